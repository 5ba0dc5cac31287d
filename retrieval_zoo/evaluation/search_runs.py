"""Search a query set without judgements and write its runs (``python search.py``).

The same stages as an evaluation (:mod:`retrieval_zoo.evaluation.stages`): the same index, the same fusion weight
(the run's tuned one, or tuned first on held-out training queries when the config asks), the same run files, so on a
judged split the runs are the evaluation's, byte for byte. Nothing is measured: the queries need no qrels.
"""

from __future__ import annotations

from pathlib import Path

from retrieval_zoo.cache import write_json
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.query_sets import QuerySource
from retrieval_zoo.evaluation.stages import QuerySet, search, with_held_out, write_runs
from retrieval_zoo.index.index import Index
from retrieval_zoo.index.saved import SavedIndex
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.methods.method import RetrievalMethod


def search_query_source(
    model: RetrievalMethod, index: Index, collection: Collection, bm25: BM25, source: QuerySource, k: int,
    out_dir: Path, name: str, tune_queries: int = 0, shards: CorpusShards | None = None,
    saved: SavedIndex | None = None,
) -> dict:  # fmt: skip
    """Search ``source``'s queries, write ``run.<source>.trec`` (BM25's, each fused part's) and ``search.json``.

    Args:
        model: The method.
        index: Its index.
        collection: The searched corpus (and its training queries, when a fusion weight is tuned).
        bm25: The baseline and a fusion's BM25 part.
        source: The queries.
        k: Run depth.
        out_dir: Where the runs and ``search.json`` go.
        name: The method's name (the run files' tag).
        tune_queries: Held-out training queries to tune the fusion weight on first (0: the configured weight).
        shards: The corpus as the model encoded it; None encodes it on demand.
        saved: The index's folder (``index_dir``): loaded from it when ready there, else built and written there.

    Returns:
        What ``search.json`` holds.
    """
    queries = with_held_out(QuerySet(source.name, source.queries, {}), collection, tune_queries)
    searched = search(model, index, collection, bm25, queries, k, name, shards, saved)
    files = write_runs(searched, out_dir, source.name)
    summary = {
        "system": searched.system, "collection": collection.name,
        "collection_fingerprint": collection.fingerprint,
        "queries": {"origin": source.origin, "name": source.name, "count": len(source.queries),
                    "fingerprint": source.fingerprint},
        "k": k, "runs": files, "seconds": searched.seconds, "tuning": searched.tuning,
    }  # fmt: skip
    write_json(out_dir / "search.json", summary)
    print(f"\n{collection.name}: {len(source.queries):,} queries from {source.origin}, depth {k}; runs in {out_dir}:")
    for system, file in files.items():
        print(f"  {system}: {file}")
    return summary
