"""Bags of contextualized surface forms and their max-sum score (CSurF, csurf.md §3.2–3.3).

A CSF A = (t_A, s_A) pairs a surface form t_A (a vocabulary id) with a source token s_A of the text; it carries the
form's weight w_A and the source's semantic vector v_{s_A}. A text's bag C = O ∪ E holds its expansion CSFs
E = {(t, s_t) | w_t > 0}, w_t = max_i E_i[t] and s_t = argmax_i E_i[t] (the grounding), and its original CSFs
O = {(x_i, i) | E_i[x_i] > 0}, each token x_i under its own surface form with its self-projection weight.

The score (§3.3) is Σ_{q_i} max_{A ∈ C_i^q} max_{B ∈ C^d} I(t_A = t_B)·w_A·w_B·f(v_{s_A}, v_{s_B}), where C_i^q holds
the query CSFs whose source is q_i. :func:`max_sum_scores` computes it only over matching pairs: the document
CSFs are sorted by surface form (:class:`Postings`, contiguous inverted lists), each query CSF reads the run of its
own form, and the pair scores are max-reduced into (query token, document) cells, then summed over query tokens.
Training scores a batch through the same function over the batch's documents, and the inverted index
(:mod:`retrieval_zoo.index.csurf.csf_retriever`) over the corpus, so retrieval scores exactly as training does. On a
GPU, training scores the same pairs in shapes fixed by the batch (:mod:`retrieval_zoo.lexical.csf_fixed`), the same
scores to float32 rounding. The bags are listed from each text's CSFs by :mod:`retrieval_zoo.lexical.csf_texts`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal, TypeVar

import torch

from retrieval_zoo.compiling import compile_once
from retrieval_zoo.distributed import gather_rows, row_counts, world
from retrieval_zoo.rows import take_rows

Bags = Literal["both", "original", "expansion"]
Texts = TypeVar("Texts")  # a dataclass of row-aligned tensors: CsfBags, TextCsfs


def cat_fields(parts: list[Texts], **given: object) -> Texts:
    """One dataclass of ``parts``' type whose tensor fields are theirs concatenated in order (None stays None).

    ``given`` sets the fields that are not concatenated (a count, a setting, a field the caller joins itself).
    """
    values = {}
    for field in fields(parts[0]):  # type: ignore[arg-type]  # a dataclass instance
        if field.name not in given:
            joined = [getattr(part, field.name) for part in parts]
            values[field.name] = None if joined[0] is None else torch.cat(joined)
    return type(parts[0])(**values, **given)


@dataclass
class CsfBags:
    """The CSFs of T texts of at most L positions, one row per CSF (K rows).

    Attributes:
        text: (K,) the text each CSF belongs to.
        surface: (K,) its surface form t (vocabulary id).
        source: (K,) the position of its source token in the text.
        weight: (K,) its lexical form weight w > 0.
        vector: (K, dv) its source's semantic vector (unit length for cosine), or None when |v| = 0 (weights only).
        original: (K,) True for an original CSF (O), False for an expansion CSF (E).
        num_texts: T.
        length: L.
        tokens: (T,) the number of source tokens of each text (its length for an all-to-all match), when known.
    """

    text: torch.Tensor
    surface: torch.Tensor
    source: torch.Tensor
    weight: torch.Tensor
    vector: torch.Tensor | None
    original: torch.Tensor
    num_texts: int
    length: int
    tokens: torch.Tensor | None = None

    def select(self, rows: torch.Tensor) -> CsfBags:
        """The CSFs at ``rows`` (a boolean mask or indices), same texts."""
        per_text = ("num_texts", "length", "tokens")
        parts = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in per_text}
        parts = {name: None if value is None else value[rows] for name, value in parts.items()}
        return CsfBags(**parts, num_texts=self.num_texts, length=self.length, tokens=self.tokens)

    def counts(self) -> torch.Tensor:
        """(T,) |C| of each text."""
        return tally(self.text, self.num_texts)


def tally(ids: torch.Tensor, size: int) -> torch.Tensor:
    """(size,) int64 occurrences of each id in ``ids`` (all < ``size``).

    ``bincount`` without its host sync on CUDA, where ``bincount`` reads the largest id back to size its output.
    """
    ids = ids.long()
    return torch.zeros(size, dtype=torch.long, device=ids.device).index_add_(0, ids, torch.ones_like(ids))


def gather_bags(bags: CsfBags) -> tuple[CsfBags, int]:
    """Every rank's bags as one, texts renumbered in rank order, with gradients (in-batch negatives under DDP).

    Returns:
        The bags of all ranks' texts, and the index of this rank's first text among them.
    """
    if world()[1] == 1:
        return bags, 0
    texts, csfs = row_counts(bags.num_texts), row_counts(len(bags.weight))
    first = sum(texts[: world()[0]])
    names = ("surface", "source", "weight", "original")
    rows = {name: gather_rows(getattr(bags, name), csfs)[0] for name in names}  # one size exchange for all fields
    owner, _ = gather_rows(bags.text + first, csfs)
    vector = None if bags.vector is None else gather_rows(bags.vector, csfs)[0]
    tokens = None if bags.tokens is None else gather_rows(bags.tokens, texts)[0]
    length = max(row_counts(bags.length))
    return CsfBags(owner, **rows, vector=vector, num_texts=sum(texts), length=length, tokens=tokens), first


DENSE_CELLS = 1 << 24  # search gives every document of a shard a cell when (query tokens x documents) fit 64 MB
PAIR_CHUNK = 1 << 15  # CSF pairs scored at a time at search on a CPU: their (chunk, dv) gathers stay in cache
DEVICE_PAIR_CHUNK = 1 << 21  # on a GPU: 2M pairs' gathered vectors (0.5 GB at dv = 32) per block of launches


def dense_columns(query: CsfBags, postings: Postings) -> int | None:
    """The ``num_docs`` search passes to :func:`max_sum_scores`: every document of the lists when the cells fit.

    With (query tokens × documents) at most :data:`DENSE_CELLS`, every document gets a cell and no first pass over
    the pairs looks for the documents they reach (the same scores); a larger shard is compacted to those documents.
    """
    return postings.doc_end if query.num_texts * query.length * postings.doc_end <= DENSE_CELLS else None


def search_pair_chunk(device: torch.device) -> int:
    """CSF pairs scored at a time at search on ``device``.

    A CPU wants blocks that fit its cache; a GPU runs each block's dozen kernels in microseconds, so small blocks
    leave it waiting on their launches (the lists of 10,000 documents took 1,900 launches a batch of 8 queries).
    """
    return PAIR_CHUNK if device.type == "cpu" else DEVICE_PAIR_CHUNK


@dataclass
class Postings:
    """Document CSFs sorted by surface form: the inverted lists of §4, as contiguous arrays.

    The list of form t is rows ``ptr[t]:ptr[t + 1]`` of ``doc``, ``source``, ``weight`` and ``vector``; document
    ids lie in ``[0, doc_end)``. The source position is kept for inspection; the score does not read it.
    """

    ptr: torch.Tensor
    doc: torch.Tensor
    source: torch.Tensor
    weight: torch.Tensor
    vector: torch.Tensor | None
    doc_end: int

    @classmethod
    def build(cls, docs: CsfBags, vocab_size: int, doc_offset: int = 0) -> Postings:
        """Sort ``docs``' CSFs by (surface form, document); document ids are ``doc_offset`` + text index."""
        order = torch.argsort(docs.surface * docs.num_texts + docs.text, stable=True)
        counts = tally(docs.surface, vocab_size)
        ptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
        vector = None if docs.vector is None else docs.vector[order]
        doc = docs.text[order] + doc_offset
        return cls(ptr, doc, docs.source[order], docs.weight[order], vector, doc_offset + docs.num_texts)

    @property
    def nbytes(self) -> int:
        """Bytes of the lists: offsets, documents, positions, weights and vectors."""
        tensors = (self.ptr, self.doc, self.source, self.weight, self.vector)
        return sum(t.nbytes for t in tensors if t is not None)

    def list_lengths(self) -> torch.Tensor:
        """(V,) entries per surface form."""
        return self.ptr[1:] - self.ptr[:-1]

    def to(self, device: torch.device, vector_dtype: torch.dtype | None = None) -> Postings:
        """The same lists on ``device``, the vectors stored as ``vector_dtype`` when given (e.g. float16)."""
        vector = None if self.vector is None else self.vector.to(device, vector_dtype or self.vector.dtype)
        lists = (self.ptr, self.doc, self.source, self.weight)
        return Postings(*(t.to(device) for t in lists), vector, self.doc_end)


def max_sum_scores(
    query: CsfBags,
    postings: Postings,
    num_docs: int | None = None,
    pair_chunk: int | None = None,
    compiled: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Score(q, d) of §3.3 for every query against the documents its CSFs match.

    Args:
        query: B queries' CSFs.
        postings: The documents' inverted lists (vectors of any float type: each pair is scored in the query's).
        num_docs: Score every document ``0..num_docs − 1`` (training: the batch's documents; search: a shard's
            documents, when their cells fit); None scores only the documents some query CSF matches, found by a
            first pass over the pairs.
        pair_chunk: Score this many CSF pairs at a time (search, without gradients: the pairs' gathered vectors stay
            small, and a max is order-free, so the scores are those of one pass); None scores them all at once.
        compiled: With ``pair_chunk``, score each block's pairs with one kernel that torch.compile fuses (gathers,
            products and the dot product; it needs a C++ compiler on the CPU): the same scores to float32 rounding
            (a dot product summed in another order), not the very same bits.

    Returns:
        (B, U) scores, (U,) the document ids of the columns, and the number of CSF pairs scored.
    """
    start = postings.ptr[query.surface]
    count = postings.ptr[query.surface + 1] - start
    ends = count.cumsum(0)  # the pairs of query CSF A are ends[A] − count[A] .. ends[A] − 1
    total = int(ends[-1]) if len(ends) else 0
    if pair_chunk is not None and torch.is_grad_enabled():
        raise ValueError("pair_chunk scores in place: search under torch.inference_mode() or no_grad")
    if compiled and pair_chunk is None:
        raise ValueError("compiled scoring is for search: give pair_chunk")
    # training scores every pair in one block, whose bounds are known without reading ``ends`` back
    whole = [(0, len(ends), 0, total)] if total else []
    blocks = whole if pair_chunk is None else _csf_blocks(ends, pair_chunk)

    def pairs(first: int, stop: int, pair_first: int, pair_stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The query CSF A and posting B of pairs ``pair_first..pair_stop − 1`` (of query CSFs ``first..stop − 1``)."""
        counts = count[first:stop]
        pairs_in_block = pair_stop - pair_first  # repeat_interleave told its output's size reads nothing back
        pair_query = torch.repeat_interleave(torch.arange(first, stop, device=count.device), counts,
                                             output_size=pairs_in_block)  # fmt: skip
        offset = start[first:stop] - (ends[first:stop] - counts)  # B = offset of A + the pair's number
        pair_number = torch.arange(pair_first, pair_stop, device=count.device)
        return pair_query, torch.repeat_interleave(offset, counts, output_size=pairs_in_block) + pair_number

    if num_docs is None:  # the documents some pair reaches, in id order
        reached = torch.zeros(postings.doc_end, dtype=torch.bool, device=count.device)
        for block in blocks:
            reached[take_rows(postings.doc, pairs(*block)[1]).long()] = True
        columns = reached.nonzero().squeeze(1)
        column_of = torch.zeros(postings.doc_end, dtype=torch.long, device=count.device)
        column_of[columns] = torch.arange(len(columns), device=count.device)
    else:
        columns = column_of = torch.arange(num_docs, device=count.device)
    cells = query.weight.new_zeros(query.num_texts * query.length * len(columns))  # unmatched query tokens add 0
    query_token = query.text * query.length + query.source  # the query token q_i of each query CSF A
    for block in blocks:
        pair_query, pair_doc = pairs(*block)
        score = compile_once(pair_values, dynamic=True) if compiled else pair_values  # any number of pairs
        value = score(query.weight, postings.weight, query.vector, postings.vector, pair_query, pair_doc)
        column = take_rows(postings.doc, pair_doc).long()
        if num_docs is None:  # compacted to the documents reached
            column = take_rows(column_of, column)
        index = take_rows(query_token, pair_query) * len(columns) + column
        if pair_chunk is None:
            cells = cells.scatter_reduce(0, index, value, reduce="amax", include_self=True)
        else:
            cells.scatter_reduce_(0, index, value, reduce="amax", include_self=True)
    return cells.view(query.num_texts, query.length, len(columns)).sum(1), columns, total


def pair_values(
    query_weight: torch.Tensor,
    doc_weight: torch.Tensor,
    query_vector: torch.Tensor | None,
    doc_vector: torch.Tensor | None,
    pair_query: torch.Tensor,
    pair_doc: torch.Tensor,
) -> torch.Tensor:
    """w_A·w_B·f(v_A, v_B) of each CSF pair (§3.3), its rows gathered by :func:`take_rows` (a fixed-order backward).

    Args:
        query_weight: (Kq,) the query CSFs' weights.
        doc_weight: (Kd,) the postings' weights.
        query_vector: (Kq, dv) the query CSFs' vectors, or None (|v| = 0).
        doc_vector: (Kd, dv) the postings' vectors (any float type), or None.
        pair_query: (P,) the query CSF A of each pair.
        pair_doc: (P,) its posting B.

    Returns:
        (P,) the pairs' scores, in the query's float type.
    """
    value = take_rows(query_weight, pair_query) * take_rows(doc_weight, pair_doc)  # w_A·w_B
    if query_vector is None:
        return value
    doc_vectors = take_rows(doc_vector, pair_doc).to(query_vector.dtype)  # ·f(v_A, v_B): dot of (unit) vectors
    return value * (take_rows(query_vector, pair_query) * doc_vectors).sum(-1)


def _csf_blocks(ends: torch.Tensor, pairs: int) -> list[tuple[int, int, int, int]]:
    """Consecutive ranges of query CSFs with about ``pairs`` CSF pairs each (more for a CSF whose list is longer).

    Args:
        ends: (K,) the cumulative count of pairs up to and including each query CSF.
        pairs: The pairs a range should hold.

    Returns:
        (first CSF, CSF stop, first pair, pair stop) of each range.
    """
    ends_list = ends.tolist()
    if not ends_list or not ends_list[-1]:
        return []
    marks = torch.tensor(range(pairs, ends_list[-1], max(1, pairs)), dtype=ends.dtype, device=ends.device)
    bounds = sorted({0, *torch.searchsorted(ends, marks, right=True).tolist(), len(ends_list)})
    pair_bounds = [0, *(ends_list[b - 1] for b in bounds[1:])]
    return [(bounds[i], bounds[i + 1], pair_bounds[i], pair_bounds[i + 1]) for i in range(len(bounds) - 1)]
