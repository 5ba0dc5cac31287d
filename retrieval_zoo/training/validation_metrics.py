"""Validation metrics over queries split across ranks: torchmetrics' retrieval metrics, fed to equal trec_eval's.

Each rank searches its share of the validation queries and adds their rankings to torchmetrics' ``RetrievalMRR``
and ``RetrievalRecall``; :meth:`RankingMetrics.compute` gathers every rank's rankings (torchmetrics' sync) and
returns the same means on every rank, equal to one process's. torchmetrics ranks a query's documents by the scores
it is given, counts a document as retrieved only when its score is positive (torchmetrics 1.9), and knows only
the documents it is given, so each query's ranking is fed as

- its top ``max(depth, 10)`` in trec_eval's order (score descending, then docid descending; :func:`ranked`), scored
  by rank (positive scores): near-ties and ties break exactly as trec_eval breaks them;
- non-relevant fillers up to ``max(depth, 10)`` documents when fewer were retrieved, scored below every retrieved
  document (for torchmetrics versions that count every document given as retrieved);
- every relevant document (grade > 0) that was not retrieved, scored 0: not retrieved, below the fillers.

Then R@depth = relevant in the top ``depth`` / all relevant (trec_eval's ``recall_<depth>``) and MRR@10 =
1 / rank of the first relevant in the top 10 (``recip_rank`` over the top 10), and a query that retrieved nothing
scores 0, as :mod:`retrieval_zoo.evaluation.metrics` counts it (``trec_eval -c``). torchmetrics computes each query's
value in float32: the means equal trec_eval's within 1e-7 (``tests/test_validation_metrics.py``).
"""

from __future__ import annotations

import torch
from torchmetrics import MetricCollection
from torchmetrics.retrieval import RetrievalMRR, RetrievalRecall

from retrieval_zoo.data.formats import Qrels, Run, ranked

MRR_DEPTH = 10


def ranking_items(
    docs: dict[str, float], relevant: set[str], depth: int
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """One query's ranking as torchmetrics takes it (module docstring).

    Args:
        docs: The query's retrieved docid → score (any order, any depth).
        relevant: Its relevant document ids (non-empty).
        depth: The cutoff of recall.

    Returns:
        (n,) float64 preds, higher is better, and (n,) bool targets, where n = max(depth, 10) + the relevant
        documents outside the top max(depth, 10).
    """
    width = max(depth, MRR_DEPTH)
    top = [docid for docid, _ in ranked(docs)[:width]]
    missing = len(relevant.difference(top))
    preds = torch.cat([
        width + 1 - torch.arange(len(top), dtype=torch.float64),  # rank order, all above 1
        torch.ones(width - len(top), dtype=torch.float64),  # fillers, below every retrieved document
        torch.zeros(missing, dtype=torch.float64),  # relevant, not retrieved
    ])  # fmt: skip
    target = torch.tensor([docid in relevant for docid in top] + [False] * (width - len(top)) + [True] * missing)
    return preds, target


class RankingMetrics:
    """MRR@10 and R@``depth`` of validation rankings, accumulated per rank and synced across ranks on compute.

    Args:
        depth: The retrieval depth (``val_k``): the cutoff of recall.
        device: Where the metric states live (the rank's device: NCCL gathers CUDA tensors).
    """

    def __init__(self, depth: int, device: torch.device | str = "cpu") -> None:
        if depth < 1:
            raise ValueError(f"depth must be at least 1, not {depth}")
        self.depth, self.device = depth, torch.device(device)
        self.metrics = MetricCollection({
            f"MRR@{MRR_DEPTH}": RetrievalMRR(top_k=MRR_DEPTH, empty_target_action="error"),
            f"R@{depth}": RetrievalRecall(top_k=depth, empty_target_action="error"),
        }).to(self.device)  # fmt: skip

    def update(self, run: Run, qrels: Qrels, query_numbers: dict[str, int]) -> None:
        """Add the rankings of ``qrels``' queries (a query missing from ``run`` retrieved nothing).

        Args:
            run: This batch's retrieved documents.
            qrels: The judgments of the batch's queries; each needs a relevant document.
            query_numbers: qid → a number unique across all ranks (the query's position in the validation set).
        """
        preds, targets, numbers = [], [], []
        for qid, judged in qrels.items():
            relevant = {docid for docid, grade in judged.items() if grade > 0}
            if not relevant:
                raise ValueError(f"validation query {qid!r} has no relevant document")
            query_preds, target = ranking_items(run.get(qid, {}), relevant, self.depth)
            preds.append(query_preds)
            targets.append(target)
            numbers.append(torch.full((len(target),), query_numbers[qid], dtype=torch.long))
        if preds:
            self.metrics.update(torch.cat(preds).to(self.device), torch.cat(targets).to(self.device),
                                indexes=torch.cat(numbers).to(self.device))  # fmt: skip

    def compute(self) -> dict[str, float]:
        """Every metric's mean over the queries of all ranks (a collective under DDP: every rank calls it)."""
        values = {name: float(value) for name, value in self.metrics.compute().items()}
        self.metrics.reset()
        return values
