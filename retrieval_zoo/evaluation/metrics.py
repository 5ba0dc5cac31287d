"""Effectiveness metrics exactly as trec_eval defines them, computed by pytrec_eval (trec_eval's own C code).

Reported: MRR@10 (trec_eval ``recip_rank`` over the top 10), R@100, R@1000 (``recall_k``), nDCG@10
(``ndcg_cut_10``: gain = grade, discount log2(rank + 1)) and MAP@1000 (``map_cut_1000``). Ties are ranked as
trec_eval ranks them: score descending, then docid descending. Every judged query counts: a query of the qrels with
at least one relevant document but no retrieved document scores 0, as with ``trec_eval -c``; queries without a
relevant document are not evaluated (MS MARCO's convention).
"""

from __future__ import annotations

from collections.abc import Mapping
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
    by_cutoff: dict[str, dict[str, str]] = {}  # one evaluation a cut of the run: handing pytrec_eval the run costs most
    for name, measure in measures.items():
        trec_measure, _, cutoff = measure.partition("@")
        by_cutoff.setdefault(cutoff, {})[name] = trec_measure
    for cutoff, names in by_cutoff.items():
        scored = top_k(run, int(cutoff)) if cutoff else run
        evaluator = pytrec_eval.RelevanceEvaluator(qrels, set(names.values()))
        for qid, result in evaluator.evaluate(scored).items():
            for name, trec_measure in names.items():
                values[name][qid] = float(result[trec_measure])
    return values


def evaluate(run: Run, qrels: Qrels, measures: Mapping[str, str] = MEASURES) -> dict[str, float]:
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
