"""Length-sorted batched encoding of many texts into row-aligned float32 tensors, with batches prepared ahead.

Every encoding loop (corpus shards, query sets) takes its batches from :func:`prepared_batches`: a DataLoader over
the length-sorted batches whose items are what the encoder reads, cached tokens gathered from their token cache or
texts with their tokens (:class:`~retrieval_zoo.encoding.tokens.TokenizedBatch`). In a process that uses CUDA, batches
that need preparing (texts to tokenize) are made by forked workers in page-locked memory while the device encodes the
batch before. Cached tokens are gathered in the process, also where several encoders each read theirs: a gather takes a
fraction of a millisecond, and the device, which is never waited on between batches, still has the batch before
queued, whereas forking the workers of a CUDA process costs tens of milliseconds a call. On CPUs every batch is
prepared in the process, where workers would take cores from the encoder (as training's ``data.num_workers: auto``
decides).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from retrieval_zoo.encoding.precision import encoding
from retrieval_zoo.encoding.tokens import CachedTexts, Tokens
from retrieval_zoo.term_matrix import cat_rows, is_csr, take_rows, to_csr

Texts = list[str] | CachedTexts  # what the encoding helpers batch: texts, or ids whose tokens are cached
LengthsOf = Callable[[list[str]], list[int] | None]  # texts → their lengths in tokens, or None: go by characters
Prepare = Callable[[list[str]], list[str]]  # a batch of texts (or ids) → the same with its tokens (TokenizedBatch)
Item = list[str] | Tokens  # what an encoding function receives for one batch
PREP_WORKERS = 2  # DataLoader workers preparing batches beside an accelerator
# Unlisted encodings (dense term weights, CSFs by form) a group of batches may hold on the device before the host
# lists them: at SPLADE's 30,522 forms in float32, about 2,000 documents' term weights or 700 documents' CSFs.
HELD_BYTES = 256 * 2**20
T = TypeVar("T")


def by_characters(texts: list[str]) -> None:
    """No token lengths known (a :data:`LengthsOf`): the texts are ordered by their length in characters."""
    return None


@dataclass(frozen=True)
class QueryPrep:
    """How a retriever batches the query texts it is handed (a method's :meth:`query_prep`).

    Args:
        lengths: Texts → their lengths in tokens, which order the batches (None: by characters).
        prepare: A batch of texts → the same with the method's tokens for them, made ahead; None: the encoder
            tokenizes in the step.
        as_csr: The encoded parts given dense and mostly zero (SPLADE's and CSurF's term weights), which
            :func:`encode_payload` lists as CSR a group of batches at a time: a wait a group, not a batch.
    """

    lengths: LengthsOf = by_characters
    prepare: Prepare | None = None
    as_csr: frozenset[str] = frozenset()

    def encoded(
        self, encode: Callable[[Item], dict[str, torch.Tensor | None]], texts: list[str], batch_size: int, desc: str
    ) -> dict[str, torch.Tensor]:
        """:func:`encode_payload` of query ``texts`` as this preparation batches them, its ``as_csr`` parts listed."""
        return encode_payload(encode, texts, batch_size, desc, self.lengths(texts), self.prepare, as_csr=self.as_csr)


PLAIN_QUERIES = QueryPrep()


def take(texts: Texts, rows: list[int]) -> list[str] | Tokens:
    """The items at ``rows``: a list of texts, or the cached texts' padded tokens."""
    return texts.take(rows) if isinstance(texts, CachedTexts) else [texts[i] for i in rows]


def read(texts: Texts) -> list[str] | Tokens:
    """All of ``texts`` as an encoder reads them: the texts, or the cached texts' padded tokens."""
    return take(texts, list(range(len(texts))))


def text_lengths(texts: Texts) -> list[int]:
    """Each text's length: cached texts carry theirs in tokens; plain texts are measured in characters."""
    return texts.lengths if isinstance(texts, CachedTexts) else [len(t) for t in texts]


def length_sorted_batches(texts: Texts, batch_size: int, lengths: list[int] | None = None) -> list[list[int]]:
    """Indices of ``texts`` in batches of similar length (longest first), so padding is minimal.

    ``lengths`` gives the length of each item when the items are not the texts themselves (document ids); cached
    texts carry theirs in tokens; plain texts are measured in characters.
    """
    if lengths is None:
        lengths = text_lengths(texts)
    if len(lengths) != len(texts):
        raise ValueError(f"{len(lengths)} lengths for {len(texts)} items")
    order = sorted(range(len(texts)), key=lengths.__getitem__, reverse=True)
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def prep_workers() -> int:
    """Workers that prepare batches that need it ahead: :data:`PREP_WORKERS` in a process that uses CUDA, else none.

    They fork, so they share the memory-mapped token caches and nothing is pickled; without fork (macOS, Windows)
    batches are prepared in the process.
    """
    if not torch.cuda.is_initialized() or "fork" not in multiprocessing.get_all_start_methods():
        return 0
    return min(PREP_WORKERS, max(1, (os.cpu_count() or 1) - 1))


class _PreparedBatches(Dataset):
    """Batch number → what the encoder reads of that batch: its cached tokens, or its texts (prepared)."""

    def __init__(self, texts: Texts, batches: list[list[int]], prepare: Prepare | None) -> None:
        self.texts, self.batches, self.prepare = texts, batches, prepare

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, number: int) -> Item:
        items = take(self.texts, self.batches[number])
        return self.prepare(items) if self.prepare is not None and not isinstance(items, Tokens) else items


def _as_is(item: Item) -> Item:
    return item


def prepared_batches(
    texts: Texts,
    batch_size: int,
    lengths: list[int] | None = None,
    prepare: Prepare | None = None,
    desc: str = "encode",
    workers: int | None = None,
) -> Iterator[tuple[list[int], Item]]:
    """Each length-sorted batch's rows in ``texts`` and what the encoder reads of it, prepared ahead (module doc).

    Args:
        texts: Texts, or ids whose tokens are cached.
        batch_size: Items per batch.
        lengths: The items' lengths, when they are not the texts themselves (see :func:`length_sorted_batches`).
        prepare: Turns a batch of plain texts (or ids) into what the encoder reads (:class:`QueryPrep`).
        desc: Progress-bar label.
        workers: DataLoader workers; default :func:`prep_workers` where the batches need preparing (``prepare``
            given, the items not cached tokens), else none (module doc).
    """
    batches = length_sorted_batches(texts, batch_size, lengths)
    # A DataLoader draws its workers' base seed from its generator, the global one by default: encoding during
    # validation would then move training's random stream (dropout, shuffling) and the run's results.
    if workers is None:
        workers = 0 if prepare is None or isinstance(texts, CachedTexts) else prep_workers()
    loader = DataLoader(_PreparedBatches(texts, batches, prepare), batch_size=None, collate_fn=_as_is,
                        num_workers=workers, pin_memory=workers > 0 and torch.cuda.is_available(),
                        multiprocessing_context="fork" if workers else None,
                        generator=torch.Generator().manual_seed(0))  # fmt: skip
    progress = tqdm(loader, desc=desc, unit="batch", leave=False, mininterval=5)
    yield from zip(batches, progress, strict=True)


def encode_all(
    encode: Callable[[list[str]], torch.Tensor],
    texts: list[str],
    batch_size: int,
    desc: str = "encode",
    lengths: list[int] | None = None,
    prepare: Prepare | None = None,
) -> np.ndarray:
    """Encode ``texts`` in length-sorted batches (by ``lengths`` when given) and return float32 vectors in order."""
    if not texts:
        raise ValueError("nothing to encode")
    encode_vectors = lambda batch: {"vectors": encode(batch)}  # noqa: E731
    return encode_payload(encode_vectors, texts, batch_size, desc, lengths, prepare)["vectors"].numpy()


@torch.inference_mode()
def encode_payload(
    encode: Callable[[Item], dict[str, torch.Tensor | None]],
    texts: Texts,
    batch_size: int,
    desc: str,
    lengths: list[int] | None = None,
    prepare: Prepare | None = None,
    workers: int | None = None,
    as_csr: frozenset[str] = frozenset(),
) -> dict[str, torch.Tensor]:
    """Named row-aligned float32 tensors of ``texts``, encoded in length-sorted batches, in the input order.

    ``encode`` maps a batch of texts (or, for cached texts, their tokens; with ``prepare``, what it makes of the
    texts) to named (n, ...) tensors; a name whose value is None is left out. When the items are ids, ``lengths``
    gives the length of the text each stands for, so batches still group similar lengths. A value given as a sparse
    CSR matrix (term weights, :mod:`retrieval_zoo.term_matrix`) stays one: its batches are stacked, then put in order.
    The dense values of the names in ``as_csr`` (mostly zero term weights) are made CSR on the encoder's device a
    group of batches at a time (:func:`held_groups`). ``workers`` as in :func:`prepared_batches` (0 where
    ``prepare`` only gathers cached tokens).
    """
    # Each batch's values stay on the encoder's device until the end: one copy to the host, not a wait per batch.
    pieces: dict[str, list[tuple[list[int], torch.Tensor]]] = {}

    def encoded() -> Iterator[tuple[list[int], dict[str, torch.Tensor]]]:
        for batch, items in prepared_batches(texts, batch_size, lengths, prepare, desc, workers):
            with encoding():
                values = encode(items)
            yield batch, {name: v if name in as_csr else v.float() for name, v in values.items() if v is not None}

    unlisted = lambda values: sum(held_bytes(v) for name, v in values.items() if name in as_csr)  # noqa: E731
    for group in held_groups(encoded(), unlisted):
        for name in dict.fromkeys(name for _, values in group for name in values):
            parts = [(batch, values[name]) for batch, values in group if name in values]
            if name in as_csr and not is_csr(parts[0][1]):  # listed once for the group: the one wait for the device
                rows = [row for batch, _ in parts for row in batch]
                parts = [(rows, to_csr(torch.cat([value for _, value in parts]).float()).cpu())]
            pieces.setdefault(name, []).extend((batch, value.float()) for batch, value in parts)
    out: dict[str, torch.Tensor] = {}
    for name, parts in pieces.items():  # stacked in batch order; output row i is stacked row position[i]
        position = torch.empty(len(texts), dtype=torch.long)
        position[torch.tensor([row for batch, _ in parts for row in batch])] = torch.arange(len(texts))
        if is_csr(parts[0][1]):
            out[name] = take_rows(cat_rows([matrix for _, matrix in parts]).cpu(), position)
        else:  # put in order where the rows are (a device gather), then one copy: no host pass over (n, |V|) rows
            stacked = torch.cat([value for _, value in parts])
            out[name] = to_host(stacked[position.to(stacked.device)])
    return out


def held_bytes(value: torch.Tensor) -> int:
    """The bytes a dense ``value`` holds (a CSR one: nothing, it is listed already)."""
    return 0 if is_csr(value) else value.numel() * value.element_size()


def held_groups(pieces: Iterable[tuple[list[int], T]], size: Callable[[T], int],
                budget: int | None = None) -> Iterator[list[tuple[list[int], T]]]:  # fmt: skip
    """Consecutive encoded batches ``(rows, piece)`` grouped until their pieces hold ``budget`` bytes (``size``).

    What a batch gives in a size only its data fixes (the non-zero entries of term weights, a bag of CSFs) is read
    back by the host, which waits for the device to finish everything queued before. Grouped, the host waits once a
    group instead of once a batch, while the device encodes the group's batches back to back; ``budget`` bounds the
    memory the group's unlisted pieces hold on the device (default :data:`HELD_BYTES`).
    """
    budget = HELD_BYTES if budget is None else budget
    group: list[tuple[list[int], T]] = []
    held = 0
    for rows, piece in pieces:
        group.append((rows, piece))
        held += size(piece)
        if held >= budget:
            yield group
            group, held = [], 0
    if group:
        yield group


def to_host(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` in host memory: from a GPU into page-locked memory, which a copy fills at the bus's rate.

    A copy into pageable memory goes through the driver's small staging buffer: (1024, |V|) float32 term weights took
    95 ms that way on an H200, most of a DeLADE+[CLS] shard's encoding. Freed page-locked blocks return to torch's
    host cache, so the next shard's copy reuses them.
    """
    if tensor.device.type != "cuda":
        return tensor.cpu()
    host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
    return host.copy_(tensor)
