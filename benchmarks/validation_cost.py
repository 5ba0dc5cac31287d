"""One validation epoch over the whole corpus against one over the candidate pool, side by side, in one process.

What :class:`retrieval_zoo.training.validation.RetrievalValidation` does at each epoch, for one model (the untrained
dense SPLADE-tiny by default; ``--method``) and its config's index, on the embedded collection (``--variant full``:
58,625 documents): build the pool (BM25's top ``--pool-depth`` of the validation queries and their judged documents; its
BM25 run is cached, so only the first epoch pays the search), encode and index the documents with the current
weights (on demand, by shard, as one process does), and search the validation queries to ``--val-k``. Both
validations of the same weights, with their MRR@10 and R@val_k through the validation metrics.

It prints the documents indexed, the seconds of each step (``pool_s``: the pool's construction at a later epoch,
from BM25's cached run), the ratio pool ÷ full, and a projection to MS MARCO:
encoding and indexing scale with the documents indexed (the encoder's cost per document, measured here); a pool
holds at most queries × depth + judged documents.
"""

from __future__ import annotations

import argparse
import time

import torch

from benchmarks.common import composed
from retrieval_zoo.data.collections import Collection, embedded
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.training.validation_metrics import RankingMetrics
from retrieval_zoo.training.validation_pool import candidate_pool

MSMARCO_PASSAGES = 8_841_823


def validate(model: object, index: object, collection: Collection, bm25: BM25, qids: list[str], val_k: int) -> dict:
    """Index ``collection`` with ``model`` and search the validation queries: the seconds and the metrics.

    Indexed twice, timed the second time: a training run's later epochs, whose document tokens are cached (the
    pool's are tokenized at its first epoch, the corpus's before training).
    """
    queries, qrels = collection.queries["dev"], collection.qrels["dev"]
    with torch.inference_mode():
        index.build(model, collection, bm25)
    started = time.perf_counter()
    with torch.inference_mode():
        retriever = index.build(model, collection, bm25)
    built = time.perf_counter()
    run = retriever.search({q: queries[q] for q in qids}, val_k)
    searched = time.perf_counter()
    metrics = RankingMetrics(val_k)
    metrics.update(run, {q: qrels[q] for q in qids}, {q: i for i, q in enumerate(qids)})
    return {"documents": len(collection.corpus), "index_s": built - started, "search_s": searched - built,
            **metrics.compute()}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="full", help="the embedded collection's variant (default or full)")
    parser.add_argument("--method", default="dense")
    parser.add_argument("--val-queries", type=int, default=300)
    parser.add_argument("--val-k", type=int, default=100)
    parser.add_argument("--pool-depth", type=int, default=1000)
    args = parser.parse_args()

    torch.manual_seed(0)
    model, index = composed("method", args.method, also=("index",))
    model.eval()
    collection = embedded(args.variant)
    bm25 = BM25(collection, k1=0.9, b=0.4)
    qids = sorted(collection.judged_queries("dev"))[: args.val_queries]
    model.cache_queries({q: collection.queries["dev"][q] for q in qids})
    started = time.perf_counter()
    pool = candidate_pool(collection, bm25, "dev", qids, args.pool_depth)
    pool_first = time.perf_counter() - started
    started = time.perf_counter()
    pool = candidate_pool(collection, bm25, "dev", qids, args.pool_depth)
    pool_again = time.perf_counter() - started
    results = {"full": validate(model, index, collection, bm25, qids, args.val_k),
               "pool": validate(model, index, pool, bm25, qids, args.val_k)}  # fmt: skip
    results["pool"]["pool_s"] = pool_again

    print(f"## Validation cost: {args.method} ({type(index).__name__}), {collection.name}, {len(qids)} queries, "
          f"val_k = {args.val_k}, pool depth {args.pool_depth}\n")  # fmt: skip
    names = ("documents", "pool_s", "index_s", "search_s", "MRR@10", f"R@{args.val_k}")
    print("| corpus | " + " | ".join(names) + " |\n" + "|---" * (len(names) + 1) + "|")
    for corpus, row in results.items():
        cells = [f"{row[n]:,}" if n == "documents" else "—" if n not in row else f"{row[n]:.4f}" if "@" in n else
                 f"{row[n]:.2f}" for n in names]  # fmt: skip
        print(f"| {corpus} | " + " | ".join(cells) + " |")
    full, pooled = results["full"], results["pool"]
    print(f"\npool ÷ full: documents {pooled['documents'] / full['documents']:.3f}, "
          f"index {pooled['index_s'] / full['index_s']:.3f}, search {pooled['search_s'] / full['search_s']:.3f}; "
          f"the pool's first build (BM25 search) {pool_first:.2f} s, then {pool_again:.2f} s (cached)")  # fmt: skip
    per_doc = full["index_s"] / full["documents"]
    bound = len(qids) * args.pool_depth + sum(len(collection.qrels["dev"][q]) for q in qids)
    print(f"encoding and indexing: {per_doc * 1e3:.3f} ms a document here. At MS MARCO's {MSMARCO_PASSAGES:,} "
          f"passages a full validation indexes all of them ({per_doc * MSMARCO_PASSAGES / 3600:.1f} h at this rate, "
          f"÷ D ranks); a pool of {len(qids):,} queries indexes at most {bound:,} "
          f"({bound / MSMARCO_PASSAGES:.1%}; {per_doc * bound / 60:.1f} min at this rate).")  # fmt: skip


if __name__ == "__main__":
    main()
