"""DLR/DHR vectors searched by gated inner product (delade-dhr.md §3.1–3.4; ``conf/index/gip.yaml``).

The method's term weights (:mod:`retrieval_zoo.index.terms.term_index`) are densified into DLRs and, with a [CLS] part,
DHRs (Eq. 4–16), searched in two stages (Eq. 18) by :class:`retrieval_zoo.index.terms.dhr.DhrRetriever`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import numpy as np

from retrieval_zoo.bounds import require_choice
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.corpus_store import corpus_ids
from retrieval_zoo.evaluation.metrics import Measure
from retrieval_zoo.index.representations import OffersTermWeights
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.index.terms.dhr import DhrRetriever
from retrieval_zoo.index.terms.dlr import Slicing, SlicingStrategy
from retrieval_zoo.index.terms.gip_search import GipIndex
from retrieval_zoo.index.terms.term_index import DHR_GRID, TermIndex
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.retriever import Retriever

GIP = "gip.json"  # a saved index's shard count, [CLS] width and the λ it was indexed with


class Gip(TermIndex):
    """DLR/DHR vectors searched by gated inner product (delade-dhr.md §3.1–3.4; ``conf/index/gip.yaml``).

    Args:
        slices: M, the DLR dimension (768, 256 or 128).
        slicing: ``stride`` (default), ``contiguous`` or ``random`` (Table 6).
        first_stage: ``approximate_gip`` (Eq. 18), ``inner_product``, or null for exact GIP over the corpus.
        theta: θ of approximate GIP (0.3 for DHRs).
        candidates: K′ re-ranked by exact GIP (10,000, capped by the corpus size).
        weight: λ of the [CLS] part at indexing; null takes the method's.
        weight_grid: λ values tried when evaluation tunes.
        tune_measure: What tuning maximises.
        extend_grid: Go past the grid's edge where the best value lies (False: the grid only).
    """

    saves: ClassVar[bool] = True

    def __init__(
        self,
        slices: int = 768,
        slicing: SlicingStrategy = "stride",
        first_stage: str | None = "approximate_gip",
        theta: float = 0.3,
        candidates: int = 10_000,
        weight: float | None = None,
        weight_grid: tuple[float, ...] = DHR_GRID,
        tune_measure: Measure = "MRR@10",
        extend_grid: bool = True,
    ) -> None:
        super().__init__(weight, weight_grid, tune_measure, extend_grid)
        if slices < 1:
            raise ValueError(f"index.slices must be at least 1, not {slices} (index=sparse searches exactly)")
        require_choice("index.slicing", slicing, SlicingStrategy)
        self.slices, self.slicing = slices, slicing
        self.first_stage, self.theta, self.candidates = first_stage, theta, candidates

    def build(
        self, method: OffersTermWeights, collection: Collection, bm25: BM25, shards: CorpusShards | None = None
    ) -> DhrRetriever:
        """Densify the corpus's term vectors (and join the [CLS] ones) into GIP indexes, one per shard."""
        encoder, shards = self.encoder_and_shards(method, collection, bm25, shards)
        slicing = Slicing(encoder.vocab_size, self.slices, encoder.discard, self.slicing)
        return DhrRetriever.from_shards(
            encoder.encode_queries, shards, slicing, self.fusion_weight(encoder), self.first_stage, self.theta,
            self.candidates, encoder.batch_size, terms=encoder.terms, queries=encoder.queries,
        )  # fmt: skip

    def save(self, retriever: Retriever, folder: Path) -> None:
        """Each shard's float16 values and positions as built (``gip-<shard>-values.npy``, ``-indices.npy``)."""
        built = self.built_here(retriever, DhrRetriever)
        for number, index in enumerate(built.indexes):
            indices = index.stored_positions(slice(None)).astype(built.slicing.index_dtype)  # their stored width
            np.save(folder / f"gip-{number:05d}-values.npy", index.values.half().cpu().numpy())
            np.save(folder / f"gip-{number:05d}-indices.npy", indices)
        shape = {"lam": built.lam, "cls_dims": built.cls_dims, "shards": len(built.indexes)}
        (folder / GIP).write_text(json.dumps(shape) + "\n", encoding="utf-8")

    def load(self, method: OffersTermWeights, collection: Collection, bm25: BM25, folder: Path) -> DhrRetriever:
        """The saved shards' GIP indexes over the collection's documents, queried by ``method``.

        The [CLS] part keeps the λ it was indexed with; a different ``weight`` rescales the queries (as tuning does).
        """
        encoder = method.term_encoder(collection, bm25)
        saved = json.loads((folder / GIP).read_text(encoding="utf-8"))
        slicing = Slicing(encoder.vocab_size, self.slices, encoder.discard, self.slicing)
        docids, indexes, row = corpus_ids(collection.corpus), [], 0
        for number in range(saved["shards"]):
            values = np.load(folder / f"gip-{number:05d}-values.npy")
            indices = np.load(folder / f"gip-{number:05d}-indices.npy")
            indexes.append(GipIndex(values, indices, docids[row : row + len(values)], open_dims=saved["cls_dims"]))
            row += len(values)
        if row != len(docids):
            raise ValueError(f"{folder}: its shards hold {row:,} documents, the corpus {len(docids):,}")
        retriever = DhrRetriever(encoder.encode_queries, indexes, slicing, saved["lam"], self.first_stage, self.theta,
                                 self.candidates, encoder.batch_size, encoder.terms, encoder.queries)  # fmt: skip
        retriever.weight = self.fusion_weight(encoder)
        return retriever
