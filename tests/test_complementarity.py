import pytest

from retrieval_zoo.evaluation.complementarity import answered, complementarity, venn_figure

QRELS = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 1}, "q4": {"d": 1}, "q5": {"e": 1}, "q0": {"z": 0}}


def test_roc_on_hand_made_sets() -> None:
    # Lexical answers q1, q2, q3 at k = 2; semantic answers q2, q4 (q3's relevant is third: not answered at 2).
    lexical = {"q1": {"a": 3.0}, "q2": {"x": 2.0, "b": 1.0}, "q3": {"c": 5.0}, "q4": {"x": 1.0}}
    semantic = {"q2": {"b": 0.9}, "q3": {"x": 0.9, "y": 0.8, "c": 0.7}, "q4": {"d": 0.5}}
    stats = complementarity(lexical, semantic, QRELS, k=2)
    # U = q1..q5 (q0 has no relevant document); S = {q1, q2, q3}, D = {q2, q4}.
    assert stats == {
        "k": 2, "U": 5, "S": 3, "D": 2, "D-S": 1, "S-D": 2, "D∩S": 1, "failures": 1, "RoC": pytest.approx(0.5),
    }  # fmt: skip
    assert answered(semantic, QRELS, k=3) == {"q2", "q3", "q4"}


def test_roc_extremes() -> None:
    run = {"q1": {"a": 1.0}, "q2": {"b": 1.0}}
    assert complementarity(run, run, QRELS)["RoC"] == 0.0  # D ⊆ S
    disjoint = complementarity({"q1": {"a": 1.0}}, {"q2": {"b": 1.0}}, QRELS)
    assert disjoint["RoC"] == 1.0 and disjoint["failures"] == 3
    assert complementarity(run, {}, QRELS)["RoC"] == 0.0  # nothing answered by D


def test_venn_figure_is_a_png(tmp_path) -> None:
    stats = complementarity({"q1": {"a": 1.0}}, {"q2": {"b": 1.0}}, QRELS)
    path = venn_figure(stats, tmp_path / "roc.png", "toy")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_moved_queries_rank_the_relevant_documents_shifts() -> None:
    from retrieval_zoo.evaluation.complementarity import moved_queries

    qrels = {"a": {"r": 1}, "b": {"r": 1}, "c": {"r": 1}, "d": {"r": 1}}
    baseline = {"a": {"x": 3.0, "y": 2.0, "r": 1.0}, "b": {"r": 5.0}, "c": {"x": 1.0}, "d": {"r": 1.0, "x": 0.5}}
    system = {"a": {"r": 9.0, "x": 1.0}, "b": {"x": 2.0, "r": 1.0}, "c": {"r": 1.0}, "d": {"x": 3.0, "y": 2.0}}
    rows = moved_queries(baseline, system, qrels, {"a": "query a"}, count=2)
    # a: 3 → 1 (+2); c: not retrieved (depth 3 + 1 = 4) → 1 (+3); b: 1 → 2 (−1); d: 1 → not retrieved 4 (−3)
    assert [(r["qid"], r["direction"], r["baseline_rank"], r["system_rank"]) for r in rows] == [
        ("c", "up", 4, 1), ("a", "up", 3, 1), ("d", "down", 1, 4), ("b", "down", 1, 2),
    ]  # fmt: skip
    assert rows[1]["query"] == "query a" and rows[2]["shift"] == -3


def test_a_hybrid_below_its_best_part_is_named_per_measure() -> None:
    from retrieval_zoo.evaluation.complementarity import below_best_part

    metrics = {
        "clear": {"MRR@10": 0.72, "R@100": 0.97},
        "clear (lexical)": {"MRR@10": 0.78, "R@100": 0.95},
        "clear (semantic)": {"MRR@10": 0.47, "R@100": 0.96},
    }
    assert below_best_part(metrics, "clear", ["lexical", "semantic"]) == {
        "MRR@10": {"hybrid": 0.72, "part": "clear (lexical)", "value": 0.78}  # R@100 holds up: 0.97 ≥ 0.96
    }
    metrics["clear"]["MRR@10"] = 0.78  # a tie is not below
    assert below_best_part(metrics, "clear", ["lexical", "semantic"]) == {}
