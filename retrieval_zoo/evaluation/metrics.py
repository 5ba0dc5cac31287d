"""Effectiveness metrics exactly as trec_eval defines them, computed by pytrec_eval (trec_eval's own C code).

Reported: MRR@10 (trec_eval ``recip_rank`` over the top 10), R@100, R@1000 (``recall_k``), nDCG@10
(``ndcg_cut_10``: gain = grade, discount log2(rank + 1)) and MAP@1000 (``map_cut_1000``). Ties are ranked as
trec_eval ranks them: score descending, then docid descending. Every judged query counts: a query of the qrels with
at least one relevant document but no retrieved document scores 0, as with ``trec_eval -c``; queries without a
relevant document are not evaluated (MS MARCO's convention).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import pytrec_eval

from retrieval_zoo.data.formats import Qrels, Run, top_k

Measure = Literal["MRR@10", "R@100", "R@1000", "nDCG@10", "MAP@1000"]  # what tuning may maximise
MEASURES: dict[Measure, str] = {
    "MRR@10": "recip_rank@10",
    "R@100": "recall_100",
    "R@1000": "recall_1000",
    "nDCG@10": "ndcg_cut_10",
    "MAP@1000": "map_cut_1000",
}
"""Reported name → trec_eval measure; ``recip_rank@k`` is trec_eval's recip_rank over the top k."""


def judged(qrels: Qrels) -> Qrels:
    """The queries of ``qrels`` with at least one relevant (grade > 0) document."""
    return {qid: docs for qid, docs in qrels.items() if any(g > 0 for g in docs.values())}


def per_query(run: Run, qrels: Qrels, measures: Mapping[str, str] = MEASURES) -> dict[str, dict[str, float]]:
    """Metric name → (qid → value) over every judged query; a query missing from the run scores 0."""
    qrels = judged(qrels)
    values = {name: dict.fromkeys(qrels, 0.0) for name in measures}
    run = {qid: docs for qid, docs in run.items() if qid in qrels and docs}
    for name, measure in measures.items():
        trec_measure, _, cutoff = measure.partition("@")
        scored = top_k(run, int(cutoff)) if cutoff else run
        evaluator = pytrec_eval.RelevanceEvaluator(qrels, {trec_measure})
        for qid, result in evaluator.evaluate(scored).items():
            values[name][qid] = float(result[trec_measure])
    return values


def evaluate(run: Run, qrels: Qrels, measures: Mapping[str, str] = MEASURES) -> dict[str, float]:
    """Mean of each metric over the judged queries of ``qrels``."""
    if not judged(qrels):
        raise ValueError("qrels have no query with a relevant document")
    return {name: sum(v.values()) / len(v) for name, v in per_query(run, qrels, measures).items()}


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
    curve = {float(v): evaluate(run_for(float(v)), qrels, {measure: MEASURES[measure]})[measure] for v in grid}
    return max(curve, key=lambda v: (curve[v], -v)), curve


def tuning_record(parameter: str, value: float, measure: str, curve: dict[float, float], queries: int) -> dict:
    """What a method's ``tune`` returns, as results.json and the loggers read it."""
    return {"parameter": parameter, "value": value, "measure": measure, "curve": curve, "queries": queries}


def tune_weight(
    retriever: object,
    queries: dict[str, str],
    qrels: Qrels,
    grid: Sequence[float],
    measure: str,
    parameter: str,
    depth: int = 1000,
) -> dict:
    """Grid-search a hybrid retriever's fusion weight on held-out queries, set it, and return the tuning record.

    Args:
        retriever: Has ``search(queries, k, weight=...)`` and a ``weight`` attribute (the hybrid retrievers).
        queries: The held-out queries.
        qrels: Their judgments.
        grid: Weights to try.
        measure: What is maximised (a name of :data:`MEASURES`).
        parameter: The weight's name in the record (``lambda_test``, ``lambda_sem``, ...).
        depth: Retrieval depth of each tried run.
    """
    best, curve = grid_search(lambda value: retriever.search(queries, depth, weight=value), grid, qrels, measure)
    retriever.weight = best
    return tuning_record(parameter, best, measure, curve, len(queries))


def format_table(results: Mapping[str, Mapping[str, float]], title: str = "system") -> str:
    """A markdown table: one row per system, one column per metric."""
    names = list(next(iter(results.values())))
    lines = [f"| {title} | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for system, metrics in results.items():
        lines.append(f"| {system} | " + " | ".join(f"{metrics[n]:.4f}" for n in names) + " |")
    return "\n".join(lines)


def top_k_overlap(run: Run, reference: Run, k: int = 10) -> float:
    """Mean over the queries ``reference`` answers of |top k ∩ reference's top k| / |reference's top k|.

    How far an approximate or quantized search (an engine's) agrees with the exact one; both top k in trec_eval's
    order (:func:`retrieval_zoo.data.formats.top_k`).
    """
    found, expected = top_k(run, k), top_k(reference, k)
    shares = [len(found.get(qid, {}).keys() & docs.keys()) / len(docs) for qid, docs in expected.items() if docs]
    if not shares:
        raise ValueError("the reference run answers no query")
    return sum(shares) / len(shares)
