import json
import os
from pathlib import Path

import pytest


def test_pair_scores_equal_pyserini_search_scores(tiny, tiny_bm25) -> None:
    queries = tiny.judged_queries("dev")
    run = tiny_bm25.search(queries, k=10)
    pairs = [(q, d) for q in list(run)[:10] for d in run[q]]
    scores = tiny_bm25.pair_scores(queries, pairs)
    for (qid, docid), score in zip(pairs, scores, strict=True):
        assert score == pytest.approx(run[qid][docid], abs=1e-3)  # Anserini writes runs with 4 decimals


def test_a_few_queries_get_searchcollections_run_from_a_searcher_kept_open(tiny, tiny_bm25, monkeypatch) -> None:
    from retrieval_zoo.lexical.lucene_bm25 import FEW_QUERIES

    queries = dict(list(tiny.judged_queries("dev").items())[:FEW_QUERIES])
    few = {qid: tiny_bm25.search({qid: text}, k=100)[qid] for qid, text in queries.items()}  # one at a time
    assert tiny_bm25.search(queries, k=100) == few  # the searcher's, as a set of at most FEW_QUERIES
    monkeypatch.setattr("retrieval_zoo.lexical.lucene_bm25.FEW_QUERIES", 0)
    many = tiny_bm25.search(queries, k=100)  # SearchCollection's run file
    assert all(list(few[qid].items()) == list(many[qid].items()) for qid in queries)  # ids, order, scores
    assert tiny_bm25.search({"q": "zzzqqqxxy"}, k=10) == {"q": {}}  # no matching term: an empty ranking


def test_candidate_scores_are_the_searchers_scores_at_any_rank(tiny, tiny_bm25) -> None:
    queries = dict(list(tiny.judged_queries("dev").items())[:5])
    run = tiny_bm25.search(queries, k=20)
    others = [d for d in tiny.corpus if all(d not in found for found in run.values())][:30]
    candidates = {qid: list(reversed(run[qid])) + others for qid in queries}  # any order, ranked or not
    scores = tiny_bm25.candidate_scores(queries, candidates)
    for qid, found in run.items():
        assert all(scores[qid][d] == pytest.approx(s, abs=1e-4) for d, s in found.items())  # runs keep 4 decimals
        floor = min(found.values()) if len(found) == 20 else 0.0
        assert all(scores[qid][d] <= floor + 1e-4 for d in others)  # outside the top 20: at most its 20th score
    assert tiny_bm25.candidate_scores({"q": "zzzqqqxxy"}, {"q": others[:3]}) == {"q": dict.fromkeys(others[:3], 0.0)}


def test_search_is_cached_and_keyed_by_parameters(tiny, tiny_bm25, monkeypatch) -> None:
    monkeypatch.setattr("retrieval_zoo.lexical.lucene_bm25.FEW_QUERIES", 0)  # SearchCollection's run files
    from retrieval_zoo.lexical.lucene_bm25 import BM25

    queries = tiny.judged_queries("dev")
    first = tiny_bm25.search(queries, k=5)
    runs = list((tiny_bm25.cache / "bm25" / "runs").glob("run-k5-*.trec.gz"))
    assert first == tiny_bm25.search(queries, k=5) and len(runs) == 1
    other = BM25(tiny, k1=1.2, b=0.75, threads=2).search(queries, k=5)
    assert other != first and len(list((tiny_bm25.cache / "bm25" / "runs").glob("run-k5-*.trec.gz"))) == 2


def test_term_weights_sum_to_the_pair_score(tiny, tiny_bm25) -> None:
    queries = tiny.judged_queries("dev")
    qid = next(iter(queries))
    docid = next(iter(tiny_bm25.search(queries, k=1)[qid]))
    [weights] = tiny_bm25.document_term_weights([docid])
    terms = tiny_bm25.analyze(queries[qid])  # BM25(q, d) = Σ over query terms of w(t, d)
    expected = tiny_bm25.pair_scores(queries, [(qid, docid)])[0]
    assert sum(weights.get(t, 0.0) for t in terms) == pytest.approx(float(expected), rel=1e-4)
    [idf] = tiny_bm25.query_idf([queries[qid]])
    assert set(idf) <= set(terms) and all(v > 0 for v in idf.values())
    df = dict(zip(idf, tiny_bm25.document_frequencies(list(idf)), strict=True))
    rare, common = min(df, key=df.get), max(df, key=df.get)
    assert idf[rare] >= idf[common]
    with pytest.raises(KeyError, match="unknown document id"):
        tiny_bm25.document_term_weights([docid, "no-such-doc"])
    # RoC's pair (Eq. 3): query IDF · document TF saturation = BM25 over the query's distinct terms.
    [saturation] = tiny_bm25.document_term_weights([docid], saturation_only=True)
    assert saturation.keys() == weights.keys() and all(0 < v < 1 for v in saturation.values())  # tf/(tf + k1·norm)
    distinct = sum(idf[t] * saturation.get(t, 0.0) for t in idf)
    assert distinct == pytest.approx(sum(weights.get(t, 0.0) for t in set(terms)), rel=1e-5)


def test_term_weights_from_term_vectors_are_the_per_term_searchs_bit_for_bit(tiny, tiny_bm25, tmp_path) -> None:
    from retrieval_zoo.data.collections import Collection
    from retrieval_zoo.lexical import lucene_ops
    from retrieval_zoo.lexical.java import LuceneWorker
    from retrieval_zoo.lexical.lucene_bm25 import BM25

    def both(index: Path, k1: float, b: float, docids: list[str], saturation_only: bool) -> tuple[list, list]:
        args = (str(index), k1, b, docids, saturation_only)
        fast = LuceneWorker.call(lucene_ops.document_term_weights, *args)
        return fast, LuceneWorker.call(lucene_ops.document_term_weights_by_search, *args)

    docids = [*tiny.corpus, "no-such-doc"]
    for k1, b, saturation_only in ((0.9, 0.4, False), (1.2, 0.75, True)):
        fast, reference = both(tiny_bm25.index_dir, k1, b, docids, saturation_only)
        assert fast == reference and fast[-1] is None  # == on floats: the same values, not close ones
        assert len({w for bag in fast[:-1] for w in bag.values()}) > 1000
    # Terms with commas, dots and "=" (the term vector crosses as text), a document of stopwords only, repeats.
    texts = {"odd": "1,000 dollars = m.a.r. a=b x==y 3.14 U.S.A. café", "stop": "the of and to", "many": "run " * 300}
    odd = BM25(Collection("odd", texts | {"plain": "a plain text about dollars"}, {}, {}), cache_dir=str(tmp_path))
    fast, reference = both(odd.index_dir, 0.9, 0.4, [*texts, "plain"], True)
    assert fast == reference and fast[1] == {} and "1,000" in fast[0] and len(fast[2]) == 1


def test_a_cache_that_does_not_match_the_collection_is_an_error(tiny, tiny_bm25) -> None:
    import json

    from retrieval_zoo.lexical.lucene_bm25 import BM25

    ready = tiny_bm25.index_dir / "ready.json"
    original = ready.read_text()
    try:
        ready.write_text(json.dumps({**json.loads(original), "documents": 3}))
        with pytest.raises(ValueError, match="cached index holds 3 documents"):
            BM25(tiny, threads=2).index_dir  # noqa: B018
    finally:
        ready.write_text(original)


def test_a_cached_run_with_a_document_the_collection_lacks_is_an_error(tiny, tiny_bm25, monkeypatch) -> None:
    monkeypatch.setattr("retrieval_zoo.lexical.lucene_bm25.FEW_QUERIES", 0)  # SearchCollection's run files
    import gzip

    from retrieval_zoo.lexical.lucene_bm25 import BM25

    queries = tiny.judged_queries("dev")
    tiny_bm25.search(queries, k=5)
    path = tiny_bm25._run_path(queries, 5)
    original = path.read_bytes()
    lines = gzip.decompress(original).decode().splitlines()
    qid, _, docid, *rest = lines[7].split()
    lines[7] = " ".join([qid, "Q0", "no-such-doc", *rest])
    try:
        path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
        with pytest.raises(ValueError, match=f"document 'no-such-doc' \\(query '{qid}'\\) unknown"):
            BM25(tiny, threads=2).search(queries, k=5)
    finally:
        path.write_bytes(original)


@pytest.mark.parametrize("chunk", [1, 3, 1 << 20])
def test_first_unknown_document_is_the_first_in_run_order_whatever_the_chunk(chunk) -> None:
    from retrieval_zoo.id_index import IdIndex
    from retrieval_zoo.lexical.lucene_bm25 import first_unknown_document

    docs = IdIndex(["d1", "d2", "d3"])
    run = {"q1": {"d1": 2.0, "d2": 1.0}, "q2": {"d3": 1.0, "x": 0.5, "y": 0.1}, "q3": {"z": 1.0}}
    assert first_unknown_document(run, docs, chunk) == ("q2", "x")
    assert first_unknown_document({"q1": {"d3": 1.0}, "q2": {}}, docs, chunk) is None


def test_document_frequencies_of_analysed_terms(tiny, tiny_bm25) -> None:
    """Every term of a document's vector occurs in at least that document (also terms such as 'm.a.r.', which
    pyserini's get_term_counts would re-analyse into other terms)."""
    docids = list(tiny.corpus)[:60]
    terms = sorted({t for vector in tiny_bm25.document_term_weights(docids) for t in vector})
    assert all(df >= 1 for df in tiny_bm25.document_frequencies(terms))


def test_a_damaged_cached_run_or_index_is_rebuilt_with_a_message(tiny, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr("retrieval_zoo.lexical.lucene_bm25.FEW_QUERIES", 0)  # SearchCollection's run files
    from retrieval_zoo.lexical.lucene_bm25 import BM25

    bm25 = BM25(tiny, threads=2, cache_dir=str(tmp_path))
    queries = dict(list(tiny.judged_queries("dev").items())[:5])
    expected = bm25.search(queries, k=5)
    (run_file,) = (tmp_path / "bm25" / "runs").glob("run-k5-*.trec.gz")
    run_file.write_bytes(run_file.read_bytes()[:-20])  # a truncated gzip
    assert bm25.search(queries, k=5) == expected
    assert "is damaged" in capsys.readouterr().out
    ready = bm25.index_dir / "ready.json"
    ready.write_text('{"documents": 4')
    again = BM25(tiny, threads=2, cache_dir=str(tmp_path))
    assert again.index_dir == bm25.index_dir and json.loads(ready.read_text())["documents"] == len(tiny.corpus)
    assert "building the index again" in capsys.readouterr().out


def test_a_truncated_lucene_file_is_found_and_the_index_rebuilt(tiny, tmp_path, capsys) -> None:
    from retrieval_zoo.lexical.lucene_bm25 import BM25

    index = BM25(tiny, threads=2, cache_dir=str(tmp_path)).index_dir
    segment = max((f for f in index.iterdir() if f.name != "ready.json"), key=lambda f: f.stat().st_size)
    segment.write_bytes(segment.read_bytes()[:-10])
    queries = dict(list(tiny.judged_queries("dev").items())[:3])
    run = BM25(tiny, threads=2, cache_dir=str(tmp_path)).search(queries, k=5)
    assert "is missing or not the size the build wrote" in capsys.readouterr().out and len(run) == 3


def max_heap_bytes() -> int:
    """Runs in the Lucene worker: the JVM's largest heap."""
    from retrieval_zoo.lexical.java import pyserini_lucene

    return pyserini_lucene()[1]("java.lang.Runtime").getRuntime().maxMemory()


def test_the_jvm_heap_is_sized_and_a_bad_size_is_named(tiny_bm25, monkeypatch) -> None:
    from retrieval_zoo.lexical.java import HEAP_VARIABLE, LuceneWorker, indexing_options, jvm_heap_mb

    tiny_bm25.index_dir  # noqa: B018  the worker started
    if HEAP_VARIABLE not in os.environ:
        assert 1.5 * 2**30 < LuceneWorker.call(max_heap_bytes) <= 2 * 2**30  # 2 GiB, not a quarter of the machine
    monkeypatch.setenv(HEAP_VARIABLE, "512m")
    assert jvm_heap_mb() == 512 and indexing_options() == ["-memoryBuffer", "256"]
    monkeypatch.setenv(HEAP_VARIABLE, "6G")
    assert jvm_heap_mb() == 6144
    monkeypatch.setenv(HEAP_VARIABLE, "lots")
    with pytest.raises(ValueError, match="RETRIEVAL_ZOO_JVM_HEAP='lots'.*512m or 4g"):
        jvm_heap_mb()
