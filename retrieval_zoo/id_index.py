"""Ids ↔ row numbers without a dict: a sorted numpy array of the ids and a binary search.

A corpus's 8.8M document ids as a ``dict`` cost about a gigabyte of Python objects in every process that holds one
(and in each forked DataLoader worker, whose reference counts touch the pages). As arrays they are the ids' bytes
(28 bytes an MS MARCO id) and two int64 columns; a lookup is a vectorised ``searchsorted``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from functools import cached_property
from typing import overload

import numpy as np

DIGEST_CHUNK = 1 << 20  # ids made Python strings at a time (iteration, IdIndex.joined_digest)


def joined_sha256(ids: Sequence[str] | IdIndex) -> str:
    """SHA-256 (hex) of ``ids`` joined by line feeds, computed :data:`DIGEST_CHUNK` ids at a time."""
    digest = hashlib.sha256()
    for start in range(0, len(ids), DIGEST_CHUNK):
        chunk = "\n".join(ids[start : start + DIGEST_CHUNK])
        digest.update((("\n" if start else "") + chunk).encode())
    return digest.hexdigest()


def find_sorted(values: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each of ``wanted`` stands in the sorted array ``values``: (n,) positions and (n,) whether it is there.

    A position is only meaningful where the value is found (it is clipped into the array otherwise).
    """
    if not len(values):
        return np.zeros(len(wanted), dtype=np.int64), np.zeros(len(wanted), dtype=bool)
    at = np.minimum(np.searchsorted(values, wanted), len(values) - 1)
    return at, values[at] == wanted


class IdIndex:
    """Ids ↔ their rows (positions), as numpy arrays: a dict of 8.8M MS MARCO ids is a gigabyte of Python objects.

    Args:
        ids: Every id, in row order (a corpus's document ids in corpus order); duplicates are not allowed.
    """

    def __init__(self, ids: Iterable[str]) -> None:
        self.ids = ids if isinstance(ids, np.ndarray) and ids.dtype.kind == "U" else np.asarray(list(ids), dtype=str)
        self.order = np.argsort(self.ids, kind="stable")
        self.sorted = self.ids[self.order]

    @classmethod
    def presorted(cls, ids: np.ndarray, order: np.ndarray, in_order: np.ndarray) -> IdIndex:
        """The index of (N,) unicode ``ids`` whose stable ``order`` and ``ids[order]`` were stored (a corpus store)."""
        index = cls.__new__(cls)
        index.ids, index.order, index.sorted = ids, order, in_order
        return index

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, row: int) -> str: ...

    @overload
    def __getitem__(self, rows: slice) -> list[str]: ...

    def __getitem__(self, row: int | slice) -> str | list[str]:
        """The id of row ``row`` (a Python string), or the ids of a slice of rows: a sequence of its ids."""
        return self.ids[row].tolist() if isinstance(row, slice) else str(self.ids[row])

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self.ids), DIGEST_CHUNK):
            yield from self.ids[start : start + DIGEST_CHUNK].tolist()

    @cached_property
    def digest(self) -> str:
        """A hash of the ids in row order: keys every cached artifact that stores rows."""
        return hashlib.sha256(self.ids.tobytes()).hexdigest()[:16]

    def joined_digest(self) -> str:
        """:func:`joined_sha256` of the ids in row order."""
        return joined_sha256(self)

    @cached_property
    def id_rank(self) -> np.ndarray:
        """(N,) each row's position in id order: trec_eval's tie-break, as integers."""
        rank = np.empty(len(self.ids), dtype=np.int64)
        rank[self.order] = np.arange(len(self.ids))
        return rank

    def rows(self, ids: Sequence[str]) -> np.ndarray:
        """(n,) int64 rows of these ids; −1 for an id that is not among them."""
        wanted = np.asarray(ids, dtype=str)
        if len(wanted) <= 64:
            return self._found_rows(wanted)
        # numpy's binary search starts each key where the last one ended when keys ascend: with the keys sorted
        # first, a run's document ids among a million took 0.54 µs a key instead of 0.82
        ascending = np.argsort(wanted)
        rows = np.empty(len(wanted), dtype=np.int64)
        rows[ascending] = self._found_rows(wanted[ascending])
        return rows

    def _found_rows(self, wanted: np.ndarray) -> np.ndarray:
        at, found = find_sorted(self.sorted, wanted)
        return np.where(found, self.order[at], -1) if len(self.order) else np.full(len(found), -1, dtype=np.int64)

    def known_rows(self, ids: Sequence[str], where: str) -> np.ndarray:
        """(n,) int64 rows of these ids, each of which must be known; ``where`` names the table in the KeyError."""
        rows = self.rows(ids)
        if (rows < 0).any():
            raise KeyError(f"{where}: no entry for {ids[int(np.argmax(rows < 0))]!r}")
        return rows

    def names(self, rows: np.ndarray | Sequence[int]) -> list[str]:
        """The ids of these rows, as Python strings."""
        return self.ids[np.asarray(rows, dtype=np.int64)].tolist()
