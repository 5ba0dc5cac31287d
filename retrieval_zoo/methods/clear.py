"""CLEAR: complementing lexical retrieval with semantic residual embeddings (Gao et al., 2021; clear.md).

A siamese BERT embeds queries and documents, prefixed with <QRY> / <DOC> markers and average-pooled over real
tokens (Eq. 2–3); s_emb is their dot product (Eq. 4). Training uses negatives sampled from BM25's top N (§3.3,
error-based sampling; the DataModule's pool) and the hinge loss of Eq. 7, whose margin is BM25's residual (Eq. 6):
pairs BM25 already orders well get a small or negative margin, hence little gradient. Retrieval ranks the union of
BM25's and the embedding's candidates by λ_test·BM25 + s_emb (Eq. 8, §3.4).

Paper choices are the defaults: raw BM25 scores in the margin, ξ = 1, λ_train = 0.1, one negative per query.
λ_train = 0 is the constant-margin ablation (Table 1).
"""

from __future__ import annotations

from typing import ClassVar

import torch

from retrieval_zoo.backbones import Backbone
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.datamodule import TrainBatch
from retrieval_zoo.data.formats import Qrels
from retrieval_zoo.evaluation import tune_weight
from retrieval_zoo.index.hybrid import HybridRetriever
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.lexical.bm25 import BM25
from retrieval_zoo.losses import check_margin_normalization, residual_hinge, residual_margin
from retrieval_zoo.methods.base import Optim
from retrieval_zoo.methods.dense import DenseBiEncoder

MARKERS = {"query": "<QRY>", "doc": "<DOC>"}


class CLEAR(DenseBiEncoder):
    """CLEAR's embedding model and hybrid retriever.

    Args:
        backbone: Where the siamese encoder comes from.
        bm25_k1: BM25's k1 on the lexical side at retrieval (training scores come from the DataModule).
        bm25_b: BM25's b.
        optim: Optimiser settings.
        xi: The margin's constant ξ (Eq. 6).
        lambda_train: Weight of BM25's residual in the margin (Eq. 6); 0 = constant margin.
        margin_normalization: ``"none"`` (raw BM25, the paper's) or ``"pair_max"`` (residual / max of the pair's
            BM25 scores, in [−1, 1]; see :func:`retrieval_zoo.losses.residual_margin`).
        lambda_test: Weight of BM25 in the retrieval score (Eq. 8); replaced by the tuned value when tuning runs.
        lambda_test_grid: Values tried when tuning λ_test.
        retrieval_depth: Candidates taken from each side before fusion.
        query_max_length: Query truncation, in tokens.
        doc_max_length: Document truncation, in tokens.
        index_factory: faiss factory string of the embedding index.
        encode_batch_size: Texts per forward pass when encoding a corpus.
        val_k: Validation retrieval depth.
    """

    needs: ClassVar[frozenset[str]] = frozenset({"bm25_scores"})
    complementarity_parts: ClassVar[tuple[str, str]] = ("lexical", "dense")

    def __init__(
        self,
        backbone: Backbone,
        bm25_k1: float = 0.9,
        bm25_b: float = 0.4,
        optim: Optim | None = None,
        xi: float = 1.0,
        lambda_train: float = 0.1,
        margin_normalization: str = "none",
        lambda_test: float = 0.5,
        lambda_test_grid: tuple[float, ...] = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),
        retrieval_depth: int = 1000,
        query_max_length: int = 32,
        doc_max_length: int = 128,
        index_factory: str = "Flat",
        encode_batch_size: int = 128,
        val_k: int = 100,
    ) -> None:
        super().__init__(
            backbone, optim, pooling="mean", query_max_length=query_max_length, doc_max_length=doc_max_length,
            in_batch_negatives=False, index_factory=index_factory, encode_batch_size=encode_batch_size, val_k=val_k,
        )  # fmt: skip
        self.bm25_k1, self.bm25_b = bm25_k1, bm25_b
        self.xi, self.lambda_train, self.lambda_test = xi, lambda_train, lambda_test
        self.margin_normalization = check_margin_normalization(margin_normalization)  # fail at construction
        self.lambda_test_grid = tuple(float(v) for v in lambda_test_grid)
        self.retrieval_depth = retrieval_depth
        self.tokenizer.add_tokens(list(MARKERS.values()), special_tokens=True)
        self.encoder.resize_token_embeddings(len(self.tokenizer))

    def encode_query(self, texts: list[str]) -> torch.Tensor:
        """v_q = AvgPool[BERT(<QRY>; query)] (Eq. 2). (B,) texts → (B, H)."""
        return self._encode([f"{MARKERS['query']} {t}" for t in texts], self.query_max_length)

    def encode_doc(self, texts: list[str]) -> torch.Tensor:
        """v_d = AvgPool[BERT(<DOC>; document)] (Eq. 3). (N,) texts → (N, H)."""
        return self._encode([f"{MARKERS['doc']} {t}" for t in texts], self.doc_max_length)

    def losses(self, batch: TrainBatch) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Residual-margin hinge (Eq. 6–7) over each query's (positive, negative) pairs, plus margin diagnostics."""
        size, group = len(batch.qids), len(batch.docids[0])
        q = self.encode_query(batch.queries)
        d = self.encode_doc(batch.docs).view(size, group, -1)
        emb = torch.einsum("bh,bgh->bg", q, d)  # s_emb (Eq. 4) of each query with its own group
        lex = batch.bm25_scores.to(emb.dtype)
        margin = residual_margin(lex[:, 0], lex[:, 1:], self.xi, self.lambda_train, self.margin_normalization)
        loss = residual_hinge(emb[:, 0], emb[:, 1:], margin)
        diagnostics = {
            "margin": margin,  # a distribution: mean, std, quantiles and a wandb histogram
            "margin/fraction_nonpositive": (margin <= 0).float().mean(),
            "accuracy": (emb[:, :1] > emb[:, 1:]).float().mean(),
            "triplets_active": (margin - emb[:, :1] + emb[:, 1:] > 0).float().mean(),  # share with a gradient
        }
        return {"hinge": loss}, diagnostics

    def tune(self, retriever: HybridRetriever, queries: dict[str, str], qrels: Qrels) -> dict:
        """Grid-search λ_test on held-out training queries by MRR@10 (§3.4; paper: 500 queries, {0, 0.1, …, 0.9})."""
        record = tune_weight(retriever, queries, qrels, self.lambda_test_grid, "MRR@10", "lambda_test", retriever.depth)
        self.lambda_test = record["value"]
        return record

    def build_retriever(self, collection: Collection, shards: CorpusShards | None = None) -> HybridRetriever:
        """BM25 ∪ embedding candidates ranked by λ_test·BM25 + s_emb (Eq. 8)."""
        dense = super().build_retriever(collection, shards)
        bm25 = BM25(collection, self.bm25_k1, self.bm25_b)
        return HybridRetriever(bm25, dense, self.lambda_test, weighted="lexical", depth=self.retrieval_depth)
