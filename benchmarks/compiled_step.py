"""CSurF's fixed-shape step, eager against ``method.compile_csfs=true``: the kernels a step launches, counted anywhere.

At ``gpu_throughput --fixed-cost``'s sizes (2 queries × (1 + 1) documents of 8 tokens, the tiny backbone) a GPU's
step waits on the host, a kernel launch an op. ``method.compile_csfs`` runs the step's CSF code (the CSFs from the
encoder's outputs, their scoring) through ``torch.compile``, which fuses it. This counts what one step launches, the
eager step's, the compiled one's and the bare backbone's on the same tensors, each the same way: on CUDA, the kernels
the profiler sees run on the device; elsewhere, the ops dispatched at the top (views apart, as ``step_ops`` counts;
among them those the compiled graphs call out to, ``bmm`` and the scatters) plus the kernels Inductor generated for
the step's graphs, each run once a step. A CPU takes its own branches (the vocabulary projection in several chunks,
the gather grounding), so its counts are not CUDA's. Times: ``gpu_throughput --fixed-cost --override
method.step_shapes=fixed --override method.compile_csfs=true``. Compiling needs a C++ compiler on a CPU.

    python -m benchmarks.compiled_step [--device cuda] [--bm25 replay=FILE]
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable
from functools import partial

import torch
import torch._inductor.metrics as inductor_metrics
from lightning.fabric.utilities.apply_func import move_data_to_device

from benchmarks.common import header
from benchmarks.gpu_throughput import bare_replay, captured, fixed_cost_inputs
from benchmarks.host_syncs import train_step
from benchmarks.recorded_bm25 import bm25_for
from benchmarks.step_ops import VIEWS
from retrieval_zoo.data.collections import embedded


def launches(run: Callable[[], None], device: torch.device) -> int:
    """The kernels ``run()`` launches after a warm-up call that compiles (module docstring: how each is counted)."""
    torch._dynamo.reset()
    inductor_metrics.reset()
    run()
    run()  # a second shape's graphs (the documents' side) compile at the first call too; none after
    generated = inductor_metrics.generated_kernel_count
    activities = [torch.profiler.ProfilerActivity.CPU]
    activities += [torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else []
    with torch.profiler.profile(activities=activities) as profile:
        run()
    if device.type == "cuda":
        return sum(event.device_type == torch.autograd.DeviceType.CUDA for event in profile.events())
    return generated + sum(top_level(event) for event in profile.events())


def top_level(event: object) -> bool:
    """Whether a profiled event is an op (not a view) dispatched by no other op."""
    if not event.name.startswith("aten::") or event.name.removeprefix("aten::") in VIEWS:
        return False
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return False
        parent = parent.cpu_parent
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--bm25", default=None, help="record=FILE or replay=FILE (benchmarks/recorded_bm25.py)")
    args = parser.parse_args()
    device = torch.device(args.device)
    collection = embedded("default")
    bm25 = bm25_for(collection, args.bm25)
    header(f"Kernels a CSurF step launches in fixed shapes, on {device}: 2 queries × (1 + 1) documents, 8 tokens")
    print("| step | bare kernels | step kernels | step ÷ bare |\n|---|---|---|---|")
    for compiled in (False, True):
        overrides = ("method.step_shapes=fixed", f"method.compile_csfs={str(compiled).lower()}")
        model, batch = fixed_cost_inputs("csurf", overrides, collection, bm25)
        model, batch = model.to(device).train(), move_data_to_device(batch, device)
        step = partial(train_step, model, batch, contextlib.nullcontext)
        bare, counted = (
            launches(bare_replay(model, captured(model, step), contextlib.nullcontext), device),
            launches(step, device),
        )
        print(f"| {'compiled CSFs' if compiled else 'eager'} | {bare} | {counted} | {counted / bare:.2f} |")


if __name__ == "__main__":
    main()
