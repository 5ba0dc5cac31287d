"""Per-query lists of corpus rows as CSR arrays: pools and positives (:class:`DocRows`), runs (:class:`RankedRows`).

Row ``i`` (a query) holds entries ``offsets[i]:offsets[i + 1]`` of flat int32 corpus rows, so 500k queries × 1,000
documents are 2 GB of integers, not half a billion Python strings. Whole-array passes go :func:`row_blocks` at a
time, each entry's query given by :func:`entry_rows`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

BLOCK_ENTRIES = 1 << 20  # entries a whole-array pass holds at a time


@dataclass
class DocRows:
    """Per query (a row), a list of corpus rows.

    Attributes:
        offsets: (Q + 1,) int64; row ``i``'s entries are ``offsets[i]:offsets[i + 1]``.
        docs: (n,) int32 corpus rows.
    """

    offsets: np.ndarray
    docs: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def row(self, i: int) -> np.ndarray:
        """Row ``i``'s corpus rows."""
        return self.docs[int(self.offsets[i]) : int(self.offsets[i + 1])]

    def counts(self) -> np.ndarray:
        """(Q,) the length of every row."""
        return np.diff(self.offsets)

    @classmethod
    def from_lists(cls, lists: Sequence[np.ndarray | Sequence[int]]) -> DocRows:
        """Rows from one list of corpus rows per query."""
        counts = [len(rows) for rows in lists]
        docs = np.concatenate([np.asarray(rows, dtype=np.int32) for rows in lists]) if lists else np.zeros(0)
        return cls(np.concatenate(([0], np.cumsum(counts, dtype=np.int64))), docs.astype(np.int32))


@dataclass
class RankedRows(DocRows):
    """Per query (a row), ranked documents (each row's in rank order) and their scores: a run.

    Attributes:
        scores: (n,) float32 the documents' scores.
    """

    scores: np.ndarray

    def row_scores(self, i: int) -> np.ndarray:
        """Row ``i``'s scores, beside :meth:`row`'s documents."""
        return self.scores[int(self.offsets[i]) : int(self.offsets[i + 1])]

    @classmethod
    def load(cls, folder: Path) -> RankedRows:
        """The ``offsets``, ``docs`` and ``scores`` arrays of ``folder``'s ``.npy`` files, memory-mapped."""
        return cls(*(np.load(folder / f"{name}.npy", mmap_mode="r") for name in ("offsets", "docs", "scores")))


def row_blocks(offsets: np.ndarray, entries: int = BLOCK_ENTRIES) -> Iterator[tuple[int, int]]:
    """(start, end) ranges of whole CSR rows of about ``entries`` entries (at least one row each), in order."""
    start, n_rows = 0, len(offsets) - 1
    while start < n_rows:
        end = int(np.searchsorted(offsets, offsets[start] + entries, side="right")) - 1
        end = min(max(end, start + 1), n_rows)
        yield start, end
        start = end


def entry_rows(offsets: np.ndarray, start: int = 0, end: int | None = None) -> np.ndarray:
    """(n,) int64: the row of each entry of rows ``start:end`` (all rows by default), in entry order."""
    end = len(offsets) - 1 if end is None else end
    return np.repeat(np.arange(start, end, dtype=np.int64), np.diff(offsets[start : end + 1]))
