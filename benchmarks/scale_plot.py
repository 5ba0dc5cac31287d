"""The scale harness's growth per stage, drawn from its measurements: log–log, measured points and the projection.

For each measure that grows with the corpus (seconds, ms a query, disk, peak memory), one figure: a line per stage
through its measured sizes, and a dashed line from the largest measured size to MS MARCO's 8.8M passages at the
growth exponent of the two largest sizes, the projection the harness's table prints. ``benchmarks.scale --plot
FOLDER`` draws them after measuring; this module draws them again from a work folder's ``results.json``.

    python -m benchmarks.scale_plot [--work /tmp/retrieval_zoo-scale] [--out docs/figures]
"""

from __future__ import annotations

import argparse
import json
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
        drawn = [(stage, *series(results, stage, measure)) for stage in STAGES]
        drawn = [(stage, points, projected) for stage, points, projected in drawn if points]
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
        written.append(save_png(figure, folder / f"scale-{measure}.png", dpi=110))
    return written


def read_results(work: Path) -> Results:
    """A work folder's ``results.json``, sizes as numbers."""
    saved = work / "results.json"
    if not saved.exists():
        raise FileNotFoundError(f"{saved}: no results; run python -m benchmarks.scale --work {work} first")
    return {int(n): r for n, r in json.loads(saved.read_text()).items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, default=Path("/tmp/retrieval_zoo-scale"))
    parser.add_argument("--out", type=Path, default=Path("docs/figures"))
    args = parser.parse_args()
    for path in plot(read_results(args.work), args.out):
        print(path)


if __name__ == "__main__":
    main()
