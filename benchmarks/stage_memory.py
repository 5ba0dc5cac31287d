"""Where a term-weight index's memory goes over SPLADE's shards: the scale harness's peaks, split by phase.

The harness (:mod:`benchmarks.scale`) records one peak a stage. Here each index is built and searched over
``encode_splade``'s shards of a harness work folder, one size and index in a fresh process, as its ``*_splade``
stage does, and this process's anonymous memory is read after each phase (and its peak sampled within it):
imports, the collection, the model, the build, then glibc's ``malloc_trim`` (what the build freed but the allocator
kept, returned: the rest is what the index holds), two searches of the dev queries at k = 1000 with the first run
kept (the stage keeps it for the agreement while it times two more), and the largest child process's peak (BMP's
``ciff2bmp``).
Between two sizes, each phase's growth a document is printed: what a straight line projects to MS MARCO.

    python -m benchmarks.stage_memory --work /tmp/retrieval_zoo-scale --sizes 100000,300000 [--indexes sparse,bmp]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")
INDEXES = ("sparse", "bmp", "seismic")


def anonymous() -> int:
    """This process's resident bytes that are not file pages."""
    resident, shared = (int(v) for v in Path("/proc/self/statm").read_text().split()[1:3])
    return (resident - shared) * PAGE


class Phases:
    """Anonymous memory at the end of each phase, and its peak within it (sampled every 20 ms)."""

    def __init__(self) -> None:
        self.peak, self.marks = anonymous(), []
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, anonymous())
            time.sleep(0.02)

    def mark(self, phase: str) -> None:
        """End ``phase``: record the memory now and the phase's peak, and start the next phase's peak from now."""
        time.sleep(0.05)  # a last sample inside the phase
        now = anonymous()
        self.marks.append({"phase": phase, "now": now, "peak": max(self.peak, now)})
        self.peak = now


def measure(index_name: str, collection_folder: Path, work: Path) -> dict:
    """One index's phases over the shards under ``work`` (this process's figures), and its size."""
    phases = Phases()
    import torch

    from benchmarks.common import composed
    from benchmarks.scale_gpu import splade_shards
    from benchmarks.scale_stages import K, load
    from benchmarks.sparse_engines import memoized
    from retrieval_zoo.host_memory import release_freed_memory
    from retrieval_zoo.lexical.lucene_bm25 import BM25

    phases.mark("imports")
    collection = load(collection_folder)
    phases.mark("collection")
    model, index = composed("method", "dlr_splade", f"index={index_name}", also=("index",))
    model.eval()
    shards = splade_shards(collection, work)
    phases.mark("model")
    with torch.inference_mode():
        retriever = index.build(model, collection, BM25(collection), shards)
        phases.mark("build")
        release_freed_memory()
        phases.mark("malloc_trim")
        retriever.encode_query = memoized(retriever.encode_query)
        queries = collection.judged_queries("dev")
        run = retriever.search(queries, K)
        retriever.search(queries, K)  # a second run beside the first, as the stage's timed searches make
        phases.mark("search")
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return {"phases": phases.marks, "index": retriever.nbytes, "children": children, "queries": len(run)}


EXTRA = (("index", "nbytes"), ("children", "largest child's peak"))  # a measured figure's key, and its row's label


def per_document(values: list[int], sizes: list[int]) -> str:
    """What ``values`` (bytes, one a size) grow a document between the two largest ``sizes``, in KiB ("" for one)."""
    if len(sizes) < 2:
        return ""
    return f"{(values[-1] - values[-2]) / (sizes[-1] - sizes[-2]) / 1024:.2f}"


def table(results: dict[int, dict[str, dict]]) -> None:
    """Each index's phases at each size, and what each phase adds a document between the two largest sizes.

    A phase's figure at a size is the memory at its end and its peak; its growth is that of what it added at its end
    (its end less the previous phase's), in KiB a document.
    """
    sizes = sorted(results)
    head = " | ".join(f"{n:,}: end / peak (MiB)" for n in sizes)
    print(f"| index | phase | {head} | KiB a document |")
    print("|---|---|" + "---|" * (len(sizes) + 1))
    for name in results[sizes[0]]:
        rows = [results[n][name] for n in sizes]
        for position, mark in enumerate(rows[0]["phases"]):
            cells = [f"{r['phases'][position]['now'] / 2**20:,.0f} / {r['phases'][position]['peak'] / 2**20:,.0f}"
                     for r in rows]  # fmt: skip
            ends = [r["phases"][position]["now"] - (r["phases"][position - 1]["now"] if position else 0) for r in rows]
            print(f"| {name} | {mark['phase']} | {' | '.join(cells)} | {per_document(ends, sizes)} |")
        for key, label in EXTRA:
            values = [r[key] for r in rows]
            cells = [f"{v / 2**20:,.0f}" for v in values]
            print(f"| {name} | {label} | {' | '.join(cells)} | {per_document(values, sizes)} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, default=Path("/tmp/retrieval_zoo-scale"), help="the harness's folder")
    parser.add_argument("--sizes", default="100000,300000")
    parser.add_argument("--indexes", default=",".join(INDEXES), help=f"any of {', '.join(INDEXES)}")
    parser.add_argument("--child", nargs=3, metavar=("INDEX", "COLLECTION", "WORK"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        name, collection, work = args.child
        print(json.dumps(measure(name, Path(collection), Path(work))))
        return
    results: dict[int, dict[str, dict]] = {}
    for size in map(int, args.sizes.split(",")):
        work = args.work / f"n{size}"
        for name in args.indexes.split(","):
            if name not in INDEXES:
                parser.error(f"unknown index {name!r}; known: {', '.join(INDEXES)}")
            command = [sys.executable, "-m", "benchmarks.stage_memory", "--child", name, str(work / "collection"),
                       str(work)]  # fmt: skip
            done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
            results.setdefault(size, {})[name] = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"[stage_memory] {size:,} documents, {name}: done", file=sys.stderr, flush=True)
    table(results)


if __name__ == "__main__":
    main()
