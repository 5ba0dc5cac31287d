"""Lucene impact search as an index (retrieval_zoo/index/terms/lucene_impact.py): scores worked by hand, the JVM's
engine."""

import pytest
import torch

from retrieval_zoo.index.terms.lucene_impact import LuceneImpact, LuceneImpactRetriever
from retrieval_zoo.lexical.java import LuceneWorker
from tests.test_impact import VOCAB, corpus, engine_runs, query_encoder


def test_lucene_scores_the_quantized_inner_product_worked_by_hand(tmp_path) -> None:
    rows = [[0.0] * VOCAB for _ in range(6)]
    rows[0][1], rows[0][2] = 2.0, 1.0  # impacts (scale 255 / 2): 255, 128 (127.5 rounds up)
    rows[3][1] = 1.0  # 128
    rows[4][2], rows[4][4] = 2.0, 0.5  # 255, 64 (63.75)
    rows[5][5] = 1.0  # matches no query term
    encode = query_encoder({"q": [0.0, 1.0, 0.4, 0.0, 0.0, 0.0], "none": [0.0, 0.0, 0.0, 1.0, 0.0, 0.0]})
    retriever = LuceneImpactRetriever.from_shards(encode, corpus(rows), lam=1.0, discard=0, folder=tmp_path, threads=1)
    run = retriever.search({"q1": "q", "q2": "none"}, 10)
    scale = 255 / 2.0 * 1000  # the query's impacts: 1000 and 400
    expected = {"d0": (1000 * 255 + 400 * 128) / scale, "d3": 1000 * 128 / scale, "d4": 400 * 255 / scale}
    assert list(run["q1"]) == ["d0", "d3", "d4"]  # only matching documents, best first
    assert run["q1"] == pytest.approx(expected, rel=1e-6)  # Lucene's scores are float32
    assert run["q1"]["d0"] == pytest.approx(2.0 * 1.0 + 1.0 * 0.4, rel=0.005)  # near the exact inner product
    assert run["q2"] == {}  # term 3: no document has it, so the query asks nothing
    assert retriever.postings == 6


def maps_both_ways(query: dict[str, int]) -> tuple[list, list, str]:
    """In the JVM worker: the entries of ``term_map(query)`` and of a HashMap filled by a put a term, in order."""
    from retrieval_zoo.lexical.lucene_ops import pyserini_lucene, term_map

    _, autoclass = pyserini_lucene()
    put = autoclass("java.util.HashMap")()
    for term, impact in query.items():
        put.put(term, autoclass("java.lang.Integer")(impact))
    read = term_map(query)
    entries = [[(e.getKey(), e.getValue()) for e in m.entrySet().toArray()] for m in (put, read)]
    return entries[0], entries[1], read.getClass().getName()


def test_a_query_crosses_into_java_as_the_same_hash_map_in_one_call() -> None:
    query = {str(term): (term * 7919) % 1000 + 1 for term in range(1999, 30522, 7)}  # a dense, DeLADE-like query
    put, read, kind = LuceneWorker.call(maps_both_ways, query)
    assert read == put and kind == "java.util.HashMap" and dict(read) == query  # same entries, same clause order
    assert [term for term, _ in read] not in (list(query), sorted(query))  # a hash map's order: compared, not assumed


def test_query_impacts_put_the_largest_weight_at_query_levels_and_leave_out_unmatched_terms(tmp_path) -> None:
    rows = [[1.0, 1.0, 1.0, 0.0, 0.0, 0.0]]
    retriever = LuceneImpactRetriever.from_shards(query_encoder({}), corpus(rows), lam=1.0, discard=0, query_levels=10,
                                      folder=tmp_path, threads=1)  # fmt: skip
    impacts, scale = retriever.query_impacts(torch.tensor([0.5, 2.0, 0.26, 3.0, 0.0, 0.0]))
    assert scale == pytest.approx(10 / 3.0) and impacts.tolist() == [2, 7, 1, 0, 0, 0]  # term 3: no document


def test_the_cls_part_reranks_the_engines_candidates(tmp_path) -> None:
    rows = [[0.0] * VOCAB for _ in range(12)]
    rows[2][1], rows[7][1] = 2.0, 1.0
    cls = [[0.0, 0.0] for _ in range(12)]
    cls[7], cls[11] = [3.0, 0.0], [5.0, 0.0]  # d11 matches no term: the engine never returns it
    encode = query_encoder({"q": [0.0, 1.0, 0.0, 0.0, 0.0, 0.0]}, {"q": [1.0, 0.0]})
    retriever = LuceneImpactRetriever.from_shards(
        encode, corpus(rows, cls), lam=1.0, discard=0, folder=tmp_path, threads=1
    )
    fused = retriever.search({"q1": "q"}, 10)["q1"]
    assert list(fused) == ["d7", "d2"] and fused["d7"] == pytest.approx(128 / 127.5 + 3.0, rel=1e-6)
    assert list(retriever.search({"q1": "q"}, 10, part="lexical")["q1"]) == ["d2", "d7"]


def test_bad_levels_are_a_clear_error() -> None:
    with pytest.raises(ValueError, match="doc_levels and index.query_levels must be at least 1"):
        LuceneImpact(doc_levels=0)


@pytest.mark.slow
def test_lucene_ranks_as_exact_search_over_its_impacts_on_the_embedded_collection(tmp_path) -> None:
    from retrieval_zoo.evaluation.metrics import top_k_overlap

    runs, mrr, _ = engine_runs(LuceneImpact(), tmp_path)
    assert abs(mrr["engine"] - mrr["exact"]) <= 0.002  # issue 21's bound
    assert top_k_overlap(runs["engine"], runs["impacts"], 10) >= 0.995  # the engine searches its impacts exactly ...
    assert top_k_overlap(runs["engine"], runs["exact"], 10) >= 0.99  # ... and issue 21's bound (0.9948 measured)
