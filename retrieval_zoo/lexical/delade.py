"""DeLADE term vectors (delade-dhr.md §3.5, Eq. 23): SPLADE with softmax instead of log(1 + ReLU).

ds_BoW[v] = max_i w_i · softmax(logit_i)[v], over the text's real tokens i except [CLS], where logit_i are the MLM
logits of token i (Eq. 19) and w_i = h_i·W + b a linear term weight (no activation, as in the reference code).
The vectors are dense: every vocabulary id gets a weight, which densification (Eq. 4–8) then compresses.

:func:`delade_vectors` computes Eq. 23 without materialising the (B, L, V) softmax: for w_i > 0,
w_i·softmax(z_i)[v] = exp(z_iv + log w_i − logsumexp(z_i)), and exp is increasing, so the max over tokens moves
inside it. When no token of a text has w_i > 0 every value is ≤ 0 and the max is −exp(min_i(z_iv + log|w_i| − lse_i)).
:func:`delade_vectors_naive` is the literal formula; a test holds the two equal.
"""

from __future__ import annotations

import torch


def delade_vectors_naive(
    logits: torch.Tensor, hidden: torch.Tensor, attention_mask: torch.Tensor, term_weight: torch.nn.Module
) -> torch.Tensor:
    """Eq. 23 literally: (B, L, V) logits, (B, L, H) hidden states, (B, L) mask → (B, V); position 0 is [CLS]."""
    values = term_weight(hidden[:, 1:]) * torch.softmax(logits[:, 1:].float(), dim=-1)
    return values.masked_fill(attention_mask[:, 1:].unsqueeze(-1) == 0, float("-inf")).amax(dim=1)


def delade_vectors(
    logits: torch.Tensor, hidden: torch.Tensor, attention_mask: torch.Tensor, term_weight: torch.nn.Module
) -> torch.Tensor:
    """Eq. 23 for a batch, with one (B, L, V) temporary instead of the softmax's several.

    Args:
        logits: (B, L, V) MLM logits, position 0 being [CLS].
        hidden: (B, L, H) last hidden states.
        attention_mask: (B, L), 1 for real tokens.
        term_weight: H → 1 linear layer giving w_i.

    Returns:
        (B, V) lexical vectors.
    """
    z = logits[:, 1:].float()
    weights = term_weight(hidden[:, 1:]).squeeze(-1).float()  # (B, L − 1): w_i, [CLS] excluded
    log_normaliser = torch.logsumexp(z, dim=-1)  # (B, L − 1)
    real = attention_mask[:, 1:] != 0
    positive = real & (weights > 0)
    offset = torch.where(positive, torch.log(weights.clamp(min=1e-30)) - log_normaliser, float("-inf"))
    vectors = torch.exp((z + offset.unsqueeze(-1)).amax(dim=1))  # rows without a positive weight: exp(−inf) = 0
    no_positive = ~positive.any(dim=1)
    if no_positive.any():  # every w_i ≤ 0: the max is the value closest to 0
        rows = no_positive.nonzero().flatten()
        magnitude = torch.log(weights[rows].abs()) - log_normaliser[rows]  # log 0 = −inf: a zero weight gives 0
        magnitude = magnitude.masked_fill(~real[rows], float("inf"))
        vectors = vectors.index_put((rows,), -torch.exp((z[rows] + magnitude.unsqueeze(-1)).amin(dim=1)))
    return vectors
