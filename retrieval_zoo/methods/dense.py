"""Dense bi-encoder reference: the "BERT-Siamese" / DPR baseline of the papers.

One shared encoder embeds queries and documents; the score is a dot product (DPR Eq. 1, Karpukhin et al. 2020;
CLEAR Eq. 4). Pooling is the mean over real tokens (CLEAR Eq. 2–3) or the [CLS] vector (DPR). Training minimises
the listwise NLL of the positive among the group's BM25 negatives and, optionally, every other document of the
batch (in-batch negatives, DPR Eq. 2). It produces ``vectors``: faiss inner-product search by default
(``index=faiss``), or fused with BM25 (``index=union``).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from transformers import PreTrainedTokenizerBase

from retrieval_zoo.backbones import Backbone
from retrieval_zoo.data.datamodule import TrainBatch
from retrieval_zoo.distributed import gather_rows
from retrieval_zoo.losses import group_targets, in_batch_accuracy, listwise_nll
from retrieval_zoo.methods.base import Optim, RetrievalMethod
from retrieval_zoo.methods.encoding import POOLING


def own_group(scores: torch.Tensor, batch: TrainBatch, first_doc: int = 0) -> torch.Tensor:
    """Each query's scores against its own group: (B, N) → (B, G), the batch's documents from column ``first_doc``."""
    size, group = len(batch.qids), len(batch.docids[0])
    positives = first_doc + group_targets(size, group, True, scores.device)  # column of each query's positive
    return scores.gather(1, positives[:, None] + torch.arange(group, device=scores.device))


class DenseBiEncoder(RetrievalMethod):
    """Shared-encoder dense retriever.

    Args:
        backbone: Where the encoder comes from.
        optim: Optimiser settings.
        pooling: ``"mean"`` (over real tokens) or ``"cls"``.
        query_max_length: Query truncation, in tokens.
        doc_max_length: Document truncation, in tokens.
        in_batch_negatives: Score each query against every document of the batch, not only its group.
        gather_across_devices: Under DDP, in-batch negatives are the documents of the global batch, gathered from
            every rank with their gradients (:mod:`retrieval_zoo.distributed`); False keeps each rank's own.
        temperature: Scores are divided by it inside the softmax (1.0 = plain DPR).
        encode_batch_size: Texts per forward pass when encoding a corpus.
        val_k: Validation retrieval depth.
        mlm_head: Load the masked-LM model (encoder + vocabulary projection), for methods that use the logits.
    """

    representations: ClassVar[tuple[str, ...]] = ("vectors",)

    def __init__(
        self,
        backbone: Backbone,
        optim: Optim | None = None,
        pooling: str = "mean",
        query_max_length: int = 32,
        doc_max_length: int = 128,
        in_batch_negatives: bool = True,
        gather_across_devices: bool = True,
        temperature: float = 1.0,
        encode_batch_size: int = 128,
        val_k: int = 100,
        mlm_head: bool = False,
    ) -> None:
        super().__init__(optim, val_k)
        if pooling not in POOLING:
            raise ValueError(f"pooling must be one of {sorted(POOLING)}, not {pooling!r}")
        self.backbone_name, self.pooling = backbone.name, pooling
        self.tokenizer: PreTrainedTokenizerBase = backbone.load_tokenizer()
        self.encoder = backbone.load_model(mlm_head=mlm_head).train()
        self.query_max_length, self.doc_max_length = query_max_length, doc_max_length
        self.in_batch_negatives, self.temperature = in_batch_negatives, temperature
        self.gather_across_devices = gather_across_devices
        self.encode_batch_size = encode_batch_size

    def _tokenize(self, texts: list[str], max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(N,) texts → padded input ids and attention mask, both (N, L), on the model's device."""
        tokens = self.tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        return tokens["input_ids"].to(self.device), tokens["attention_mask"].to(self.device)

    def _embed(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(N, L) ids and mask → (N, H) pooled vectors."""
        hidden = self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state  # DistilBERT has no segments
        return POOLING[self.pooling](hidden, mask)

    def _encode(self, texts: list[str], max_length: int) -> torch.Tensor:
        return self._embed(*self._tokenize(texts, max_length))

    def encode_query(self, texts: list[str]) -> torch.Tensor:
        """(B,) texts → (B, H) query vectors."""
        return self._encode(texts, self.query_max_length)

    def encode_doc(self, texts: list[str]) -> torch.Tensor:
        """(N,) texts → (N, H) document vectors."""
        return self._encode(texts, self.doc_max_length)

    def score(self, queries: torch.Tensor, docs: torch.Tensor) -> torch.Tensor:
        """Dot product of every query with every document (CLEAR Eq. 4; DPR Eq. 1): (B, H), (N, H) → (B, N)."""
        return queries @ docs.T

    def losses(self, batch: TrainBatch) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Listwise NLL over the group (and the batch, with in-batch negatives)."""
        nll, accuracy = self._listwise_nll(self.encode_query(batch.queries), self.encode_doc(batch.docs), batch)
        return {"nll": nll}, {"accuracy": accuracy}

    def _listwise_nll(self, q: torch.Tensor, d: torch.Tensor, batch: TrainBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """NLL of each query's positive (DPR Eq. 2), and the in-batch accuracy: (B, H), (B·G, H) → two scalars.

        The candidates are the query's own group, or every document of the batch with in-batch negatives (of the
        global batch under DDP, with ``gather_across_devices``).
        """
        first = 0
        if self.in_batch_negatives and self.gather_across_devices:
            d, first = gather_rows(d)
        return self._nll_of_scores(self.score(q, d), batch, first)

    def _nll_of_scores(
        self, scores: torch.Tensor, batch: TrainBatch, first_doc: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """NLL and in-batch accuracy from the scores of the batch's queries against documents that hold its own.

        Args:
            scores: (B, N) scores of this batch's B queries against N documents, among which this batch's B·G
                documents (row-major groups) start at column ``first_doc`` (N = B·G on one device; the global
                batch's documents under DDP).
            batch: The batch.
            first_doc: Column of this batch's first document.
        """
        size, group = len(batch.qids), len(batch.docids[0])
        if self.in_batch_negatives:
            targets = first_doc + group_targets(size, group, True, scores.device)  # column of each query's positive
        else:
            scores, targets = own_group(scores, batch, first_doc), group_targets(size, group, False, scores.device)
        scores = scores / self.temperature
        return listwise_nll(scores, targets), in_batch_accuracy(scores, targets)
