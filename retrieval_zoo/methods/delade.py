"""DeLADE and DeLADE+[CLS]: dense lexical + [CLS] retrieval through DHRs (Lin et al.; delade-dhr.md §3.3–3.5).

DeLADE is SPLADE with a softmax: ds_BoW[v] = max_i w_i·softmax(logit_i)[v] over the tokens but [CLS] (Eq. 23).
DeLADE+[CLS] adds the [CLS] vector through a linear projection to 128 dimensions, and trains both jointly on the
exact fused score ⟨q_BoW, d_BoW⟩ + λ⟨q_[CLS], d_[CLS]⟩ (Eq. 13, λ = 1) with the listwise NLL over BM25 and in-batch
negatives (Eq. 17). The "+" models add KL distillation: from a teacher run file over each query's group, or, as §4.2
trains them, from a teacher in the loop (:mod:`retrieval_zoo.teachers`) over every document of the batch. The model
produces ``term_weights``: retrieval densifies the lexical vectors into DLRs (Eq. 4–8) and the pair into DHRs
(Eq. 14–16), searched by gated inner product in two stages (Eq. 18) (``index=gip``, the default); ``index=sparse``
scores the exact vectors, and ``index=faiss`` the full [ds_BoW ; √λ·[CLS]] vectors by inner product.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch

from retrieval_zoo.encoding.encoder import BERT_DISCARD, Encoder
from retrieval_zoo.encoding.tokens import Tokens
from retrieval_zoo.index.terms.term_index import TermWeightsFromParts
from retrieval_zoo.lexical.delade_vectors import delade_vectors
from retrieval_zoo.losses import kl_distillation
from retrieval_zoo.methods.dense import DenseBiEncoder
from retrieval_zoo.methods.method import Optim
from retrieval_zoo.teachers import Teacher, TeacherRef
from retrieval_zoo.training.datamodule import TrainBatch, required


class DeLADE(TermWeightsFromParts, DenseBiEncoder):
    """DeLADE (``cls_dim=0``) or DeLADE+[CLS], with optional distillation.

    Encoded texts are the vectors [ds_BoW ; √λ·[CLS]], so their dot product is the training score of Eq. 13.

    Args:
        encoder: The encoder, with its MLM head (``mlm_head: true``).
        optim: Optimiser settings.
        cls_dim: Width of the [CLS] projection (128 in the paper); 0 = DeLADE alone.
        lambda_cls: λ of Eq. 13–14.
        in_batch_negatives: Score each query against every document of the batch (Eq. 17 as trained).
        gather_across_devices: Under DDP, in-batch negatives are the global batch's documents (with gradients).
        kd_weight: Weight of KL(teacher ‖ fused score): over each query's group from ``data.teacher_run``, or with
            ``teacher`` over every document of the batch (in-batch negatives, §4.2).
        kd_lexical_weight: Weight of the same KL on the lexical score alone (the reference code's optional term).
        kd_semantic_weight: Weight of the same KL on the [CLS] score alone.
        freeze_word_embeddings: Freeze the word embeddings (and the tied MLM decoder), as the reference code does.
        val_k: Validation retrieval depth.
        teacher: An online teacher (:mod:`retrieval_zoo.teachers`) scoring each query against every document of the
            batch; None distils from ``data.teacher_run`` instead.
    """

    representations: ClassVar[tuple[str, ...]] = ("term_weights", "vectors")

    def __init__(
        self,
        encoder: Encoder,
        optim: Optim | None = None,
        cls_dim: int = 128,
        lambda_cls: float = 1.0,
        in_batch_negatives: bool = True,
        gather_across_devices: bool = True,
        kd_weight: float = 0.0,
        kd_lexical_weight: float = 0.0,
        kd_semantic_weight: float = 0.0,
        freeze_word_embeddings: bool = True,
        val_k: int = 100,
        teacher: Teacher | None = None,
    ) -> None:
        super().__init__(encoder, optim, in_batch_negatives, gather_across_devices, val_k=val_k)
        if not encoder.mlm_head:
            raise ValueError("DeLADE reads the MLM logits (Eq. 23): set method.encoder.mlm_head=true")
        hidden, self.vocab_size = encoder.hidden_size, encoder.vocab_size
        self.term_weight = torch.nn.Linear(hidden, 1)  # w_i = h_i·W + b (Eq. 23)
        self.cls_projection = torch.nn.Linear(hidden, cls_dim) if cls_dim > 0 else None
        if kd_semantic_weight > 0 and cls_dim == 0:
            raise ValueError("kd_semantic_weight needs a [CLS] part (cls_dim > 0)")
        self.lambda_cls = lambda_cls
        self.kd_weights = {"kd": kd_weight, "kd_lexical": kd_lexical_weight, "kd_semantic": kd_semantic_weight}
        distils = any(w > 0 for w in self.kd_weights.values())
        if teacher is not None and not distils:
            raise ValueError("method.teacher is set but every KD weight is 0: set method.kd_weight > 0")
        self.teacher_ref = TeacherRef(teacher)
        if freeze_word_embeddings:
            encoder.model.get_input_embeddings().weight.requires_grad_(False)

    @property
    def teacher(self) -> Teacher | None:
        """The online teacher, or None (distilling from ``data.teacher_run``, or not at all)."""
        return self.teacher_ref.teacher

    @property
    def needs(self) -> frozenset[str]:
        """The texts for an online teacher (its own tokenizer reads them), else a run's scores when distilling."""
        if self.teacher is not None:
            return frozenset({"texts"})
        return frozenset({"teacher_scores"}) if any(w > 0 for w in self.kd_weights.values()) else frozenset()

    def term_parts(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(N, L) ids and mask → (N, |V|) ds_BoW (Eq. 23) and the (N, cls_dim) projected [CLS] (or None)."""
        out = self.encoder.model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        hidden = out.hidden_states[-1]
        lexical = delade_vectors(out.logits, hidden, mask, self.term_weight)
        return lexical, self.cls_projection(hidden[:, 0]) if self.cls_projection is not None else None

    def fused(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """[ds_BoW ; √λ·[CLS]]: their dot product is sim_hybrid of Eq. 13. (N, L) → (N, |V| + cls_dim)."""
        lexical, cls = self.term_parts(ids, mask)
        return lexical if cls is None else torch.cat([lexical, math.sqrt(self.lambda_cls) * cls], dim=1)

    def encode_query(self, texts: list[str] | Tokens) -> torch.Tensor:
        """(B,) texts, or their tokens → (B, |V| + cls_dim) fused query vectors."""
        return self.fused(*self.encoder.tokenize(texts, "query"))

    def encode_doc(self, texts: list[str] | Tokens) -> torch.Tensor:
        """(N,) texts, or their tokens → (N, |V| + cls_dim) fused document vectors."""
        return self.fused(*self.encoder.tokenize(texts, "doc"))

    def losses(self, batch: TrainBatch) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """NLL of Eq. 17 on the exact fused score, plus the weighted KL terms when distilling."""
        q, d = self.encode_query(batch.query_input), self.encode_doc(batch.doc_input)
        nll, accuracy = self.listwise_nll(q, d, batch)
        losses, split = {"nll": nll}, self.vocab_size
        student, teacher = self.distillation_scores(q, d, batch)
        for name, weight in self.kd_weights.items():
            if weight > 0 and teacher is not None:  # a teacher whenever a KD weight is set
                losses[name] = weight * kl_distillation(student[name], teacher)
        group = len(batch.docids[0])
        d = d.view(len(batch.qids), group, -1)
        lexical_positive = torch.einsum("bh,bh->b", q[:, :split], d[:, 0, :split]).detach()
        diagnostics = {
            "accuracy": accuracy,
            "score/lexical_positive": lexical_positive,
            "lexical/max": d[:, :, :split].detach().amax(dim=2).flatten(),
        }
        if self.cls_projection is not None:
            fused_positive = torch.einsum("bh,bh->b", q, d[:, 0]).detach()
            diagnostics["score/semantic_positive"] = fused_positive - lexical_positive
        if teacher is not None:
            positives = self.positive_columns(teacher, group)
            diagnostics["kd/teacher_accuracy"] = (teacher.argmax(dim=1) == positives).float()
        return losses, diagnostics

    def distillation_scores(
        self, q: torch.Tensor, d: torch.Tensor, batch: TrainBatch
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
        """The student's KD scores (fused, lexical, semantic) and the teacher's, over the same candidates.

        From a run file: each query's own group, (B, G). From an online teacher: every document of the (local) batch
        with in-batch negatives, (B, B·G), else the query's own group; the teacher scores the same texts.

        Args:
            q: (B, |V| + cls_dim) fused query vectors.
            d: (B·G, |V| + cls_dim) fused document vectors, grouped by query.
            batch: The batch (its texts and, from a run file, ``teacher_scores``).
        """
        if not any(w > 0 for w in self.kd_weights.values()):
            return {}, None
        split, size, group = self.vocab_size, len(batch.qids), len(batch.docids[0])
        if self.teacher is not None and self.in_batch_negatives:  # every document of the batch: (B, B·G)
            teacher = self.teacher.scores(required(batch.queries, "queries"), required(batch.docs, "docs"), q.device)
            student = {"kd": q @ d.T, "kd_lexical": q[:, :split] @ d[:, :split].T}
        else:  # the query's own group: (B, G)
            if self.teacher is not None:  # B·G pairs, not the B²·G of the whole batch
                paired = [text for text in required(batch.queries, "queries") for _ in range(group)]
                teacher = self.teacher.pair_scores(paired, required(batch.docs, "docs"), q.device).view(size, group)
            else:
                teacher = required(batch.teacher_scores, "teacher_scores").to(q.device)
            grouped = d.view(size, group, -1)
            student = {
                "kd": torch.einsum("bh,bgh->bg", q, grouped),
                "kd_lexical": torch.einsum("bh,bgh->bg", q[:, :split], grouped[:, :, :split]),
            }
        if self.cls_projection is not None:
            student["kd_semantic"] = student["kd"] - student["kd_lexical"]  # λ·<q_cls, d_cls>
        return student, teacher

    @staticmethod
    def positive_columns(scores: torch.Tensor, group: int) -> torch.Tensor:
        """Column of each query's positive in (B, G) group scores (0) or (B, B·G) batch scores (b·G)."""
        rows = torch.arange(scores.shape[0], device=scores.device)
        return rows * group if scores.shape[1] > group else torch.zeros_like(rows)

    @property
    def term_discard(self) -> int:
        """BERT's leading ids, which are never a term: dropped before densification (§4.2)."""
        return BERT_DISCARD

    @property
    def cls_weight(self) -> float:
        """λ of Eq. 13, with which the [CLS] part was trained."""
        return self.lambda_cls

    sparse_terms: ClassVar[bool] = False  # Eq. 23's softmax gives every id a weight: kept dense
