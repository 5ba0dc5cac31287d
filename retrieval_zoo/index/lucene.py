"""Lucene BM25 as an index (``conf/index/lucene.yaml``): the pipeline's own BM25, for the ``bm25`` method."""

from __future__ import annotations

from typing import Any, ClassVar

from retrieval_zoo.data.collections import Collection
from retrieval_zoo.index.base import Index
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.lexical.bm25 import BM25


class Lucene(Index):
    """The collection's Lucene index searched by BM25 (k1, b, threads and cache from the run's ``bm25`` block)."""

    accepts: ClassVar[tuple[str, ...]] = ("bm25",)

    def encodes_corpus(self, method: Any) -> bool:
        """Lucene indexes the text itself: nothing to encode."""
        return False

    def build(self, method: Any, collection: Collection, bm25: BM25, shards: CorpusShards | None = None) -> BM25:
        """The pipeline's (cached) BM25."""
        return bm25
