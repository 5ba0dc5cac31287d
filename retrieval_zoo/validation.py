"""Validation by first-stage retrieval through the run's index, so checkpoints are selected on retrieval quality.

At the start of each validation epoch the corpus is indexed with the current weights (encoded on demand, never
cached: they change every epoch) by the same index the run evaluates with; each validation batch of query ids is
searched to depth ``val_k``, and MRR@10 and R@val_k of the validation subset are logged as ``val/MRR@10`` and
``val/R@<val_k>``.
"""

from __future__ import annotations

import lightning as L

from retrieval_zoo.data.formats import Run
from retrieval_zoo.evaluation import MEASURES, evaluate
from retrieval_zoo.index.base import Index, Retriever
from retrieval_zoo.lexical.bm25 import BM25


class RetrievalValidation(L.Callback):
    """Index the corpus, search each validation batch, and log the subset's MRR@10 and recall.

    Args:
        index: The run's index.
        bm25: The run's BM25, for indexes that fuse or project it.
    """

    def __init__(self, index: Index, bm25: BM25) -> None:
        self.index, self.bm25 = index, bm25
        self._retriever: Retriever | None = None
        self._run: Run = {}

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Index the corpus with the current weights; the validation queries' tokens are read from a token cache."""
        self._run = {}
        datamodule = trainer.datamodule
        queries = datamodule.collection.queries[datamodule.val_split]
        pl_module.cache_queries({q: queries[q] for q in datamodule.val_qids})
        self._retriever = self.index.build(pl_module, trainer.datamodule.collection, self.bm25)

    def on_validation_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: object, batch: list[str], batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        """Retrieve for a batch of validation query ids."""
        datamodule = trainer.datamodule
        queries = datamodule.collection.queries[datamodule.val_split]
        self._run.update(self._retriever.search({q: queries[q] for q in batch}, pl_module.val_k))

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Log MRR@10 and R@val_k of the validation subset."""
        datamodule = trainer.datamodule
        qrels = datamodule.collection.qrels[datamodule.val_split]
        measures = {"MRR@10": MEASURES["MRR@10"], f"R@{pl_module.val_k}": f"recall_{pl_module.val_k}"}
        metrics = evaluate(self._run, {q: qrels[q] for q in self._run}, measures)
        for name, value in metrics.items():
            pl_module.log(f"val/{name}", value, prog_bar=name == "MRR@10")
        self._retriever = None
