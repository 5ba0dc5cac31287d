"""SPLADE term vectors from a backbone with an MLM head (SPLADE v2, Formal et al., 2021; delade-dhr.md Eq. 20).

w_j = max_i log(1 + ReLU(logit_ij)) over the tokens i of a text, for every vocabulary id j.

:func:`splade_vectors` computes it the fast way, with three exact rewrites of the naive loop
(:func:`splade_vectors_naive`):

1. length-sorted batches (in :func:`retrieval_zoo.encoding.batching.encode_all`) to avoid padding;
2. max-pooling *before* the activation: log(1 + ReLU(·)) is monotonic non-decreasing, so
   max_i f(x_i) = f(max_i x_i), and the activation runs on (B, V) instead of (B, L, V);
3. the vocabulary projection in chunks (:func:`vocabulary_chunk`: a budget of products a chunk), each max-pooled at
   once, so memory stays O(B·L·chunk) instead of O(B·L·V).
   Padding is masked inside the GEMM (``baddbmm`` adds a 0/−inf row bias), and the projection bias is added after
   the max (max_i(z_ij + b_j) = max_i z_ij + b_j), so no (B, L, chunk) tensor is copied.

Without gradients and without a use for the winning positions (encoding SPLADE vectors) the max keeps no argmax:
a reduction that also tracks indices costs several times a plain one, and as much as the projection itself.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from transformers import PreTrainedModel

from retrieval_zoo.lexical.maxima import max_with_positions_
from retrieval_zoo.rows import add_rows, coalesced

MIN_CHUNK = 1024  # vocabulary ids projected at a time, at least
CPU_CHUNK_BYTES = 1 << 20  # the products a chunk may hold on a CPU: a core's L2 cache
DEVICE_CHUNK_BYTES = 1 << 29  # and on an accelerator


def vocabulary_chunk(x: torch.Tensor, vocab: int) -> int:
    """Vocabulary ids to project at a time for (B, L, H) inputs ``x`` over ``vocab`` ids.

    As many as keep a chunk's (B, L, chunk) products under :data:`CPU_CHUNK_BYTES` on a CPU and
    :data:`DEVICE_CHUNK_BYTES` elsewhere, at least :data:`MIN_CHUNK`. Each chunk costs the host a dozen small ops: 30
    chunks of 1,024 ids were half of CSurF's training step at 2 × (1 + 1) texts of 8 tokens on a CPU, and a third of
    the kernel launches of its corpus encoding on a GPU. Batches of training size on a CPU keep 1,024 ids a chunk.
    """
    budget = CPU_CHUNK_BYTES if x.device.type == "cpu" else DEVICE_CHUNK_BYTES
    per_id = max(1, x.shape[0] * x.shape[1] * torch.finfo(compute_dtype(x)).bits // 8)
    return min(vocab, max(MIN_CHUNK, budget // per_id))


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
    chunk: int | None = None,
    fixed_backward: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """max_i logit_iv over the pooled positions, its argmax, and the last hidden states, per vocabulary chunk.

    Args:
        model: A BERT-style masked LM.
        input_ids: (B, L) token ids.
        attention_mask: (B, L), 1 for real tokens.
        pool_mask: (B, L), 1 for the positions the max runs over; the attention mask when None.
        chunk: Vocabulary ids projected at a time; :func:`vocabulary_chunk`'s when None.
        fixed_backward: Backpropagate through every (text, id) pair, a product as large as the projection, instead
            of only the pairs whose gradient is non-zero, which a GPU's host must count (``nonzero``) first.

    Returns:
        (B, V) maxima (−inf where a text has no pooled position), (B, V) their positions, and the encoder's (B, L, H)
        last hidden states.
    """
    hidden = last_hidden_states(model, input_ids, attention_mask)
    pool_mask = attention_mask if pool_mask is None else pool_mask
    return *pooled_mlm_logits(model, hidden, pool_mask, chunk, fixed_backward), hidden


def pooled_mlm_logits(
    model: PreTrainedModel,
    hidden: torch.Tensor,
    pool_mask: torch.Tensor,
    chunk: int | None = None,
    fixed_backward: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, L, H) last hidden states → :func:`max_pooled_logits`' (B, V) maxima and positions, from the MLM head on."""
    _, transform, projection = mlm_head_parts(model)
    x = transform(hidden)
    chunk = vocabulary_chunk(x, projection.weight.shape[0]) if chunk is None else chunk
    sparse = tied_projection(model)  # taken on a CPU and without fixed_backward (_PooledProjection)
    maxima, argmax = _PooledProjection.apply(x, projection.weight, pool_mask, chunk, fixed_backward, sparse)
    return with_bias(maxima, projection), argmax


def tied_projection(model: PreTrainedModel) -> bool:
    """Whether the vocabulary projection is the input embeddings' table, whose dense gradient every backward has.

    Then the projection's own reads may give it a sparse gradient (:func:`retrieval_zoo.rows.sparse_row_sums`): summed
    with the embeddings' in the same backward it is dense again, with the same bits.
    """
    return model.get_output_embeddings().weight is model.get_input_embeddings().weight


def last_hidden_states(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, L, H) last hidden states of a BERT-style masked LM's encoder (no MLM head)."""
    encoder, _, _ = mlm_head_parts(model)
    return encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def head_inputs(
    model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.nn.Linear]:
    """(B, L, H) last hidden states, the (B, L, H) inputs of the vocabulary projection, and the projection."""
    _, transform, projection = mlm_head_parts(model)
    hidden = last_hidden_states(model, input_ids, attention_mask)
    return hidden, transform(hidden), projection


def with_bias(maxima: torch.Tensor, projection: torch.nn.Linear) -> torch.Tensor:
    """(B, V) pooled maxima of the projection without its bias, plus it: max_i(z_iv + b_v) = max_i z_iv + b_v."""
    return maxima if projection.bias is None else maxima + projection.bias


def padding_bias(pool_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, L, 1): 0 at pooled positions, −inf elsewhere, the row bias ``baddbmm`` adds inside the projection."""
    padding = torch.zeros(pool_mask.shape + (1,), dtype=dtype, device=pool_mask.device)
    return padding.masked_fill(pool_mask.unsqueeze(-1) == 0, float("-inf"))


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype a matrix product of ``x`` runs in: autocast's where it is on for x's device, else x's."""
    kind = x.device.type
    autocast = torch.amp.is_autocast_available(kind) and torch.is_autocast_enabled(kind)
    return torch.get_autocast_dtype(kind) if autocast else x.dtype


def chunk_of(weight: torch.Tensor, start: int, chunk: int, x: torch.Tensor) -> torch.Tensor:
    """(B, H, chunk): the (V, H) projection's rows ``start`` to ``start + chunk``, transposed, broadcast over x's B.

    In ``x``'s dtype, cast before broadcasting: autocast would cast the broadcast chunk whole, a (B, H, chunk) copy per
    chunk (most of CSurF's encoding time on a GPU), where casting the chunk first copies (H, chunk) once.
    """
    return weight[start : start + chunk].to(x.dtype).T.expand(x.shape[0], -1, -1)


def projected_chunks(
    x: torch.Tensor, weight: torch.Tensor, pool_mask: torch.Tensor, chunk: int
) -> Iterator[torch.Tensor]:
    """Each vocabulary chunk's (B, L, chunk) products ⟨x_i, W_v⟩, −inf at positions not pooled.

    (B, L, H) inputs, (V, H) weights and a (B, L) pool mask; computed in the dtype the product runs in.
    """
    x = x.to(compute_dtype(x))
    padding = padding_bias(pool_mask, x.dtype)
    for start in range(0, weight.shape[0], chunk):
        yield torch.baddbmm(padding, x, chunk_of(weight, start, chunk, x))


def pooled_maxima(x: torch.Tensor, weight: torch.Tensor, pool_mask: torch.Tensor, chunk: int) -> torch.Tensor:
    """(B, L, H) inputs, (V, H) weights, (B, L) pool mask → (B, V) max_i ⟨x_i, W_v⟩, no positions kept."""
    return joined([products.amax(dim=1) for products in projected_chunks(x, weight, pool_mask, chunk)])


def joined(parts: list[torch.Tensor]) -> torch.Tensor:
    """Per-chunk (B, chunk) tensors side by side; one chunk (a GPU's usual case) as it is, with no copy."""
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)


class _PooledProjection(torch.autograd.Function):
    """max_i ⟨x_i, W_v⟩ over pooled positions, per vocabulary chunk, with a backward through the maxima only.

    Only the winning position i*(v) of each id receives gradient: ∂/∂x_{i*(v)} += g_v·W_v and ∂/∂W_v += g_v·x_{i*(v)}.
    The backward visits only the ids whose incoming gradient is non-zero: after log(1 + ReLU(·)) those are the
    expanded terms, a few hundred per text, so it costs a sliver of the (B, L, |V|) projection that autograd would
    run backwards. With ``fixed_backward`` it runs that projection backwards, per chunk, the gradient placed at each
    id's winning position: more work, but sizes fixed by the shapes, where counting the non-zero ids stops a GPU's
    host. With ``sparse_weight`` (not with ``fixed_backward``; on a CPU) the weight's gradient is those ids' rows
    alone, a sparse tensor (:func:`~retrieval_zoo.rows.sparse_row_sums`), not a (|V|, H) one mostly of zeros.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, pool_mask: torch.Tensor, chunk: int,  # noqa: ANN001, ANN205
                fixed_backward: bool = False, sparse_weight: bool = False):  # fmt: skip
        maxima, positions = [], []
        for products in projected_chunks(x, weight, pool_mask, chunk):
            values, argmax = max_with_positions_(products, dim=1)
            maxima.append(values)
            positions.append(argmax)
        argmax = joined(positions)
        ctx.save_for_backward(x, weight, argmax)
        ctx.mark_non_differentiable(argmax)
        ctx.chunk, ctx.fixed_backward, ctx.compute_dtype = chunk, fixed_backward, compute_dtype(x)
        ctx.sparse_weight = sparse_weight and not fixed_backward and weight.device.type == "cpu"
        return joined(maxima), argmax

    @staticmethod
    def backward(ctx, grad: torch.Tensor, _: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None, None, None, None]:  # noqa: ANN001
        x, weight, argmax = ctx.saved_tensors
        # summed in float32 whatever autocast made of x and the maxima (bf16 on a CPU), then given their dtypes
        grad_x = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        if ctx.fixed_backward:
            grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
            _dense_backward(grad, argmax, x.to(ctx.compute_dtype), weight, grad_x, grad_weight, ctx.chunk)
            return grad_x.to(x.dtype), grad_weight.to(weight.dtype), None, None, None, None
        text, term = grad.nonzero(as_tuple=True)
        if ctx.sparse_weight:  # the ids' rows alone, each summed in the order add_rows would (sparse_row_sums)
            ids, row_of = torch.unique(term, return_inverse=True)
            weight_rows = torch.zeros(len(ids), weight.shape[1], dtype=torch.float32, device=weight.device)
        else:
            weight_rows, row_of = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device), term
        step = 1 << 18  # (text, id) pairs at a time: bounded memory however dense the incoming gradient
        for first in range(0, len(text), step):
            t, v = text[first : first + step], term[first : first + step]
            g, position = grad[t, v].unsqueeze(1).float(), argmax[t, v]
            add_rows(grad_x.view(-1, x.shape[-1]), t * x.shape[1] + position, g * weight[v].float())  # rows repeat
            add_rows(weight_rows, row_of[first : first + step], g * x[t, position].float())
        grad_weight = coalesced(ids, weight_rows, weight.shape) if ctx.sparse_weight else weight_rows
        return grad_x.to(x.dtype), grad_weight.to(weight.dtype), None, None, None, None


def _dense_backward(grad: torch.Tensor, argmax: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                    grad_x: torch.Tensor, grad_weight: torch.Tensor, chunk: int) -> None:  # fmt: skip
    """Add the pooled projection's gradients into ``grad_x`` (B, L, H) and ``grad_weight`` (V, H), a chunk at a time.

    (B, V) incoming gradient and winning positions: each chunk's gradient is placed at its positions, a (B, L, chunk)
    tensor, and multiplied back through the projection, every size fixed by the shapes. The products run in ``x``'s
    dtype, the forward's (bf16 under autocast, as autograd's backward of the forward's product would), summed into
    the float32 gradients.
    """
    for start in range(0, weight.shape[0], chunk):
        stop = min(start + chunk, weight.shape[0])
        placed = x.new_zeros(x.shape[0], x.shape[1], stop - start)
        placed.scatter_(1, argmax[:, start:stop].unsqueeze(1), grad[:, start:stop].unsqueeze(1).to(x.dtype))
        grad_x.add_(placed @ weight[start:stop].to(x.dtype))
        grad_weight[start:stop] = torch.einsum("blc,blh->ch", placed, x).float()


def splade_vectors(
    model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor, chunk: int | None = None
) -> torch.Tensor:
    """Same values as :func:`splade_vectors_naive`, max-pooled per vocabulary chunk before the activation.

    Args:
        model: A BERT-style masked LM.
        input_ids: (B, L) token ids.
        attention_mask: (B, L), 1 for real tokens.
        chunk: Vocabulary ids projected at a time; :func:`vocabulary_chunk`'s when None.

    Returns:
        (B, V) non-negative term weights.
    """
    if torch.is_grad_enabled() and any(p.requires_grad for p in model.parameters()):
        maxima = max_pooled_logits(model, input_ids, attention_mask, chunk=chunk)[0]
    else:  # encoding: no positions kept
        _, x, projection = head_inputs(model, input_ids, attention_mask)
        chunk = vocabulary_chunk(x, projection.weight.shape[0]) if chunk is None else chunk
        maxima = with_bias(pooled_maxima(x, projection.weight, attention_mask, chunk), projection)
    return torch.log1p(torch.relu(maxima))
