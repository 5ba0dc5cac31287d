"""Losses as pure functions of score tensors. Shapes: B queries, G = 1 + n documents per query.

Each method sums the named losses it needs; the base module logs each as ``train/loss/<name>``.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from retrieval_zoo.bounds import require_choice


def group_targets(batch_size: int, group_size: int, in_batch: bool, device: torch.device) -> torch.Tensor:
    """Column of each query's positive: 0 within its own group, or ``i·G`` among all B·G batch documents."""
    step = group_size if in_batch else 0
    return torch.arange(batch_size, device=device) * step


def listwise_nll(scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Negative log-likelihood of the positive under a softmax over candidates (DPR Eq. 2; Karpukhin et al. 2020).

    L = mean_i [ −s(q_i, d_i⁺) + log Σ_j exp s(q_i, d_j) ].

    Args:
        scores: (B, C) scores of each query against its C candidates: C = G for its own group only, or
            C = B·G with in-batch negatives (every document of the batch).
        targets: (B,) column of each query's positive.

    Returns:
        Scalar mean loss.
    """
    return F.cross_entropy(scores, targets)


def in_batch_accuracy(scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Fraction of queries whose positive outscores every other candidate. (B, C), (B,) → scalar."""
    return (scores.argmax(dim=1) == targets).float().mean()


def own_group(scores: torch.Tensor, group_size: int, first_doc: int = 0) -> torch.Tensor:
    """Each query's scores against its own group: (B, N) → (B, G).

    The batch's B·G documents (row-major groups, the positive first) start at column ``first_doc`` of ``scores``.
    """
    positives = first_doc + group_targets(scores.shape[0], group_size, True, scores.device)
    return scores.gather(1, positives[:, None] + torch.arange(group_size, device=scores.device))


def contrastive_nll(
    scores: torch.Tensor,
    group_size: int,
    first_doc: int = 0,
    in_batch_negatives: bool = True,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """NLL of each query's positive (DPR Eq. 2) and the in-batch accuracy, from its scores against the batch.

    Args:
        scores: (B, N) scores of the batch's B queries against N documents, among which the batch's own B·G
            documents (row-major groups, the positive first) start at column ``first_doc`` (N = B·G on one device;
            the global batch's documents under DDP).
        group_size: G, documents per query.
        first_doc: Column of the batch's first document.
        in_batch_negatives: Every document of ``scores`` is a candidate; else only the query's own group.
        temperature: Scores are divided by it inside the softmax.

    Returns:
        The scalar mean NLL and the scalar in-batch accuracy.
    """
    size = scores.shape[0]
    if in_batch_negatives:
        targets = first_doc + group_targets(size, group_size, True, scores.device)  # column of each query's positive
    else:
        scores = own_group(scores, group_size, first_doc)
        targets = group_targets(size, group_size, False, scores.device)
    scores = scores / temperature
    return listwise_nll(scores, targets), in_batch_accuracy(scores, targets)


MarginNormalization = Literal["none", "pair_max"]


def check_margin_normalization(normalization: str) -> str:
    """``normalization`` if it names a margin normalisation of :func:`residual_margin`, else a ValueError."""
    require_choice("margin_normalization", normalization, MarginNormalization)
    return normalization


def residual_margin(
    lex_positive: torch.Tensor,
    lex_negative: torch.Tensor,
    xi: float,
    lambda_train: float,
    normalization: MarginNormalization = "none",
) -> torch.Tensor:
    """CLEAR's residual margin, Eq. 6: m_r = ξ − λ_train · (s_lex(q, d⁺) − s_lex(q, d⁻)).

    Args:
        lex_positive: (B,) lexical score of each query's positive.
        lex_negative: (B, n) lexical scores of its n negatives.
        xi: The constant bias ξ ≥ 0.
        lambda_train: Weight of the lexical residual; 0 gives the constant margin ξ (Table 1's ablation).
        normalization: ``"none"`` uses raw scores, as the paper does. ``"pair_max"`` divides the residual by
            max(s_lex(q, d⁺), s_lex(q, d⁻)), so it lies in [−1, 1] whatever the query's length or the collection's
            score scale (raw MS MARCO residuals of 5–20 make most margins negative at λ_train = 0.1); with it,
            λ_train is the margin's swing, around 1.

    Returns:
        (B, n) margins.
    """
    check_margin_normalization(normalization)
    residual = lex_positive.unsqueeze(1) - lex_negative
    if normalization == "pair_max":
        scale = torch.maximum(lex_positive.unsqueeze(1), lex_negative).clamp_min(torch.finfo(residual.dtype).tiny)
        residual = residual / scale
    return xi - lambda_train * residual


def residual_hinge(emb_positive: torch.Tensor, emb_negative: torch.Tensor, margin: torch.Tensor) -> torch.Tensor:
    """CLEAR's hinge loss with a per-pair margin, Eq. 7: [m_r − s_emb(q, d⁺) + s_emb(q, d⁻)]₊, mean over pairs.

    Args:
        emb_positive: (B,) embedding score of each query's positive.
        emb_negative: (B, n) embedding scores of its negatives.
        margin: (B, n) margins (Eq. 6); a margin ≤ 0 on a pair already ordered gives no gradient.

    Returns:
        Scalar mean loss over the B·n triplets.
    """
    return torch.relu(margin - emb_positive.unsqueeze(1) + emb_negative).mean()


def orthogonality(
    query_lex: torch.Tensor, query_sem: torch.Tensor, doc_lex: torch.Tensor, doc_sem: torch.Tensor
) -> torch.Tensor:
    """RoC's embedding-level orthogonality, Eq. 8: cos²(q_lex, q_sem) + cos²(d_lex, d_sem), each side averaged.

    Args:
        query_lex: (B, H) projected BM25 query vectors (Eq. 3).
        query_sem: (B, H) semantic query vectors (Eq. 6).
        doc_lex: (N, H) projected BM25 document vectors.
        doc_sem: (N, H) semantic document vectors (of the perturbed documents d', Eq. 10, when masking is on).

    Returns:
        Scalar: mean over queries of cos² plus mean over documents of cos²; 0 when every pair is orthogonal. A zero
        lexical vector (no term known to the index) counts as orthogonal.
    """
    query_cos = F.cosine_similarity(query_lex, query_sem, dim=-1, eps=1e-8)
    doc_cos = F.cosine_similarity(doc_lex, doc_sem, dim=-1, eps=1e-8)
    return query_cos.pow(2).mean() + doc_cos.pow(2).mean()


KlDirection = Literal["teacher_student", "student_teacher"]


def kl_distillation(
    student: torch.Tensor, teacher: torch.Tensor, direction: KlDirection = "teacher_student"
) -> torch.Tensor:
    """KL divergence between the softmaxes of student and teacher scores over each query's candidates.

    ``teacher_student``: KL(p_t ‖ p_s) = mean_i Σ_j p_t(j | q_i) · (log p_t(j | q_i) − log p_s(j | q_i)), as the
    DeLADE reference code's ``KLDivLoss(reduction="batchmean")`` (delade-dhr.md's "+" models).
    ``student_teacher``: KL(p_s ‖ p_t) = mean_i Σ_j p_s(j | q_i) · (log p_s(j | q_i) − log p_t(j | q_i)), the
    direction of RocketQAv2, which csurf.md §3.5 cites for L_KL (the sum there is weighted by the model's s̃).

    Args:
        student: (B, G) the model's scores of each query's group.
        teacher: (B, G) the teacher's scores of the same documents.
        direction: ``teacher_student`` or ``student_teacher``.

    Returns:
        Scalar mean loss.
    """
    if student.shape != teacher.shape:
        raise ValueError(f"student scores {tuple(student.shape)} and teacher scores {tuple(teacher.shape)} differ")
    require_choice("direction", direction, KlDirection)
    log_student, log_teacher = F.log_softmax(student, dim=1), F.log_softmax(teacher.to(student.dtype), dim=1)
    if direction == "teacher_student":
        return F.kl_div(log_student, log_teacher, log_target=True, reduction="batchmean")
    return (log_student.exp() * (log_student - log_teacher)).sum(dim=1).mean()


def flops(mean_weights: torch.Tensor) -> torch.Tensor:
    """FLOPS regulariser (Paria et al. 2020; csurf.md §3.5, L_reg): Σ_t (mean over the batch of w_t)².

    Squaring the batch mean (not each w_t) penalises terms that are non-zero in many texts of the batch, a smooth
    proxy of the expected number of multiplications of an inverted-index search (SPLADE's form).

    Args:
        mean_weights: (V,) the mean of the non-negative term weights w_t over the texts of the batch: ``w.mean(0)``
            of (T, V) weights, or :func:`retrieval_zoo.distributed.global_mean` over the global batch under DDP.

    Returns:
        Scalar.
    """
    return mean_weights.pow(2).sum()


def quadratic_warmup(step: int, warmup_steps: int) -> float:
    """Multiplier of a regulariser's λ at global step ``step``: (step / warmup_steps)² until ``warmup_steps``, then 1.

    SPLADE's FLOPS warm-up; 0 warm-up steps gives 1 from the start. A pure function of the step, so resuming and
    gradient accumulation see the same value.
    """
    if warmup_steps <= 0 or step >= warmup_steps:
        return 1.0
    return (max(step, 0) / warmup_steps) ** 2
