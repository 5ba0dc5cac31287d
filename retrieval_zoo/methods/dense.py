"""Dense bi-encoder reference: the "BERT-Siamese" / DPR baseline of the papers.

One shared encoder embeds queries and documents; the score is a dot product (DPR Eq. 1, Karpukhin et al. 2020;
CLEAR Eq. 4). Pooling (the encoder's) is the mean over real tokens (CLEAR Eq. 2–3) or the [CLS] vector (DPR).
Training minimises the listwise NLL of the positive among the group's BM25 negatives and, optionally, every other
document of the batch (in-batch negatives, DPR Eq. 2). It produces ``vectors``: faiss inner-product search by default
(``index=faiss``), or fused with BM25 (``index=union``).
"""

from __future__ import annotations

from typing import ClassVar

import torch

from retrieval_zoo.distributed import gather_rows
from retrieval_zoo.encoding.encoder import Encoder
from retrieval_zoo.encoding.tokens import Tokens
from retrieval_zoo.losses import contrastive_nll
from retrieval_zoo.methods.method import BiEncoder, Optim
from retrieval_zoo.training.datamodule import TrainBatch


class DenseBiEncoder(BiEncoder[torch.Tensor]):
    """Shared-encoder dense retriever.

    Args:
        encoder: The shared encoder (its pooling gives the text's vector).
        optim: Optimiser settings.
        in_batch_negatives: Score each query against every document of the batch, not only its group.
        gather_across_devices: Under DDP, in-batch negatives are the documents of the global batch, gathered from
            every rank with their gradients (:mod:`retrieval_zoo.distributed`); False keeps each rank's own.
        temperature: Scores are divided by it inside the softmax (1.0 = plain DPR).
        val_k: Validation retrieval depth.
    """

    representations: ClassVar[tuple[str, ...]] = ("vectors",)
    encoder: Encoder  # always one here (the base allows None for BM25)

    def __init__(
        self,
        encoder: Encoder,
        optim: Optim | None = None,
        in_batch_negatives: bool = True,
        gather_across_devices: bool = True,
        temperature: float = 1.0,
        val_k: int = 100,
    ) -> None:
        super().__init__(encoder, optim, val_k)
        self.in_batch_negatives, self.gather_across_devices = in_batch_negatives, gather_across_devices
        self.temperature = temperature

    def encode_query(self, texts: list[str] | Tokens) -> torch.Tensor:
        """(B,) texts, or their tokens → (B, H) query vectors."""
        return self.encoder.encode(texts, "query")

    def encode_doc(self, texts: list[str] | Tokens) -> torch.Tensor:
        """(N,) texts, or their tokens → (N, H) document vectors."""
        return self.encoder.encode(texts, "doc")

    def score(self, queries: torch.Tensor, docs: torch.Tensor) -> torch.Tensor:
        """Dot product of every query with every document (CLEAR Eq. 4; DPR Eq. 1): (B, H), (N, H) → (B, N)."""
        return queries @ docs.T

    def losses(self, batch: TrainBatch) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Listwise NLL over the group (and the batch, with in-batch negatives)."""
        nll, accuracy = self.listwise_nll(self.encode_query(batch.query_input), self.encode_doc(batch.doc_input), batch)
        return {"nll": nll}, {"accuracy": accuracy}

    def listwise_nll(self, q: torch.Tensor, d: torch.Tensor, batch: TrainBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """NLL of each query's positive (DPR Eq. 2), and the in-batch accuracy: (B, H), (B·G, H) → two scalars.

        The candidates are the query's own group, or every document of the batch with in-batch negatives (of the
        global batch under DDP, with ``gather_across_devices``).
        """
        first = 0
        if self.in_batch_negatives and self.gather_across_devices:
            d, first = gather_rows(d)
        group = len(batch.docids[0])
        return contrastive_nll(self.score(q, d), group, first, self.in_batch_negatives, self.temperature)
