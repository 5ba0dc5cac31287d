"""DLR (Eq. 4–8) and DHR (Eq. 14–16) vectors of texts and of a corpus shard's encoded vectors (delade-dhr.md §3.1–3.4).

Queries are encoded and densified a batch at a time on the encoder's device, and read back by the host a group of
batches at a time (one wait for the device a group); a shard's vectors, already on the host, are densified a batch
at a time. :mod:`retrieval_zoo.index.terms.dhr` searches them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import torch

from retrieval_zoo.encoding.batching import Item, Prepare, held_groups, prepared_batches, to_host
from retrieval_zoo.encoding.precision import encoding
from retrieval_zoo.index.shards import Payload
from retrieval_zoo.index.terms.dlr import Slicing, densified, densify, hybrid
from retrieval_zoo.term_matrix import row_range

PartEncoder = Callable[[Item], tuple[torch.Tensor, torch.Tensor | None]]


def densify_parts(
    lexical: torch.Tensor, cls: torch.Tensor | None, slicing: Slicing, lam: float
) -> tuple[np.ndarray, np.ndarray, int]:
    """DLR of (n, |V|) ``lexical`` vectors, dense or CSR (Eq. 4–8), or DHR with (n, c) ``cls`` (Eq. 14–16); and c."""
    values, indices = densify(lexical, slicing)
    if cls is None:
        return values, indices, 0
    return (*hybrid(values, indices, cls.float().cpu().numpy(), lam), cls.shape[1])


def represent_shard(
    payload: Payload, slicing: Slicing, lam: float, batch_size: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """(n, M [+ c]) float16 values and indices of a shard's ``lexical`` (and ``cls``) vectors, and c."""
    lexical, cls = payload["lexical"], payload.get("cls")
    parts = [densify_parts(row_range(lexical, i, i + batch_size), None if cls is None else cls[i : i + batch_size],
                           slicing, lam) for i in range(0, lexical.shape[0], batch_size)]  # fmt: skip
    values = np.concatenate([p[0] for p in parts]).astype(np.float16)
    return values, np.concatenate([p[1] for p in parts]), parts[0][2]


@torch.inference_mode()
def represent(
    encode: PartEncoder,
    items: list[str],
    slicing: Slicing,
    lam: float,
    batch_size: int,
    desc: str = "densify",
    lengths: list[int] | None = None,
    prepare: Prepare | None = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """DLR (or DHR, when ``encode`` returns a [CLS] part) of every text, in input order, densified batch by batch.

    Args:
        encode: texts → ((n, |V|) lexical vectors, (n, c) [CLS] vectors or None).
        items: The texts (queries).
        slicing: The DLR slicing.
        lam: λ of the [CLS] part (Eq. 14).
        batch_size: Items per forward pass.
        desc: Progress-bar label.
        lengths: The items' lengths in tokens, which order the batches (default: characters).
        prepare: Makes a batch of texts ready for ``encode`` ahead
            (:class:`~retrieval_zoo.encoding.batching.QueryPrep`).

    Returns:
        (n, M [+ c]) float16 values, (n, M [+ c]) indices, and the number of [CLS] dimensions c.
    """

    def densified_batches() -> Iterator[tuple[list[int], list[torch.Tensor]]]:
        for batch, texts in prepared_batches(items, batch_size, lengths, prepare, desc):
            with encoding():
                lexical, cls = encode(texts)
            yield batch, [*densified(lexical, slicing), *([] if cls is None else [cls.float()])]

    filled: list[np.ndarray] = []  # values, positions and the [CLS] part (if any), in item order
    size = lambda parts: sum(part.numel() * part.element_size() for part in parts)  # noqa: E731
    for group in held_groups(densified_batches(), size):  # held on the device, read back a group at a time
        rows = [row for batch, _ in group for row in batch]
        host = [to_host(torch.cat(part)).numpy() for part in zip(*(parts for _, parts in group), strict=True)]
        if not filled:
            filled = [np.empty((len(items), *part.shape[1:]), dtype=part.dtype) for part in host]
        for target, part in zip(filled, host, strict=True):
            target[rows] = part
    if not filled:
        raise ValueError("nothing to densify")
    values, positions = filled[0], filled[1].astype(slicing.index_dtype)
    if len(filled) == 2:
        return values, positions, 0
    cls_vectors = filled[2]
    return (*hybrid(values, positions, cls_vectors, lam), cls_vectors.shape[1])
