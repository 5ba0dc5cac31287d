import pytest


def test_pair_scores_equal_pyserini_search_scores(tiny, tiny_bm25) -> None:
    queries = tiny.judged_queries("dev")
    run = tiny_bm25.search(queries, k=10)
    pairs = [(q, d) for q in list(run)[:10] for d in run[q]]
    scores = tiny_bm25.pair_scores(queries, pairs)
    for (qid, docid), score in zip(pairs, scores, strict=True):
        assert score == pytest.approx(run[qid][docid], abs=1e-3)  # Anserini writes runs with 4 decimals


def test_search_is_cached_and_keyed_by_parameters(tiny, tiny_bm25) -> None:
    from retrieval_zoo.lexical.bm25 import BM25

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
    weights = tiny_bm25.document_term_weights(docid)
    terms = tiny_bm25.reader.analyze(queries[qid])  # BM25(q, d) = Σ over query terms of w(t, d)
    expected = tiny_bm25.pair_scores(queries, [(qid, docid)])[0]
    assert sum(weights.get(t, 0.0) for t in terms) == pytest.approx(float(expected), rel=1e-4)
    idf = tiny_bm25.query_idf(queries[qid])
    assert set(idf) <= set(terms) and all(v > 0 for v in idf.values())
    df = {t: tiny_bm25.reader.get_term_counts(t, analyzer=None)[0] for t in idf}
    rare, common = min(df, key=df.get), max(df, key=df.get)
    assert idf[rare] >= idf[common]
    with pytest.raises(KeyError, match="unknown document id"):
        tiny_bm25.document_term_weights("no-such-doc")
