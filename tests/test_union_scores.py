"""Exact union scores: each side of a hybrid scores documents outside its own top k (CLEAR Eq. 8, RoC's naive sum)."""

import numpy as np
import pytest

from retrieval_zoo.data.formats import top_k
from retrieval_zoo.index.fusion import complete, interpolate, union_gaps
from retrieval_zoo.index.vectors.faiss import FaissIndex


def test_union_gaps_and_complete_by_hand() -> None:
    lexical = {"q": {"a": 10.0, "d": 9.0}, "empty": {}}
    dense = {"q": {"c": 3.0, "d": 2.0}, "empty": {"x": 1.0}}
    assert union_gaps(lexical, dense) == {"q": ["c"], "empty": ["x"]}
    assert union_gaps(dense, lexical) == {"q": ["a"], "empty": []}
    full = complete(lexical, {"q": {"c": 2.0, "d": -1.0}, "empty": {"x": 0.0}})
    assert full == {"q": {"a": 10.0, "d": 9.0, "c": 2.0}, "empty": {"x": 0.0}}  # its own d score is kept
    # Completed runs cover the union, so interpolate uses no floor: 0.5·BM25 + dense over a, c, d.
    fused = interpolate(full, complete(dense, {"q": {"a": 0.5}}), weight_a=0.5)
    assert fused["q"] == pytest.approx({"a": 5.5, "c": 4.0, "d": 6.5})


@pytest.mark.parametrize("factory", ["Flat", "HNSW8", "IVF2,Flat"])
def test_faiss_candidate_scores_are_the_inner_products_at_any_rank(factory: str) -> None:
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((40, 8)).astype(np.float32)
    docids = [f"d{i}" for i in range(40)]
    index = FaissIndex(factory, use_gpu=False, nprobe=2, train_size=40)
    index.build_sharded([(docids[:15], vectors[:15]), (docids[15:], vectors[15:])])  # two shards
    queries = rng.standard_normal((2, 8)).astype(np.float32)
    candidates = {"q0": ["d39", "d0", "d16"], "q1": ["d7"]}
    scores = index.candidate_scores(queries, ["q0", "q1"], candidates)
    for row, qid in enumerate(["q0", "q1"]):
        expected = {d: float(vectors[int(d[1:])] @ queries[row]) for d in candidates[qid]}
        assert scores[qid] == pytest.approx(expected, abs=1e-5)
        assert list(scores[qid]) == candidates[qid]


def test_faiss_candidate_scores_name_an_index_that_keeps_no_vectors(monkeypatch) -> None:
    import faiss

    class KeepsNoVectors:  # every factory tried (Flat, HNSW, IVF, PQ, fast scan, RaBitQ, NSG) reconstructs
        ntotal = 300

        def reconstruct_batch(self, rows):
            raise RuntimeError("reconstruct not implemented for this type of index")

    def not_ivf(part):
        raise RuntimeError("not an IVF index")

    vectors = np.random.default_rng(0).standard_normal((300, 8)).astype(np.float32)
    index = FaissIndex("Flat", use_gpu=False).build(vectors, [str(i) for i in range(300)])
    index._parts = [KeepsNoVectors()]
    monkeypatch.setattr(faiss, "extract_index_ivf", not_ivf)
    with pytest.raises(RuntimeError, match="'Flat' cannot return its stored vectors.*union_scores=floor"):
        index.candidate_scores(vectors[:1], ["q"], {"q": ["5"]})


def test_bm25_candidate_scores_match_the_run_and_reach_beyond_it(tiny, tiny_bm25) -> None:
    queries = dict(list(tiny.judged_queries("dev").items())[:5])
    shallow, deep = tiny_bm25.search(queries, k=6), tiny_bm25.search(queries, k=len(tiny.corpus))
    outside = {q: [d for d in list(deep[q])[6:20]] + ["no match"] for q in queries}
    no_match = next(d for d in tiny.corpus if all(d not in deep[q] for q in queries))
    candidates = {q: list(shallow[q]) + [d for d in outside[q] if d != "no match"] + [no_match] for q in queries}
    scores = tiny_bm25.candidate_scores(queries, candidates)
    for qid in queries:
        assert list(scores[qid]) == candidates[qid]
        for docid in candidates[qid]:
            # The searcher's own score, 0 where the document shares no term with the query. (Anserini's searcher
            # and a filtered Lucene search differ in the 4th decimal at most, as pyserini's pair scores do.)
            assert scores[qid][docid] == pytest.approx(deep[qid].get(docid, 0.0), abs=1e-3)
        assert scores[qid][no_match] == 0.0
    with pytest.raises(KeyError, match="unknown document id 'nope' for query"):
        tiny_bm25.candidate_scores(queries, {next(iter(queries)): ["nope"]})


@pytest.mark.parametrize(("weighted", "weight"), [("lexical", 0.3), ("semantic", 2.0)])
def test_a_top_k_below_the_depth_is_the_whole_unions_scoring_only_what_can_reach_it(
    weighted, weight, tiny, tiny_bm25, monkeypatch
) -> None:
    import torch

    from retrieval_zoo.index.vectors.union import Union
    from retrieval_zoo.methods.roc import RoC
    from tests.conftest import tiny_encoder

    model = RoC(tiny_encoder(pooling="cls")).eval()
    weights = (weight, 1.0) if weighted == "lexical" else (1.0, weight)
    asked: list[int] = []
    scores = tiny_bm25.candidate_scores
    monkeypatch.setattr(
        tiny_bm25, "candidate_scores", lambda q, c: asked.append(sum(map(len, c.values()))) or scores(q, c)
    )
    with torch.inference_mode():
        retriever = Union(depth=40, weighted=weighted, weight=weight).build(model, tiny, tiny_bm25)
        for qid, text in list(tiny.judged_queries("dev").items())[:12]:  # one query at a time, as typed
            bounded = retriever.search({qid: text}, 5)
            gaps = sum(map(len, union_gaps(*retriever.runs({qid: text})).values()))
            whole = retriever.union_runs({qid: text})  # every document of the union scored on both sides
            expected = top_k(interpolate(*whole, weight_a=weights[0], weight_b=weights[1]), 5)
            assert list(bounded[qid].items()) == list(expected[qid].items())  # ids, order and scores
            assert asked[-2] <= gaps == asked[-1]  # BM25 scores asked: the bounded search's, the whole union's
    assert sum(asked[0::2]) < sum(asked[1::2]) / 2  # the bound leaves most of the union unscored
