"""Figures of the registered tables, drawn from their numbers, never by hand.

A table's registry file may name figures (``figures: [{name, x, y, title, log_x, x_label}]``): the ``y`` column
against the ``x`` column, one numbered point a row that has both, the rows' names in a key below. ``python -m
retrieval_zoo.reproduce --figures`` draws them from the registered cells into ``docs/figures/<table>-<name>.png``,
where the docs pages show them; a reproduction run draws the same figures from what it measured into its ``--out``
folder. Each PNG carries the digest of the values it plots (its ``Description``), so a test finds a figure that its
table's numbers have moved away from.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from retrieval_zoo.plots import pyplot, save_png
from retrieval_zoo.reproduce.cells import Cell
from retrieval_zoo.reproduce.registry import Expected, Figure, Table

Values = dict[str, dict[str, float]]  # row name → column → value


def registered_values(table: Table) -> Values:
    """The registered cells as numbers (a mean ± sd cell as its mean)."""
    return {row.name: {column: cell.centre for column, cell in row.cells.items()} for row in table.rows}


def measured_values(cells: list[Cell]) -> Values:
    """What a reproduction measured, as numbers, by row and column (missing cells left out)."""
    values: Values = {}
    for cell in cells:
        if cell.measured != "missing":
            values.setdefault(cell.row, {})[cell.column] = Expected.parse(cell.measured, cell.row).centre
    return values


def points(figure: Figure, values: Values) -> list[tuple[str, float, float]]:
    """(row, x, y) of each row with both of the figure's columns, in the table's order."""
    return [(row, cells[figure.x], cells[figure.y]) for row, cells in values.items()
            if figure.x in cells and figure.y in cells]  # fmt: skip


def digest(figure: Figure, values: Values) -> str:
    """SHA-256 of what the figure plots: its spec and its points."""
    spec = {"figure": [figure.name, figure.x, figure.y, figure.title, figure.log_x], "points": points(figure, values)}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def figure_path(table: Table, figure: Figure, folder: Path) -> Path:
    """Where a figure of ``table`` is drawn in ``folder``."""
    return folder / f"{table.name}-{figure.name}.png"


def draw(table: Table, values: Values, folder: Path) -> list[Path]:
    """Every figure of ``table`` from ``values`` into ``folder``; returns the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for figure in table.figures:
        path = figure_path(table, figure, folder)
        labels = (figure.x_label or figure.x.replace("\\", ""), figure.y.replace("\\", ""))
        scatter(path, points(figure, values), figure.title, labels, figure.log_x, digest(figure, values))
        written.append(path)
    return written


def scatter(path: Path, shown: list[tuple[str, float, float]], title: str, labels: tuple[str, str], log_x: bool,
            description: str) -> None:  # fmt: skip
    """(name, x, y) points as a numbered scatter with the names in a key below, saved as a PNG at ``path``.

    Args:
        path: The PNG to write.
        shown: The points, in the key's order.
        title: The figure's title.
        labels: The x and y axes' labels.
        log_x: A logarithmic x axis.
        description: Kept in the PNG's metadata (what the figure plots, to tell a stale figure).
    """
    fig, axes = pyplot().subplots(figsize=(6.4, 3.6 + 0.17 * len(shown)))  # room for the key below
    axes.scatter([x for _, x, _ in shown], [y for _, _, y in shown], color="tab:blue")
    for number, (_, x, y) in enumerate(shown, start=1):
        axes.annotate(str(number), (x, y), textcoords="offset points", xytext=(4, 3), fontsize=8)
    if log_x:
        axes.set_xscale("log")
    axes.set_xlabel(labels[0])
    axes.set_ylabel(labels[1])
    axes.set_title(title, fontsize=10)
    axes.grid(alpha=0.3)
    key = "\n".join(f"{number}: {name.replace(chr(96), '')}" for number, (name, _, _) in enumerate(shown, start=1))
    fig.text(0.02, 0.01, key, fontsize=7, va="bottom", ha="left")
    fig.subplots_adjust(bottom=(0.17 * len(shown) + 0.6) / (3.6 + 0.17 * len(shown)), top=0.9, left=0.12)
    save_png(fig, path, dpi=110, tight=False, metadata={"Description": description})
