"""Dense lexical and hybrid representations: DLR, DHR and the gated inner product (delade-dhr.md §3.1–3.2).

A |V|-dimensional lexical vector is cut into M slices of N entries (Eq. 4); each slice keeps only its largest value
and that value's position in the slice (Eq. 6–8). The pair (values, indices) is a DLR, and the inner product of two
lexical vectors is approximated by the gated inner product (GIP) of their DLRs: values multiply only where the
indices agree (Eq. 10–12). A DHR appends √λ·[CLS] to the values with an all-ones gate (Eq. 14–16).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

import numpy as np
import torch

from retrieval_zoo.bounds import require_choice
from retrieval_zoo.term_matrix import dense_rows, entry_rows, is_csr, parts

SlicingStrategy = Literal["contiguous", "stride", "random"]


@dataclass(frozen=True)
class Slicing:
    """Where each vocabulary id lands: slice m ∈ [0, M) and position n ∈ [0, N) (Eq. 4 and Table 6).

    The first ``discard`` ids are dropped (BERT's 570 are [PAD], [unused*] and the like; §4.2), and the remaining
    ``|V| − discard`` ids are padded up to M·N. With j = id − discard:
    - ``contiguous``: slice j // N, position j mod N (Eq. 4);
    - ``stride``: slice j mod M, position j // M (the paper's default; ids of one slice are M apart);
    - ``random``: a seeded permutation of j, then stride.

    Args:
        vocab_size: |V| of the lexical vectors.
        slices: M, the DLR's dimension (768, 256 or 128 in the paper).
        discard: Leading vocabulary ids that are dropped.
        strategy: One of :data:`SlicingStrategy`.
        seed: Seed of the ``random`` permutation.
    """

    vocab_size: int
    slices: int = 768
    discard: int = 570
    strategy: SlicingStrategy = "stride"
    seed: int = 0
    _permutation: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)
    _inverse: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        require_choice("slicing strategy", self.strategy, SlicingStrategy)
        if not 0 <= self.discard < self.vocab_size or self.slices < 1:
            raise ValueError(f"need 0 <= discard < vocab_size and slices >= 1: {self}")
        if self.strategy == "random":
            permutation = np.random.default_rng(self.seed).permutation(self.kept)
            inverse = np.full(self.slices * self.width, -1, dtype=np.int64)  # cell → j, −1 for padding cells
            inverse[permutation] = np.arange(self.kept)
            object.__setattr__(self, "_permutation", permutation)
            object.__setattr__(self, "_inverse", inverse)

    @property
    def kept(self) -> int:
        """|V| − discard, the ids that are sliced."""
        return self.vocab_size - self.discard

    @property
    def width(self) -> int:
        """N, the entries of one slice."""
        return math.ceil(self.kept / self.slices)

    @property
    def index_dtype(self) -> np.dtype:
        """uint8 when a slice has at most 256 entries (BERT's 29,952 ids in 768 slices: 39), else uint16."""
        if self.width > 65536:
            raise ValueError(f"{self.width} entries per slice do not fit uint16 indices; use more slices")
        return np.dtype(np.uint8 if self.width <= 256 else np.uint16)

    def slot(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(slice, position) of each vocabulary id (ids below ``discard`` are not allowed)."""
        j = np.asarray(ids, dtype=np.int64) - self.discard
        if (j < 0).any() or (j >= self.kept).any():
            raise ValueError(f"ids must lie in [{self.discard}, {self.vocab_size})")
        if self._permutation is not None:
            j = self._permutation[j]
        if self.strategy == "contiguous":
            return j // self.width, j % self.width
        return j % self.slices, j // self.slices

    def term_id(self, slices: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """The vocabulary id at (slice, position): the inverse of :meth:`slot` (−1 for padding entries)."""
        slices, positions = np.asarray(slices, dtype=np.int64), np.asarray(positions, dtype=np.int64)
        j = slices * self.width + positions if self.strategy == "contiguous" else positions * self.slices + slices
        if self._inverse is not None:
            j = self._inverse[j]
        return np.where((j >= 0) & (j < self.kept), j + self.discard, -1)

    @cached_property
    def order(self) -> torch.Tensor:
        """(M·N,) vocabulary id of each (slice, position) cell in row-major order; −1 for padding."""
        cells = np.arange(self.slices * self.width)
        return torch.from_numpy(self.term_id(cells // self.width, cells % self.width))

    @cached_property
    def cells(self) -> torch.Tensor:
        """(|V|,) the cell (slice · N + position) of each vocabulary id; −1 for the discarded ids."""
        order, cells = self.order, torch.full((self.vocab_size,), -1, dtype=torch.int64)
        real = order >= 0
        cells[order[real]] = torch.arange(len(order))[real]
        return cells

    @cached_property
    def first_open(self) -> torch.Tensor:
        """(M,) each slice's first position that holds a vocabulary id; −1 for a slice of padding alone."""
        real = self.order.view(self.slices, self.width) >= 0
        return torch.where(real.any(dim=1), real.int().argmax(dim=1), -1)


def densify(bow: torch.Tensor, slicing: Slicing) -> tuple[np.ndarray, np.ndarray]:
    """DLR of lexical vectors (Eq. 6–8): each slice's largest value (float16) and its position in the slice.

    A CSR matrix is densified from its entries alone, in time proportional to them (BM25's vocabulary grows with the
    corpus, so a pass over |V| per document would make the build quadratic); it gives the dense path's result:
    absent entries are zeros, and ties go to the first position, as ``max`` gives them.

    Args:
        bow: (B, |V|) lexical vectors, dense or CSR.
        slicing: The slicing map.

    Returns:
        (B, M) values as float16 and (B, M) positions as ``slicing.index_dtype``.
    """
    values, positions = densified(bow, slicing)
    return values.cpu().numpy(), positions.cpu().numpy().astype(slicing.index_dtype)


def densified(bow: torch.Tensor, slicing: Slicing) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`densify` on the vectors' device: (B, M) float16 values and (B, M) int64 positions."""
    if bow.shape[1] != slicing.vocab_size:
        raise ValueError(f"vectors have {bow.shape[1]} dimensions, the slicing expects {slicing.vocab_size}")
    if is_csr(bow) and not bool((bow.values() < 0).any()):
        best_values, best_positions = _densify_entries(bow, slicing)
    else:
        bow = dense_rows(bow)
        padded = torch.cat([bow.float(), torch.full((bow.shape[0], 1), -torch.inf, device=bow.device)], dim=1)
        cells = padded[:, slicing.order.to(bow.device)]  # index −1 picks the −inf column: padding never wins a slice
        best_values, best_positions = cells.view(bow.shape[0], slicing.slices, slicing.width).max(dim=2)
    return best_values.clamp(min=torch.finfo(torch.float16).min).to(torch.float16), best_positions


def _densify_entries(bow: torch.Tensor, slicing: Slicing) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, M) largest values and their first positions from a CSR matrix's non-negative entries (Eq. 6–8).

    The entries that take no part go to a spare slot past the last rather than being cut out by a mask, so every
    size is the entries' count, which the host knows: a GPU's host waits for none of them.
    """
    offsets, columns, weights = parts(bow)
    cells = slicing.cells.to(bow.device)[columns]
    keep = (weights > 0) & (cells >= 0)  # zeros tie with the absent entries; discarded ids are in no slice
    size = bow.shape[0] * slicing.slices
    slots = torch.where(keep, entry_rows(offsets, len(columns)) * slicing.slices + cells // slicing.width, size)
    weights = torch.where(keep, weights.float(), 0)
    best = weights.new_zeros(size + 1).scatter_reduce(0, slots, weights, "amax")
    won = keep & (weights == best[slots])
    first = torch.full((size + 1,), slicing.width, device=bow.device).scatter_reduce(
        0, torch.where(won, slots, size), torch.where(won, cells % slicing.width, slicing.width), "amin"
    )
    first_open = slicing.first_open.to(bow.device)
    first = first[:size].view(-1, slicing.slices)
    first = torch.where(first == slicing.width, first_open.clamp(min=0), first)  # no entry: first real position
    padding = torch.full((), -torch.inf, device=bow.device)  # a slice of padding cells alone, as the dense path
    return torch.where(first_open >= 0, best[:size].view(-1, slicing.slices), padding), first


def hybrid(values: np.ndarray, indices: np.ndarray, cls: np.ndarray, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """DHR (Eq. 15–16): values DLR ⊕ √λ·[CLS], indices DLR ⊕ 1 (the [CLS] part's gate is always open)."""
    cls_values = (math.sqrt(lam) * cls.astype(np.float32)).astype(np.float16)
    return (
        np.concatenate([values.astype(np.float16), cls_values], axis=1),
        np.concatenate([indices, np.ones(cls.shape, dtype=indices.dtype)], axis=1),
    )


def gip(
    q_values: torch.Tensor, q_indices: torch.Tensor, d_values: torch.Tensor, d_indices: torch.Tensor
) -> torch.Tensor:
    """GIP(q, d, g) = Σ_m q[m]·d[m]·g[m] with g[m] = 1{q_idx[m] = d_idx[m]} (Eq. 11–12).

    Args:
        q_values: (Q, M) query values.
        q_indices: (Q, M) query indices.
        d_values: (C, M) document values.
        d_indices: (C, M) document indices.

    Returns:
        (Q, C) scores, in float32.
    """
    return gated_products(q_values, q_indices, d_values, d_indices).sum(dim=2)


def gated_products(
    q_values: torch.Tensor, q_indices: torch.Tensor, d_values: torch.Tensor, d_indices: torch.Tensor
) -> torch.Tensor:
    """(Q, C, M) q[m]·d[m]·g[m] of every query, document and dimension, in float32: the terms GIP sums (Eq. 11)."""
    gate = q_indices.unsqueeze(1) == d_indices.unsqueeze(0)
    return gate * q_values.float().unsqueeze(1) * d_values.float().unsqueeze(0)


def gip_parts(
    q_values: torch.Tensor, q_indices: torch.Tensor, d_values: torch.Tensor, d_indices: torch.Tensor, split: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """GIP (Eq. 11) and its two parts, from one product.

    The lexical part sums the dimensions before ``split`` (a DHR's DLR), the semantic part those from ``split`` on
    (its [CLS] part, Eq. 15–16). The fused score is :func:`gip`'s to the bit; each part is the score of :func:`gip`
    with the other part of the query zeroed to float32 rounding (a shorter sum, in another order).

    Returns:
        (Q, C) fused, lexical and semantic scores, in float32.
    """
    products = gated_products(q_values, q_indices, d_values, d_indices)
    return products.sum(dim=2), products[..., :split].sum(dim=2), products[..., split:].sum(dim=2)


def explain(
    q_values: np.ndarray, q_indices: np.ndarray, d_values: np.ndarray, d_indices: np.ndarray, slicing: Slicing
) -> list[tuple[int, float, float]]:
    """What a DLR pair matched (Table 13): (vocabulary id, query value, document value) per open gate, best first.

    Each open gate m (q_idx[m] = d_idx[m], Eq. 12) is one vocabulary id, found by reverting the slicing; its
    contribution to the GIP is the product of the two values. Only the first ``slicing.slices`` dimensions are
    read, so a DHR's [CLS] part is left out.

    Args:
        q_values: (M,) query values.
        q_indices: (M,) query indices.
        d_values: (M,) document values.
        d_indices: (M,) document indices.
        slicing: The slicing both were densified with.
    """
    m = slicing.slices
    gates = np.flatnonzero(q_indices[:m] == d_indices[:m])
    ids = slicing.term_id(gates, q_indices[gates])
    matched = [
        (int(i), float(q_values[g]), float(d_values[g]))
        for g, i in zip(gates, ids, strict=True)
        if i >= 0 and q_values[g] * d_values[g] != 0
    ]
    return sorted(matched, key=lambda t: t[1] * t[2], reverse=True)
