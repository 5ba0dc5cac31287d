"""DeLADE term vectors (delade-dhr.md §3.5, Eq. 23): SPLADE with softmax instead of log(1 + ReLU).

ds_BoW[v] = max_i w_i · softmax(logit_i)[v], over the text's real tokens i except [CLS], where logit_i are the MLM
logits of token i (Eq. 19) and w_i = h_i·W + b a linear term weight (no activation, as in the reference code).
The vectors are dense: every vocabulary id gets a weight, which densification (Eq. 4–8) then compresses.

:func:`delade_vectors` computes Eq. 23 with a hand-written backward, so autograd keeps none of the softmax's
(B, L, V) intermediates: the forward builds the candidates w_i·softmax(z_i)[v] in one tensor, reduces them by a max
over positions (no Python loop over tokens) and frees them; the backward recomputes the softmax from the saved
logits. Each pass allocates one (B, L, V) tensor and works in place on it: on a CPU, first touching a fresh
gigabyte costs more than the arithmetic. [CLS] is left out by the mask, not by slicing the logits, whose slice
would cost autograd another (B, L, V) gradient and copy. Without gradients (encoding) the max keeps no winners.
:func:`delade_vectors_naive` is the literal formula; a test holds the two equal.
"""

from __future__ import annotations

import torch

CPU_CHUNK_BYTES = 32 * 2**20


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
    S_i = Σ_{v: i*(v) = i} g_v·out_v. Each pass builds one (B, L, V) tensor besides its input (the forward's
    candidates, freed once reduced; the backward's gradient itself), with no loop over positions.
    """

    @staticmethod
    def forward(ctx, z: torch.Tensor, weights: torch.Tensor, real: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
        log_normaliser, best, winner = best_candidates(z, weights, real, winners=True)
        ctx.save_for_backward(z, weights, log_normaliser, winner, best)
        return best

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:  # noqa: ANN001
        z, weights, log_normaliser, winner, best = ctx.saved_tensors
        contribution = grad * best  # g_v·out_v, (B, V)
        per_position = torch.zeros_like(log_normaliser).scatter_add_(1, winner, contribution)  # S_i, (B, L)
        probabilities = torch.sub(z, log_normaliser.unsqueeze(-1)).exp_()  # (B, L, V), the one allocation
        winner_probability = probabilities.gather(1, winner.unsqueeze(1)).squeeze(1)  # p_{i* v}
        grad_weights = torch.zeros_like(weights).scatter_add_(1, winner, grad * winner_probability)
        grad_z = probabilities.mul_(-per_position.unsqueeze(-1))
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
    z = logits.float()
    if not (torch.is_grad_enabled() and (z.requires_grad or weights.requires_grad)):  # encoding: no winners kept
        return best_candidates(z, weights, real, winners=False)[1]
    return _WeightedSoftmaxMax.apply(z, weights, real)


def best_candidates(
    z: torch.Tensor, weights: torch.Tensor, real: torch.Tensor, winners: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The (B, L) log-normalisers, (B, V) max candidates and, with ``winners``, their (B, V) positions.

    Ties go to the first position, as a running max's would. Rows are processed in chunks on a CPU
    (:func:`rows_per_chunk`), all at once elsewhere; each row's figures are the same either way.
    """
    parts, step = [], rows_per_chunk(z)
    for start in range(0, max(len(z), 1), step):  # one (empty) chunk for an empty batch
        chunk = slice(start, start + step)
        log_normaliser = torch.logsumexp(z[chunk], dim=-1)
        candidates = weighted_probabilities(z[chunk], log_normaliser, weights[chunk], real[chunk])
        best, winner = candidates.max(dim=1) if winners else (candidates.amax(dim=1), None)
        parts.append((log_normaliser, best, winner))
    if len(parts) == 1:
        return parts[0]
    log_normalisers, bests, winner_parts = zip(*parts, strict=True)
    return torch.cat(log_normalisers), torch.cat(bests), torch.cat(winner_parts) if winners else None


def rows_per_chunk(z: torch.Tensor) -> int:
    """Rows of ``z`` (B, L, V) to reduce at a time: all of them, except on a CPU.

    On a CPU a chunk's temporaries stay under glibc's largest mmap threshold (32 MiB), so they reuse the heap's pages
    instead of faulting in fresh ones (a third of the time of a (64, 128, 30522) forward).
    """
    if z.device.type != "cpu" or len(z) == 0:
        return max(1, len(z))
    return max(1, CPU_CHUNK_BYTES // max(1, z[0].numel() * z.element_size()))


def weighted_probabilities(
    z: torch.Tensor, log_normaliser: torch.Tensor, weights: torch.Tensor, real: torch.Tensor
) -> torch.Tensor:
    """(B, L, V) candidates w_i·softmax(z_i)[v], −inf at positions that are not ``real``, in one allocation."""
    candidates = torch.sub(z, log_normaliser.unsqueeze(-1)).exp_().mul_(weights.unsqueeze(-1))
    return candidates.masked_fill_(~real.unsqueeze(-1), float("-inf"))
