"""The scale harness's CSurF stages (:mod:`benchmarks.scale`): its bags, its inverted lists and their variants.

- ``csf_shards``: every document's bag of CSFs, encoded into shards on disk (what the lists are built from);
- ``csf``: the inverted lists (``index=csf``, float32), 200 dev queries at k = 1000; its run is kept as the exact
  reference of the variants below;
- ``csf_fp16``: the same lists with float16 vectors (``index.vector_dtype=float16``);
- ``csf_pruned``: post-hoc pruning of the lowest half of the postings (``index.prune_fraction=0.5``);
- ``csf_compiled``: the float32 lists scored by a torch.compile'd kernel (``index.compile=true``; compiled in the
  8 warm-up queries);
- ``csf_split``: the float32 lists split over 2 processes (gloo, one thread each; evaluation under DDP), rank 0
  searching and rank 1 serving; ``rank_disk`` is the larger rank's share of the lists.

The variants report ``recall_exact`` (the share of the reference run's top 1000 they return) and ``top10_overlap``
(of its top 10); ``csf_split`` must return the reference run itself (``same_run`` 1).

The model is CSurF on SPLADE-tiny's trained expansion with untrained 32-d vectors (no FLOPS training of its own).
Query encoding is inside the timed search, as a user's ``search`` call has it. Every process runs one torch thread, so
``csf_split`` compares 2 processes with 1 at the same work per process (and a busy machine does not stall a
multi-threaded search on its slowest thread).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from benchmarks.common import composed
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.formats import Run
from retrieval_zoo.lexical.lucene_bm25 import BM25

SHARD_SIZE = 4096
K = 1000
CSF_QUERIES = 200


def csurf_model():
    """CSurF on SPLADE-tiny's trained expansion (``method=csurf``), its 32-d vectors untrained: realistic bags."""
    torch.manual_seed(0)
    return composed("method", "csurf").eval()


def csurf_setup(collection: Collection, work: Path, **index_settings: object) -> tuple:
    """(model, ``index=csf`` with ``index_settings``, BM25, the shards of CSurF's bags under ``work``)."""
    from retrieval_zoo.index.shards import CorpusShards

    shards = CorpusShards(list(collection.corpus), SHARD_SIZE, work / "csf-shards")
    index = composed("index", "csf", *(f"index.{name}={value}" for name, value in index_settings.items()))
    return csurf_model(), index, BM25(collection), shards


def stage_csf_shards(collection: Collection, work: Path) -> dict:
    """CSurF's bags of CSFs of every document, encoded into shards on disk (what its inverted lists are built from)."""
    from benchmarks.scale_stages import folder_bytes, timed

    model, index, bm25, shards = csurf_setup(collection, work)
    _, seconds = timed(lambda: shards.encode_into(index.doc_encoder(model, collection, bm25), shards.missing()))
    return {"seconds": seconds, "disk": folder_bytes(work / "csf-shards")}


def searched(collection: Collection, work: Path, **index_settings: object) -> tuple[dict, Run]:
    """Build the lists with ``index_settings``, search 200 dev queries once after 8 to warm up: figures and run."""
    from benchmarks.scale_stages import timed

    torch.set_num_threads(1)
    model, index, bm25, shards = csurf_setup(collection, work, **index_settings)
    with torch.inference_mode():
        retriever, seconds = timed(lambda: index.build(model, collection, bm25, shards))
        queries = dict(list(collection.judged_queries("dev").items())[:CSF_QUERIES])
        retriever.search(dict(list(queries.items())[:8]), K)
        run, searching = timed(lambda: retriever.search(queries, K))
    figures = {"seconds": seconds, "disk": retriever.nbytes, "ms_per_query": 1000 * searching / len(queries)}
    return figures, run


def agreement(run: Run, exact: Run) -> dict[str, float]:
    """``recall_exact``: the share of ``exact``'s top 1000 in ``run``'s; ``top10_overlap``: the same for the top 10.

    Averaged over the queries for which ``exact`` lists any document.
    """

    def top(ranking: dict[str, float], depth: int) -> set[str]:
        return set(sorted(ranking, key=lambda d: (-ranking[d], d))[:depth])

    def share(depth: int) -> float:
        kept = [len(top(run[q], depth) & top(exact[q], depth)) / len(top(exact[q], depth)) for q in exact if exact[q]]
        return sum(kept) / len(kept)

    return {"recall_exact": share(K), "top10_overlap": share(10)}


def stage_csf(collection: Collection, work: Path) -> dict:
    """CSurF's inverted lists (``index=csf``) over the ``csf_shards`` stage's bags; its run kept as the reference."""
    figures, run = searched(collection, work)
    torch.save(run, work / "csf-run.pt")
    return figures


def variant(**index_settings: object):
    """The stage of the lists built with ``index_settings``, compared with the ``csf`` stage's exact run."""

    def stage(collection: Collection, work: Path) -> dict:
        figures, run = searched(collection, work, **index_settings)
        return figures | agreement(run, torch.load(work / "csf-run.pt"))

    return stage


def split_rank(rank: int, port: int, folder: str, work: str, out: str) -> None:
    """One of 2 processes holding half of the lists; rank 0 searches and saves its figures and run."""
    from benchmarks.scale_stages import load, timed
    from retrieval_zoo.index.process_shards import split_over_processes

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    collection = load(Path(folder))
    model, index, bm25, shards = csurf_setup(collection, Path(work))
    with torch.inference_mode():
        if rank:
            index.serve(model, collection, bm25, shards)
        else:
            with split_over_processes():
                retriever, seconds = timed(lambda: index.build(model, collection, bm25, shards))
            queries = dict(list(collection.judged_queries("dev").items())[:CSF_QUERIES])
            retriever.search(dict(list(queries.items())[:8]), K)
            run, searching = timed(lambda: retriever.search(queries, K))
            retriever.release()
            own = retriever.rank_nbytes
            figures = {"seconds": seconds, "disk": retriever.nbytes, "ms_per_query": 1000 * searching / len(queries)}
            torch.save((figures | {"rank_disk": max(own, retriever.nbytes - own)}, run), out)
    torch.distributed.destroy_process_group()


def stage_csf_split(collection: Collection, work: Path) -> dict:
    """The float32 lists split over 2 processes, as evaluation under DDP splits them; must give the exact run."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    folder, out = work / "collection", work / "csf-split.pt"
    mp.spawn(split_rank, args=(port, str(folder), str(work), str(out)), nprocs=2, join=True)
    figures, run = torch.load(out, weights_only=False)
    exact = torch.load(work / "csf-run.pt")
    return figures | agreement(run, exact) | {"same_run": float(run == exact)}


STAGES = {"csf_shards": stage_csf_shards, "csf": stage_csf, "csf_fp16": variant(vector_dtype="float16"),
          "csf_pruned": variant(prune_fraction=0.5), "csf_split": stage_csf_split,
          "csf_compiled": variant(compile="true")}  # fmt: skip
