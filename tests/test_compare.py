"""The comparison report against values worked out by hand: per-query reciprocal ranks, the paired t statistic, the
exact sign-flip permutation p-value, Bonferroni, wins and losses."""

import csv
import json
import math
from pathlib import Path

import pytest
from scipy import stats

from retrieval_zoo.data.formats import write_qrels, write_run
from retrieval_zoo.evaluation.compare import bonferroni, compare, main

QRELS = {f"q{i}": {f"d{i}": 1} for i in range(1, 5)}
FILLER = {f"x{j}": 0.0 for j in range(3)}


def ranked_at(docid: str, rank: int) -> dict[str, float]:
    """A ranking with ``docid`` at ``rank`` (1-based) among fillers."""
    others = [f"x{j}" for j in range(3)]
    order = others[: rank - 1] + [docid] + others[rank - 1 :]
    return {d: float(10 - i) for i, d in enumerate(order)}


# Reciprocal ranks: baseline (1, 1/2, 1, 0), system (1, 1, 1/4, 1): differences (0, +0.5, −0.75, +1).
BASELINE = {"q1": ranked_at("d1", 1), "q2": ranked_at("d2", 2), "q3": ranked_at("d3", 1), "q4": FILLER}
SYSTEM = {"q1": ranked_at("d1", 1), "q2": ranked_at("d2", 1), "q3": ranked_at("d3", 4), "q4": ranked_at("d4", 1)}


def test_paired_tests_and_counts_by_hand() -> None:
    (row,) = compare({"base": BASELINE, "sys": SYSTEM}, QRELS, ["MRR@10"], resamples=10_000)
    assert (row.mean, row.baseline_mean) == (pytest.approx(3.25 / 4), pytest.approx(2.5 / 4))
    assert (row.wins, row.losses, row.ties) == (2, 1, 1)
    # t = mean(d) / (sd(d)/√n): mean 0.1875, Σ(d − mean)² = 1.671875, sd = √(1.671875/3), n = 4, df = 3.
    t = 0.1875 / (math.sqrt(1.671875 / 3) / 2)
    assert row.t_p == pytest.approx(2 * stats.t.sf(t, df=3), rel=1e-9)
    # Exact sign flips of (0.5, −0.75, 1) (the 0 flips to itself): sums 2.25, 0.25, 0.75, −1.25, 1.25, −0.75, −0.25,
    # −2.25; |sum| ≥ 0.75 in 6 of 8, so p = 0.75.
    assert row.permutation_p == pytest.approx(0.75)


def test_bonferroni_multiplies_by_the_systems_tested_and_caps_at_one() -> None:
    rows = compare({"base": BASELINE, "a": SYSTEM, "b": BASELINE}, QRELS, ["MRR@10"])
    corrected = bonferroni(rows, tests_per_measure=2)
    assert corrected[0].t_p == pytest.approx(min(1.0, 2 * rows[0].t_p))
    assert corrected[0].permutation_p == 1.0  # 2 × 0.75 capped
    assert corrected[1].t_p == 1.0 and corrected[1].ties == 4  # identical runs: no difference, p = 1


def test_command_line_writes_markdown_csv_and_json(tmp_path: Path) -> None:
    write_qrels(tmp_path / "qrels.tsv", QRELS)
    write_run(tmp_path / "base.trec", BASELINE)
    write_run(tmp_path / "sys.trec", SYSTEM)
    table = main([str(tmp_path / "base.trec"), str(tmp_path / "sys.trec"), "--qrels", str(tmp_path / "qrels.tsv"),
                  "--measures", "MRR@10", "nDCG@10", "--out", str(tmp_path / "report")])  # fmt: skip
    assert "| sys.trec | MRR@10 | 0.8125 | 0.6250 | +0.1875 |" in table and "| 2 | 1 | 1 |" in table
    rows = list(csv.DictReader((tmp_path / "report" / "comparison.csv").open()))
    assert [r["measure"] for r in rows] == ["MRR@10", "nDCG@10"]
    report = json.loads((tmp_path / "report" / "comparison.json").read_text())
    assert report["baseline"] == "base.trec" and report["rows"][0]["permutation_p"] == pytest.approx(0.75)
    with pytest.raises(FileNotFoundError, match="neither a run file nor an output directory"):
        main([str(tmp_path / "base.trec"), str(tmp_path / "missing.trec"), "--qrels", str(tmp_path / "qrels.tsv")])
