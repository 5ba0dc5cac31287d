"""SPLADE term vectors from a backbone with an MLM head (SPLADE v2, Formal et al., 2021; delade-dhr.md Eq. 20).

w_j = max_i log(1 + ReLU(logit_ij)) over the tokens i of a text, for every vocabulary id j.

:func:`splade_vectors` computes it the fast way, with three exact rewrites of the naive loop
(:func:`splade_vectors_naive`):

1. length-sorted batches (in :func:`retrieval_zoo.methods.encoding.encode_all`) to avoid padding;
2. max-pooling *before* the activation: log(1 + ReLU(·)) is monotonic non-decreasing, so
   max_i f(x_i) = f(max_i x_i), and the activation runs on (B, V) instead of (B, L, V);
3. the vocabulary projection in chunks, each max-pooled at once, so memory stays O(B·L·chunk) instead of O(B·L·V).
   Padding is masked inside the GEMM (``baddbmm`` adds a 0/−inf row bias), and the projection bias is added after
   the max (max_i(z_ij + b_j) = max_i z_ij + b_j), so no (B, L, chunk) tensor is copied.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel


def mlm_head_parts(model: PreTrainedModel) -> tuple[torch.nn.Module, torch.nn.Module, torch.nn.Linear]:
    """(encoder, transform before the vocabulary projection, vocabulary projection) of a BERT-style MLM."""
    if not hasattr(model, "cls") or not hasattr(model.cls, "predictions"):
        raise TypeError(f"{type(model).__name__}: expected a BERT-style masked-LM head (model.cls.predictions)")
    return model.base_model, model.cls.predictions.transform, model.get_output_embeddings()


def splade_vectors_naive(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Reference: full (B, L, V) logits, activation on every token, then max over real tokens. → (B, V)."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    weights = torch.log1p(torch.relu(logits)) * attention_mask.unsqueeze(-1)
    return weights.max(dim=1).values


def max_pooled_logits(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    pool_mask: torch.Tensor | None = None,
    chunk: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """max_i logit_iv over the pooled positions, its argmax, and the last hidden states, per vocabulary chunk.

    Args:
        model: A BERT-style masked LM.
        input_ids: (B, L) token ids.
        attention_mask: (B, L), 1 for real tokens.
        pool_mask: (B, L), 1 for the positions the max runs over; the attention mask when None.
        chunk: Vocabulary ids projected at a time.

    Returns:
        (B, V) maxima (−inf where a text has no pooled position), (B, V) their positions, and the encoder's (B, L, H)
        last hidden states.
    """
    encoder, transform, projection = mlm_head_parts(model)
    hidden = encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    transformed = transform(hidden)
    pool_mask = attention_mask if pool_mask is None else pool_mask
    padding = torch.zeros(pool_mask.shape + (1,), dtype=hidden.dtype, device=hidden.device)
    padding = padding.masked_fill(pool_mask.unsqueeze(-1) == 0, float("-inf"))
    maxima, positions = [], []
    for start in range(0, projection.out_features, chunk):
        weight = projection.weight[start : start + chunk].T.expand(hidden.shape[0], -1, -1)
        values, argmax = torch.baddbmm(padding, transformed, weight).max(dim=1)
        if projection.bias is not None:
            values = values + projection.bias[start : start + chunk]
        maxima.append(values)
        positions.append(argmax)
    return torch.cat(maxima, dim=1), torch.cat(positions, dim=1), hidden


def splade_vectors(
    model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor, chunk: int = 1024
) -> torch.Tensor:
    """Same values as :func:`splade_vectors_naive`, max-pooled per vocabulary chunk before the activation.

    Args:
        model: A BERT-style masked LM.
        input_ids: (B, L) token ids.
        attention_mask: (B, L), 1 for real tokens.
        chunk: Vocabulary ids projected at a time.

    Returns:
        (B, V) non-negative term weights.
    """
    maxima, _, _ = max_pooled_logits(model, input_ids, attention_mask, chunk=chunk)
    return torch.log1p(torch.relu(maxima))
