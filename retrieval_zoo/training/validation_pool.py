"""A validation pool: the union of BM25's top k for the validation queries and their judged documents.

Validating over the whole corpus encodes and indexes every document each epoch (at MS MARCO's 8.8M passages, the
cost the README states). The pool is a corpus of its own, a :class:`~retrieval_zoo.data.corpus_store.CorpusSubset`
of the collection's documents (no text copied), that the run's index encodes and searches as it would the whole
corpus. The index's BM25 stays the run's, over the whole corpus: a pooled document gets the score it gets in a
full-corpus search, and only the candidates shrink. The pool's metrics are not the corpus's (fewer competitors);
they rank checkpoints by how they order the documents BM25 and the judges saw, as reranking validation does.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from retrieval_zoo.cache import fingerprint
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.corpus_store import CorpusSubset, corpus_ids
from retrieval_zoo.lexical.lucene_bm25 import BM25


def candidate_pool(collection: Collection, bm25: BM25, split: str, qids: list[str], depth: int) -> Collection:
    """``collection`` with its corpus cut to BM25's top ``depth`` of ``qids`` and every document judged for them.

    Args:
        collection: The whole collection.
        bm25: The run's BM25 over it (its run is read as arrays and cached: :meth:`BM25.search_rows`).
        split: The split of ``qids``.
        qids: The validation queries.
        depth: How many of BM25's documents per query join the pool.

    Returns:
        A collection whose corpus is the pool, keyed (``corpus_fingerprint``) by the corpus and the pool's ids.
    """
    if depth < 1:
        raise ValueError(f"the pool depth must be at least 1, not {depth}")
    queries, qrels, docs = collection.queries[split], collection.qrels[split], corpus_ids(collection.corpus)
    ranked = bm25.search_rows({qid: queries[qid] for qid in qids}, depth, docs)
    judged = docs.known_rows([docid for qid in qids for docid in qrels[qid]], f"the qrels of split {split!r}")
    pool = CorpusSubset(collection.corpus, np.concatenate([np.asarray(ranked.docs, dtype=np.int64), judged]))
    restricted = dataclasses.replace(collection, name=f"{collection.name}-pool", corpus=pool, files=[],
                                     corpus_files=[])  # fmt: skip
    key = ("validation pool", pool.index.digest)
    restricted.__dict__["corpus_fingerprint"] = fingerprint(collection.corpus_fingerprint, *key)  # cached_property
    restricted.__dict__["fingerprint"] = fingerprint(collection.fingerprint, *key)
    print(f"[validation] pool of {len(pool):,} documents: BM25's top {depth} of {len(qids):,} queries and "
          f"their judged documents (of {len(collection.corpus):,})")  # fmt: skip
    return restricted
