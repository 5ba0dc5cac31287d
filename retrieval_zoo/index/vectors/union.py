"""Hybrid retrieval over the union of a lexical and a dense run, ranked by a weighted sum of their scores."""

from __future__ import annotations

import math
import typing
from pathlib import Path
from typing import ClassVar, Literal

from retrieval_zoo.bounds import require_choice
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.formats import Run, top_k
from retrieval_zoo.encoding.batching import Texts
from retrieval_zoo.evaluation.metrics import Measure
from retrieval_zoo.index.fusion import complete, interpolate, union_gaps
from retrieval_zoo.index.index import TENTHS_TO_TWO, EncodingIndex
from retrieval_zoo.index.representations import OffersVectors
from retrieval_zoo.index.shards import CorpusShards, Payload
from retrieval_zoo.index.vectors.faiss import DenseRetriever, Faiss
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.retriever import Retriever

Part = Literal["lexical", "semantic"]
PARTS = typing.get_args(Part)
UnionScores = Literal["exact", "floor"]


class HybridRetriever(Retriever):
    """BM25 top ``depth`` ∪ dense top ``depth``, ranked by a weighted sum in which one part carries ``weight``.

    CLEAR weights BM25 (λ_test·BM25 + s_emb, CLEAR Eq. 8); RoC's naive-sum baseline weights the semantic part
    (BM25 + λ·[CLS], RoC Eq. 11). With ``union_scores="exact"`` (the papers' reading), a document found by one side
    only is scored on the other side too: BM25(q, d) by a Lucene search filtered to those documents, the dense score
    by an inner product with its stored vector. With ``"floor"``, it takes the other side's lowest score for the
    query instead (a document outside a top-k list scores at most its k-th score): no second scoring pass, and a
    different ranking. Same interface as :class:`~retrieval_zoo.index.vectors.concatenated.ConcatenatedRetriever`.

    Args:
        bm25: The lexical side.
        dense: The dense side.
        weight: Weight of the ``weighted`` part; the other part's is 1.
        weighted: Which part ``weight`` multiplies: one of ``parts``.
        depth: Candidates taken from each side.
        parts: Names of the (lexical, dense) parts, for :meth:`side` and ``weighted``.
        union_scores: ``exact`` or ``floor``: how a document missing from one side's top ``depth`` is scored there.
    """

    def __init__(
        self,
        bm25: BM25,
        dense: DenseRetriever,
        weight: float,
        weighted: str = "lexical",
        depth: int = 1000,
        parts: tuple[str, str] = PARTS,
        union_scores: UnionScores = "exact",
    ) -> None:
        if weighted not in parts:
            raise ValueError(f"weighted must be one of the parts {parts}, not {weighted!r}")
        require_choice("union_scores", union_scores, UnionScores)
        self.bm25, self.dense, self.weight, self.weighted = bm25, dense, weight, weighted
        self.depth, self.parts, self.weight_name, self.union_scores = depth, parts, f"{weighted}_weight", union_scores
        self._last: tuple[dict[str, str], Run, Run] | None = None
        self._union: tuple[dict[str, str], Run, Run] | None = None

    def runs(self, queries: dict[str, str]) -> tuple[Run, Run]:
        """The lexical and dense top ``depth`` runs the fusion starts from (also useful on their own, and for tuning).

        The last call's runs are kept, so reporting a side alone or trying another weight costs no second search.
        """
        if self._last is None or self._last[0] != queries:
            self._last = (dict(queries), self.bm25.search(queries, self.depth), self.dense.search(queries, self.depth))
        return self._last[1], self._last[2]

    def union_runs(self, queries: dict[str, str]) -> tuple[Run, Run]:
        """The two runs the weighted sum adds: with exact union scores, each scores every document of the union."""
        lexical, dense = self.runs(queries)
        if self.union_scores == "floor":
            return lexical, dense
        if self._union is None or self._union[0] != queries:
            lexical_gaps, dense_gaps = union_gaps(lexical, dense), union_gaps(dense, lexical)
            missing_lexical, missing_dense = sum(map(len, lexical_gaps.values())), sum(map(len, dense_gaps.values()))
            print(f"[union] scoring {missing_lexical:,} documents outside BM25's top {self.depth} and "
                  f"{missing_dense:,} outside the dense top {self.depth}")  # fmt: skip
            lexical = complete(lexical, self.bm25.candidate_scores(queries, lexical_gaps))
            dense = complete(dense, self.dense.candidate_scores(queries, dense_gaps))
            self._union = (dict(queries), lexical, dense)
        return self._union[1], self._union[2]

    def side(self, name: str, queries: dict[str, str], k: int) -> Run:
        """One part's own top ``k``."""
        if name not in self.parts:
            raise ValueError(f"unknown part {name!r}; parts: {self.parts}")
        lexical_side = name == self.parts[0]
        if k > self.depth:
            return (self.bm25 if lexical_side else self.dense).search(queries, k)
        lexical, dense = self.runs(queries)
        return top_k(lexical if lexical_side else dense, k)

    def search(self, queries: dict[str, str], k: int, weight: float | None = None) -> Run:
        """Top ``k`` of the union by the weighted sum (the retriever's weight unless ``weight`` is given).

        Below the depth, and before the whole union is scored (a few queries typed into the Python retriever), only
        the documents that can reach the top ``k`` get their BM25 scores (:meth:`bounded_top`): the same run.
        """
        value = self.weight if weight is None else weight
        weight_lexical, weight_dense = (value, 1.0) if self.weighted == self.parts[0] else (1.0, value)
        unscored = self._union is None or self._union[0] != queries
        if self.union_scores == "exact" and k < self.depth and unscored and weight_lexical >= 0:
            return self.bounded_top(queries, k, weight_lexical, weight_dense)
        lexical, dense = self.union_runs(queries)
        return top_k(interpolate(lexical, dense, weight_a=weight_lexical, weight_b=weight_dense), k)

    def bounded_top(self, queries: dict[str, str], k: int, weight_lexical: float, weight_dense: float) -> Run:
        """The exact union's top ``k``, BM25-scoring only the dense documents whose bound reaches it.

        Every document of BM25's top ``depth`` is scored on both sides (the dense side by inner products), which
        fixes τ, the k-th best fused score among them. A dense document outside BM25's top ``depth`` has BM25 at
        most the depth-th score s (0 when BM25 found fewer): one whose weight·s + its dense part is below τ is
        beaten by k documents whatever its BM25 score, so it is left out; the others are scored as in
        :meth:`union_runs`. With ``weight_lexical`` ≥ 0 the bound holds in floating point too.
        """
        lexical, dense = self.runs(queries)
        dense = complete(dense, self.dense.candidate_scores(queries, union_gaps(dense, lexical)))
        reach: dict[str, list[str]] = {}
        for qid, found in lexical.items():
            floor = min(found.values()) if len(found) >= self.depth else 0.0
            known = sorted((weight_lexical * s + weight_dense * dense[qid][d] for d, s in found.items()), reverse=True)
            threshold = known[k - 1] if len(known) >= k else -math.inf
            reach[qid] = [d for d, s in dense[qid].items()
                          if d not in found and weight_lexical * floor + weight_dense * s >= threshold]  # fmt: skip
        lexical = complete(lexical, self.bm25.candidate_scores(queries, reach))
        dense = {qid: {d: dense[qid][d] for d in scores} for qid, scores in lexical.items()}
        return top_k(interpolate(lexical, dense, weight_a=weight_lexical, weight_b=weight_dense), k)


class Union(EncodingIndex[OffersVectors]):
    """Lucene BM25's top ``depth`` ∪ the method's faiss top ``depth``, ranked by a weighted sum (``conf/index/union``).

    Args:
        weighted: The part the weight multiplies: ``semantic`` (BM25 + λ·dense, RoC's naive sum) or ``lexical``
            (λ·BM25 + dense, CLEAR Eq. 8).
        weight: λ until tuning replaces it.
        weight_grid: λ values tried when evaluation tunes (``eval.tune_queries`` > 0).
        tune_measure: What tuning maximises.
        extend_grid: Go past the grid's edge where the best value lies (False: the grid only).
        depth: Candidates taken from each side.
        factory: faiss factory string of the dense side.
        union_scores: ``exact`` (each side scores every document of the union, the papers' fusion) or ``floor``
            (a document missing from a side takes that side's lowest score for the query).
    """

    accepts: ClassVar[tuple[str, ...]] = ("vectors",)
    saves: ClassVar[bool] = True

    def __init__(
        self,
        weighted: Part = "semantic",
        weight: float = 1.0,
        weight_grid: tuple[float, ...] = TENTHS_TO_TWO,
        tune_measure: Measure = "MAP@1000",
        extend_grid: bool = True,
        depth: int = 1000,
        factory: str = "Flat",
        union_scores: UnionScores = "exact",
    ) -> None:
        super().__init__(weight_grid, tune_measure, extend_grid)
        require_choice("weighted", weighted, Part)
        require_choice("union_scores", union_scores, UnionScores)
        self.weighted, self.weight, self.depth, self.union_scores = weighted, weight, depth, union_scores
        self.dense = Faiss(factory)

    def corpus_payload(self, method: OffersVectors, texts: Texts) -> Payload:
        """The documents' vectors (the dense side)."""
        return self.dense.corpus_payload(method, texts)

    def build(
        self, method: OffersVectors, collection: Collection, bm25: BM25, shards: CorpusShards | None = None
    ) -> HybridRetriever:
        """The pipeline's BM25 beside the method's vectors in faiss."""
        dense = self.dense.build(method, collection, bm25, shards)
        return HybridRetriever(bm25, dense, self.weight, self.weighted, self.depth, union_scores=self.union_scores)

    def save(self, retriever: Retriever, folder: Path) -> None:
        """The dense side's faiss shards (BM25's index is the collection's own, cached by content)."""
        self.dense.save(self.built_here(retriever, HybridRetriever).dense, folder)

    def load(self, method: OffersVectors, collection: Collection, bm25: BM25, folder: Path) -> HybridRetriever:
        """The pipeline's BM25 beside the saved dense side."""
        dense = self.dense.load(method, collection, bm25, folder)
        return HybridRetriever(bm25, dense, self.weight, self.weighted, self.depth, union_scores=self.union_scores)
