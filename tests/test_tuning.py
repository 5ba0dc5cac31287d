"""Tuning a fusion weight: the grid, and past its edge where the best value lies (a synthetic optimum off the grid)."""

import pytest

from retrieval_zoo.evaluation.tuning import EXTEND_STEPS, extend_past_edge, tune_weight, tuning_figure


def test_an_optimum_above_the_grid_is_followed_until_the_curve_turns() -> None:
    measure = lambda v: -((v - 3.0) ** 2)  # noqa: E731  # peaks at 3, above the grid
    curve = {v: measure(v) for v in (0.0, 0.5, 1.0)}
    extension = extend_past_edge(measure, curve)
    # 1.0 (−4) → 2.0 (−1, better) → 4.0 (−1, not better): turned; 2.0 kept
    assert extension == {"direction": "up", "edge": 1.0, "values": [2.0, 4.0], "best": 2.0, "stopped": "turned"}
    assert set(curve) == {0.0, 0.5, 1.0, 2.0, 4.0}


def test_an_optimum_below_the_grid_is_followed_down_by_halving() -> None:
    measure = lambda v: -abs(v - 0.01)  # noqa: E731
    curve = {v: measure(v) for v in (0.5, 1.0, 2.0)}
    extension = extend_past_edge(measure, curve)
    halvings = [0.5 / 2**i for i in range(1, 8)]  # 0.25 ... 0.0078125 (best), then 0.00390625 is farther from 0.01
    assert extension == {"direction": "down", "edge": 0.5, "values": halvings, "best": 0.0078125, "stopped": "turned"}


def test_a_curve_still_rising_stops_at_the_stated_bound_and_says_so() -> None:
    curve = {v: v for v in (0.0, 1.0)}
    extension = extend_past_edge(lambda v: v, curve)
    assert extension["stopped"] == "bound" and len(extension["values"]) == EXTEND_STEPS
    assert extension["best"] == 2.0**EXTEND_STEPS


@pytest.mark.parametrize("grid", [(0.0, 1.0, 2.0), (0.0, 0.5), (0.9,)])  # inside; lower edge at 0; one value
def test_no_extension_inside_the_grid_at_zero_or_for_one_value(grid: tuple) -> None:
    measure = {(0.0, 1.0, 2.0): lambda v: -((v - 1) ** 2), (0.0, 0.5): lambda v: -v, (0.9,): lambda v: v}[grid]
    curve = {v: measure(v) for v in grid}
    assert extend_past_edge(measure, curve) is None and set(curve) == set(grid)


class RankedAt:
    """A hybrid whose relevant document ranks 3rd below a weight of 0.75, 2nd below 2, 1st up to 5, then 4th."""

    weight = 0.0

    def search(self, queries: dict, k: int, weight: float) -> dict:
        rank = 3 if weight < 0.75 else 2 if weight < 2 else 1 if weight <= 5 else 4
        others = {f"d{i}": 10.0 - i for i in range(1, 5) if i != rank}
        return {"q": {**others, "rel": 10.0 - rank}}


def test_tune_weight_sets_the_extended_best_and_records_curve_and_extension(capsys) -> None:
    retriever = RankedAt()
    record = tune_weight(retriever, {"q": "text"}, {"q": {"rel": 1}}, (0.0, 0.5, 1.0), "MRR@10", "lambda_test", 10)
    assert record["value"] == 2.0 == retriever.weight  # 4.0 ties 2.0 (rank 1): the curve flattened, 2.0 kept
    assert record["curve"] == {0.0: 1 / 3, 0.5: 1 / 3, 1.0: 0.5, 2.0: 1.0, 4.0: 1.0}
    assert record["extended"]["values"] == [2.0, 4.0] and record["extended"]["stopped"] == "turned"
    assert "lambda_test: the grid's best value 1 lay at its upper edge; tried 2, 4" in capsys.readouterr().out


def test_extend_grid_false_keeps_to_the_grid() -> None:
    retriever = RankedAt()
    record = tune_weight(retriever, {"q": "t"}, {"q": {"rel": 1}}, (0.0, 0.5, 1.0), "MRR@10", "w", 10, extend=False)
    assert record["value"] == 1.0 == retriever.weight and record["extended"] is None and len(record["curve"]) == 3


def test_the_tuning_figure_is_drawn_from_the_record_as_results_json_keeps_it(tmp_path) -> None:
    import json

    from PIL import Image

    record = tune_weight(RankedAt(), {"q": "text"}, {"q": {"rel": 1}}, (0.0, 0.5, 1.0), "MRR@10", "lambda_test", 10)
    stored = json.loads(json.dumps(record))  # results.json: the curve's values as strings
    path = tuning_figure(stored, tmp_path / "tuning.dev.png", "clear: lambda_test")
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size[0] > 300 and image.size[1] > 200
    assert list(tmp_path.iterdir()) == [path]  # written in place of a temporary file, nothing left beside it
