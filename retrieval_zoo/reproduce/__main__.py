"""Re-run the docs' results tables and compare every cell with its registered value (pyserini's 2CR, for this zoo).

    python -m retrieval_zoo.reproduce --list                  # the tables, their jobs and what a run costs
    python -m retrieval_zoo.reproduce --quick                 # seed 13 and the headline rows of every table
    python -m retrieval_zoo.reproduce default roc --dry-run   # the commands of two whole tables, not run
    python -m retrieval_zoo.reproduce clear_widened           # one whole table, every seed

The registry is ``reproductions/<table>.yaml`` (:mod:`retrieval_zoo.reproduce.registry`). Jobs run as ``train.py`` /
``evaluate.py`` subprocesses, cached by command and code (:mod:`retrieval_zoo.reproduce.runner`). Prints expected,
measured, Δ and tolerance per cell, writes ``reproduce.md`` and ``reproduce.json`` into ``--out``, and exits 1 when a
gated cell (a trec_eval measure) is outside its tolerance.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from retrieval_zoo.cache import write_json
from retrieval_zoo.reproduce.cells import as_json, compare_table, markdown
from retrieval_zoo.reproduce.figures import draw, measured_values, registered_values
from retrieval_zoo.reproduce.registry import (
    DOCS,
    REGISTRY,
    Job,
    Table,
    docs_tables,
    load_registry,
    load_tolerances,
)
from retrieval_zoo.reproduce.runner import ROOT, Runner


def machine() -> str:
    """This CPU as the registry and the docs name machines: model, family/model numbers, vector ISA, cores."""
    info = {}
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout.splitlines():
            key, _, value = line.partition(":")
            info[key.strip()] = value.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"{platform.processor() or platform.machine()}"
    flags = info.get("Flags", "").split()
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    family, model = info.get("CPU family", "?"), info.get("Model", "?")
    return f"{info.get('Model name', '?')} (family {family}, model {model}; {isa}), {info.get('CPU(s)', '?')} cores"


def commit() -> str:
    """The checkout's commit, with ``+changes`` when tracked files differ from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=ROOT).returncode != 0
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def planned(table: Table, quick: bool) -> dict[str, list[int]]:
    """Job → seeds to run, in an order that runs a job after those it needs.

    Every job and seed, or with ``quick`` the first seed of the jobs the quick rows need (and of what those need).
    """
    needed = {row.job for row in table.rows if row.quick or not quick}
    while any(table.jobs[j].needs - needed for j in needed):
        needed |= {n for j in needed for n in table.jobs[j].needs}
    order: list[str] = []
    while len(order) < len(needed):
        order += sorted(j for j in needed if j not in order and table.jobs[j].needs <= set(order))
    return {j: list(table.jobs[j].seeds[:1] if quick else table.jobs[j].seeds) for j in order}


def resolved(job: Job, directories: dict[tuple[str, int], Path], seeds: dict[str, list[int]]) -> Job:
    """The job with each ``{dir:<job>}`` replaced by that job's directory (of its first seed run here)."""

    def directory(match: re.Match) -> str:
        return str(directories[(match.group(1), seeds[match.group(1)][0])])

    return replace(job, overrides=tuple(re.sub(r"\{dir:(\w+)\}", directory, o) for o in job.overrides))


def run_table(table: Table, runner: Runner, quick: bool) -> tuple[dict, dict[str, list[int]], dict]:
    """Run (or find cached) every planned job, each after the jobs it needs.

    Returns:
        The results and the directory of each (job, seed) run, and the seeds of each job.
    """
    seeds = planned(table, quick)
    directories, results = {}, {}
    for job_name, job_seeds in seeds.items():
        job = resolved(table.jobs[job_name], directories, seeds)
        for seed in job_seeds:
            evaluated = directories[(job.of, seed)] if job.of else None
            directories[(job_name, seed)] = runner.run(job, seed, evaluated)
            if not runner.dry_run:
                results[(job_name, seed)] = runner.results(directories[(job_name, seed)])
    return results, seeds, directories


def copy_drawn(table: Table, directories: dict[tuple[str, int], Path], seeds: dict[str, list[int]],
               folder: Path) -> list[Path]:  # fmt: skip
    """The figures the table's jobs drew (their first seed's), copied into ``folder`` as ``<table>-<name>.png``."""
    copied = []
    for figure in table.drawn:
        if figure.job not in seeds:  # a job a quick run leaves out
            continue
        source = directories[(figure.job, seeds[figure.job][0])] / figure.file
        if not source.exists():
            raise FileNotFoundError(f"{source}: job {figure.job!r} of {table.name} drew no {figure.file}")
        folder.mkdir(parents=True, exist_ok=True)
        copied.append(Path(shutil.copyfile(source, folder / f"{table.name}-{figure.name}{source.suffix}")))
    return copied


def list_tables(tables: dict[str, Table]) -> None:
    """One block per table: its page, rows, jobs and seeds, quick rows and where it was last reproduced."""
    pages = docs_tables()
    for table in tables.values():
        full, quick = planned(table, False), planned(table, True)
        page = f"docs/{pages[table.name][0]}" if table.name in pages else "on no docs page"
        print(f"{table.name}: {table.title}  [{table.path.relative_to(table.path.parent.parent)}; shown in {page}]")
        print(f"  reproduced at {table.reproduced['commit']} on {table.reproduced['machine']}")
        headline = ", ".join(r.name for r in table.rows if r.quick)
        runs, quick_runs = sum(map(len, full.values())), sum(map(len, quick.values()))
        print(f"  {len(table.rows)} rows; runs: {runs} in full, {quick_runs} with --quick (rows: {headline})")
        for name, job in table.jobs.items():
            source = f"of {job.of}'s runs" if job.of else f"seeds {', '.join(map(str, job.seeds))}"
            print(f"    {name}: {job.script}.py {' '.join(job.overrides)}  ({source})")


def main(argv: list[str] | None = None) -> int:
    """Command line; returns the exit status (1 when a gated cell is outside its tolerance)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tables", nargs="*", metavar="TABLE", help="tables to reproduce (default: all)")
    parser.add_argument("--list", action="store_true", help="list the tables and their jobs, run nothing")
    parser.add_argument("--quick", action="store_true", help="one seed and the headline rows of every table")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--registry", type=Path, default=REGISTRY, help="the registry directory")
    parser.add_argument("--cache-dir", type=Path, help="job directories (default: $RETRIEVAL_ZOO_CACHE/reproduce)")
    parser.add_argument("--out", type=Path, help="where reproduce.md/json go (default: outputs/reproduce/<time>)")
    parser.add_argument("--baseline", type=Path, help="an earlier reproduce.json: every measured cell must equal it")
    parser.add_argument("--figures", action="store_true", help="draw the tables' figures from the registry into "
                        "docs/figures, run nothing")  # fmt: skip
    args = parser.parse_args(argv)
    tables = load_registry(args.registry)
    unknown = set(args.tables) - set(tables)
    if unknown:
        parser.error(f"unknown tables {sorted(unknown)}; the registry has {', '.join(tables)}")
    chosen = {name: tables[name] for name in args.tables or tables}
    if args.list:
        list_tables(chosen)
        return 0
    if args.figures:
        for table in chosen.values():
            for path in draw(table, registered_values(table), DOCS / "figures"):
                print(path)
            for figure in table.drawn:  # only a run of the job draws these
                print(f"{table.name}-{figure.name}: drawn by job {figure.job}; reproduce {table.name} and copy it from "
                      "the run's --out folder's figures/")  # fmt: skip
        return 0
    tolerances = load_tolerances(args.registry)
    runner = Runner(cache_dir=args.cache_dir, dry_run=args.dry_run)
    here = {"commit": commit(), "machine": machine(), "python": sys.version.split()[0], **runner.stack}
    mode = "quick" if args.quick else "full"
    print(f"reproduce: {mode}, code {runner.code}, " + ", ".join(f"{k} {v}" for k, v in here.items()))
    sections, cells, figures = [], [], []
    for table in chosen.values():
        print(f"\n{table.name}: {table.title}")
        results, seeds, directories = run_table(table, runner, args.quick)
        if args.dry_run:
            continue
        table_cells = compare_table(table, results, seeds, tolerances)
        figures.append((table, measured_values(table_cells), directories, seeds))
        sections.append(markdown(table, table_cells))
        print("\n" + sections[-1])
        cells += table_cells
    if args.dry_run:
        return 0
    outside = [c for c in cells if not c.ok]
    out = args.out or ROOT / "outputs" / "reproduce" / datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    head = f"# Reproduction ({mode})\n\nMeasured at commit {here['commit']} on {here['machine']}, code {runner.code}."
    summary = f"{len(cells) - len(outside)} of {len(cells)} cells within tolerance"
    out.mkdir(parents=True, exist_ok=True)
    (out / "reproduce.md").write_text("\n\n".join([head, *sections, summary]) + "\n")
    write_json(out / "reproduce.json", {"quick": args.quick, "machine": here, "cells": as_json(cells)})
    for table, values, directories, seeds in figures:  # drawn from what was measured, beside the tables
        draw(table, values, out / "figures")
        copy_drawn(table, directories, seeds, out / "figures")
    print(f"\n{summary}; {out / 'reproduce.md'}, {out / 'reproduce.json'}")
    for cell in outside:
        print(f"OUTSIDE: {cell.table} / {cell.row} / {cell.column}: expected {cell.expected}, measured {cell.measured}")
    changed = changed_since(args.baseline, cells) if args.baseline else []
    return 1 if outside or changed else 0


def changed_since(baseline: Path, cells: list) -> list[str]:
    """The cells whose measured text differs from an earlier run's ``reproduce.json`` (a refactor's before)."""
    before = {(c["table"], c["row"], c["column"]): c["measured"] for c in json.loads(baseline.read_text())["cells"]}
    changed = []
    for c in cells:
        was = before.get((c.table, c.row, c.column), c.measured)
        if was != c.measured:
            changed.append(f"CHANGED since {baseline}: {c.table} / {c.row} / {c.column}: {was} -> {c.measured}")
    print("\n".join(changed) or f"every cell measured in {baseline} came out the same")
    return changed


if __name__ == "__main__":
    sys.exit(main())
