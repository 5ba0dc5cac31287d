"""Bags of words as CSR arrays: built once from term → weight mappings, then gathered with tensor ops.

A corpus's (or a query set's) bags become three arrays: each row's offset, and per entry its column (a vocabulary
id, or a term's hash key) and weight, in the order of the bags' items. :meth:`SparseRows.gather` takes any rows as
flat (row, column, weight) tensors and :meth:`SparseRows.dense` as a matrix, with no Python loop over documents or
terms, so training batches and corpus encodings read them on the hot path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from retrieval_zoo.host_work import host_only
from retrieval_zoo.term_matrix import csr, offsets_of


@dataclass
class SparseBatch:
    """Some rows of a :class:`SparseRows`: entry ``i`` puts ``weights[i]`` at column ``columns[i]`` of row ``rows[i]``.

    Attributes:
        rows: (nnz,) the output row of each entry.
        columns: (nnz,) its column (a vocabulary id or a term's key).
        weights: (nnz,) its weight.
        count: The number of rows.
    """

    rows: torch.Tensor
    columns: torch.Tensor
    weights: torch.Tensor
    count: int


class SparseRows:
    """Bags of words as CSR rows (see the module docstring).

    Args:
        bags: (n,) term → weight.
        columns: term → its column; a term without one matches nothing and is not stored.
    """

    def __init__(self, bags: Sequence[Mapping[str, float]], columns: Mapping[str, int]) -> None:
        pairs = [[(columns[t], w) for t, w in bag.items() if t in columns] for bag in bags]
        self.offsets = torch.tensor([0] + [len(row) for row in pairs]).cumsum(0)  # (n + 1,)
        self.columns = torch.tensor([c for row in pairs for c, _ in row], dtype=torch.long)  # (nnz,)
        self.weights = torch.tensor([w for row in pairs for _, w in row], dtype=torch.float32)  # (nnz,)

    @classmethod
    def keyed(
        cls,
        ids: Sequence[str],
        bags_of: Callable[[list[str]], list[Mapping[str, float]]],
        term_keys: Callable[[list[str]], np.ndarray],
        chunk: int = 50_000,
    ) -> SparseRows:
        """The bags of ``ids`` under their terms' keys, built ``chunk`` ids at a time (no bag outlives its chunk).

        Args:
            ids: Row ``i`` is the bag of ``ids[i]``.
            bags_of: Some ids → their bags (term → weight).
            term_keys: Terms → int64 keys, term by term (a hash: a term's key does not depend on the others).
            chunk: Ids whose bags are held at a time.
        """
        key_of: dict[str, int] = {}
        offsets, columns, weights = [torch.zeros(1, dtype=torch.long)], [], []
        for start in range(0, len(ids), chunk):
            bags = bags_of(list(ids[start : start + chunk]))
            new = sorted({term for bag in bags for term in bag} - key_of.keys())
            key_of.update(zip(new, term_keys(new).tolist(), strict=True))
            part = cls(bags, key_of)
            offsets.append(part.offsets[1:] + offsets[-1][-1])
            columns.append(part.columns), weights.append(part.weights)
        rows = cls([], {})
        rows.offsets = torch.cat(offsets)
        rows.columns = torch.cat(columns) if columns else rows.columns
        rows.weights = torch.cat(weights) if weights else rows.weights
        return rows

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def gather(self, rows: torch.Tensor) -> SparseBatch:
        """The entries of ``rows`` (m,), renumbered 0..m − 1 in that order; each row's entries in their order."""
        with host_only("a gather of bags kept on the host"):  # made from Python bags, never moved to a device
            starts, counts = self.offsets[rows], self.offsets[rows + 1] - self.offsets[rows]
            owner = torch.arange(len(rows)).repeat_interleave(counts)
            first = torch.cumsum(counts, 0) - counts  # where each output row's entries begin
            total = int(counts.sum())
            entries = starts.repeat_interleave(counts) + torch.arange(total) - first.repeat_interleave(counts)
            return SparseBatch(owner, self.columns[entries], self.weights[entries], len(rows))

    def csr(self, rows: torch.Tensor, width: int) -> torch.Tensor:
        """(m,) row numbers → (m, width) sparse CSR matrix of those bags, columns ascending in each row.

        The columns being vocabulary ids, this is :meth:`dense` without the zeros (:mod:`retrieval_zoo.term_matrix`).
        """
        batch = self.gather(rows)
        order = torch.argsort(batch.rows * width + batch.columns)
        return csr(offsets_of(batch.rows, batch.count), batch.columns[order], batch.weights[order], width)

    def dense(self, rows: torch.Tensor, width: int) -> torch.Tensor:
        """(m,) row numbers → (m, width) float32 matrix of those bags (the columns being vocabulary ids)."""
        batch = self.gather(rows)
        matrix = torch.zeros(batch.count, width)
        matrix[batch.rows, batch.columns] = batch.weights
        return matrix
