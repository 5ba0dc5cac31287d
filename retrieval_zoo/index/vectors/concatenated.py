"""Exact two-part hybrid search through one faiss index over concatenated vectors.

[d_a ; d_b] · [q_a ; λ q_b] = q_a·d_a + λ q_b·d_b, so a single inner-product search ranks the whole corpus by the
weighted sum of both parts exactly (RoC Eq. 11: lexical + λ·semantic), and zeroing one half of the query searches
the other part alone. No candidate union, no missing scores.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar

import numpy as np

from retrieval_zoo.cache import atomic_path, entry_lock, fingerprint
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.formats import Run
from retrieval_zoo.encoding.batching import Texts, encode_all
from retrieval_zoo.encoding.precision import encoding
from retrieval_zoo.evaluation.metrics import Measure
from retrieval_zoo.id_index import IdIndex
from retrieval_zoo.index.index import TENTHS_TO_TWO, EncodingIndex
from retrieval_zoo.index.representations import OffersLexicalSemantic
from retrieval_zoo.index.shards import CorpusShards, Payload, docids_digest
from retrieval_zoo.index.vectors.faiss import Faiss, FaissIndex, vectors_payload
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.lexical.projection import RademacherProjection
from retrieval_zoo.retriever import Retriever

QueryEncoder = Callable[[dict[str, str]], tuple[np.ndarray, np.ndarray]]


class ConcatenatedRetriever(Retriever):
    """Search by ``a + weight·b`` over documents stored as [a ; b].

    Args:
        index: The documents' [a ; b] vectors in faiss (built by :meth:`Concatenated.build`, or loaded).
        encode_queries: queries → ((Q, dim_a), (Q, dim_b)) vectors, in the order of the dict.
        weight: λ, the second part's weight.
        parts: Names of the two parts, for :meth:`side`.
    """

    weight_name = "semantic_weight"

    def __init__(
        self,
        index: FaissIndex,
        encode_queries: QueryEncoder,
        weight: float,
        parts: tuple[str, str] = ("lexical", "semantic"),
    ) -> None:
        self.index, self.encode_queries, self.weight, self.parts = index, encode_queries, weight, parts
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


def doc_lexical_matrix(projection: RademacherProjection, bm25: BM25, docids: Sequence[str] | IdIndex) -> np.ndarray:
    """A·(Lucene's TF saturation) of every document, cached by corpus, BM25 parameters and projection.

    RoC's d_lex (Eq. 3) is this matrix times the method's ``saturation_scale`` ((k1 + 1) at the paper's scale). The
    key holds the documents' ids: a validation pool indexes a subset of BM25's corpus.
    """
    key = fingerprint(bm25.collection.corpus_fingerprint, docids_digest(docids), bm25.k1, bm25.b, projection.dim,
                      projection.seed)  # fmt: skip
    path = bm25.cache / "roc" / f"doc-lex-{key}.npy"
    with entry_lock(path):
        if path.exists():
            return np.load(path)
        matrix = np.concatenate([
            projection.project(bm25.document_term_weights(list(docids[i : i + 4096]), saturation_only=True)).numpy()
            for i in range(0, len(docids), 4096)
        ])  # fmt: skip
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            np.save(f, matrix)
    return matrix


class Concatenated(EncodingIndex[OffersLexicalSemantic]):
    """RoC's one index over [d_lex ; d_sem], searched with [q_lex ; λ·q_sem] (RoC Eq. 11; ``conf/index/concatenated``).

    The lexical part is the pipeline's BM25 random-projected by the method's ``projection`` (Eq. 3–4); the semantic
    part is the method's vectors. The sum is exact over the whole corpus: no candidate union.

    Args:
        weight: λ until tuning replaces it.
        weight_grid: λ values tried when evaluation tunes (RoC §4.1: [0, 2] by 0.1).
        tune_measure: What tuning maximises (RoC: MAP).
        extend_grid: Go past the grid's edge where the best value lies (False: the grid only).
        factory: faiss factory string.
    """

    accepts: ClassVar[tuple[str, ...]] = ("lexical_semantic",)
    saves: ClassVar[bool] = True

    def __init__(
        self,
        weight: float = 1.0,
        weight_grid: tuple[float, ...] = TENTHS_TO_TWO,
        tune_measure: Measure = "MAP@1000",
        extend_grid: bool = True,
        factory: str = "Flat",
    ) -> None:
        super().__init__(weight_grid, tune_measure, extend_grid)
        self.weight, self.faiss = weight, Faiss(factory)

    def corpus_payload(self, method: OffersLexicalSemantic, texts: Texts) -> Payload:
        """The documents' semantic vectors (the lexical part comes from BM25 at build time)."""
        return vectors_payload(method, texts)

    def build(
        self, method: OffersLexicalSemantic, collection: Collection, bm25: BM25, shards: CorpusShards | None = None
    ) -> ConcatenatedRetriever:
        """[d_lex ; d_sem] of every document in faiss; queries [q_lex ; λ·q_sem]."""
        shards = self.corpus_shards(method, collection, bm25, shards)
        projection = method.projection
        lexical = doc_lexical_matrix(projection, bm25, shards.docids) * np.float32(method.saturation_scale(bm25.k1))
        doc_parts = [
            (shards.shard_docids(s), np.concatenate([lexical[start:stop], shards.read(s)["vectors"].numpy()], axis=1))
            for s, (start, stop) in enumerate(shards.ranges)
        ]
        index = self.faiss.faiss_index().build_sharded(doc_parts)
        return ConcatenatedRetriever(index, query_encoder(method, bm25), self.weight)

    def save(self, retriever: Retriever, folder: Path) -> None:
        """The [d_lex ; d_sem] faiss shards of a retriever this index built."""
        self.built_here(retriever, ConcatenatedRetriever).index.save(folder)

    def load(
        self, method: OffersLexicalSemantic, collection: Collection, bm25: BM25, folder: Path
    ) -> ConcatenatedRetriever:
        """The saved [d_lex ; d_sem] shards, queried as :meth:`build`'s retriever is."""
        return ConcatenatedRetriever(self.faiss.faiss_index().load(folder), query_encoder(method, bm25), self.weight)


def query_encoder(method: OffersLexicalSemantic, bm25: BM25) -> QueryEncoder:
    """Queries → their (projected BM25, semantic) vectors, q_lex and q_sem of RoC Eq. 11."""

    def encode_queries(queries: dict[str, str]) -> tuple[np.ndarray, np.ndarray]:
        texts = list(queries.values())
        idf = bm25.query_idf(texts)
        with encoding():  # RoC's random projection is part of its encoder (its training step projects in autocast)
            q_lex = method.projection.project(idf).float().numpy()
        prep = method.query_prep()
        q_semantic = encode_all(method.encode_query, texts, method.encode_batch_size, "queries",
                                prep.lengths(texts), prep.prepare)  # fmt: skip
        return q_lex, q_semantic

    return encode_queries
