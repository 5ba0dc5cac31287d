"""DeLADE term vectors (delade-dhr.md §3.5, Eq. 23): SPLADE with softmax instead of log(1 + ReLU).

ds_BoW[v] = max_i w_i · softmax(logit_i)[v], over the text's real tokens i except [CLS], where logit_i are the MLM
logits of token i (Eq. 19) and w_i = h_i·W + b a linear term weight (no activation, as in the reference code).
The vectors are dense: every vocabulary id gets a weight, which densification (Eq. 4–8) then compresses.

:func:`delade_vectors` computes Eq. 23 with a hand-written backward, so autograd keeps none of the softmax's
(B, L, V) intermediates but the probabilities themselves: the forward builds them in one tensor (kept for the
backward, which turns them into the logits' gradient in place) and the candidates w_i·softmax(z_i)[v] a chunk of
rows at a time, reduced by a max over positions (no Python loop over tokens) and freed. Positions that do not count
get −inf by adding a (B, L, 1) bias, a fraction of a masked fill's cost on a CPU. Chunks keep the scratch tensor
bounded (on a CPU, first touching a fresh gigabyte costs more than the arithmetic, so chunks stay small there).
[CLS] is left out by the mask, not by slicing the logits, whose slice would cost autograd another (B, L, V)
gradient and copy. Without gradients (encoding) the max keeps no winners and no probabilities are kept. Off the CPU
(:func:`fused_candidates`) the probabilities come from torch's fused softmax, encoding and training alike.
:func:`delade_vectors_naive` is the literal formula; a test holds the two equal.
"""

from __future__ import annotations

import torch

from retrieval_zoo.lexical.maxima import max_with_positions_
from retrieval_zoo.lexical.splade import padding_bias

CPU_CHUNK_BYTES = 32 * 2**20
DEVICE_CHUNK_BYTES = 2**30


def delade_vectors_naive(
    logits: torch.Tensor, hidden: torch.Tensor, attention_mask: torch.Tensor, term_weight: torch.nn.Module
) -> torch.Tensor:
    """Eq. 23 literally: (B, L, V) logits, (B, L, H) hidden states, (B, L) mask → (B, V); position 0 is [CLS]."""
    values = term_weight(hidden[:, 1:]) * torch.softmax(logits[:, 1:].float(), dim=-1)
    return values.masked_fill(attention_mask[:, 1:].unsqueeze(-1) == 0, float("-inf")).amax(dim=1)


class _WeightedSoftmaxMax(torch.autograd.Function):
    """max_i w_i·softmax(z_i)[v] over real positions, with a hand-written backward.

    With p = softmax(z_i), i*(v) the winning position of v and out_v = w_{i*} p_{i* v}:
    ∂L/∂z_iu = [i*(u) = i]·g_u·out_u − p_iu·S_i and ∂L/∂w_i = Σ_{v: i*(v) = i} g_v·p_iv, where
    S_i = Σ_{v: i*(v) = i} g_v·out_v. The forward keeps p, (B, L, V), which the backward turns into ∂L/∂z in place:
    one (B, L, V) tensor from the forward to the end of the backward, with no loop over positions. With ``fused``
    (off the CPU) the forward is :func:`fused_candidates` and z may be bf16: p stays float32 and ∂L/∂z takes z's dtype.
    """

    @staticmethod
    def forward(  # noqa: ANN001
        ctx, z: torch.Tensor, weights: torch.Tensor, real: torch.Tensor, fused: bool
    ) -> torch.Tensor:
        candidates = fused_candidates if fused else best_candidates
        probabilities, best, winner = candidates(z, weights, real, winners=True)
        ctx.save_for_backward(weights, probabilities, winner, best)
        ctx.logits_dtype = z.dtype
        return best

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None, None]:  # noqa: ANN001
        weights, probabilities, winner, best = ctx.saved_tensors
        contribution = grad * best  # g_v·out_v, (B, V)
        per_position = torch.zeros_like(weights).scatter_add_(1, winner, contribution)  # S_i, (B, L)
        winner_probability = probabilities.gather(1, winner.unsqueeze(1)).squeeze(1)  # p_{i* v}
        grad_weights = torch.zeros_like(weights).scatter_add_(1, winner, grad * winner_probability)
        minus_s = -per_position.unsqueeze(-1)  # (B, L, 1)
        winners_grad = (winner_probability * minus_s.squeeze(-1).gather(1, winner)).add_(contribution)  # float32
        # −p_iu·S_i written straight in the logits' dtype (bf16: no float32 gradient to cast); float32: over the kept
        # p, used up, so a second backward fails. The winners' entries, −p·S + g·out, each rounded once, set after.
        same = ctx.logits_dtype == probabilities.dtype
        into = probabilities if same else probabilities.new_empty(probabilities.shape, dtype=ctx.logits_dtype)
        grad_z = torch.mul(probabilities, minus_s, out=into)
        grad_z.scatter_(1, winner.unsqueeze(1), winners_grad.unsqueeze(1).to(ctx.logits_dtype))
        return grad_z, grad_weights, None, None


def delade_vectors(
    logits: torch.Tensor, hidden: torch.Tensor, attention_mask: torch.Tensor, term_weight: torch.nn.Module
) -> torch.Tensor:
    """Eq. 23 for a batch, without materialising the softmax's (B, L, V) intermediates.

    Args:
        logits: (B, L, V) MLM logits, position 0 being [CLS].
        hidden: (B, L, H) last hidden states.
        attention_mask: (B, L), 1 for real tokens.
        term_weight: H → 1 linear layer giving w_i.

    Returns:
        (B, V) lexical vectors.
    """
    weights = term_weight(hidden[:, 1:]).squeeze(-1).float()  # (B, L − 1): w_i, [CLS] excluded
    weights = torch.nn.functional.pad(weights, (1, 0))  # (B, L): a masked 0 at [CLS], so z needs no slicing
    real = attention_mask != 0
    real[:, 0] = False  # [CLS] (position 0) never counts
    fused = logits.device.type != "cpu"  # the CPU keeps the bits of the registered figures (fused_candidates)
    if not (torch.is_grad_enabled() and (logits.requires_grad or weights.requires_grad)):  # encoding: no winners
        if fused:
            return fused_candidates(logits, weights, real, winners=False)[1]
        return best_candidates(logits.float(), weights, real, winners=False)[1]
    return _WeightedSoftmaxMax.apply(logits if fused else logits.float(), weights, real, fused)


def fused_candidates(
    logits: torch.Tensor, weights: torch.Tensor, real: torch.Tensor, winners: bool
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor | None]:
    """:func:`best_candidates` off the CPU: the softmax by torch's fused kernel, the candidates by one ``addcmul``.

    The probabilities are float32 from the logits' dtype (no float32 copy of bf16 logits), w_i·p_iv plus the
    padding's −inf is one ``addcmul``, and the max with positions is torch's (one kernel on a GPU): a GPU reads and
    writes (B, L, V) about three times instead of eight. With ``winners`` (training) the whole batch's probabilities
    are kept for the backward and the candidates go a chunk of rows at a time into a bounded scratch tensor; without
    (encoding) each chunk's probabilities are overwritten by its candidates. They are exp(z − max) / Σ exp(z − max)
    where :func:`best_candidates` takes exp(z − logsumexp(z)): the same to float32 rounding, not the same bits, so the
    CPU (whose figures the registry holds) keeps :func:`best_candidates`.
    """
    padding = padding_bias(real, torch.float32)
    probabilities = torch.softmax(logits, dim=-1, dtype=torch.float32) if winners else None
    step = rows_per_chunk(logits, element_size=4)  # a chunk's float32 probabilities, or its candidates
    scratch = torch.empty_like(probabilities[:step]) if probabilities is not None else None
    bests: list[torch.Tensor] = []
    winner_parts: list[torch.Tensor] = []
    for start in range(0, max(len(logits), 1), step):  # one (empty) chunk for an empty batch
        rows = slice(start, start + step)
        if probabilities is not None and scratch is not None:
            p, into = probabilities[rows], scratch[: len(probabilities[rows])]
        else:  # encoding: the chunk's candidates written over its probabilities
            p = into = torch.softmax(logits[rows], dim=-1, dtype=torch.float32)
        candidates = torch.addcmul(padding[rows], p, weights[rows].unsqueeze(-1), out=into)
        if winners:
            best, winner = candidates.max(dim=1)
            winner_parts.append(winner)
        else:
            best = candidates.amax(dim=1)
        bests.append(best)
    return probabilities, *joined(bests, winner_parts, winners)


def best_candidates(
    z: torch.Tensor, weights: torch.Tensor, real: torch.Tensor, winners: bool
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor | None]:
    """With ``winners``: the (B, L, V) probabilities softmax(z), the (B, V) max candidates and their (B, V) positions.

    Without: (None, the max candidates, None). Ties go to the first position, as a running max's would. Rows are
    processed in chunks (:func:`rows_per_chunk`); each row's figures are the same however they are chunked.
    """
    probabilities = torch.empty_like(z) if winners else None
    padding = padding_bias(real, z.dtype)  # (B, L, 1): 0 where position i counts, else −inf
    bests: list[torch.Tensor] = []
    winner_parts: list[torch.Tensor] = []
    step = rows_per_chunk(z)
    scratch = torch.empty_like(z[:step])  # each chunk's exponentials, then its candidates: one allocation a call
    for start in range(0, max(len(z), 1), step):  # one (empty) chunk for an empty batch
        rows = slice(start, start + step)
        buffer = scratch[: len(z[rows])]
        log_normaliser = log_normalisers(z[rows], buffer)
        into = probabilities[rows] if probabilities is not None else buffer
        p = torch.sub(z[rows], log_normaliser, out=into).exp_()
        candidates = torch.mul(p, weights[rows].unsqueeze(-1), out=buffer)
        candidates.add_(padding[rows])  # w_i·p_iv, or −inf where position i does not count
        best, winner = max_with_positions_(candidates, dim=1) if winners else (candidates.amax(dim=1), None)
        bests.append(best)
        winner_parts += [winner] if winner is not None else []
    return probabilities, *joined(bests, winner_parts, winners)


def joined(
    bests: list[torch.Tensor], winner_parts: list[torch.Tensor], winners: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The chunks' (B, V) maxima and, with ``winners``, their positions, each concatenated (a chunk alone: no copy)."""
    if len(bests) == 1:
        return bests[0], winner_parts[0] if winners else None
    return torch.cat(bests), torch.cat(winner_parts) if winners else None


def log_normalisers(z: torch.Tensor, scratch: torch.Tensor) -> torch.Tensor:
    """``torch.logsumexp(z, dim=-1, keepdim=True)``, the same steps and bits, its exponentials written into ``scratch``.

    (B, L, V) logits and a tensor of their shape to overwrite → (B, L, 1): torch's own allocates the (B, L, V)
    exponentials afresh, which on a CPU costs as much as computing them.
    """
    maxima = z.amax(dim=-1, keepdim=True)
    maxima.masked_fill_(maxima.abs() == float("inf"), 0)
    return torch.sub(z, maxima, out=scratch).exp_().sum(dim=-1, keepdim=True).log_().add_(maxima)


def rows_per_chunk(z: torch.Tensor, element_size: int | None = None) -> int:
    """Rows of ``z`` (B, L, V) to reduce at a time: those that fit the device's chunk budget, at least one.

    ``element_size`` is the bytes of an element of a chunk's tensors, ``z``'s by default (the fused encoding's float32
    probabilities of bf16 logits: 4).

    The chunk's scratch tensor (its exponentials, then its candidates) is the forward's only (B, L, V) allocation
    besides the kept probabilities. On a CPU a chunk stays under glibc's largest mmap threshold (32 MiB), so it
    reuses the heap's pages instead of faulting in fresh ones (a third of the time of a (64, 128, 30522) forward);
    on a GPU, under 1 GiB, so a large batch's forward holds the logits, the probabilities and a bounded scratch
    tensor, a handful of chunks at most.
    """
    if len(z) == 0:
        return 1
    budget = CPU_CHUNK_BYTES if z.device.type == "cpu" else DEVICE_CHUNK_BYTES
    return max(1, budget // max(1, z[0].numel() * (element_size or z.element_size())))
