"""BM25 as a method with no training (Robertson & Zaragoza, 2009), through pyserini's Lucene.

It lets train → index → search → evaluate run end to end, and it is the baseline every table is read against. It has
no encoder: ``index=lucene`` searches the run's own BM25 (its ``bm25`` block: k1, b, threads, cache).
"""

from __future__ import annotations

from typing import ClassVar

from retrieval_zoo.methods.method import RetrievalMethod


class BM25Method(RetrievalMethod):
    """Lucene BM25: nothing to train or encode."""

    trainable: ClassVar[bool] = False
    representations: ClassVar[tuple[str, ...]] = ("bm25",)
