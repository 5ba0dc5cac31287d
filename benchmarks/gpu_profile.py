"""Where a method's training step, corpus encoding and CSurF's search spend their time: torch.profiler's op tables.

What ``benchmarks.gpu_throughput`` reports as ratios, broken down by op, for the paths still off target: per
method, one profiled training step (trained methods), one profiled encoding of ``--docs`` documents through the
index its config picks, and CSurF's search over ``--queries`` dev queries; each after one unprofiled warm-up run.
Each table lists the ``--rows`` ops with the most self time on the device (CUDA) or on the host (CPU), with the
wall time of the profiled run above it.

    python -m benchmarks.gpu_profile --device cuda --backbone bert_base_random --precision bf16 --methods csurf
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial

import torch
from lightning.fabric.utilities.apply_func import move_data_to_device

from benchmarks.common import autocast_for, composed, first_batch, header, searching_for, small_bags
from benchmarks.host_syncs import train_step
from benchmarks.recorded_bm25 import bm25_for
from retrieval_zoo.data.collections import embedded
from retrieval_zoo.index.csurf.csf import InvertedLists


def profiled(title: str, run: Callable[[], object], device: torch.device, rows: int) -> None:
    """Print ``run``'s op table (after a warm-up run) by self time on ``device``, and its wall time."""
    run()
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
        torch.cuda.synchronize()
    started = time.perf_counter()
    with torch.profiler.profile(activities=activities) as profile:
        run()
        if device.type == "cuda":
            torch.cuda.synchronize()
    wall = time.perf_counter() - started
    sort = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(f"\n### {title}: {1000 * wall:.1f} ms (profiled)\n")
    print(profile.key_averages().table(sort_by=sort, row_limit=rows, max_name_column_width=60))
    if device.type == "cuda":
        print(profile.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=60))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--backbone", default="splade_tiny")
    parser.add_argument("--methods", default="delade_cls,csurf,dlr_splade,dhr_bm25_dense")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--docs", type=int, default=1024)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rows", type=int, default=15)
    parser.add_argument("--bm25", default=None, help="replay=FILE: BM25's recorded Java answers (recorded_bm25)")
    args = parser.parse_args()
    device, collection = torch.device(args.device), embedded("default")
    bm25 = bm25_for(collection, args.bm25)
    autocast, searching = autocast_for(device, args.precision), searching_for(device, args.precision)
    docids = list(collection.corpus)[: args.docs]
    header(f"Profiles on {device} ({args.backbone}, {args.precision})")
    for method in args.methods.split(","):
        model, index = composed("method", method, f"backbone={args.backbone}", also=("index",))
        if args.backbone.endswith("_random"):
            small_bags(model, splade=True)
        model = model.to(device)
        if model.trainable:
            batch = move_data_to_device(first_batch(model, collection, bm25, args.batch_size), device)
            profiled(f"{method}: training step", partial(train_step, model.train(), batch, autocast), device, args.rows)
        encode = index.doc_encoder(model.eval(), collection, bm25)

        def encoding(encode: Callable = encode) -> None:
            with torch.inference_mode(), autocast():
                encode(docids)

        profiled(f"{method}: encoding {len(docids)} documents", encoding, device, args.rows)
        if method == "csurf" and args.queries > 0:
            queries = dict(list(collection.judged_queries("dev").items())[: args.queries])
            with torch.inference_mode(), searching(model):
                retriever = InvertedLists().build(model, collection, bm25)

            def search(retriever: object = retriever, queries: dict = queries, model: torch.nn.Module = model) -> None:
                with torch.inference_mode(), searching(model):
                    retriever.search(queries, 1000)

            profiled(f"csurf: search of {len(queries)} queries", search, device, args.rows)


if __name__ == "__main__":
    main()
