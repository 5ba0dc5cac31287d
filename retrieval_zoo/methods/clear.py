"""CLEAR: complementing lexical retrieval with semantic residual embeddings (Gao et al., 2021; clear.md).

A siamese BERT embeds queries and documents, prefixed with ``<QRY>`` / ``<DOC>`` markers and average-pooled over real
tokens (Eq. 2–3; the encoder's ``markers`` and ``pooling: mean`` in ``conf/method/clear.yaml``); s_emb is their dot
product (Eq. 4). Training uses negatives sampled from BM25's top N (§3.3,
error-based sampling; the DataModule's pool) and the hinge loss of Eq. 7, whose margin is BM25's residual (Eq. 6):
pairs BM25 already orders well get a small or negative margin, hence little gradient. Retrieval ranks the union of
BM25's and the embedding's candidates by λ_test·BM25 + s_emb (Eq. 8, §3.4): ``index=union_clear``, CLEAR's default,
with λ_test and its grid in ``conf/index/union_clear.yaml``; ``index=faiss`` searches the embedding alone.

Paper choices are the defaults: raw BM25 scores in the margin, ξ = 1, λ_train = 0.1, one negative per query.
λ_train = 0 is the constant-margin ablation (Table 1).
"""

from __future__ import annotations

import torch

from retrieval_zoo.encoding.encoder import Encoder
from retrieval_zoo.losses import MarginNormalization, check_margin_normalization, residual_hinge, residual_margin
from retrieval_zoo.methods.dense import DenseBiEncoder
from retrieval_zoo.methods.method import Optim
from retrieval_zoo.training.datamodule import TrainBatch, required


class CLEAR(DenseBiEncoder):
    """CLEAR's embedding model.

    Args:
        encoder: The siamese encoder (the paper: mean pooling, ``<QRY>`` / ``<DOC>`` markers).
        optim: Optimiser settings.
        xi: The margin's constant ξ (Eq. 6).
        lambda_train: Weight of BM25's residual in the margin (Eq. 6); 0 = constant margin.
        margin_normalization: ``"none"`` (raw BM25, the paper's) or ``"pair_max"`` (residual / max of the pair's
            BM25 scores, in [−1, 1]; see :func:`retrieval_zoo.losses.residual_margin`).
        val_k: Validation retrieval depth.
    """

    def __init__(
        self,
        encoder: Encoder,
        optim: Optim | None = None,
        xi: float = 1.0,
        lambda_train: float = 0.1,
        margin_normalization: MarginNormalization = "none",
        val_k: int = 100,
    ) -> None:
        super().__init__(encoder, optim, in_batch_negatives=False, val_k=val_k)
        self.xi, self.lambda_train = xi, lambda_train
        check_margin_normalization(margin_normalization)  # fail at construction
        self.margin_normalization = margin_normalization

    @property
    def needs(self) -> frozenset[str]:
        """BM25 scores of the pairs (the margin, Eq. 6)."""
        return frozenset({"bm25_scores"})

    def losses(self, batch: TrainBatch) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Residual-margin hinge (Eq. 6–7) over each query's (positive, negative) pairs, plus margin diagnostics."""
        size, group = len(batch.qids), len(batch.docids[0])
        q = self.encode_query(batch.query_input)
        d = self.encode_doc(batch.doc_input).view(size, group, -1)
        emb = torch.einsum("bh,bgh->bg", q, d)  # s_emb (Eq. 4) of each query with its own group
        lex = required(batch.bm25_scores, "bm25_scores").to(emb.dtype)
        margin = residual_margin(lex[:, 0], lex[:, 1:], self.xi, self.lambda_train, self.margin_normalization)
        loss = residual_hinge(emb[:, 0], emb[:, 1:], margin)
        diagnostics = {
            "margin": margin,  # a distribution: mean, std, quantiles and a wandb histogram
            "margin/fraction_nonpositive": (margin <= 0).float().mean(),
            "accuracy": (emb[:, :1] > emb[:, 1:]).float().mean(),
            "triplets_active": (margin - emb[:, :1] + emb[:, 1:] > 0).float().mean(),  # share with a gradient
        }
        return {"hinge": loss}, diagnostics
