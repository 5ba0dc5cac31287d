"""The DataModule's arrays at MS MARCO's size, without BM25: the time and peak memory of each step after the search.

A synthetic top-1,000 run of 502,939 training queries over 8,841,823 passages (random corpus rows, scores
descending by rank) is written as the memory-mapped :class:`~retrieval_zoo.data.ranked_rows.RankedRows` that
``BM25.search_rows`` and ``data.negatives_run`` produce. Then each step ``TriplesDataModule.setup`` takes with it:
the corpus's id index, the judged positives (one a query, as in MS MARCO), the negative pool, the groups of every
epoch and the BM25 score of every sampled pair, read from the run (CLEAR's pair table). Issue 21's target is 8 GB
for 500k queries × 1,000 candidates. ``peak_anon`` is the memory the process allocated; ``peak_rss`` adds the file
pages of the memory-mapped run it read. The search and the JVM are measured by ``benchmarks/scale.py``.

    python -m benchmarks.datamodule_memory [--queries 502939] [--docs 8841823] [--depth 1000] [--epochs 1]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.scale import tree_rss
from retrieval_zoo.data.doc_rows import DocRows, RankedRows
from retrieval_zoo.id_index import IdIndex
from retrieval_zoo.training.lookups import run_scores, sampled_pairs
from retrieval_zoo.training.negatives import GroupSampling, negative_pool


def measured(name: str, step: Callable[[], object]) -> object:
    """Run ``step``, printing its seconds and the process's peak resident and anonymous memory meanwhile."""
    peak, peak_anon, done = 0, 0, threading.Event()

    def sample() -> None:
        nonlocal peak, peak_anon
        while not done.is_set():
            resident, anonymous, _ = tree_rss(os.getpid())
            peak, peak_anon = max(peak, resident), max(peak_anon, anonymous)
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    result = step()
    seconds = time.perf_counter() - started
    done.set()
    sampler.join()
    print(f"| {name} | {seconds:.1f} s | {peak / 2**30:.2f} GiB | {peak_anon / 2**30:.2f} GiB |", flush=True)
    return result


def synthetic_run(folder: Path, queries: int, docs: int, depth: int, seed: int = 0) -> RankedRows:
    """A run of ``depth`` distinct-enough random documents a query, written in pieces as memory-mapped arrays."""
    rng = np.random.default_rng(seed)
    offsets = np.arange(queries + 1, dtype=np.int64) * depth
    np.save(folder / "offsets.npy", offsets)
    doc_rows = np.lib.format.open_memmap(folder / "docs.npy", "w+", np.int32, (queries * depth,))
    scores = np.lib.format.open_memmap(folder / "scores.npy", "w+", np.float32, (queries * depth,))
    piece = max(1, 4_000_000 // depth)
    for start in range(0, queries, piece):
        end = min(start + piece, queries)
        doc_rows[start * depth : end * depth] = rng.integers(0, docs, (end - start) * depth, dtype=np.int32)
        scores[start * depth : end * depth] = np.tile(np.arange(depth, 0, -1, dtype=np.float32), end - start)
    doc_rows.flush(), scores.flush()
    del doc_rows, scores
    return RankedRows.load(folder)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queries", type=int, default=502_939)
    parser.add_argument("--docs", type=int, default=8_841_823)
    parser.add_argument("--depth", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--negatives", type=int, default=1)
    parser.add_argument("--work", type=Path, default=None, help="folder for the run (default: /tmp)")
    args = parser.parse_args()
    print(f"{args.queries:,} queries × top {args.depth:,} over {args.docs:,} documents, {args.epochs} epoch(s)\n")
    print("Peaks are the whole process while the step runs, the arrays of the steps before it included.\n")
    print("| step | seconds | peak_rss | peak_anon |\n|---|---|---|---|")
    with tempfile.TemporaryDirectory(dir=args.work) as scratch:
        run = measured("synthetic run (written, memory-mapped)",
                       lambda: synthetic_run(Path(scratch), args.queries, args.docs, args.depth))  # fmt: skip
        ids = measured("corpus id index (IdIndex)", lambda: IdIndex(str(i) for i in range(args.docs)))
        rng = np.random.default_rng(1)
        positives = DocRows(np.arange(args.queries + 1, dtype=np.int64),
                            rng.integers(0, args.docs, args.queries, dtype=np.int32))  # fmt: skip
        pool = measured("negative pool", lambda: negative_pool(run, positives, args.docs))
        qids = [f"q{i}" for i in range(args.queries)]
        sampling = GroupSampling({q: i for i, q in enumerate(qids)}, positives, pool, ids, args.negatives, 13)
        keys = measured("groups of every epoch (pair keys)", lambda: sampled_pairs(sampling, qids, args.epochs))
        values, found = measured("BM25 scores of the pairs, from the run", lambda: run_scores(run, keys, args.docs))
        print(f"\n{len(keys):,} pairs, {found.mean():.1%} of them in the run (the rest: positives outside it)")


if __name__ == "__main__":
    main()
