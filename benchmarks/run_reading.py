"""Reading a TREC run into arrays (:func:`~retrieval_zoo.data.ranked_rows.read_ranked_rows`), µs a line, by part.

A synthetic run as BM25's search writes it (``qid Q0 docid rank score tag``, gzip level 1): ``--queries`` queries
× ``--depth`` documents drawn from a corpus of ``--docs`` ids. Timed side by side on one block of it, the garbage
collector paused as the reader pauses it: splitting its lines into fields, the document ids looked up in the
corpus's :class:`~retrieval_zoo.id_index.IdIndex` with the keys sorted first (as it does) and unsorted, the scores
parsed; then the whole file read.

    python -m benchmarks.run_reading [--queries 4000] [--depth 1000] [--docs 1000000]
"""

from __future__ import annotations

import argparse
import gzip
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import side_by_side
from retrieval_zoo.data import run_blocks
from retrieval_zoo.data.ranked_rows import read_ranked_rows
from retrieval_zoo.id_index import IdIndex


def synthetic_run(path: Path, queries: int, depth: int, docs: int, seed: int = 0) -> None:
    """``queries`` × ``depth`` lines over the ids ``D0`` … ``D{docs − 1}``, scores descending by rank."""
    rng = np.random.default_rng(seed)
    with gzip.open(path, "wt", compresslevel=1) as out:
        for q in range(queries):
            rows = rng.choice(docs, depth, replace=False)
            scores = np.sort(rng.uniform(0, 30, depth))[::-1]
            ranked = enumerate(zip(rows, scores, strict=True), start=1)
            out.writelines(f"Q{q} Q0 D{d} {rank} {score:.4f} bm25\n" for rank, (d, score) in ranked)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queries", type=int, default=4000)
    parser.add_argument("--depth", type=int, default=1000)
    parser.add_argument("--docs", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "run.trec.gz"
        synthetic_run(path, args.queries, args.depth, args.docs)
        index = IdIndex(f"D{i}" for i in range(args.docs))
        with gzip.open(path) as handle:
            raw = handle.read(run_blocks.READ_BYTES)
        chunk = raw[: raw.rfind(b"\n") + 1]
        lines = chunk.count(b"\n")
        fields = run_blocks._split(chunk, True)
        docids, scores = [f[2] for f in fields], [f[4] for f in fields]

        with run_blocks.without_cyclic_gc():  # as the reader parses
            block = side_by_side(
                {
                    "split into fields": lambda: run_blocks._split(chunk, True),
                    "ids, sorted keys (IdIndex.rows)": lambda: index.rows(docids),
                    "ids, unsorted keys": lambda: index._found_rows(np.asarray(docids, dtype=str)),
                    "scores": lambda: np.asarray(scores, dtype=np.float64),
                },
                repeat=3,
            )
        print(f"One block of {lines:,} lines, µs a line (best of 3, in alternation):\n")
        print("| part | µs a line |\n|---|---|")
        for name, seconds in block.items():
            print(f"| {name} | {1e6 * seconds / lines:.3f} |")
        total = args.queries * args.depth
        (Path(scratch) / "rows").mkdir()
        started = time.perf_counter()
        qids = [f"Q{q}" for q in range(args.queries)]
        read_ranked_rows([path], dict.fromkeys(qids), qids, index, None, Path(scratch) / "rows")
        seconds = time.perf_counter() - started
        print(f"\nThe whole run, {total:,} lines over {args.docs:,} ids: {seconds:.1f} s, "
              f"{1e6 * seconds / total:.2f} µs a line")  # fmt: skip


if __name__ == "__main__":
    main()
