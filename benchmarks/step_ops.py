"""The ops a training step dispatches where compute is negligible, each method against the bare backbone, anywhere.

At ``gpu_throughput --fixed-cost``'s sizes (2 queries × (1 + 1) documents of 8 tokens, the tiny backbone) a GPU
waits on the host: each op is a kernel launch with its Python and dispatcher work, so a step's time ÷ the bare
backbone's follows its count of ops ÷ the bare one's. This counts them on any machine: the step runs on the meta
device (shapes, no data), whose branches are the accelerator's where the code asks for a device other than the CPU,
and CSurF takes its CUDA default (``method.step_shapes=fixed``). A :class:`TorchDispatchMode` sees every op below
autograd, forward and backward; views (no kernel) are counted apart. fp32: bf16 autocast adds casts to both sides.
``--lines METHOD`` lists that method's ops by the innermost line of the package that issued them (the backward's as
``(backward or backbone)``), to see which code to merge.

    python -m benchmarks.step_ops [--methods dense,clear,roc,delade_cls,csurf] [--lines csurf]
"""

from __future__ import annotations

import argparse
import contextlib
import traceback
from collections import Counter
from collections.abc import Callable
from functools import partial

import torch
from lightning.fabric.utilities.apply_func import move_data_to_device
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.common import header
from benchmarks.gpu_throughput import bare_replay, captured, fixed_cost_inputs
from benchmarks.host_syncs import train_step
from benchmarks.recorded_bm25 import bm25_for
from retrieval_zoo.data.collections import Collection, embedded
from retrieval_zoo.lexical.lucene_bm25 import BM25

TRAINED = ("dense", "clear", "roc", "delade_cls", "csurf")
CUDA_DEFAULTS = {"csurf": ("method.step_shapes=fixed",)}
VIEWS = frozenset(
    ("alias", "as_strided", "detach", "expand", "narrow", "permute", "reshape", "_reshape_alias", "select", "slice")
    + ("split", "squeeze", "t", "transpose", "unbind", "unfold", "unsqueeze", "view", "view_as", "_unsafe_view")
)


class OpCount(TorchDispatchMode):
    """Counts the ops dispatched while active: kernels by name and by the package line that issued them, and views."""

    def __init__(self) -> None:
        super().__init__()
        self.kernels: Counter[str] = Counter()
        self.lines: Counter[str] = Counter()
        self.views = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        name = func.overloadpacket.__name__
        if name in VIEWS:
            self.views += 1
        else:
            self.kernels[name] += 1
            self.lines[package_line()] += 1
        return func(*args, **(kwargs or {}))


def package_line() -> str:
    """``module.py:line function`` of the innermost frame in ``retrieval_zoo``, or ``(backward or backbone)``."""
    frames = [f for f in traceback.extract_stack() if "retrieval_zoo" in f.filename]
    if not frames:
        return "(backward or backbone)"
    return f"{frames[-1].filename.split('retrieval_zoo/')[-1]}:{frames[-1].lineno} {frames[-1].name}"


def counted(run: Callable[[], object]) -> OpCount:
    """The ops of ``run()`` after one uncounted call (first calls build caches)."""
    run()
    count = OpCount()
    with count:
        run()
    return count


def step_ops(method: str, collection: Collection, bm25: BM25) -> tuple[OpCount, OpCount]:
    """(bare backbone's ops, the method's step's ops) at the fixed-cost sizes on the meta device."""
    model, batch = fixed_cost_inputs(method, CUDA_DEFAULTS.get(method, ()), collection, bm25)
    meta = torch.device("meta")
    model, batch = model.to(meta).train(), move_data_to_device(batch, meta)
    step = partial(train_step, model, batch, contextlib.nullcontext)  # fp32: no autocast
    return counted(bare_replay(model, captured(model, step), contextlib.nullcontext)), counted(step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", default=",".join(TRAINED))
    parser.add_argument("--lines", default=None, help="a method whose ops to list by source line")
    parser.add_argument("--bm25", default=None, help="record=FILE or replay=FILE (benchmarks/recorded_bm25.py)")
    args = parser.parse_args()
    collection = embedded("default")
    bm25 = bm25_for(collection, args.bm25)
    report(args.methods.split(","), args.lines, collection, bm25)


def report(methods: list[str], lines: str | None, collection: Collection, bm25: BM25) -> None:
    """Print the table of ``methods`` and, for ``lines``, its ops by source line."""
    header("Ops a step dispatches: 2 queries × (1 + 1) documents, 8 tokens, tiny_random, on the meta device")
    print("| method | bare ops | step ops | step ÷ bare | bare views | step views |\n|---|---|---|---|---|---|")
    for method in methods:
        bare, step = step_ops(method, collection, bm25)
        kernels, bare_kernels = sum(step.kernels.values()), sum(bare.kernels.values())
        print(f"| {method} | {bare_kernels} | {kernels} | {kernels / bare_kernels:.2f} | {bare.views} | {step.views} |")
        if method == lines:
            print(f"\n{method}'s ops by the package line that issued them:")
            for line, n in step.lines.most_common():
                print(f"{n:6d}  {line}")
            print("by op: " + ", ".join(f"{name} {n}" for name, n in step.kernels.most_common(25)) + "\n")


if __name__ == "__main__":
    main()
