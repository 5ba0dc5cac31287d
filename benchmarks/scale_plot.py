"""The scale harness's growth per stage, drawn from its measurements: log–log, measured points and the projection.

For each measure that grows with the corpus (seconds, ms a query, disk, peak memory), one figure: a line per stage
through its measured sizes, and a dashed line from the largest measured size to MS MARCO's 8.8M passages at the
growth exponent of the two largest sizes, the projection the harness's table prints. ``benchmarks.scale --plot
FOLDER`` draws them after measuring; this module draws them again from a work folder's ``results.json``, or from a
table the harness printed, as a page keeps it (``--table``: the first table under the page's scale-harness heading,
its figures as printed, so rounded; footnote marks dropped, cells without a figure left out).

    python -m benchmarks.scale_plot [--work /tmp/retrieval_zoo-scale | --table docs/benchmarks.md] [--out docs/figures]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from pathlib import Path

from benchmarks.scale import MSMARCO, STAGES, exponent
from retrieval_zoo.plots import pyplot, save_png

PLOTTED = {"seconds": "seconds", "ms_per_query": "ms a query", "disk": "bytes on disk", "peak_rss": "peak RSS, bytes"}
Results = dict[int, dict[str, dict[str, float | str]]]  # size → stage → measure → value


def series(results: Results, stage: str, measure: str) -> tuple[list[tuple[int, float]], float | None]:
    """A stage's measured (size, value) points, and its projection to MS MARCO (None without two clean sizes)."""
    points = []
    for size in sorted(results):
        found = results[size].get(stage, {})
        value = found.get(measure)
        if isinstance(value, int | float) and value > 0 and "failed" not in found:
            points.append((size, float(value)))
    if len(points) < 2 or points[-1][0] != max(results):  # a stage that failed at the largest size: no projection
        return points, None
    (small_n, small), (large_n, large) = points[-2], points[-1]
    growth = exponent(small, large, large_n / small_n)
    return points, None if growth is None else large * (MSMARCO / large_n) ** growth


def plot(results: Results, folder: Path) -> list[Path]:
    """One PNG a measure (``scale-<measure>.png``) in ``folder``; returns the files written."""
    plt = pyplot()
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for measure, label in PLOTTED.items():
        drawn = drawn_series(results, measure)
        if not drawn:
            continue
        figure, axes = plt.subplots(figsize=(7.0, 4.6))
        for number, (stage, points, projected) in enumerate(drawn):
            color = plt.get_cmap("tab20")(number % 20)
            axes.plot(*zip(*points, strict=True), marker="o", color=color, label=stage)
            if projected is not None:
                axes.plot([points[-1][0], MSMARCO], [points[-1][1], projected], linestyle="--", color=color)
        axes.axvline(MSMARCO, color="grey", linewidth=0.8)
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.set_xlabel("documents (measured: solid; projected to MS MARCO's 8,841,823: dashed)")
        axes.set_ylabel(label)
        axes.set_title(f"Scale harness: {label} against the corpus size", fontsize=10)
        axes.grid(alpha=0.3, which="both")
        axes.legend(fontsize=7, ncol=2, loc="upper left")
        metadata = {"Description": digest(drawn)}  # what it plots, so a test finds a figure its table moved from
        written.append(save_png(figure, folder / f"scale-{measure}.png", dpi=110, metadata=metadata))
    return written


def drawn_series(results: Results, measure: str) -> list[tuple[str, list[tuple[int, float]], float | None]]:
    """(stage, measured points, projection) for every stage with a point of ``measure``, in the harness's order."""
    drawn = [(stage, *series(results, stage, measure)) for stage in STAGES]
    return [(stage, points, projected) for stage, points, projected in drawn if points]


def digest(drawn: list[tuple[str, list[tuple[int, float]], float | None]]) -> str:
    """SHA-256 of a figure's series, stored in its PNG: the same numbers give the same digest."""
    return hashlib.sha256(json.dumps(drawn).encode()).hexdigest()


def read_results(work: Path) -> Results:
    """A work folder's ``results.json``, sizes as numbers."""
    saved = work / "results.json"
    if not saved.exists():
        raise FileNotFoundError(f"{saved}: no results; run python -m benchmarks.scale --work {work} first")
    return {int(n): r for n, r in json.loads(saved.read_text()).items()}


HEADING = "## Scale harness"
UNITS = {"": 1.0, "s": 1.0, "h": 3600.0, "KiB": 2.0**10, "MiB": 2.0**20, "GiB": 2.0**30}  # as benchmarks.scale.human
FIGURE = re.compile(r"^([0-9][0-9,]*(?:\.[0-9]+)?)\s*(s|h|KiB|MiB|GiB)?$")


def read_table(page: Path) -> Results:
    """The first table under ``page``'s scale-harness heading, as measured figures (seconds, bytes, ms a query).

    Its header names the sizes (``| stage | measure | 10,000 | 100,000 | exponent | ...``); a cell that is not a
    figure with one of the harness's units is left out, and words in a seconds cell (``refused †``) mark the stage
    failed at that size, as ``results.json`` would; a row whose measure is not plotted is left out. A page without
    the heading or its table is refused, naming the page.
    """
    lines = page.read_text(encoding="utf-8").splitlines()
    starts = [number for number, line in enumerate(lines) if line.startswith(HEADING)]
    rows = []
    for line in lines[starts[0] :] if starts else []:
        if line.startswith("| stage | measure |") or (rows and line.startswith("|")):
            rows.append(line)
        elif rows:
            break
    if len(rows) < 3:
        raise ValueError(f"{page}: no table under a heading starting {HEADING!r}")
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    numbers = {column: name.replace(",", "") for column, name in enumerate(header)}
    sizes = {column: int(number) for column, number in numbers.items() if number.isdigit()}
    results: Results = {size: {} for size in sizes.values()}
    for row in rows[2:]:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        stage, measure = cells[0], cells[1].split()[0]
        for column, size in sizes.items():
            cell = re.sub(r"[^\w.,\s]", "", cells[column]).strip() if column < len(cells) else ""
            figure = FIGURE.match(cell)
            if measure == "seconds" and cell and not figure:  # "refused": failed at this size, as results.json says
                results[size].setdefault(stage, {})["failed"] = cell
            elif measure in PLOTTED and figure:
                value = float(figure.group(1).replace(",", "")) * UNITS[figure.group(2) or ""]
                results[size].setdefault(stage, {})[measure] = value
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, default=Path("/tmp/retrieval_zoo-scale"))
    parser.add_argument("--table", type=Path, default=None, help="a page holding the harness's table (docs/…)")
    parser.add_argument("--out", type=Path, default=Path("docs/figures"))
    args = parser.parse_args()
    results = read_table(args.table) if args.table else read_results(args.work)
    for path in plot(results, args.out):
        print(path)


if __name__ == "__main__":
    main()
