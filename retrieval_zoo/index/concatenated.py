"""Exact two-part hybrid search through one faiss index over concatenated vectors.

[d_a ; d_b] · [q_a ; λ q_b] = q_a·d_a + λ q_b·d_b, so a single inner-product search ranks the whole corpus by the
weighted sum of both parts exactly (RoC Eq. 11: lexical + λ·semantic), and zeroing one half of the query searches
the other part alone. No candidate union, no missing scores.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from retrieval_zoo.data.formats import Run
from retrieval_zoo.index.dense import FaissIndex

QueryEncoder = Callable[[dict[str, str]], tuple[np.ndarray, np.ndarray]]


class ConcatenatedRetriever:
    """Search by ``a + weight·b`` over documents stored as [a ; b].

    Args:
        doc_parts: Per shard of the corpus: its document ids, their (n, dim_a) first-part vectors (RoC: projected
            BM25) and their (n, dim_b) second-part vectors (RoC: [CLS]); one faiss shard each.
        encode_queries: queries → ((Q, dim_a), (Q, dim_b)) vectors, in the order of the dict.
        weight: λ, the second part's weight.
        parts: Names of the two parts, for :meth:`side`.
        factory: faiss factory string.
    """

    def __init__(
        self,
        doc_parts: list[tuple[list[str], np.ndarray, np.ndarray]],
        encode_queries: QueryEncoder,
        weight: float,
        parts: tuple[str, str] = ("lexical", "semantic"),
        factory: str = "Flat",
    ) -> None:
        shards = [(docids, np.concatenate([a, b], axis=1)) for docids, a, b in doc_parts]
        self.index = FaissIndex(factory).build_sharded(shards)
        self.encode_queries, self.weight, self.parts = encode_queries, weight, parts
        self._last: tuple[dict[str, str], np.ndarray, np.ndarray] | None = None

    def _queries(self, queries: dict[str, str]) -> tuple[np.ndarray, np.ndarray]:
        """Both parts of the query vectors; the last call's are kept (searching one query set several ways)."""
        if self._last is None or self._last[0] != queries:
            self._last = (dict(queries), *self.encode_queries(queries))
        return self._last[1], self._last[2]

    def search(self, queries: dict[str, str], k: int, weight: float | None = None) -> Run:
        """Top ``k`` by a + weight·b (the retriever's λ unless ``weight`` is given)."""
        a, b = self._queries(queries)
        value = self.weight if weight is None else weight
        return self.index.search(np.concatenate([a, value * b], axis=1), list(queries), k)

    def side(self, name: str, queries: dict[str, str], k: int) -> Run:
        """Top ``k`` by one part alone (the other half of the query zeroed)."""
        if name not in self.parts:
            raise ValueError(f"unknown part {name!r}; parts: {self.parts}")
        a, b = self._queries(queries)
        vectors = np.concatenate([a, np.zeros_like(b)] if name == self.parts[0] else [np.zeros_like(a), b], axis=1)
        return self.index.search(vectors, list(queries), k)
