"""Lucene BM25 as an index (``conf/index/lucene.yaml``): the pipeline's own BM25, for the ``bm25`` method."""

from __future__ import annotations

from typing import ClassVar

from retrieval_zoo.data.collections import Collection
from retrieval_zoo.index.index import Index
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.retriever import Represented


class Lucene(Index[Represented]):
    """The collection's Lucene index searched by BM25 (k1, b, threads and cache from the run's ``bm25`` block)."""

    accepts: ClassVar[tuple[str, ...]] = ("bm25",)

    def encodes_corpus(self, method: Represented) -> bool:
        """Lucene indexes the text itself: nothing to encode."""
        return False

    def build(
        self, method: Represented, collection: Collection, bm25: BM25, shards: CorpusShards | None = None
    ) -> BM25:
        """The pipeline's (cached) BM25."""
        return bm25
