"""Hybrid retrieval over the union of a lexical and a dense run, ranked by a weighted sum of their scores."""

from __future__ import annotations

from retrieval_zoo.data.formats import Run, top_k
from retrieval_zoo.index.dense import DenseRetriever
from retrieval_zoo.index.fusion import interpolate
from retrieval_zoo.lexical.bm25 import BM25


class HybridRetriever:
    """BM25 top ``depth`` ∪ dense top ``depth``, ranked by λ·BM25 + dense (CLEAR Eq. 8).

    A document retrieved by one side only takes the other side's lowest score among that query's retrieved documents
    (a document outside a top-k list scores at most its k-th score), so nothing is re-scored through Java.

    Args:
        bm25: The lexical side.
        dense: The dense side.
        lambda_lex: Weight λ of the BM25 score (CLEAR's λ_test).
        depth: Candidates taken from each side.
    """

    def __init__(self, bm25: BM25, dense: DenseRetriever, lambda_lex: float, depth: int = 1000) -> None:
        self.bm25, self.dense, self.lambda_lex, self.depth = bm25, dense, lambda_lex, depth
        self._last: tuple[dict[str, str], Run, Run] | None = None

    def runs(self, queries: dict[str, str]) -> tuple[Run, Run]:
        """The lexical and dense runs the fusion starts from (also useful on their own, and for tuning λ).

        The last call's runs are kept, so reporting a side alone after the fused search costs no second search.
        """
        if self._last is None or self._last[0] != queries:
            self._last = (dict(queries), self.bm25.search(queries, self.depth), self.dense.search(queries, self.depth))
        return self._last[1], self._last[2]

    def side(self, name: str, queries: dict[str, str], k: int) -> Run:
        """The ``"lexical"`` or ``"dense"`` side's own top ``k``."""
        if k > self.depth:
            return (self.bm25 if name == "lexical" else self.dense).search(queries, k)
        lexical, dense = self.runs(queries)
        return top_k(lexical if name == "lexical" else dense, k)

    def search(self, queries: dict[str, str], k: int) -> Run:
        """Top ``k`` of the union by λ·BM25 + dense."""
        lexical, dense = self.runs(queries)
        return top_k(interpolate(dense, lexical, weight_a=1.0, weight_b=self.lambda_lex), k)
