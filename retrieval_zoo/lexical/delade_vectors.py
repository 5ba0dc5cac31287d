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
gradient and copy. Without gradients (encoding) the max keeps no winners and no probabilities are kept.
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
    one (B, L, V) tensor from the forward to the end of the backward, with no loop over positions.
    """

    @staticmethod
    def forward(ctx, z: torch.Tensor, weights: torch.Tensor, real: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
        probabilities, best, winner = best_candidates(z, weights, real, winners=True)
        ctx.save_for_backward(weights, probabilities, winner, best)
        return best

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:  # noqa: ANN001
        weights, probabilities, winner, best = ctx.saved_tensors
        contribution = grad * best  # g_v·out_v, (B, V)
        per_position = torch.zeros_like(weights).scatter_add_(1, winner, contribution)  # S_i, (B, L)
        winner_probability = probabilities.gather(1, winner.unsqueeze(1)).squeeze(1)  # p_{i* v}
        grad_weights = torch.zeros_like(weights).scatter_add_(1, winner, grad * winner_probability)
        grad_z = probabilities.mul_(-per_position.unsqueeze(-1))  # the kept p, used up: a second backward fails
        grad_z.scatter_add_(1, winner.unsqueeze(1), contribution.unsqueeze(1))
        return grad_z, grad_weights, None


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
    if not (torch.is_grad_enabled() and (logits.requires_grad or weights.requires_grad)):  # encoding: no winners
        if logits.device.type != "cpu":
            return fused_best_candidates(logits, weights, real)
        return best_candidates(logits.float(), weights, real, winners=False)[1]
    return _WeightedSoftmaxMax.apply(logits.float(), weights, real)


def fused_best_candidates(logits: torch.Tensor, weights: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """The (B, V) max candidates of :func:`best_candidates` in three passes over each chunk of rows, for encoding.

    torch's fused softmax (float32 from the logits' dtype, no float32 copy of them), then w_i·p_iv plus the padding's
    −inf in one ``addcmul`` written over the probabilities, then the max: a GPU reads and writes (B, L, V) three times
    instead of eight. Its probabilities are exp(z − max) / Σ exp(z − max) where :func:`best_candidates` takes
    exp(z − logsumexp(z)): the same to float32 rounding, not the same bits, so the CPU (whose figures the registry
    holds) keeps :func:`best_candidates`.
    """
    padding = padding_bias(real, torch.float32)
    step = rows_per_chunk(logits, element_size=4)  # a chunk's float32 probabilities
    bests = []
    for start in range(0, max(len(logits), 1), step):
        rows = slice(start, start + step)
        p = torch.softmax(logits[rows], dim=-1, dtype=torch.float32)
        bests.append(torch.addcmul(padding[rows], p, weights[rows].unsqueeze(-1), out=p).amax(dim=1))
    return bests[0] if len(bests) == 1 else torch.cat(bests)


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
    if len(bests) == 1:  # no copy by a cat of one
        return probabilities, bests[0], winner_parts[0] if winners else None
    return probabilities, torch.cat(bests), torch.cat(winner_parts) if winners else None


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
