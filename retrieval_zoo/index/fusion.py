"""Hybrid fusion of two runs, as pure functions: the union's gaps, linear interpolation (normalised or not), RRF."""

from __future__ import annotations

import statistics
from typing import Literal

from retrieval_zoo.data.formats import Run, ranked

Normalization = Literal["none", "minmax", "zscore"]


def normalize(scores: dict[str, float], method: Normalization) -> dict[str, float]:
    """Normalise one query's scores: ``none``, ``minmax`` to [0, 1], or ``zscore`` (mean 0, std 1)."""
    if method == "none" or not scores:
        return dict(scores)
    values = list(scores.values())
    if method == "minmax":
        low, span = min(values), max(values) - min(values)
        return {d: (s - low) / span if span > 0 else 0.0 for d, s in scores.items()}
    if method == "zscore":
        mean, std = statistics.fmean(values), statistics.pstdev(values)
        return {d: (s - mean) / std if std > 0 else 0.0 for d, s in scores.items()}
    raise ValueError(f"unknown normalization {method!r}; use none, minmax or zscore")


def union_gaps(run: Run, other: Run) -> dict[str, list[str]]:
    """Per query of ``run``, the documents ``other`` retrieves that ``run`` lacks, in ``other``'s order.

    Scoring these on ``run``'s side (:func:`complete`) makes both runs cover the union, so that
    :func:`interpolate` needs no stand-in score: the exact union fusion of CLEAR Eq. 8.
    """
    return {qid: [d for d in other.get(qid, {}) if d not in scores] for qid, scores in run.items()}


def complete(run: Run, extra: Run) -> Run:
    """``run`` with ``extra``'s scores added for documents it lacks (its own scores are kept)."""
    return {qid: {**extra.get(qid, {}), **scores} for qid, scores in run.items()}


def interpolate(
    run_a: Run, run_b: Run, weight_a: float = 1.0, weight_b: float = 1.0, normalization: Normalization = "none"
) -> Run:
    """Score each document of the union by weight_a·a + weight_b·b, per query.

    A document missing from one run takes that run's lowest (normalised) score for the query, the usual choice
    for fusing truncated runs (a document outside the top k scores at most the k-th score); runs completed over
    the union (:func:`union_gaps`, :func:`complete`) never need it.
    """
    fused: Run = {}
    for qid in run_a.keys() | run_b.keys():
        a = normalize(run_a.get(qid, {}), normalization)
        b = normalize(run_b.get(qid, {}), normalization)
        floor_a, floor_b = min(a.values(), default=0.0), min(b.values(), default=0.0)
        fused[qid] = {d: weight_a * a.get(d, floor_a) + weight_b * b.get(d, floor_b) for d in a.keys() | b.keys()}
    return fused


def reciprocal_rank_fusion(runs: list[Run], k: int = 60) -> Run:
    """RRF (Cormack et al., 2009): Σ over runs of 1 / (k + rank), rank starting at 1."""
    fused: Run = {}
    for run in runs:
        for qid, scores in run.items():
            target = fused.setdefault(qid, {})
            for rank, (docid, _) in enumerate(ranked(scores), start=1):
                target[docid] = target.get(docid, 0.0) + 1.0 / (k + rank)
    return fused
