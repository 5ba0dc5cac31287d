import math
import random

import pytest

from retrieval_zoo.data.formats import top_k
from retrieval_zoo.evaluation.metrics import MEASURES, evaluate, format_table, per_query
from retrieval_zoo.index.fusion import interpolate, normalize, reciprocal_rank_fusion


def test_graded_case_by_hand() -> None:
    qrels = {"q1": {"a": 1, "b": 0, "c": 2}}
    run = {"q1": {"x": 3.0, "a": 2.0, "c": 1.0, "b": 0.5}}
    metrics = evaluate(run, qrels)
    assert metrics["MRR@10"] == pytest.approx(1 / 2)
    assert metrics["R@100"] == pytest.approx(1.0) and metrics["R@1000"] == pytest.approx(1.0)
    dcg = 1 / math.log2(3) + 2 / math.log2(4)  # trec_eval: gain = grade, discount log2(rank + 1)
    ideal = 2 / math.log2(2) + 1 / math.log2(3)
    assert metrics["nDCG@10"] == pytest.approx(dcg / ideal)
    assert metrics["MAP@1000"] == pytest.approx((1 / 2 + 2 / 3) / 2)


def test_ties_are_broken_by_docid_descending_like_trec_eval() -> None:
    run = {"q": {"a": 1.0, "b": 1.0}}
    assert evaluate(run, {"q": {"b": 1}})["MRR@10"] == pytest.approx(1.0)
    assert evaluate(run, {"q": {"a": 1}})["MRR@10"] == pytest.approx(0.5)


def test_query_without_relevant_is_skipped_and_missing_query_scores_zero() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 0}, "q3": {"c": 1}}
    run = {"q1": {"a": 1.0}, "q2": {"b": 1.0}}
    values = per_query(run, qrels)
    assert set(values["MRR@10"]) == {"q1", "q3"}
    assert values["MRR@10"] == {"q1": 1.0, "q3": 0.0}
    assert evaluate(run, qrels)["MRR@10"] == pytest.approx(0.5)


def test_cutoffs() -> None:
    run = {"q": {f"d{i:03d}": 100.0 - i for i in range(150)}}
    metrics = evaluate(run, {"q": {"d011": 1, "d120": 1}})
    assert metrics["MRR@10"] == 0.0  # first relevant at rank 12
    assert metrics["R@100"] == pytest.approx(0.5) and metrics["R@1000"] == pytest.approx(1.0)


def test_measures_evaluated_together_equal_each_measured_alone() -> None:
    rng = random.Random(0)  # graded judgements, ties in score, runs longer and shorter than the cutoffs
    qrels = {f"q{q}": {f"d{d}": rng.choice([0, 1, 2]) for d in rng.sample(range(300), 20)} for q in range(30)}
    run = {f"q{q}": {f"d{d}": float(rng.randint(0, 40)) for d in rng.sample(range(300), rng.randint(1, 250))}
           for q in range(25)}  # fmt: skip
    together = per_query(run, qrels)
    assert set(together) == set(MEASURES)
    for name, measure in MEASURES.items():
        assert together[name] == per_query(run, qrels, {name: measure})[name]


def test_no_judged_query_is_an_error() -> None:
    with pytest.raises(ValueError, match="no query with a relevant document"):
        evaluate({"q": {"a": 1.0}}, {"q": {"a": 0}})


def test_format_table() -> None:
    table = format_table({"BM25": {"MRR@10": 0.5}, "dense": {"MRR@10": 0.25}})
    assert table.splitlines() == ["| system | MRR@10 |", "|---|---|", "| BM25 | 0.5000 |", "| dense | 0.2500 |"]


def test_interpolation_by_hand() -> None:
    a = {"q": {"x": 2.0, "y": 1.0}}
    b = {"q": {"y": 4.0, "z": 2.0}}
    fused = interpolate(a, b, weight_a=0.5, weight_b=1.0)
    # Missing documents take the run's lowest score for the query: a(z) = 1.0, b(x) = 2.0.
    assert fused == {"q": {"x": 0.5 * 2 + 2.0, "y": 0.5 * 1 + 4.0, "z": 0.5 * 1 + 2.0}}
    minmax = interpolate(a, b, normalization="minmax")
    assert minmax["q"] == pytest.approx({"x": 1.0 + 0.0, "y": 0.0 + 1.0, "z": 0.0 + 0.0})


def test_normalize_zscore_and_degenerate() -> None:
    z = normalize({"a": 1.0, "b": 3.0}, "zscore")
    assert z == pytest.approx({"a": -1.0, "b": 1.0})
    assert normalize({"a": 2.0}, "minmax") == {"a": 0.0}
    with pytest.raises(ValueError, match="unknown normalization"):
        normalize({"a": 1.0}, "l2")  # type: ignore[arg-type]


def test_reciprocal_rank_fusion_by_hand() -> None:
    a = {"q": {"x": 3.0, "y": 2.0}}
    b = {"q": {"y": 9.0, "z": 1.0}}
    fused = reciprocal_rank_fusion([a, b], k=60)
    assert fused["q"] == pytest.approx({"x": 1 / 61, "y": 1 / 62 + 1 / 61, "z": 1 / 62})
    assert list(top_k(fused, 1)["q"]) == ["y"]


def test_top_k_overlap_by_hand() -> None:
    from retrieval_zoo.evaluation.metrics import top_k_overlap

    reference = {"q1": {"a": 3.0, "b": 2.0, "c": 1.0}, "q2": {"x": 1.0}, "q3": {}}
    run = {"q1": {"a": 9.0, "c": 8.0, "d": 7.0}, "q2": {"y": 1.0}}  # q1 shares a, c of its top 2; q2 nothing
    assert top_k_overlap(run, reference, k=2) == pytest.approx((1 / 2 + 0 / 1) / 2)  # q3 has no top k: not counted
    assert top_k_overlap(run, reference, k=3) == pytest.approx((2 / 3 + 0) / 2)
    with pytest.raises(ValueError, match="answers no query"):
        top_k_overlap(run, {"q3": {}})
