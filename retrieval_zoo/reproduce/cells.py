"""Registered cells against measured ones: Δ, tolerance and verdict per cell, as markdown and JSON."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

from retrieval_zoo.reproduce.registry import Expected, Row, Table, field_value


@dataclass
class Cell:
    """One README cell checked: what the registry says, what was measured, and whether it is within tolerance."""

    table: str
    row: str
    column: str
    expected: str
    measured: str
    delta: float | None
    tolerance: float
    seeds: list[int]
    gated: bool
    ok: bool


def tolerance(expected: Expected, row: Row, seeds_measured: int, seeds_registered: int, tol: dict[str, float]) -> float:
    """|Δ| allowed: the row's own spread, else its kind's machine spread; plus ``seed_sd_factor`` sd for fewer seeds.

    A row's own ``tolerance`` is the measured run-to-run spread of a training that is not deterministic. Half a unit
    in the registered value's last decimal is added too: the README rounds what it reports.
    """
    allowed = row.tolerance if row.tolerance is not None else tol["lexical"] if row.lexical else tol["model"]
    if expected.kind == "mean_sd" and seeds_measured < seeds_registered:
        allowed += tol["seed_sd_factor"] * expected.values[1]
    return allowed + 0.5 * 10.0**-expected.decimals


def measured_text(values: list[float], expected: Expected) -> str:
    """The measured values written the way the registered cell is (same decimals, mean ± sd or per seed)."""
    digits = expected.decimals
    if expected.kind == "per_seed":
        return ", ".join(f"{v:.{digits}f}" for v in values)
    if expected.kind == "mean_sd" and len(values) > 1:
        return f"{statistics.fmean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"
    return f"{statistics.fmean(values):.{digits}f}"


def delta(values: list[float], expected: Expected) -> float:
    """Measured minus registered: of the means, or the largest per-seed difference for per-seed cells."""
    if expected.kind == "per_seed":
        return max((v - e for v, e in zip(values, expected.values, strict=False)), key=abs)
    return statistics.fmean(values) - expected.centre


def compare_table(table: Table, results: dict[tuple[str, int], dict], seeds: dict[str, list[int]],
                  tol: dict[str, float]) -> list[Cell]:  # fmt: skip
    """Every registered cell of ``table`` against ``results[(job, seed)]`` (the ``results.json`` of each run).

    Args:
        table: The registry table.
        results: (job name, seed) → that run's ``results.json``.
        seeds: job name → the seeds that were run (all of the job's, or the first with ``--quick``).
        tol: :func:`~retrieval_zoo.reproduce.registry.load_tolerances`.
    """
    cells = []
    for row in table.rows:
        run_seeds = seeds.get(row.job, [])
        if not run_seeds:
            continue  # a row left out of this run (--quick)
        all_seeds = len(table.jobs[row.job].seeds)
        for column, registered in row.cells.items():
            expected = row.first_seed.get(column, registered) if len(run_seeds) < all_seeds else registered
            values = [field_value(results[(row.job, s)], row.system, table.columns[column]) for s in run_seeds]
            allowed = tolerance(expected, row, len(run_seeds), all_seeds, tol)
            gated = table.gated(column)
            if any(v is None for v in values):
                cell = Cell(table.name, row.name, column, expected.text, "missing", None, allowed, run_seeds, gated,
                            not gated)  # fmt: skip
            else:
                change = delta(values, expected)
                ok = abs(change) <= allowed or not gated
                cell = Cell(table.name, row.name, column, expected.text, measured_text(values, expected), change,
                            allowed, run_seeds, gated, ok)  # fmt: skip
            cells.append(cell)
    return cells


def verdict(cell: Cell) -> str:
    """``ok``, ``OUTSIDE`` (a gated cell beyond its tolerance) or ``info`` (compared, not gated)."""
    if not cell.gated:
        return "info"
    return "ok" if cell.ok else "OUTSIDE"


def markdown(table: Table, cells: list[Cell]) -> str:
    """The comparison of one table: registered, measured, Δ and tolerance per cell."""
    where = table.reproduced
    lines = [
        f"### {table.title} (`{table.name}`)",
        "",
        f"Registered: commit {where['commit']} on {where['machine']}.",
        "",
        "| row | column | expected | measured | Δ | tolerance | seeds | status |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        change = "" if c.delta is None else f"{c.delta:+.4f}"
        seeds = ",".join(map(str, c.seeds))
        lines.append(f"| {c.row} | {c.column} | {c.expected} | {c.measured} | {change} | {c.tolerance:.4f} | {seeds} "
                     f"| {verdict(c)} |")  # fmt: skip
    return "\n".join(lines)


def as_json(cells: list[Cell]) -> list[dict]:
    """The cells as JSON records."""
    return [asdict(c) | {"status": verdict(c)} for c in cells]
