"""The validation pool: a view of the corpus holding BM25's top k of the validation queries and their judgments."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval_zoo.data.corpus_store import CorpusSubset, corpus_ids
from retrieval_zoo.training.validation_pool import candidate_pool


def test_corpus_subset_is_a_view_in_corpus_order(tiny) -> None:
    ids = list(tiny.corpus)
    subset = CorpusSubset(tiny.corpus, np.array([30, 7, 2, 7]))
    assert list(subset) == [ids[2], ids[7], ids[30]] and len(subset) == 3  # sorted, once each
    assert subset[ids[7]] == tiny.corpus[ids[7]] and ids[7] in subset
    assert ids[3] not in subset and 3 not in subset
    with pytest.raises(KeyError):
        subset[ids[3]]
    assert corpus_ids(subset) is subset.index and subset.index.names([1]) == [ids[7]]


def test_pool_is_bm25s_top_k_and_every_judged_document(tiny, tiny_bm25) -> None:
    qids = sorted(tiny.judged_queries("dev"))[:5]
    pool = candidate_pool(tiny, tiny_bm25, "dev", qids, depth=20)
    run = tiny_bm25.search({q: tiny.queries["dev"][q] for q in qids}, 20)
    expected = set().union(*(run[q] for q in qids), *(tiny.qrels["dev"][q] for q in qids))
    assert list(pool.corpus) == [d for d in tiny.corpus if d in expected]
    assert pool.queries is tiny.queries and pool.qrels is tiny.qrels
    again, shallower = (candidate_pool(tiny, tiny_bm25, "dev", qids, depth) for depth in (20, 10))
    assert again.corpus_fingerprint == pool.corpus_fingerprint != tiny.corpus_fingerprint
    assert shallower.corpus_fingerprint != pool.corpus_fingerprint and len(shallower.corpus) < len(pool.corpus)
    with pytest.raises(ValueError, match="pool depth must be at least 1"):
        candidate_pool(tiny, tiny_bm25, "dev", qids, depth=0)
