"""BM25 as a method with no training (Robertson & Zaragoza, 2009), through pyserini's Lucene.

It lets train → index → search → evaluate run end to end, and it is the baseline every table is read against.
"""

from __future__ import annotations

from retrieval_zoo.data.collections import Collection
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.lexical.bm25 import BM25
from retrieval_zoo.methods.base import RetrievalMethod


class BM25Method(RetrievalMethod):
    """Lucene BM25.

    Args:
        k1: Term-frequency saturation.
        b: Length normalisation.
        threads: Search threads (None = all cores).
    """

    trainable = False

    def __init__(self, k1: float = 0.9, b: float = 0.4, threads: int | None = None) -> None:
        super().__init__()
        self.k1, self.b, self.threads = k1, b, threads

    def build_retriever(self, collection: Collection, shards: CorpusShards | None = None) -> BM25:
        """The (cached) Lucene index of the collection."""
        return BM25(collection, self.k1, self.b, self.threads)
