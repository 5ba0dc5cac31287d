"""BM25's document vectors of the whole corpus: built in parts, equal to every bag held at once, cached, resumed."""

import contextlib

import torch

from retrieval_zoo.lexical import bm25_rows
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.lexical.sparse_rows import SparseRows


def test_document_rows_are_the_whole_corpus_bags_over_their_sorted_vocabulary(tiny, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(bm25_rows, "PART", 150)  # 400 documents: three parts
    bm25 = BM25(tiny, cache_dir=str(tmp_path))
    docids = list(tiny.corpus)
    rows, words = bm25_rows.document_rows(bm25)
    saturation = bm25.document_term_weights(docids, saturation_only=True)
    assert words == sorted(set().union(*saturation))  # what the whole corpus's bags, held at once, gave before
    picked = torch.tensor([5, 0, 151, 299, 300, len(docids) - 1])  # rows of every part
    expected = SparseRows(saturation, {term: i for i, term in enumerate(words)}).dense(picked, len(words))
    assert torch.equal(rows.dense(picked, len(words)), expected)
    full, _ = bm25_rows.document_rows(bm25, saturation_only=False)  # IDF × saturation: another entry
    weights = bm25.document_term_weights(docids[:3])
    assert torch.equal(
        full.dense(torch.arange(3), len(words)),
        SparseRows(weights, {t: i for i, t in enumerate(words)}).dense(torch.arange(3), len(words)),
    )


def test_document_rows_are_cached_and_a_killed_build_resumes_from_its_parts(tiny, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(bm25_rows, "PART", 150)
    bm25 = BM25(tiny, cache_dir=str(tmp_path))
    bm25.index_dir  # noqa: B018
    asked = []
    weights = BM25.document_term_weights

    def counted(self, ids, saturation_only=False):
        asked.append(len(ids))
        if len(asked) == 3:
            raise KeyboardInterrupt  # killed during the third part
        return weights(self, ids, saturation_only)

    monkeypatch.setattr(BM25, "document_term_weights", counted)
    with contextlib.suppress(KeyboardInterrupt):
        bm25_rows.document_rows(bm25)
    last = len(tiny.corpus) - 300
    assert asked == [150, 150, last]
    asked.clear()
    rows, words = bm25_rows.document_rows(bm25)  # the first two parts are read back, the third is built
    assert asked == [last] and len(rows) == len(tiny.corpus)
    asked.clear()
    assert bm25_rows.document_rows(bm25)[1] == words and asked == []  # then cached whole
    assert not list((tmp_path / "bm25" / "doc-rows").glob("*.parts"))
