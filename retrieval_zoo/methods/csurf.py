"""CSurF: sparse lexical retrieval through contextualized surface forms (Fan, Gao and Callan, 2023; csurf.md).

Each token gets a semantic vector φ_v(x) = ReLU(W_v x + b_v) (32 dims, trained from scratch) and expansion weights
φ_e(x) = log(1 + ReLU(MLM logits)) over the vocabulary (the backbone's MLM head) (§3.5). Each surface form t takes
w_t = max_i E_i[t] and is grounded to s_t = argmax_i E_i[t] (§3.2); with the original tokens' own forms this gives
the bag of CSFs C = O ∪ E (or O or E alone, Table 2). A query and a document score Σ_{q_i} max over same-form CSF
pairs of w_q·w_d·f(v_q, v_d), f = cosine or dot, or weights alone with |v| = 0 (§3.3). Training sums the contrastive
NLL over BM25 and in-batch negatives (L_ret) and the FLOPS regularisers λ_q·L_reg^q + λ_d·L_reg^d (§3.5), λ warmed
up quadratically; CSurF_HN adds a KL term to teacher scores over each query's group (L_HN). The model produces
``csf_bags``, searched through inverted lists scored exactly as training scores (``index=csf``;
:mod:`retrieval_zoo.index.csurf.csf`), and ``term_weights``: each bag read with |v| = 0, a surface form's largest weight
(:meth:`TextCsfs.term_weights`), scored by their inner product, SPLADE's sum where CSurF takes the max-sum over source
tokens (§3.4), for the term-weight indexes (``index=sparse``, ``bmp``, ``lucene_impact``, ``seismic``, ``gip``) and
CIFF (``python -m retrieval_zoo.export.ciff``). The vectors are left out: for a model trained with |v| > 0 these are
its weights alone, not the model.
"""

from __future__ import annotations

import warnings
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F

from retrieval_zoo.bounds import require_choice
from retrieval_zoo.compiling import compile_once
from retrieval_zoo.distributed import global_mean
from retrieval_zoo.encoding.encoder import Encoder
from retrieval_zoo.encoding.tokens import Tokens
from retrieval_zoo.index.terms.term_index import TermWeightsFromParts
from retrieval_zoo.lexical.csf_bags import Bags, CsfBags, Postings, gather_bags, max_sum_scores
from retrieval_zoo.lexical.csf_fixed import fixed_max_sum_scores
from retrieval_zoo.lexical.csf_texts import TextCsfs, csf_texts, gather_texts
from retrieval_zoo.lexical.splade import mlm_head_parts, pooled_mlm_logits, tied_projection
from retrieval_zoo.losses import (
    KlDirection,
    contrastive_nll,
    flops,
    kl_distillation,
    own_group,
    quadratic_warmup,
)
from retrieval_zoo.methods.method import BiEncoder, Optim
from retrieval_zoo.rows import take_rows
from retrieval_zoo.training.datamodule import TrainBatch, required

Similarity = Literal["cosine", "dot"]
StepShapes = Literal["auto", "fixed", "data"]


class CSurF(TermWeightsFromParts, BiEncoder[CsfBags]):
    """CSurF, or CSurF_HN with ``kd_weight`` > 0 and a teacher run.

    Args:
        encoder: A BERT-style encoder with its MLM head (coCondenser in the paper; ``mlm_head: true``).
        optim: Optimiser settings.
        vector_dim: |v|, the width of φ_v (32; 4 and 0, weights only, in Table 2).
        similarity: f of §3.3, ``cosine`` (the paper's default) or ``dot``.
        bags: ``both`` (O ∪ E), ``original`` (O only) or ``expansion`` (E only).
        lambda_q: λ_q of the query FLOPS term.
        lambda_d: λ_d of the document FLOPS term.
        flops_warmup_steps: Steps over which both λ rise quadratically from 0 (0 = no warm-up).
        in_batch_negatives: Score each query against every document of the batch.
        gather_across_devices: Under DDP, in-batch negatives are the global batch's documents (with gradients).
        kd_weight: Weight of L_KL over each query's group (L_HN, §3.5); > 0 needs ``data.teacher_run``.
        kd_direction: ``student_teacher``, KL(model ‖ teacher), the paper's reading of L_KL (RocketQAv2's, which §3.5
            cites), or ``teacher_student``, KL(teacher ‖ model) (:func:`retrieval_zoo.losses.kl_distillation`).
        step_shapes: How a training step scores its batch: ``data``, the pairs of CSFs that exist
            (:func:`~retrieval_zoo.lexical.csf_bags.max_sum_scores`: the least work, sizes that depend on the data);
            ``fixed``, every pair the shapes allow, a missing CSF weighing 0
            (:func:`~retrieval_zoo.lexical.csf_fixed.fixed_max_sum_scores`: sizes fixed by the batch, so a GPU's host
            never waits to read one back); ``auto``, fixed on CUDA, data elsewhere. The same scores and gradients
            to float32 rounding.
        compile_csfs: Run a fixed-shape step's own code, its CSFs from the encoder's hidden states (:func:`csfs_of`)
            and their scoring, through ``torch.compile``
            (:func:`~retrieval_zoo.compiling.compile_once`): fewer, fused kernels on a GPU, the same
            scores to float32 rounding. Needs steps in fixed shapes (``step_shapes`` ``fixed``, or ``auto`` on CUDA).
        val_k: Validation retrieval depth.
    """

    representations: ClassVar[tuple[str, ...]] = ("csf_bags", "term_weights")
    encoder: Encoder  # always one here (the base allows None for BM25)
    special_ids: torch.Tensor  # a buffer

    def __init__(
        self,
        encoder: Encoder,
        optim: Optim | None = None,
        vector_dim: int = 32,
        similarity: Similarity = "cosine",
        bags: Bags = "both",
        lambda_q: float = 1e-4,
        lambda_d: float = 1e-4,
        flops_warmup_steps: int = 0,
        in_batch_negatives: bool = True,
        gather_across_devices: bool = True,
        kd_weight: float = 0.0,
        kd_direction: KlDirection = "student_teacher",
        step_shapes: StepShapes = "auto",
        compile_csfs: bool = False,
        val_k: int = 100,
    ) -> None:
        super().__init__(encoder, optim, val_k)
        require_choice("kd_direction", kd_direction, KlDirection)
        require_choice("similarity", similarity, Similarity)
        require_choice("bags", bags, Bags)
        require_choice("step_shapes", step_shapes, StepShapes)
        _, _, projection = mlm_head_parts(encoder.model)  # fails here on a backbone without a BERT-style MLM head
        self.vocab_size = projection.out_features
        self.vector_projection = torch.nn.Linear(encoder.hidden_size, vector_dim) if vector_dim > 0 else None  # φ_v
        self.similarity, self.bags = similarity, bags
        self.lambda_q, self.lambda_d, self.flops_warmup_steps = lambda_q, lambda_d, flops_warmup_steps
        self.in_batch_negatives, self.gather_across_devices = in_batch_negatives, gather_across_devices
        self.kd_weight, self.kd_direction, self.step_shapes = kd_weight, kd_direction, step_shapes
        if compile_csfs and step_shapes == "data":
            raise ValueError(
                "method.compile_csfs=true compiles the CSF code of fixed-shape steps, which method.step_shapes=data "
                "never runs: set step_shapes to fixed (or auto, fixed on CUDA) or compile_csfs to false"
            )
        self.compile_csfs = compile_csfs
        self.register_buffer("special_ids", torch.tensor(encoder.tokenizer.all_special_ids), persistent=False)

    @property
    def needs(self) -> frozenset[str]:
        """A run's teacher scores when distilling (``kd_weight`` > 0)."""
        return frozenset({"teacher_scores"}) if self.kd_weight > 0 else frozenset()

    def fixed_shapes(self, device: torch.device) -> bool:
        """Whether a training step on ``device`` scores in shapes fixed by the batch (``step_shapes``)."""
        return self.step_shapes == "fixed" or (self.step_shapes == "auto" and device.type == "cuda")

    def encode_bags(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[CsfBags, torch.Tensor]:
        """(T, L) ids and mask → the texts' bags of CSFs and their (T, |V|) expansion weights w_t (for FLOPS)."""
        texts, expansion = self.encode_csfs(ids, mask)
        return texts.listed(), expansion

    def encode_csfs(self, ids: torch.Tensor, mask: torch.Tensor, fixed: bool = False) -> tuple[TextCsfs, torch.Tensor]:
        """(T, L) ids and mask → the texts' CSFs by form and position and their (T, |V|) expansion weights w_t.

        Sources are the text's tokens: padding, [CLS] and [SEP] neither expand nor form original CSFs. ``fixed``:
        a backward pass whose sizes the shapes fix (:func:`~retrieval_zoo.lexical.splade.max_pooled_logits`).
        """
        source_mask = mask.bool() & ~torch.isin(ids, self.special_ids)
        hidden = self.encoder.hidden_states(ids, mask)  # the encoder below the MLM head
        parts = compile_once(csfs_of, fullgraph=True) if fixed and self.compile_csfs else csfs_of
        return parts(self, hidden, ids, source_mask, fixed)

    def encode_query(self, texts: list[str] | Tokens) -> CsfBags:
        """(B,) texts, or their tokens → their bags of CSFs."""
        return self.encode_bags(*self.encoder.tokenize(texts, "query"))[0]

    def encode_doc(self, texts: list[str] | Tokens) -> CsfBags:
        """(N,) texts, or their tokens → their bags of CSFs."""
        return self.doc_csfs(texts).listed()

    def doc_csfs(self, texts: list[str] | Tokens) -> TextCsfs:
        """(N,) texts, or their tokens → their CSFs in the encoder's shapes, not yet listed."""
        return self.encode_csfs(*self.encoder.tokenize(texts, "doc"))[0]

    def token_strings(self, texts: list[str], side: str) -> list[list[str]]:
        """Each text's tokens as strings by position (a bag's ``source``; for explanations)."""
        ids, mask = self.encoder.tokenize(texts, side)
        return [
            self.encoder.id_strings(row[: int(length)].tolist()) for row, length in zip(ids, mask.sum(1), strict=True)
        ]

    def form_strings(self, ids: list[int]) -> list[str]:
        """Surface forms (vocabulary ids) → their word pieces."""
        return self.encoder.id_strings(ids)

    term_discard: ClassVar[int] = 0  # every surface form can be a term
    cls_weight: ClassVar[float] = 1.0  # no [CLS] part
    sparse_terms: ClassVar[bool] = True  # a text's forms: listed as CSR a group of batches at a time

    def term_parts(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, None]:
        """(T, L) ids and mask → the texts' bags as dense (T, |V|) term weights (|v| = 0; module docstring)."""
        return self.encode_csfs(ids, mask)[0].term_weights(), None

    def score(self, queries: CsfBags, docs: CsfBags) -> torch.Tensor:
        """Score(q, d) of §3.3 for every query and document: B and N bags → (B, N)."""
        postings = Postings.build(docs, self.vocab_size)
        return max_sum_scores(queries, postings, num_docs=docs.num_texts)[0]

    def losses(self, batch: TrainBatch) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """L = L_ret + λ_q·L_reg^q + λ_d·L_reg^d (§3.5), + L_KL with a teacher (CSurF_HN).

        Under DDP the in-batch negatives are the global batch's documents (``gather_across_devices``) and FLOPS
        takes the mean weights of the global batch, so every rank's loss is its share of the single-device loss.
        """
        query_ids, query_mask = self.encoder.tokenize(batch.query_input, "query")
        fixed = self.fixed_shapes(query_ids.device)
        if self.compile_csfs and not fixed:
            warnings.warn(
                "method.compile_csfs=true: step_shapes=auto lists bags off CUDA, compiling nothing", stacklevel=2
            )
        q, q_weights = self.encode_csfs(query_ids, query_mask, fixed)
        d, d_weights = self.encode_csfs(*self.encoder.tokenize(batch.doc_input, "doc"), fixed)
        gather = self.in_batch_negatives and self.gather_across_devices
        if fixed:
            candidates, first = gather_texts(d) if gather else (d, 0)
            scores = fixed_max_sum_scores(q, candidates, compiled=self.compile_csfs)
        else:
            listed, first = gather_bags(d.listed()) if gather else (d.listed(), 0)
            scores = self.score(q.listed(), listed)  # (B, N): N documents of the batch (the global batch's, gathered)
        group = len(batch.docids[0])
        nll, accuracy = contrastive_nll(scores, group, first, self.in_batch_negatives)
        warmup = quadratic_warmup(self.global_step, self.flops_warmup_steps)
        losses = {
            "nll": nll,
            "flops_query": self.lambda_q * warmup * flops(global_mean(q_weights)),
            "flops_doc": self.lambda_d * warmup * flops(global_mean(d_weights)),
        }
        group_scores = own_group(scores, group, first)  # (B, G)
        (q_csfs, q_originals), (d_csfs, d_originals) = q.counts(), d.counts()
        if self.kd_weight > 0:
            teacher = required(batch.teacher_scores, "teacher_scores").to(scores.device)
            losses["kd"] = self.kd_weight * kl_distillation(group_scores, teacher, self.kd_direction)  # L_KL, §3.5
        diagnostics = {
            "accuracy": accuracy,
            "csf_per_query": q_csfs.float().mean(),
            "csf_per_doc": d_csfs.float().mean(),
            "original_share": (q_originals.sum() + d_originals.sum()) / (q_csfs.sum() + d_csfs.sum()),
            "flops_warmup": scores.new_full((), warmup),  # a fill, not a copy from the host
            "score/positive": group_scores[:, 0].detach(),
        }
        return losses, diagnostics


def csfs_of(method: CSurF, hidden: torch.Tensor, ids: torch.Tensor, source_mask: torch.Tensor,
            fixed: bool) -> tuple[TextCsfs, torch.Tensor]:  # fmt: skip
    """The texts' CSFs and (T, |V|) expansion weights w_t from the encoder's (T, L, H) last hidden states on.

    (T, L) ids and source mask (the text's own tokens); ``fixed``: the pooled projection's backward in fixed sizes
    (:meth:`CSurF.encode_csfs`).
    """
    model = method.encoder.model
    maxima, sources = pooled_mlm_logits(model, hidden, source_mask, fixed_backward=fixed)
    expansion = torch.log1p(torch.relu(maxima))  # w_t = max_i φ_e(x_i)[t]: φ_e is monotonic, so max first
    _, transform, projection = mlm_head_parts(model)
    rows = ids.flatten()  # the text's own ids repeat: take_rows sums their gradients in a fixed order
    own_rows = take_rows(projection.weight, rows, sparse_gradient=not fixed and tied_projection(model))
    own = (transform(hidden) * own_rows.view(*ids.shape, -1)).sum(-1)
    own = own + take_rows(projection.bias, rows).view(ids.shape)
    self_weights = torch.log1p(torch.relu(own))  # E_i[x_i], the original CSFs' weights
    vectors = None
    if method.vector_projection is not None:
        vectors = torch.relu(method.vector_projection(hidden))  # φ_v
        vectors = F.normalize(vectors, dim=-1) if method.similarity == "cosine" else vectors
    return csf_texts(expansion, sources, self_weights, ids, source_mask, vectors, method.bags), expansion
