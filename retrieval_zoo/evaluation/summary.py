"""Summarise runs over seeds: mean ± std of each system's metrics, grouped by configuration.

    python -m retrieval_zoo.evaluation.summary /tmp/runs/sweep_a /tmp/runs/sweep_b [--measures MRR@10] [--csv s.csv]

Every directory holding a ``results.json`` (a ``train.py`` or ``evaluate.py`` job) below the given paths is one run.
Runs are grouped by their command-line overrides with ``seed`` left out, so the seeds of one configuration form one
group whatever sweep they came from. An ``evaluate.py run_dir=X`` job takes the overrides X was trained with, plus
its own. Each group prints one Markdown row per system (std over seeds, n − 1 in the denominator), with the
complementarity (RoC Eq. 1), the tuned fusion weight and the index size (MiB) where the runs have them, and
CSurF's efficiency columns (|C^q|, |C^d|, E_OPS; csurf.md Table 3) when some run reports them.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import statistics
from collections.abc import Iterable
from pathlib import Path

import yaml

from retrieval_zoo.cache import atomic_path

IGNORED = ("seed=", "hydra.", "logger=", "run_dir=")
EFFICIENCY = (("|C^q|", "csf_per_query"), ("|C^d|", "csf_per_doc"), ("E_OPS", "e_ops"))  # CSurF's Table 3 columns


def overrides(job: Path) -> list[str]:
    """The job's own command-line overrides (``.hydra/overrides.yaml``), with those of the run it evaluated."""
    path = job / ".hydra" / "overrides.yaml"
    if not path.exists():
        raise FileNotFoundError(f"{path}: missing; is {job} a train.py or evaluate.py output directory?")
    given = yaml.safe_load(path.read_text()) or []
    trained = [o.split("=", 1)[1] for o in given if o.startswith("run_dir=")]
    return (overrides(Path(trained[0])) if trained else []) + list(given)


def group_key(job: Path) -> str:
    """The configuration of a run, seeds aside: its overrides without seed, logger, hydra and run_dir keys."""
    kept = {o for o in overrides(job) if not o.lstrip("+~").startswith(IGNORED)}
    return " ".join(sorted(kept)) or "(defaults)"


def mean_std(values: list[float], digits: int = 4) -> str:
    """``mean ± std`` (sample std), or the single value."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def method_system(result: dict) -> str:
    """The name of the method's own (fused) run among ``metrics``, as opposed to BM25's and the method's parts."""
    if "system" in result:
        return result["system"]
    own = [s for s in result["metrics"] if s != "BM25" and " (" not in s]  # results.json written before "system"
    return own[0] if own else ""


def summary_rows(jobs: Iterable[Path], measures: list[str]) -> tuple[list[str], list[list[str]]]:
    """The header and one row per (configuration, system)."""
    groups: dict[str, list[dict]] = {}
    for job in sorted(jobs):
        groups.setdefault(group_key(job), []).append(json.loads((job / "results.json").read_text()))
    efficiency = any(r.get("efficiency") for results in groups.values() for r in results)
    header = ["configuration", "system", "seeds", *measures, "RoC", "tuned weight", "index MiB"]
    header += [label for label, _ in EFFICIENCY] if efficiency else []
    rows = []
    for key, results in groups.items():
        systems = [s for s in results[0]["metrics"] if all(s in r["metrics"] for r in results)]
        for system in systems:
            row = [key, system, str(len(results))]
            row += [mean_std([r["metrics"][system][m] for r in results]) for m in measures]
            fused = system == method_system(results[0])
            roc = [
                r["complementarity"]["RoC"] for r in results if (r.get("complementarity") or {}).get("RoC") is not None
            ]
            weight = [r["tuning"]["value"] for r in results if r.get("tuning")]
            size = [r["index_bytes"] / 2**20 for r in results if r.get("index_bytes")]
            row += [mean_std(roc, 3) if fused and roc else "", mean_std(weight, 2) if fused and weight else ""]
            row += [mean_std(size, 1) if fused and size else ""]
            for _, field in EFFICIENCY if efficiency else ():
                values = [r["efficiency"][field] for r in results if field in (r.get("efficiency") or {})]
                row.append(mean_std(values, 2) if fused and values else "")
            rows.append(row)
    return header, rows


def summarise(jobs: Iterable[Path], measures: list[str]) -> str:
    """A Markdown table: one row per (configuration, system)."""
    header, rows = summary_rows(jobs, measures)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def write_csv(path: Path, jobs: Iterable[Path], measures: list[str]) -> None:
    """The same table as CSV (``mean ± std`` cells as text), written atomically."""
    header, rows = summary_rows(jobs, measures)
    buffer = io.StringIO()
    csv.writer(buffer).writerows([header, *rows])
    with atomic_path(path) as tmp:
        tmp.write_text(buffer.getvalue())


def main(argv: list[str] | None = None) -> None:
    """Command line: print the summary of every run below the given paths."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+", type=Path, help="sweep or run directories")
    parser.add_argument("--measures", nargs="+", default=["MRR@10", "R@100", "MAP@1000"])
    parser.add_argument("--csv", type=Path, help="also write the table as CSV to this file")
    args = parser.parse_args(argv)
    jobs = [p.parent for path in args.paths for p in path.rglob("results.json")]
    if not jobs:
        raise SystemExit(f"no results.json under {', '.join(map(str, args.paths))}")
    print(summarise(jobs, args.measures))
    if args.csv:
        write_csv(args.csv, jobs, args.measures)


if __name__ == "__main__":
    main()
