"""Compare systems on the same queries: a table, paired significance tests, and per-query wins and losses.

    python -m retrieval_zoo.evaluation.compare outputs/<clear_run> outputs/<roc_run>/run.dev.trec --bm25 --out report/
    python -m retrieval_zoo.evaluation.compare a.trec b.trec --qrels qrels.dev.tsv --measures MRR@10 --bonferroni

Each system is a TREC run file, or a ``train.py`` / ``evaluate.py`` output directory (its ``run.<split>.trec``;
``--bm25`` adds the first directory's BM25 run as the baseline). The qrels come from ``--qrels`` or from the first
directory's dataset config. The first system is the baseline; every other one is tested against it, per measure, on
the per-query values trec_eval computes (:func:`retrieval_zoo.evaluation.metrics.per_query`):

- a paired two-sided t-test (``scipy.stats.ttest_rel``), as CLEAR and RoC report;
- a paired two-sided permutation test that flips the sign of per-query differences (``scipy.stats.permutation_test``,
  exact when 2^n ≤ the number of resamples);
- optionally Bonferroni's correction: p × m, capped at 1, with m the number of systems tested against the baseline;
- wins, losses and ties: queries where the system scores higher, lower or the same.

Writes ``comparison.md``, ``comparison.csv`` and ``comparison.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from scipy import stats

from retrieval_zoo.cache import atomic_path, write_json
from retrieval_zoo.data.formats import Qrels, Run, read_qrels, read_run
from retrieval_zoo.evaluation.metrics import MEASURES, per_query


@dataclass
class Comparison:
    """One system against the baseline on one measure."""

    system: str
    measure: str
    mean: float
    baseline_mean: float
    t_p: float
    permutation_p: float
    wins: int
    losses: int
    ties: int


def paired_tests(system: np.ndarray, baseline: np.ndarray, resamples: int, seed: int) -> tuple[float, float]:
    """Two-sided p-values of the paired t-test and of the sign-flip permutation test on mean(system − baseline)."""
    differences = system - baseline
    if not differences.any():
        return 1.0, 1.0
    t_p = float(stats.ttest_rel(system, baseline).pvalue) if differences.std() > 0 else 0.0
    permutation = stats.permutation_test(
        (differences,), np.mean, permutation_type="samples", n_resamples=resamples, alternative="two-sided",
        rng=np.random.default_rng(seed),
    )  # fmt: skip
    return t_p, float(permutation.pvalue)


def compare(
    runs: dict[str, Run], qrels: Qrels, measures: list[str], resamples: int = 10_000, seed: int = 0
) -> list[Comparison]:
    """Every system after the first against the first (the baseline), on every measure."""
    names = list(runs)
    values = {name: per_query(run, qrels, {m: MEASURES[m] for m in measures}) for name, run in runs.items()}
    qids = sorted(values[names[0]][measures[0]])
    rows = []
    for measure in measures:
        base = np.array([values[names[0]][measure][q] for q in qids])
        for name in names[1:]:
            ours = np.array([values[name][measure][q] for q in qids])
            t_p, permutation_p = paired_tests(ours, base, resamples, seed)
            counts = int((ours > base).sum()), int((ours < base).sum()), int((ours == base).sum())
            rows.append(Comparison(name, measure, float(ours.mean()), float(base.mean()), t_p, permutation_p, *counts))
    return rows


def bonferroni(rows: list[Comparison], tests_per_measure: int) -> list[Comparison]:
    """P × m, capped at 1: the family is the m systems tested against the baseline on one measure."""
    scale = lambda p: min(1.0, p * tests_per_measure)  # noqa: E731
    return [Comparison(**{**asdict(r), "t_p": scale(r.t_p), "permutation_p": scale(r.permutation_p)}) for r in rows]


def markdown(rows: list[Comparison], baseline: str, alpha: float, corrected: bool) -> str:
    """The comparison table; † marks p < alpha in both tests."""
    note = " (Bonferroni-corrected)" if corrected else ""
    lines = [
        f"Baseline: {baseline}. p-values are two-sided{note}; † = p < {alpha} in both tests.",
        "",
        "| system | measure | mean | baseline | Δ | t-test p | permutation p | wins | losses | ties |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        mark = " †" if r.t_p < alpha and r.permutation_p < alpha else ""
        lines.append(f"| {r.system} | {r.measure} | {r.mean:.4f}{mark} | {r.baseline_mean:.4f} | "
                     f"{r.mean - r.baseline_mean:+.4f} | {r.t_p:.3g} | {r.permutation_p:.3g} | {r.wins} | {r.losses} | "
                     f"{r.ties} |")  # fmt: skip
    return "\n".join(lines)


def load_systems(paths: list[Path], with_bm25: bool) -> tuple[dict[str, Run], Path | None]:
    """System name → run, from run files and output directories; and the first directory (for its qrels)."""
    runs: dict[str, Run] = {}
    first_dir = next((p for p in paths if p.is_dir()), None)
    for path in paths:
        if path.is_dir():
            results = json.loads((path / "results.json").read_text())
            split, system = results["split"], results["system"]
            if with_bm25 and path == first_dir:
                runs["BM25"] = read_run(path / f"run.{split}.bm25.trec")
            name = system if system not in runs else f"{system} ({path.name})"
            runs[name] = read_run(path / f"run.{split}.trec")
        elif path.exists():
            runs[path.name if path.name not in runs else str(path)] = read_run(path)
        else:
            raise FileNotFoundError(f"{path}: neither a run file nor an output directory")
    return runs, first_dir


def directory_qrels(run_dir: Path) -> Qrels:
    """The qrels of the split a ``train.py`` / ``evaluate.py`` run evaluated, from its saved dataset config."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    config = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    split = json.loads((run_dir / "results.json").read_text())["split"]
    return instantiate(config.dataset).qrels[split]


def main(argv: list[str] | None = None) -> str:
    """Command line: compare, print the table, write the three files."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "systems", nargs="+", type=Path, help="run files or output directories; the first is the baseline"
    )
    parser.add_argument("--qrels", type=Path, help="qrels file (default: the first directory's dataset)")
    parser.add_argument("--bm25", action="store_true", help="the first directory's BM25 run as the baseline")
    parser.add_argument("--measures", nargs="+", default=["MRR@10", "R@1000", "nDCG@10", "MAP@1000"])
    parser.add_argument("--bonferroni", action="store_true", help="correct p-values for the systems compared")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--resamples", type=int, default=10_000, help="permutation test resamples")
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args(argv)
    unknown = [m for m in args.measures if m not in MEASURES]
    if unknown:
        parser.error(f"unknown measures {unknown}; known: {sorted(MEASURES)}")
    runs, first_dir = load_systems(args.systems, args.bm25)
    if len(runs) < 2:
        parser.error("give at least two systems")
    if args.qrels is None and first_dir is None:
        parser.error("--qrels is needed when no output directory is given")
    qrels = read_qrels(args.qrels) if args.qrels else directory_qrels(first_dir)
    rows = compare(runs, qrels, args.measures, args.resamples)
    if args.bonferroni:
        rows = bonferroni(rows, len(runs) - 1)
    table = markdown(rows, next(iter(runs)), args.alpha, args.bonferroni)
    print(table)
    with atomic_path(args.out / "comparison.md") as tmp:
        tmp.write_text(table + "\n")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(asdict(rows[0])))
    writer.writeheader()
    writer.writerows(asdict(r) for r in rows)
    with atomic_path(args.out / "comparison.csv") as tmp:
        tmp.write_text(buffer.getvalue())
    write_json(args.out / "comparison.json", {"baseline": next(iter(runs)), "rows": [asdict(r) for r in rows]})
    return table


if __name__ == "__main__":
    main()
