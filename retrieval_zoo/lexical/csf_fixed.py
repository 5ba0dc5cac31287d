"""CSurF's score (csurf.md §3.3) over every surface form at once: a training step that never waits on the device.

:func:`~retrieval_zoo.lexical.csf_bags.max_sum_scores` scores only the pairs of CSFs that share a form: the least
work, but how many there are depends on the data, and on a GPU the host stops to read that number back (and the
bags' ``nonzero``). Here the CSFs stay in the encoder's shapes (:class:`~retrieval_zoo.lexical.csf_texts.TextCsfs`)
and every possible pair is scored, a missing CSF weighing 0. A query CSF and a document CSF of one form are one of
four kinds (E: the expansion CSF of a form; O: the original CSF of a position):

- E×E, every form t: w^q_t·w^d_t·f(v^q_{s^q_t}, v^d_{s^d_t}), in the cell of query token s^q_t;
- E×O, every document position j: w^q_{x_j}·E_j[x_j]·f(v^q_{s^q_{x_j}}, v^d_j), in the cell of s^q_{x_j};
- O×E, every query position i: E_i[x_i]·w^d_{x_i}·f(v^q_i, v^d_{s^d_{x_i}}), in the cell of i;
- O×O, every pair of positions with x_i = x_j: E_i[x_i]·E_j[x_j]·f(v^q_i, v^d_j), in the cell of i.

Each (query token, document) cell keeps its largest value and the cells are summed over query tokens (§3.3). Every
value is ≥ 0 (weights are log(1 + ReLU(·)), vectors ReLU(·), so f ≥ 0) and a cell starts at 0 (an unmatched token
adds 0), so a pair with a missing CSF, valued 0, changes no maximum: these are the scores of ``max_sum_scores`` to
float32 rounding (dot products summed in another order). E×E takes B·N·|V| values, so documents go in blocks of at
most :data:`FIXED_CELLS` of them, each recomputed in the backward pass when there are several.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from retrieval_zoo.compiling import compile_once
from retrieval_zoo.lexical.csf_texts import TextCsfs
from retrieval_zoo.rows import take_rows

FIXED_CELLS = 1 << 26  # E×E values of one block of documents: 256 MB in float32
ONE_HOT_VALUES = 1 << 26  # entries of the sources' one-hot matrix made at a time: 128 MB in bf16


def fixed_max_sum_scores(
    query: TextCsfs, docs: TextCsfs, cells: int = FIXED_CELLS, compiled: bool = False
) -> torch.Tensor:
    """Score(q, d) of §3.3 for every query and document, every size fixed by the inputs' shapes.

    Args:
        query: B queries' CSFs.
        docs: N documents' CSFs, from the same model (the same kinds of CSF kept).
        cells: The most E×E values (queries × documents × |V|) a block of documents takes.
        compiled: Score each block through ``torch.compile``, one graph forward and one backward (every size
            follows from the shapes): fewer, fused kernels, the same values to float32 rounding.

    Returns:
        (B, N) scores.
    """
    block_scores = compile_once(_block_scores, fullgraph=True) if compiled else _block_scores
    batch, vocab = query.expansion.shape
    block, count = max(1, cells // (batch * vocab)), len(docs.ids)
    if block >= count:
        return block_scores(query, docs)
    parts = []
    for start in range(0, count, block):
        part = docs.texts(slice(start, start + block))
        if torch.is_grad_enabled():  # recomputed in the backward pass: one block's values held at a time
            parts.append(checkpoint(block_scores, query, part, use_reentrant=False))
        else:
            parts.append(block_scores(query, part))
    return torch.cat(parts, dim=1)


def _block_scores(query: TextCsfs, docs: TextCsfs) -> torch.Tensor:
    """(B, n) scores of the queries against one block of documents (module docstring: the four kinds of pair)."""
    (batch, query_length), (count, doc_length) = query.ids.shape, docs.ids.shape
    similar = None  # (B, Lq, n, Ld) f(v_i, v_j) of every query and document position
    if query.vectors is not None and docs.vectors is not None:
        similar = torch.einsum("bik,njk->binj", query.vectors, docs.vectors.to(query.vectors.dtype))
    cells = query.expansion.new_zeros(batch, query_length, count)  # (B, Lq, n): a token with no match adds 0
    if query.kept != "original":  # E×E: (B, |V|, n), scattered to each form's query source
        value = query.expansion.unsqueeze(2) * docs.expansion.T.unsqueeze(0)
        if similar is not None:
            grounded = torch.bmm(_grounded(query), _grounded(docs).transpose(1, 2))  # (|V|, B, n)
            value = value * _ContiguousGradient.apply(grounded).permute(1, 0, 2)
        index = query.sources.unsqueeze(2).expand(-1, -1, count)
        cells = cells.scatter_reduce(1, index, value.to(cells.dtype), "amax", include_self=True)
    if query.kept == "both":
        # E×O: (B, n, Ld), each document position's form looked up among the query's expansion CSFs
        forms = docs.ids.flatten()
        source = query.sources[:, forms].view(batch, count, doc_length)
        value = take_rows(query.expansion.T, forms).T.reshape(batch, count, doc_length) * docs.own
        if similar is not None:
            value = value * similar.gather(1, source.unsqueeze(1)).squeeze(1)
        value = value.transpose(1, 2).to(cells.dtype)
        cells = cells.scatter_reduce(1, source.transpose(1, 2), value, "amax", include_self=True)
        # O×E: (B, Lq, n), each query position's form looked up among the documents' expansion CSFs
        forms = query.ids.flatten()
        source = docs.sources.T[forms].view(batch, query_length, count)
        value = query.own.unsqueeze(2) * take_rows(docs.expansion.T, forms).view(batch, query_length, count)
        if similar is not None:
            value = value * similar.gather(3, source.unsqueeze(3)).squeeze(3)
        cells = torch.maximum(cells, value.to(cells.dtype))
    if query.kept != "expansion":  # O×O: (B, Lq, n, Ld), positions of the same token
        value = query.own[:, :, None, None] * docs.own[None, None]
        value = value if similar is None else value * similar
        same = query.ids[:, :, None, None] == docs.ids[None, None]
        cells = torch.maximum(cells, torch.where(same, value, 0.0).amax(3).to(cells.dtype))
    return cells.sum(1)


class _ContiguousGradient(torch.autograd.Function):
    """The identity, handing its gradient on contiguous.

    The grounding product's gradient comes back through the permute and the cell maxima with no unit stride in its
    (B, n) matrices; a CPU's ``bmm`` backward then multiplies the |V| matrices one at a time, where one copy lets it
    take the batched GEMM (4 queries × (1 + 1) documents on the tiny backbone, 2 cores: a 480 ms step, 190 ms with the
    copy). A GPU's ``bmm`` copies it anyway.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
        return grad.contiguous()


def _grounded(texts: TextCsfs) -> torch.Tensor:
    """(|V|, T, dv): each form's source vector v_{s_t} in each text (read where w_t > 0)."""
    assert texts.vectors is not None
    if grounds_by_product(texts.vectors):
        return source_rows(texts.vectors, texts.sources).transpose(0, 1)
    return gathered_source_rows(texts.vectors, texts.sources)


def gathered_source_rows(vectors: torch.Tensor, sources: torch.Tensor) -> torch.Tensor:
    """(T, L, dv) vectors and (T, |V|) source positions → (|V|, T, dv) ``vectors[t, sources[t, v]]``, gathered."""
    count, length = sources.shape[0], vectors.shape[1]
    rows = torch.arange(count, device=sources.device).unsqueeze(1) * length + sources
    return take_rows(vectors.flatten(0, 1), rows.T.flatten()).view(sources.shape[1], count, -1)


def grounds_by_product(vectors: torch.Tensor) -> bool:
    """Whether :func:`source_rows` grounds the forms (off a CPU) rather than a gather of rows (on a CPU).

    On a GPU the gather's backward sends |V|·T row gradients through torch's deterministic scatter, which sorts them:
    about 13 ms of a CSurF step on an H200 (bf16, bert-base size, profiled at 9698fef). A CPU gathers and scatters
    rows at memory speed, where the product would multiply a (T, |V|, L) matrix.
    """
    return vectors.device.type != "cpu"


def source_rows(vectors: torch.Tensor, sources: torch.Tensor, values: int = ONE_HOT_VALUES) -> torch.Tensor:
    """(T, L, dv) vectors and (T, |V|) source positions → (T, |V|, dv) ``vectors[t, sources[t, v]]``, as a product.

    The one-hot matrix of the sources times the vectors: each row is one vector times 1, exactly. The backward is the
    transposed product, deterministic (each position's gradient summed in the product's order). The one-hot matrix is
    built for at most ``values`` entries at a time, in the backward pass again, and never kept.
    """
    return _SourceRows.apply(vectors, sources, values)


class _SourceRows(torch.autograd.Function):
    """:func:`source_rows`, its one-hot matrices made a chunk of texts at a time and made again for the backward."""

    @staticmethod
    def forward(ctx, vectors: torch.Tensor, sources: torch.Tensor, values: int) -> torch.Tensor:  # noqa: ANN001
        ctx.save_for_backward(sources)
        ctx.length, ctx.values = vectors.shape[1], values
        return torch.cat([torch.bmm(hot, vectors[rows]) for rows, hot in _one_hot(sources, ctx.length, vectors.dtype,
                                                                                     values)])  # fmt: skip

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:  # noqa: ANN001
        (sources,) = ctx.saved_tensors
        parts = _one_hot(sources, ctx.length, grad.dtype, ctx.values)
        return torch.cat([torch.bmm(hot.transpose(1, 2), grad[rows]) for rows, hot in parts]), None, None


def _one_hot(sources: torch.Tensor, length: int, dtype: torch.dtype, values: int):  # noqa: ANN202
    """(rows of texts, their (t, |V|, L) one-hot matrix of the sources), a chunk of at most ``values`` entries."""
    step = max(1, values // max(1, sources.shape[1] * length))
    for start in range(0, len(sources), step):
        rows = slice(start, start + step)
        hot = torch.zeros(*sources[rows].shape, length, dtype=dtype, device=sources.device)
        yield rows, hot.scatter_(2, sources[rows].unsqueeze(2), 1)
