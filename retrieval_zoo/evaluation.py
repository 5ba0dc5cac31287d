"""Effectiveness metrics as trec_eval defines them, computed through ir-measures (pytrec_eval backend).

Reported: MRR@10 (trec_eval ``recip_rank`` cut at 10), R@100, R@1000, nDCG@10 (graded, trec_eval's linear
gain) and MAP@1000. Ties are broken as trec_eval does (by docid, descending). Every judged query counts: a
query of the qrels with at least one relevant document but no retrieved document scores 0, as with
``trec_eval -c``; queries without a relevant document are not evaluated (MS MARCO's convention).
"""

from __future__ import annotations

from collections.abc import Mapping

import ir_measures
from ir_measures import AP, RR, R, nDCG

from retrieval_zoo.data.formats import Qrels, Run

MEASURES = {"MRR@10": RR @ 10, "R@100": R @ 100, "R@1000": R @ 1000, "nDCG@10": nDCG @ 10, "MAP@1000": AP @ 1000}


def judged(qrels: Qrels) -> Qrels:
    """The queries of ``qrels`` with at least one relevant (grade > 0) document."""
    return {qid: docs for qid, docs in qrels.items() if any(g > 0 for g in docs.values())}


def per_query(run: Run, qrels: Qrels, measures: Mapping[str, object] = MEASURES) -> dict[str, dict[str, float]]:
    """Metric name → (qid → value) over every judged query; a query missing from the run scores 0."""
    qrels = judged(qrels)
    values = {name: dict.fromkeys(qrels, 0.0) for name in measures}
    by_measure = {measure: name for name, measure in measures.items()}
    ranked = {qid: docs for qid, docs in run.items() if qid in qrels and docs}
    for metric in ir_measures.iter_calc(list(measures.values()), qrels, ranked):
        values[by_measure[metric.measure]][metric.query_id] = float(metric.value)
    return values


def evaluate(run: Run, qrels: Qrels, measures: Mapping[str, object] = MEASURES) -> dict[str, float]:
    """Mean of each metric over the judged queries of ``qrels``."""
    if not judged(qrels):
        raise ValueError("qrels have no query with a relevant document")
    return {name: sum(v.values()) / len(v) for name, v in per_query(run, qrels, measures).items()}


def format_table(results: Mapping[str, Mapping[str, float]], title: str = "system") -> str:
    """A markdown table: one row per system, one column per metric."""
    names = list(next(iter(results.values())))
    lines = [f"| {title} | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for system, metrics in results.items():
        lines.append(f"| {system} | " + " | ".join(f"{metrics[n]:.4f}" for n in names) + " |")
    return "\n".join(lines)
