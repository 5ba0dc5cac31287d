"""RoC: complementarity objectives for hybrid retrieval (Lee et al.; roc.md).

BM25's query IDF and document TF-saturation vectors are random-projected to the encoder's width by a fixed
Rademacher matrix (§3.2, Eq. 3), so Score_lex = q_lex·d_lex approximates BM25 (Eq. 4). Beside them, a [CLS]
encoder (Eq. 5–6) is trained with the NLL of the positive among BM25 hard negatives (Eq. 7) plus two objectives
that push it away from what BM25 already captures:
- embedding-level orthogonality, cos²(q_lex, q_sem) + cos²(d_lex, d_sem) added 1:1 (Eq. 8–9);
- input-level orthogonality: at training time only, 15% of the document's exact-match tokens become [MASK], and
  the perturbed document d' takes both losses (Eq. 10).
Retrieval ranks the whole corpus exactly by q_lex·d_lex + λ·q_sem·d_sem (Eq. 11) through one index over
concatenated vectors, with λ tuned on held-out training queries over [0, 2] by MAP. ``fusion_lexical=exact``
fuses Lucene's exact BM25 instead (BM25 ∪ [CLS] candidates), as the paper's naive-sum baselines do (Tables 3–4).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from retrieval_zoo.backbones import Backbone
from retrieval_zoo.cache import atomic_path, fingerprint
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.datamodule import TrainBatch
from retrieval_zoo.data.formats import Qrels
from retrieval_zoo.evaluation import MEASURES, tune_weight
from retrieval_zoo.index.concatenated import ConcatenatedRetriever
from retrieval_zoo.index.hybrid import HybridRetriever
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.lexical.bm25 import BM25
from retrieval_zoo.lexical.projection import RademacherProjection
from retrieval_zoo.losses import orthogonality
from retrieval_zoo.methods.base import Optim
from retrieval_zoo.methods.dense import DenseBiEncoder
from retrieval_zoo.methods.encoding import encode_all, mask_exact_matches

FUSION_LEXICAL = ("projected", "exact")
PAPER_GRID = tuple(round(0.1 * i, 1) for i in range(21))  # [0, 2] in steps of 0.1 (§4.1)


class RoC(DenseBiEncoder):
    """RoC's [CLS] encoder beside projected BM25, with its orthogonality objectives.

    Args:
        backbone: Where the encoder comes from.
        bm25_k1: BM25's k1 for the lexical vectors at retrieval (training vectors come from the DataModule).
        bm25_b: BM25's b.
        optim: Optimiser settings.
        projection_seed: Seed of the Rademacher projection (its width is the encoder's, so that Eq. 8 applies).
        ortho_weight: Weight of the orthogonality loss (Eq. 9: 1; 0 turns embedding-level orthogonality off).
        mask_fraction: Share of exact-match document tokens masked at training (Eq. 10: 0.15; 0 turns it off).
        in_batch_negatives: Also score each query against every other document of the batch.
        gather_across_devices: Under DDP, in-batch negatives are the global batch's documents (with gradients).
        fusion_lexical: Lexical score fused at retrieval: ``projected`` (q_lex·d_lex, Eq. 11 as the paper does) or
            ``exact`` (Lucene BM25 over the union of both sides' top ``retrieval_depth``, the naive sum).
        retrieval_depth: Candidates taken from each side when ``fusion_lexical`` is ``exact``.
        lambda_sem: λ of Eq. 11; replaced by the tuned value when tuning runs.
        lambda_grid: Values tried when tuning λ.
        tune_measure: Measure λ is tuned on (the paper: MAP).
        query_max_length: Query truncation, in tokens.
        doc_max_length: Document truncation, in tokens.
        index_factory: faiss factory string of the concatenated index.
        encode_batch_size: Texts per forward pass when encoding a corpus.
        val_k: Validation retrieval depth.
        seed: Seed of the masking's random choices.
    """

    needs: ClassVar[frozenset[str]] = frozenset({"bm25_vectors"})
    complementarity_parts: ClassVar[tuple[str, str]] = ("lexical", "semantic")

    def __init__(
        self,
        backbone: Backbone,
        bm25_k1: float = 0.9,
        bm25_b: float = 0.4,
        optim: Optim | None = None,
        projection_seed: int = 0,
        ortho_weight: float = 1.0,
        mask_fraction: float = 0.15,
        in_batch_negatives: bool = False,
        gather_across_devices: bool = True,
        fusion_lexical: str = "projected",
        retrieval_depth: int = 1000,
        lambda_sem: float = 1.0,
        lambda_grid: tuple[float, ...] = PAPER_GRID,
        tune_measure: str = "MAP@1000",
        query_max_length: int = 32,
        doc_max_length: int = 128,
        index_factory: str = "Flat",
        encode_batch_size: int = 128,
        val_k: int = 100,
        seed: int = 13,
    ) -> None:
        super().__init__(
            backbone, optim, pooling="cls", query_max_length=query_max_length, doc_max_length=doc_max_length,
            in_batch_negatives=in_batch_negatives, gather_across_devices=gather_across_devices,
            index_factory=index_factory, encode_batch_size=encode_batch_size,
            val_k=val_k,
        )  # fmt: skip
        if tune_measure not in MEASURES:
            raise ValueError(f"tune_measure must be one of {sorted(MEASURES)}, not {tune_measure!r}")
        if fusion_lexical not in FUSION_LEXICAL:
            raise ValueError(f"fusion_lexical must be one of {FUSION_LEXICAL}, not {fusion_lexical!r}")
        self.bm25_k1, self.bm25_b = bm25_k1, bm25_b
        self.fusion_lexical, self.retrieval_depth = fusion_lexical, retrieval_depth
        self.projection = RademacherProjection(self.encoder.config.hidden_size, projection_seed)
        self.ortho_weight, self.mask_fraction = ortho_weight, mask_fraction
        self.lambda_sem, self.lambda_grid = lambda_sem, tuple(float(v) for v in lambda_grid)
        self.tune_measure = tune_measure
        self.masking = torch.Generator().manual_seed(seed)

    def lexical(self, vectors: list[dict[str, float]]) -> torch.Tensor:
        """q_lex = A·q_bm25 or d_lex = A·d_bm25 (Eq. 3): (N,) bags of words → (N, H), no gradient."""
        return self.projection.project(vectors).to(self.device)

    def losses(self, batch: TrainBatch) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """NLL of the positive (Eq. 7) plus the weighted orthogonality (Eq. 8–9) on the perturbed documents."""
        query_ids, query_mask = self._tokenize(batch.queries, self.query_max_length)
        doc_ids, doc_mask = self._tokenize(batch.docs, self.doc_max_length)
        if self.mask_fraction > 0:  # Eq. 10: d' = d with a sample of X_EM masked
            doc_ids = mask_exact_matches(
                doc_ids, query_ids, self.mask_fraction, self.tokenizer.mask_token_id,
                self.tokenizer.all_special_ids, self.masking,
            )  # fmt: skip
        q_sem, d_sem = self._embed(query_ids, query_mask), self._embed(doc_ids, doc_mask)
        nll, accuracy = self._listwise_nll(q_sem, d_sem, batch)  # Eq. 7 on Score_sem = q_sem·d'_sem
        losses = {"nll": nll}
        q_lex, d_lex = self.lexical(batch.bm25_query_vectors), self.lexical(batch.bm25_doc_vectors)
        ortho = orthogonality(q_lex, q_sem, d_lex, d_sem)
        if self.ortho_weight > 0:
            losses["ortho"] = self.ortho_weight * ortho
        return losses, {"accuracy": accuracy, "orthogonality": ortho.detach()}

    def doc_lexical_matrix(self, bm25: BM25, docids: list[str]) -> np.ndarray:
        """d_lex of every document (Eq. 3), cached by corpus, BM25 parameters and projection."""
        key = fingerprint(
            bm25.collection.corpus_fingerprint, bm25.k1, bm25.b, self.projection.dim, self.projection.seed
        )
        path = bm25.cache / "roc" / f"doc-lex-{key}.npy"
        if path.exists():
            return np.load(path)
        matrix = np.concatenate([
            self.projection.project(bm25.document_term_weights(docids[i : i + 4096], saturation_only=True)).numpy()
            for i in range(0, len(docids), 4096)
        ])  # fmt: skip
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            np.save(f, matrix)
        return matrix

    def build_retriever(
        self, collection: Collection, shards: CorpusShards | None = None
    ) -> ConcatenatedRetriever | HybridRetriever:
        """One index over [d_lex ; d_sem], searched with [q_lex ; λ·q_sem] (Eq. 11), or exact BM25 + λ·[CLS]."""
        bm25 = BM25(collection, self.bm25_k1, self.bm25_b)
        if self.fusion_lexical == "exact":
            dense = super().build_retriever(collection, shards)
            parts = self.complementarity_parts
            return HybridRetriever(bm25, dense, self.lambda_sem, "semantic", self.retrieval_depth, parts)
        shards = self.corpus_shards(collection, shards)
        lexical = self.doc_lexical_matrix(bm25, shards.docids)
        doc_parts = [(shards.shard_docids(s), lexical[start:stop], shards.read(s)["vectors"].numpy())
                     for s, (start, stop) in enumerate(shards.ranges)]  # fmt: skip

        def encode_queries(queries: dict[str, str]) -> tuple[np.ndarray, np.ndarray]:
            texts = list(queries.values())
            q_lex = self.projection.project(bm25.query_idf(texts)).numpy()
            return q_lex, encode_all(self.encode_query, texts, self.encode_batch_size, desc="queries")

        return ConcatenatedRetriever(doc_parts, encode_queries, self.lambda_sem, factory=self.index_factory)

    def tune(self, retriever: ConcatenatedRetriever | HybridRetriever, queries: dict[str, str], qrels: Qrels) -> dict:
        """Grid-search λ on held-out training queries (§4.1: [0, 2] by 0.1, on MAP)."""
        record = tune_weight(retriever, queries, qrels, self.lambda_grid, self.tune_measure, "lambda_sem")
        self.lambda_sem = record["value"]
        return record
