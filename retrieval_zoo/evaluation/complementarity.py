"""How complementary a hybrid's two sides are: RoC's Ratio of Complementarity (roc.md §1, Eq. 1) and its Venn figure.

Over the judged queries U, S is the set a hybrid's lexical side answers (a relevant document in its top k) and D
the set its semantic side answers. RoC = |D − S| / |D| = 1 − |D ∩ S| / |D|: 1 when the sides answer disjoint
queries, 0 when D ⊆ S. The failures |U − D ∪ S| are the queries neither side answers at k.
"""

from __future__ import annotations

from pathlib import Path

from retrieval_zoo.data.formats import Qrels, Run, ranked
from retrieval_zoo.evaluation.metrics import judged
from retrieval_zoo.plots import pyplot, save_png


def answered(run: Run, qrels: Qrels, k: int) -> set[str]:
    """The judged queries with a relevant document among ``run``'s top ``k`` (trec_eval's order)."""
    return {
        qid
        for qid, rels in judged(qrels).items()
        if any(rels.get(docid, 0) > 0 for docid, _ in ranked(run.get(qid, {}))[:k])
    }


def complementarity(lexical: Run, semantic: Run, qrels: Qrels, k: int = 10) -> dict[str, float]:
    """RoC (Eq. 1) and the set sizes behind it, at cutoff ``k``.

    Returns:
        ``k``, ``U`` (judged queries), ``S``, ``D``, ``D-S``, ``S-D``, ``D∩S``, ``failures`` (|U − D ∪ S|) and
        ``RoC`` (0 when D is empty).
    """
    universe = set(judged(qrels))
    s, d = answered(lexical, qrels, k), answered(semantic, qrels, k)
    return {
        "k": k,
        "U": len(universe),
        "S": len(s),
        "D": len(d),
        "D-S": len(d - s),
        "S-D": len(s - d),
        "D∩S": len(d & s),
        "failures": len(universe - (d | s)),
        "RoC": len(d - s) / len(d) if d else 0.0,
    }


def venn_figure(stats: dict[str, float], path: str | Path, title: str) -> Path:
    """Draw the two sides' answered sets like RoC's Figure 1 (percent of U in each region), as a PNG."""
    from matplotlib.patches import Circle

    plt = pyplot()

    total = max(1, stats["U"])

    def share(n: float) -> str:
        return f"{int(n):,}\n({100 * n / total:.1f}%)"

    figure, axes = plt.subplots(figsize=(5.2, 3.8))
    axes.add_patch(Circle((-0.45, 0), 1.0, color="#f2c14e", alpha=0.6, label=f"S: lexical ({int(stats['S']):,})"))
    axes.add_patch(Circle((0.45, 0), 1.0, color="#5b8def", alpha=0.5, label=f"D: semantic ({int(stats['D']):,})"))
    for x, key in ((-0.95, "S-D"), (0.0, "D∩S"), (0.95, "D-S")):
        axes.text(x, 0, share(stats[key]), ha="center", va="center", fontsize=9)
    axes.text(0, -1.3, f"failures |U − D∪S| = {share(stats['failures'])}".replace("\n", " "), ha="center", fontsize=9)
    axes.set_title(f"{title}: RoC = {stats['RoC']:.3f} at R@{stats['k']}", fontsize=10)
    axes.set_xlim(-1.6, 1.6)
    axes.set_ylim(-1.5, 1.2)
    axes.set_aspect("equal")
    axes.axis("off")
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, 1.02), ncol=2, fontsize=8, frameon=False)
    return save_png(figure, path, dpi=120)


def first_relevant_rank(ranking: dict[str, float], relevant: set[str]) -> int | None:
    """1-based rank of the first relevant document of ``ranking`` in trec_eval's order, None if none is retrieved."""
    return next((rank for rank, (docid, _) in enumerate(ranked(ranking), 1) if docid in relevant), None)


def moved_queries(baseline: Run, system: Run, qrels: Qrels, queries: dict[str, str], count: int = 5) -> list[dict]:
    """The queries where ``system`` moved the first relevant document most, up and down, against ``baseline``.

    CLEAR's Tables 3–4 in numbers: for each judged query, the first relevant document's rank in the baseline (BM25)
    and in the system; a document not retrieved counts one past the deeper run's depth. Returns ``count`` rows moved
    up most (largest baseline rank − system rank) then ``count`` moved down most, each with qid, query, the ranks and
    the shift.
    """
    depth = max((len(r) for r in (*baseline.values(), *system.values())), default=0) + 1
    rows = []
    for qid, rels in judged(qrels).items():
        relevant = {d for d, g in rels.items() if g > 0}
        before = first_relevant_rank(baseline.get(qid, {}), relevant) or depth
        after = first_relevant_rank(system.get(qid, {}), relevant) or depth
        rows.append({"qid": qid, "query": queries.get(qid, ""), "baseline_rank": before, "system_rank": after,
                     "shift": before - after})  # fmt: skip
    rows.sort(key=lambda row: (-row["shift"], row["qid"]))
    up = [dict(row, direction="up") for row in rows[:count] if row["shift"] > 0]
    down = [dict(row, direction="down") for row in reversed(rows[-count:]) if row["shift"] < 0]
    return up + down


def below_best_part(metrics: dict[str, dict[str, float]], system: str, parts: list[str]) -> dict[str, dict]:
    """The measures on which a hybrid scores below its best part alone: a fusion that loses to one of its own sides.

    Args:
        metrics: System → measure → value, with the hybrid ``system`` and each part as ``<system> (<part>)``.
        system: The hybrid's row.
        parts: Its parts' names.

    Returns:
        Measure → ``hybrid`` (its value), ``part`` (the best part's row) and ``value`` (that part's), for each measure
        where the hybrid is lower; empty when it holds up on every measure.
    """
    rows = [f"{system} ({part})" for part in parts]
    found = {}
    for measure, value in metrics[system].items():
        best = max(rows, key=lambda row: metrics[row][measure])
        if value < metrics[best][measure]:
            found[measure] = {"hybrid": value, "part": best, "value": metrics[best][measure]}
    return found
