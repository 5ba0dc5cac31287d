"""BM25 on the embedded collection: Lucene indexing time, and queries per second at several depths.

Side by side in one run: Anserini's multi-threaded SearchCollection (what retrieval_zoo uses) against pyserini's
``batch_search``, which converts every hit into a Python object. Both run in the JVM worker process.

    python benchmarks/bm25_throughput.py [--variant default]
"""

from __future__ import annotations

import argparse
import tempfile
import time

from benchmarks.common import header
from retrieval_zoo.data.collections import embedded
from retrieval_zoo.lexical.java import LuceneWorker, pyserini_lucene
from retrieval_zoo.lexical.lucene_bm25 import BM25


def python_batch_search(index_dir: str, queries: dict[str, str], k: int, threads: int) -> int:
    """pyserini's batch_search with every hit turned into Python (runs in the JVM worker)."""
    pyserini_lucene()  # the JVM configured before pyserini's searchers start it
    import pyserini.search.lucene as search_lucene

    searcher = search_lucene.LuceneSearcher(index_dir)
    searcher.set_bm25(0.9, 0.4)
    qids = list(queries)
    hits = searcher.batch_search([queries[q] for q in qids], qids, k=k, threads=threads)
    return sum(len({h.docid: h.score for h in hits[q]}) for q in hits)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--variant", default="default")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    from benchmarks.bm25_throughput import python_batch_search as batch_search  # by name: the worker imports it

    collection = embedded(args.variant)
    queries = collection.judged_queries("dev")
    with tempfile.TemporaryDirectory() as cache:
        bm25 = BM25(collection, threads=args.threads, cache_dir=cache)
        started = time.perf_counter()
        bm25.index_dir  # noqa: B018 - builds the index
        index_seconds = time.perf_counter() - started
        rows = []
        for k in (10, 100, 1000):
            started = time.perf_counter()
            bm25.search(queries, k)
            ours = len(queries) / (time.perf_counter() - started)
            started = time.perf_counter()
            LuceneWorker.call(batch_search, str(bm25.index_dir), queries, k, args.threads)
            python = len(queries) / (time.perf_counter() - started)
            rows.append((k, ours, python))
    header(f"BM25 on {collection.name}")
    print(
        f"indexing {len(collection.corpus):,} documents: {index_seconds:.1f} s "
        f"({len(collection.corpus) / index_seconds:,.0f} docs/s, {args.threads} threads, docvectors stored)\n"
    )
    print(f"{len(queries):,} dev queries, {args.threads} threads; runs written to disk and read back included\n")
    print("| k | SearchCollection q/s | batch_search → Python q/s | ratio |\n|---|---|---|---|")
    for k, ours, python in rows:
        print(f"| {k} | {ours:,.0f} | {python:,.0f} | {ours / python:.2f} |")


if __name__ == "__main__":
    main()
