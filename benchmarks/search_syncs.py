"""Host synchronisations of each index family's search, counted on any machine (``benchmarks.host_syncs``' count).

Every compatible ``conf/method`` × ``conf/index`` pair (the matrix the configs and contracts give) is built on the
tiny random backbone over a pool of the collection's documents (BM25's top ``--depth`` of the queries searched, as
validation pools them), then searched twice: a call of ``--queries`` queries and one of four times as many, in
batches of :data:`BATCH` queries wherever a pair has a batch setting. The two counts split into what is paid once a
call and what a batch adds (for an engine that takes one query at a time: 8 × what a query adds). Work on host
tensors on purpose (an engine's own search of the queries' host copy) is marked
:func:`~retrieval_zoo.host_work.host_only` and left out, as in the step's count. What each remaining one is, and why
it stays, is in docs/benchmarks.md.

    python -m benchmarks.search_syncs [--queries 16] [--depth 50] [--methods csurf,dlr_splade] [--indexes sparse]

On a GPU machine without Java (``benchmarks/gpu_session.sh search_syncs``), BM25's answers come from a record made
by the same command with ``--bm25 record=FILE`` where Java runs (``benchmarks/recorded_bm25.py``; its searches
included). With ``--bm25`` the indexes are by default :data:`REPLAYABLE`.
"""

from __future__ import annotations

import argparse
from collections import Counter
from functools import partial
from pathlib import Path

import torch
from hydra.utils import get_class, instantiate
from omegaconf import OmegaConf

from benchmarks.common import composed_config, header, shortened, small_bags
from benchmarks.host_syncs import host_syncs, report_syncs
from benchmarks.recorded_bm25 import JAVA_CALLS, SEARCH_CALLS, RecordedBM25, bm25_recording
from retrieval_zoo.data.collections import Collection, embedded
from retrieval_zoo.index.index import compatible
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.retriever import Retriever
from retrieval_zoo.training.validation_pool import candidate_pool

CONF = Path(__file__).resolve().parents[1] / "retrieval_zoo" / "conf"
SHORT = 16  # tokens a text: the count does not depend on lengths, and the random backbone encodes faster
BATCH = 8  # queries a batch, in every batch setting a pair has: the calls of 16 and 64 queries take 2 and 8 batches
# The indexes whose BM25 calls do not depend on the model's scores, so that a record made on the CPU answers a GPU's
# run: the unions ask BM25 for the documents their dense side found, which a GPU's rounding may change; the host
# engines (bmp, seismic, lucene, lucene_impact) search on the host, and the Lucene ones need Java.
REPLAYABLE = ("concatenated", "csf", "faiss", "gip", "sparse")
BATCH_SETTINGS = ("method.encoder.batch_size", "method.dense.encoder.batch_size", "method.encode_batch_size",
                  "index.query_batch_size")  # fmt: skip


def pairs(methods: list[str] | None = None, indexes: list[str] | None = None) -> list[tuple[str, str]]:
    """Every (method, index) pair whose index accepts a representation the method produces, in name order."""
    methods = methods or sorted(p.stem for p in (CONF / "method").glob("*.yaml"))
    indexes = indexes or sorted(p.stem for p in (CONF / "index").glob("*.yaml"))
    found = []
    for method in methods:
        for index in indexes:
            cfg = composed_config("method", method, f"index={index}")
            if compatible(get_class(cfg.method._target_), get_class(cfg.index._target_)):
                found.append((method, index))
    return found


def built(method: str, index_name: str, collection: Collection, bm25: BM25, device: str = "cpu") -> Retriever:
    """The pair's retriever over ``collection``'s whole corpus (the caller cuts it), on the tiny random backbone."""
    cfg = composed_config("method", method, f"index={index_name}", "backbone=tiny_random")
    shortened(cfg, SHORT)
    for setting in BATCH_SETTINGS:
        if OmegaConf.select(cfg, setting) is not None:
            OmegaConf.update(cfg, setting, BATCH)
    torch.manual_seed(0)
    model, index = instantiate(cfg.method).eval().to(device), instantiate(cfg.index)
    small_bags(model, splade=True)  # CSurF's bags and SPLADE's vectors as sparse as trained ones
    with torch.inference_mode():
        return index.build(model, collection, bm25)


def warm_up(retriever: Retriever, queries: dict[str, str], k: int) -> None:
    """Search once with other texts at each call size counted: first-call work (imports, lazy tables) is not a
    search's, and a call of few queries takes another path than one of many (BM25's kept searcher)."""
    with torch.inference_mode():
        for size in (queries, fourfold(queries)):
            retriever.search({f"warm-up-{qid}": f"{text} again" for qid, text in size.items()}, k)


def fourfold(queries: dict[str, str]) -> dict[str, str]:
    """``queries`` four times over, under fresh qids."""
    return {f"{qid}#{copy}": text for copy in range(4) for qid, text in queries.items()}


def search_syncs(method: str, index_name: str, collection: Collection, bm25: BM25, queries: dict[str, str],
                 k: int = 100) -> tuple[Counter[str], Counter[str]]:  # fmt: skip
    """The syncs of one search call of ``queries`` and of one of them four times over (fresh qids), top ``k``."""
    retriever = built(method, index_name, collection, bm25)
    try:
        warm_up(retriever, queries, k)
        with torch.inference_mode():
            return host_syncs(partial(retriever.search, queries, k)), host_syncs(
                partial(retriever.search, fourfold(queries), k)
            )
    finally:
        retriever.release()


def split_count(few: int, many: int, queries: int) -> tuple[float, float]:
    """(syncs paid once a call, syncs a batch of :data:`BATCH` queries) from the counts of two calls.

    The calls hold ``queries`` and 4 × ``queries`` queries, so ``queries`` / BATCH and four times as many batches:
    the count is a + b · batches, solved for a and b.
    """
    batches = queries / BATCH
    per_batch = (many - few) / (3 * batches)
    return few - per_batch * batches, per_batch


def measure(found_pairs: list[tuple[str, str]], collection: Collection, bm25: BM25, queries: dict[str, str],
            k: int = 100) -> dict[tuple[str, str], tuple[Counter[str], Counter[str]]]:  # fmt: skip
    """Print and return each pair's syncs per search call of ``queries`` and of four times as many."""
    n = len(queries)
    print(f"| index | method | a call of {n} queries | of {4 * n} | once a call | a batch of {BATCH} queries "
          f"| where ({4 * n} queries) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    found = {}
    for method, index in sorted(found_pairs, key=lambda pair: pair[::-1]):
        try:
            few, many = found[method, index] = search_syncs(method, index, collection, bm25, queries, k)
        except ValueError as refused:  # an index that refuses the method's vectors (Seismic: DeLADE's dense ones)
            if not str(refused).startswith(f"index={index}:"):
                raise
            print(f"| {index} | {method} | — | — | — | — | refused: {str(refused).split(';')[0]} |", flush=True)
            continue
        once, per_batch = split_count(sum(few.values()), sum(many.values()), n)
        sites = ", ".join(f"{site} ×{count}" for site, count in many.most_common())
        print(f"| {index} | {method} | {sum(few.values())} | {sum(many.values())} | {once:g} | {per_batch:g} "
              f"| {sites} |", flush=True)  # fmt: skip
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--methods", default="", help="comma-separated; default: every method")
    parser.add_argument("--indexes", default="", help="comma-separated; default: every index (with --bm25: REPLAYABLE)")
    parser.add_argument("--queries", type=int, default=16, help="queries of the first call; the second has 4x")
    parser.add_argument("--depth", type=int, default=50, help="BM25's documents a query in the searched pool")
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                        help="cuda: torch's sync debug mode reports each search's syncs")  # fmt: skip
    parser.add_argument("--bm25", default=None, help="record=FILE or replay=FILE: BM25's answers, searches included")
    args = parser.parse_args()
    collection = embedded("default")
    with bm25_recording(collection, args.bm25, JAVA_CALLS + SEARCH_CALLS) as bm25:
        syncs_of_pairs(args, collection, bm25)


def syncs_of_pairs(args: argparse.Namespace, collection: Collection, bm25: BM25) -> None:
    """Print the syncs of the pairs ``args`` names, over a pool of ``collection`` that ``bm25`` cuts."""
    split = collection.eval_split
    queries = dict(list(collection.judged_queries(split).items())[: args.queries])
    pool = candidate_pool(collection, bm25, split, list(queries), args.depth)
    # the unions' lexical side searches the pool as their dense side does
    pool_bm25 = bm25.over(pool) if isinstance(bm25, RecordedBM25) else BM25(pool)
    indexes = [i for i in args.indexes.split(",") if i] or (list(REPLAYABLE) if args.bm25 else None)
    found_pairs = pairs([m for m in args.methods.split(",") if m], indexes)
    header(f"Host synchronisations of a search call (tiny_random; {len(pool.corpus):,} documents, top {args.k})")
    if args.device == "cpu":
        measure(found_pairs, pool, pool_bm25, queries, args.k)
        return
    for method, index in found_pairs:  # on CUDA the authority: torch's own count, by source line
        retriever = built(method, index, pool, pool_bm25, args.device)
        warm_up(retriever, queries, args.k)
        for searched in (queries, fourfold(queries)):
            with torch.inference_mode():
                report_syncs(
                    f"{index} × {method}, {len(searched)} queries", partial(retriever.search, searched, args.k)
                )
        retriever.release()


if __name__ == "__main__":
    main()
