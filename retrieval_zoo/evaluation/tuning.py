"""Tuning a hybrid's fusion weight on held-out queries: its grid, extended past an edge where the best value lies.

A fixed grid cannot tell a weight it stops at from the weight the data wants: CLEAR's λ_test (Eq. 8) scales BM25
against an embedding score whose range depends on the model and the collection. When the grid's best value lies at
its largest value (or at its smallest, when that is above 0), the search goes on geometrically, ×2 (or ÷2) a step,
until a value no longer improves on the best (the curve turned or flattened) or :data:`EXTEND_STEPS` steps were taken
(a stated bound: 256 times the edge). The log says which; the tuning record keeps the whole curve and the extension.
``index.extend_grid=false`` keeps to the grid (a paper's protocol).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from retrieval_zoo.data.formats import Qrels, Run
from retrieval_zoo.evaluation.metrics import MEASURES, evaluate
from retrieval_zoo.plots import pyplot, save_png

EXTEND_FACTOR = 2.0  # each step past an edge doubles (or halves) the weight
EXTEND_STEPS = 8  # at most 2^8 = 256 times (or 1/256 of) the edge


def best_of(curve: dict[float, float]) -> float:
    """The value with the highest measure; ties go to the smaller value."""
    return max(curve, key=lambda v: (curve[v], -v))


def grid_search(
    run_for: Callable[[float], Run], grid: Sequence[float], qrels: Qrels, measure: str
) -> tuple[float, dict[float, float]]:
    """Pick the grid value whose run scores best on ``measure`` (a name of :data:`MEASURES`); ties go to the smaller.

    Args:
        run_for: value → the run retrieved with it.
        grid: Values to try.
        qrels: Judgments of the tuning queries (only those are averaged over).
        measure: What is maximised.

    Returns:
        The chosen value, and the whole curve (value → measure).
    """
    curve = {float(v): score(run_for(float(v)), qrels, measure) for v in grid}
    return best_of(curve), curve


def score(run: Run, qrels: Qrels, measure: str) -> float:
    """``measure`` of ``run`` over ``qrels``' queries."""
    return evaluate(run, qrels, {measure: MEASURES[measure]})[measure]


def extend_past_edge(
    measure_at: Callable[[float], float], curve: dict[float, float], steps: int = EXTEND_STEPS
) -> dict | None:
    """Extend ``curve`` (value → measure, modified in place) past the grid's edge where its best value lies.

    Args:
        measure_at: value → the measure of the run retrieved with it.
        curve: The grid's curve; the values tried here are added to it.
        steps: At most this many values tried past the edge.

    Returns:
        None when the best value lies inside the grid (or at a smallest value of 0, or the grid is one value); else
        the extension: its
        ``direction`` (``up`` or ``down``), the ``edge``, the ``values`` tried, the ``best`` value and why it
        ``stopped``: ``turned`` (a value did not improve on the best) or ``bound`` (``steps`` values, still improving).
    """
    values, best = sorted(curve), best_of(curve)
    if len(values) < 2:  # one value is a weight given, not a grid
        return None
    if best == values[-1] and best > 0:
        direction, factor = "up", EXTEND_FACTOR
    elif best == values[0] and best > 0:
        direction, factor = "down", 1 / EXTEND_FACTOR
    else:
        return None
    edge, tried, value = best, [], best
    for _ in range(steps):
        value *= factor
        curve[value] = measure_at(value)
        tried.append(value)
        if curve[value] <= curve[best]:
            return {"direction": direction, "edge": edge, "values": tried, "best": best, "stopped": "turned"}
        best = value
    return {"direction": direction, "edge": edge, "values": tried, "best": best, "stopped": "bound"}


def extension_note(parameter: str, extension: dict) -> str:
    """The log line of an extension."""
    tried = ", ".join(f"{v:g}" for v in extension["values"])
    edge = "upper" if extension["direction"] == "up" else "lower"
    steps = len(extension["values"])
    how = "the curve turned" if extension["stopped"] == "turned" else f"still improving at the bound ({steps} steps)"
    return (f"[tune] {parameter}: the grid's best value {extension['edge']:g} lay at its {edge} edge; tried {tried}: "
            f"{how}; {parameter} = {extension['best']:g}")  # fmt: skip


def tuning_record(
    parameter: str, value: float, measure: str, curve: dict[float, float], queries: int, extended: dict | None = None
) -> dict:
    """What a method's ``tune`` returns, as results.json and the loggers read it.

    ``extended`` is None, or the extension of :func:`extend_past_edge`.
    """
    return {"parameter": parameter, "value": value, "measure": measure, "curve": dict(sorted(curve.items())),
            "queries": queries, "extended": extended}  # fmt: skip


def tune_weight(
    retriever: object,
    queries: dict[str, str],
    qrels: Qrels,
    grid: Sequence[float],
    measure: str,
    parameter: str,
    depth: int = 1000,
    extend: bool = True,
) -> dict:
    """Search a hybrid retriever's fusion weight on held-out queries, set it, and return the tuning record.

    Args:
        retriever: Has ``search(queries, k, weight=...)`` and a ``weight`` attribute (the hybrid retrievers).
        queries: The held-out queries.
        qrels: Their judgments.
        grid: Weights to try first.
        measure: What is maximised (a name of :data:`MEASURES`).
        parameter: The weight's name in the record (``lambda_test``, ``lambda_sem``, ...).
        depth: Retrieval depth of each tried run.
        extend: Go past the grid's edge where its best value lies (module docstring); False keeps to the grid.
    """

    def run_for(value: float) -> Run:
        return retriever.search(queries, depth, weight=value)

    best, curve = grid_search(run_for, grid, qrels, measure)
    extended = extend_past_edge(lambda value: score(run_for(value), qrels, measure), curve) if extend else None
    if extended is not None:
        best = extended["best"]
        print(extension_note(parameter, extended))
    retriever.weight = best
    return tuning_record(parameter, best, measure, curve, len(queries), extended)


def tuning_figure(record: dict, path: str | Path, title: str) -> Path:
    """Draw a tuning record's curve (the measure on the held-out queries against the weight), the chosen value marked.

    Values past the grid's edge (``extended``) are drawn as they were tried; a curve over values of several orders of
    magnitude has a logarithmic axis.
    """
    plt = pyplot()
    curve = {float(value): float(measure) for value, measure in record["curve"].items()}
    values = sorted(curve)
    figure, axes = plt.subplots(figsize=(5.2, 3.4))
    axes.plot(values, [curve[v] for v in values], marker="o", markersize=3, color="#5b8def")
    chosen = float(record["value"])
    axes.axvline(chosen, color="#d1495b", linestyle="--", linewidth=1)
    axes.annotate(f"{record['parameter']} = {chosen:g}", (chosen, curve.get(chosen, max(curve.values()))),
                  textcoords="offset points", xytext=(6, -12), fontsize=8, color="#d1495b")  # fmt: skip
    positive = [v for v in values if v > 0]
    if positive and values[-1] / positive[0] > 100:
        axes.set_xscale("symlog", linthresh=positive[0])
    axes.set_xlabel(record["parameter"])
    axes.set_ylabel(f"{record['measure']} ({record['queries']:,} held-out queries)")
    axes.set_title(title, fontsize=10)
    axes.grid(alpha=0.3)
    return save_png(figure, path, dpi=120)
