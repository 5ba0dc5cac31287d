"""RoC: complementarity objectives for hybrid retrieval (Lee et al.; roc.md).

BM25's query IDF and document TF-saturation vectors are random-projected to the encoder's width by a fixed
Rademacher matrix (§3.2, Eq. 3), so Score_lex = q_lex·d_lex approximates BM25 (Eq. 4). Eq. 3's d_bm25 carries the
(k1 + 1) factor of classic BM25, which Lucene drops: ``lexical_scale="paper"`` (the default) keeps it, so Score_lex is
(k1 + 1) = 1.9 times Lucene's BM25; ``"lucene"`` gives Lucene's scale. The factor reaches retrieval only (Eq. 4 and
11, where it rescales the λ that tuning finds); the training losses see the lexical vectors through a cosine (Eq. 8).
Beside them, a [CLS] encoder (Eq. 5–6) is trained with the NLL of the positive among BM25 hard negatives (Eq. 7)
plus two objectives that push it away from what BM25 already captures:
- embedding-level orthogonality, cos²(q_lex, q_sem) + cos²(d_lex, d_sem) added 1:1 (Eq. 8–9);
- input-level orthogonality: at training time only, 15% of the document's exact-match tokens become [MASK], and
  the perturbed document d' takes both losses (Eq. 10).
Retrieval ranks the whole corpus exactly by q_lex·d_lex + λ·q_sem·d_sem (Eq. 11) through one index over
concatenated vectors (``index=concatenated``, RoC's default), with λ tuned on held-out training queries over [0, 2]
by MAP. ``index=union`` fuses Lucene's exact BM25 instead (BM25 ∪ [CLS] candidates), as the paper's naive-sum
baselines do (Tables 3–4), and ``index=faiss`` searches the [CLS] part alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, Literal

import numpy as np
import torch

from retrieval_zoo.bounds import require_choice
from retrieval_zoo.encoding.encoder import Encoder
from retrieval_zoo.lexical.projection import RademacherProjection
from retrieval_zoo.lexical.sparse_rows import SparseBatch
from retrieval_zoo.losses import orthogonality
from retrieval_zoo.methods.dense import DenseBiEncoder
from retrieval_zoo.methods.masking import mask_exact_matches
from retrieval_zoo.methods.method import Optim
from retrieval_zoo.training.datamodule import TrainBatch

LexicalScale = Literal["paper", "lucene"]


class RoC(DenseBiEncoder):
    """RoC's [CLS] encoder beside projected BM25, with its orthogonality objectives.

    Args:
        encoder: The encoder (the paper: [CLS] pooling, Eq. 6).
        optim: Optimiser settings.
        projection_seed: Seed of the Rademacher projection (its width is the encoder's, so that Eq. 8 applies).
        ortho_weight: Weight of the orthogonality loss (Eq. 9: 1; 0 turns embedding-level orthogonality off).
        mask_fraction: Share of exact-match document tokens masked at training (Eq. 10: 0.15; 0 turns it off).
        in_batch_negatives: Also score each query against every other document of the batch.
        gather_across_devices: Under DDP, in-batch negatives are the global batch's documents (with gradients).
        val_k: Validation retrieval depth.
        seed: Seed of the masking's random choices.
        lexical_scale: ``paper`` (d_bm25 with Eq. 3's (k1 + 1) factor) or ``lucene`` (Lucene's BM25, without it).
    """

    representations: ClassVar[tuple[str, ...]] = ("lexical_semantic", "vectors")

    def __init__(
        self,
        encoder: Encoder,
        optim: Optim | None = None,
        projection_seed: int = 0,
        ortho_weight: float = 1.0,
        mask_fraction: float = 0.15,
        in_batch_negatives: bool = False,
        gather_across_devices: bool = True,
        val_k: int = 100,
        seed: int = 13,
        lexical_scale: LexicalScale = "paper",
    ) -> None:
        super().__init__(encoder, optim, in_batch_negatives, gather_across_devices, val_k=val_k)
        require_choice("lexical_scale", lexical_scale, LexicalScale)
        self.lexical_scale = lexical_scale
        self.projection = RademacherProjection(encoder.hidden_size, projection_seed)
        self.ortho_weight, self.mask_fraction = ortho_weight, mask_fraction
        self.masking = torch.Generator().manual_seed(seed)

    @property
    def needs(self) -> frozenset[str]:
        """BM25's term vectors of the texts (Eq. 3), and each document's exact-match count when masking (Eq. 10)."""
        return frozenset({"bm25_vectors", "exact_match_counts"} if self.mask_fraction > 0 else {"bm25_vectors"})

    def saturation_scale(self, k1: float) -> float:
        """What Lucene's TF saturation is multiplied by to give Eq. 3's d_bm25: (k1 + 1), or 1 at Lucene's scale."""
        return k1 + 1.0 if self.lexical_scale == "paper" else 1.0

    def term_keys(self) -> Callable[[list[str]], np.ndarray]:
        """The projection's term keys: the DataModule stores the BM25 bags under them, as tensors."""
        return self.projection.term_keys

    def lexical(self, vectors: list[dict[str, float]] | SparseBatch) -> torch.Tensor:
        """q_lex = A·q_bm25 or d_lex = A·d_bm25 (Eq. 3): (N,) bags of words → (N, H), no gradient.

        Bags as tensors of term keys (a training batch's) are projected on their device with tensor ops; bags as
        dicts, term by term on the CPU. Both give the same numbers.
        """
        if isinstance(vectors, SparseBatch):
            return self.projection.project_keys(vectors)
        return self.projection.project(vectors).to(self.device)

    def losses(self, batch: TrainBatch) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """NLL of the positive (Eq. 7) plus the weighted orthogonality (Eq. 8–9) on the perturbed documents."""
        query_ids, query_mask = self.encoder.tokenize(batch.query_input, "query")
        doc_ids, doc_mask = self.encoder.tokenize(batch.doc_input, "doc")
        if self.mask_fraction > 0:  # Eq. 10: d' = d with a sample of X_EM masked
            tokenizer = self.encoder.tokenizer
            doc_ids = mask_exact_matches(doc_ids, query_ids, self.mask_fraction, tokenizer.mask_token_id,
                                         tokenizer.all_special_ids, self.masking, batch.exact_match_counts)  # fmt: skip
        q_sem, d_sem = self.encoder.embed(query_ids, query_mask), self.encoder.embed(doc_ids, doc_mask)
        nll, accuracy = self.listwise_nll(q_sem, d_sem, batch)  # Eq. 7 on Score_sem = q_sem·d'_sem
        losses = {"nll": nll}
        if batch.bm25_query_vectors is None or batch.bm25_doc_vectors is None:
            raise ValueError("the batch has no BM25 vectors: RoC's needs must name bm25_vectors")
        q_lex, d_lex = self.lexical(batch.bm25_query_vectors), self.lexical(batch.bm25_doc_vectors)
        ortho = orthogonality(q_lex, q_sem, d_lex, d_sem)
        if self.ortho_weight > 0:
            losses["ortho"] = self.ortho_weight * ortho
        return losses, {"accuracy": accuracy, "orthogonality": ortho.detach()}
