"""Random projection of bag-of-words vectors (RoC §3.2, Eq. 3; Luan et al., 2021).

A fixed matrix A ∈ {−1/√k, +1/√k}^{k×|V|} with Rademacher entries maps a |V|-dimensional term vector to k
dimensions, and E[(A·q)·(A·d)] = q·d: inner products, hence BM25's ranking, are preserved in expectation, with an
error that shrinks as k grows. A is never materialised: the column of a term is derived from a keyed hash of the
term and the seed, so any vocabulary (Lucene's analysed terms, millions for MS MARCO) works, the same term always
gets the same column across processes and machines, and no gradient can reach it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from retrieval_zoo.lexical.sparse_rows import SparseBatch

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, elementwise on uint64 (a bijective mixer with good avalanche)."""
    with np.errstate(over="ignore"):
        x = (x + np.uint64(0x9E3779B97F4A7C15)) & _MASK64
        x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK64
        x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK64
        return x ^ (x >> np.uint64(31))


def _as_int64(value: int) -> int:
    """A uint64 constant as the int64 with the same bits."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 bit patterns (torch's ``>>`` is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _splitmix64_torch(x: torch.Tensor) -> torch.Tensor:
    """:func:`_splitmix64` on int64 tensors holding uint64 bits, on any device (multiplication wraps mod 2^64)."""
    x = x + _as_int64(0x9E3779B97F4A7C15)
    x = (x ^ _shift_right(x, 30)) * _as_int64(0xBF58476D1CE4E5B9)
    x = (x ^ _shift_right(x, 27)) * _as_int64(0x94D049BB133111EB)
    return x ^ _shift_right(x, 31)


class RademacherProjection:
    """The fixed projection A of Eq. 3, reproducible from ``seed``.

    Args:
        dim: k, the projected width (the paper: the encoder's width, 768).
        seed: Seed of the hash; the same (dim, seed) always gives the same A.
    """

    def __init__(self, dim: int, seed: int = 0) -> None:
        if dim < 1:
            raise ValueError(f"projection dim must be ≥ 1, not {dim}")
        self.dim, self.seed = dim, seed
        self._columns: dict[str, np.ndarray] = {}

    def _term_keys(self, terms: Sequence[str]) -> np.ndarray:
        key = self.seed.to_bytes(8, "little", signed=True)
        digests = [hashlib.blake2b(t.encode("utf-8"), digest_size=8, key=key).digest() for t in terms]
        return np.frombuffer(b"".join(digests), dtype="<u8").astype(np.uint64)

    def columns(self, terms: Sequence[str]) -> np.ndarray:
        """A's columns for ``terms``: (T, k) float32 of ±1/√k."""
        if not terms:
            return np.zeros((0, self.dim), dtype=np.float32)
        keys = self._term_keys(terms)
        mixed = _splitmix64(keys[:, None] ^ _splitmix64(np.arange(self.dim, dtype=np.uint64))[None, :])
        signs = np.where((mixed >> np.uint64(63)) == 1, 1.0, -1.0).astype(np.float32)
        return signs / np.float32(np.sqrt(self.dim))

    def term_keys(self, terms: Sequence[str]) -> np.ndarray:
        """Each term's key (its keyed hash, as int64 bits): what :meth:`project_keys` derives A's columns from."""
        return self._term_keys(terms).view(np.int64) if terms else np.zeros(0, dtype=np.int64)

    def columns_torch(self, keys: torch.Tensor) -> torch.Tensor:
        """A's columns for (T,) int64 term keys, on their device: (T, k) float32, equal to :meth:`columns`."""
        dims = _splitmix64_torch(torch.arange(self.dim, dtype=torch.int64, device=keys.device))
        mixed = _splitmix64_torch(keys[:, None] ^ dims[None, :])
        scale = torch.tensor(np.float32(np.sqrt(self.dim)), device=keys.device)
        return torch.where(mixed < 0, 1.0, -1.0) / scale  # the top bit set: +1, as :meth:`columns`

    def project_keys(self, bags: SparseBatch) -> torch.Tensor:
        """A·v for bags whose columns are term keys (:meth:`term_keys`), with tensor ops on their device: (n, k).

        Equal to :meth:`project` on the same bags in the same order: the same columns, products and sums.
        """
        basis = self.columns_torch(bags.columns)  # (nnz, k): a column per entry (unique keys would sync the host)
        out = torch.zeros(bags.count, self.dim, device=bags.weights.device)
        return out.index_add_(0, bags.rows, basis * bags.weights[:, None])

    def project(self, vectors: Sequence[Mapping[str, float]]) -> torch.Tensor:
        """A·v for each bag of words v (term → weight): (N,) → (N, k) float32."""
        vocabulary = sorted({t for v in vectors for t in v})
        if not vocabulary:
            return torch.zeros(len(vectors), self.dim)
        missing = [t for t in vocabulary if t not in self._columns]
        if len(self._columns) + len(missing) > 1_000_000:  # bound the memo on huge vocabularies
            self._columns.clear()
            missing = vocabulary
        if missing:
            self._columns.update(zip(missing, self.columns(missing), strict=True))
        basis = torch.from_numpy(np.stack([self._columns[t] for t in vocabulary]))  # (T, k)
        index = {t: i for i, t in enumerate(vocabulary)}
        rows = torch.tensor([i for i, v in enumerate(vectors) for _ in v])
        cols = torch.tensor([index[t] for v in vectors for t in v])
        values = torch.tensor([float(w) for v in vectors for w in v.values()], dtype=torch.float32)
        return torch.zeros(len(vectors), self.dim).index_add_(0, rows, basis[cols] * values[:, None])
