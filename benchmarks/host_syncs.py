"""Host synchronisations of each method's training step and corpus-encoding batch, counted on any machine.

On CUDA, ``.item()``, ``bool()`` / ``float()`` of a tensor, ``.tolist()``, ``.cpu()``, ``nonzero``,
``unique``, ``masked_select``, boolean-mask indexing and ``repeat_interleave`` without ``output_size`` stop the host
until the GPU catches up. ``torch.profiler`` records the ops behind them on a CPU run too
(``aten::_local_scalar_dense``, ``aten::nonzero``, ``aten::_unique2``, ...) and, with Python stacks, the calls of
``tolist`` / ``cpu`` that leave no op on the CPU (``numpy`` refuses a CUDA tensor: it only ever reads the host's).
Each is counted once, at its outermost op, and named by
the first frame outside torch; the DataLoader's own work (host tensors, its seeds) is not counted, nor is work marked
:func:`~retrieval_zoo.host_work.host_only` (reads of tensors kept on the host on purpose, such as RoC's draws on its
CPU generator, which a CPU run cannot tell from device reads). One blind spot: ``.to("cpu")`` leaves no trace on a
CPU run (read the code path).
On a GPU, ``benchmarks.gpu_throughput --sync-debug`` gives the same count from torch's own sync debug mode.

    python -m benchmarks.host_syncs [--backbone tiny_random] [--methods dense,csurf] [--batch-size 8] [--docs 64]
"""

from __future__ import annotations

import argparse
import contextlib
import warnings
from collections import Counter
from collections.abc import Callable
from functools import partial

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.common import composed, first_batch, header, small_bags
from retrieval_zoo.data.collections import Collection, embedded
from retrieval_zoo.host_work import HOST_ONLY
from retrieval_zoo.lexical.lucene_bm25 import BM25

METHODS = ("dense", "clear", "roc", "delade_cls", "csurf", "dlr_splade", "dhr_bm25_dense")
SYNC_OPS = frozenset({
    "aten::_local_scalar_dense",  # .item(), bool(), float(), repeat_interleave without output_size, masked_select
    "aten::nonzero",  # nonzero, boolean-mask indexing
    "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive", "aten::unique_dim_consecutive",
})  # fmt: skip
# What a method runs on CUDA where its default on a CPU differs: the path a GPU takes is the one counted
GPU_PATH = {"csurf": ("method.step_shapes=fixed",)}
# ``.numpy()`` is not among them: it refuses a CUDA tensor, so where it runs on a GPU it reads the host's memory
HOST_COPIES = tuple(f"<built-in method {name} of Tensor" for name in ("tolist", "cpu"))


def host_syncs(fn: Callable[[], object]) -> Counter[str]:
    """The host synchronisations ``fn()`` would make on CUDA: ``"op at file(line): function"`` → count.

    Call ``fn`` once before: a module it imports on first use runs code that Python then frees, and the profiler's
    Python tracer keeps pointers to the names of the code it saw, read after the run (now and then undecodable).
    """
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        fn()
    counted: set[int] = set()
    syncs: Counter[str] = Counter()
    for event in prof.events():
        if event.name not in SYNC_OPS and not event.name.startswith(HOST_COPIES):
            continue
        outermost, site, parent, loader = event, None, event.cpu_parent, False
        while parent is not None:  # the outermost aten op (repeat_interleave, index, ...) and the caller's frame
            if parent.name.startswith("aten::"):
                outermost = parent
            elif site is None and "(" in parent.name and not parent.name.startswith(("torch/", "<built-in")):
                site = parent.name
            loader |= parent.name.startswith(("torch/utils/data/", HOST_ONLY))  # the DataLoader's or marked host work
            parent = parent.cpu_parent
        if not loader and id(outermost) not in counted:
            counted.add(id(outermost))
            name = outermost.name if outermost.name.startswith("aten::") else outermost.name.split()[2]  # tolist
            syncs[f"{name} at {site}"] += 1
    return syncs


def train_step(model: torch.nn.Module, batch: object, autocast: object) -> None:
    """One training step's forward and backward (``autocast``: a context manager factory), gradients cleared."""
    with autocast():
        losses, _ = model.losses(batch)
    torch.stack(list(losses.values())).sum().backward()
    model.zero_grad(set_to_none=True)


def report_syncs(what: str, fn: Callable[[], object]) -> None:
    """Print the host synchronisations ``fn()`` makes on CUDA, by source line (torch's sync debug mode)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    lines = Counter(
        f"{w.filename.split('retrieval_zoo/')[-1]}:{w.lineno}" for w in caught if "synchroniz" in str(w.message)
    )
    print(f"syncs, {what}: {sum(lines.values())} " + ", ".join(f"{k} ×{n}" for k, n in lines.most_common()))


def method_syncs(method: str, backbone: str, collection: Collection, bm25: BM25, batch_size: int,
                 docs: int) -> tuple[Counter[str] | None, Counter[str], Counter[str]]:  # fmt: skip
    """(syncs of one training step or None for an untrained method, of encoding ``docs`` and 4 × ``docs`` documents).

    An encoding's count that grows with the documents is paid per batch; the rest, once a call (the copy of the
    encoded call to the host). With ``docs`` = 0, the step alone (empty encoding counts).
    """
    model, index = composed("method", method, f"backbone={backbone}", *GPU_PATH.get(method, ()), also=("index",))
    if backbone.endswith("_random"):
        small_bags(model)
    step = None
    if model.trainable:
        batch = first_batch(model, collection, bm25, batch_size)
        model.train()

        step_once = partial(train_step, model, batch, contextlib.nullcontext)
        step_once()  # first-call work (lazy tables, caches) is not a step's
        step = host_syncs(step_once)
    model.eval()
    if docs == 0:  # the step alone
        return step, Counter(), Counter()
    encode = index.doc_encoder(model, collection, bm25)
    with torch.inference_mode():
        encode(list(collection.corpus)[:docs])
        encodings = tuple(host_syncs(partial(encode, list(collection.corpus)[:n])) for n in (docs, 4 * docs))
    return step, *encodings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backbone", default="tiny_random")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--docs", type=int, default=64)
    args = parser.parse_args()
    collection = embedded("default")
    measure(args.methods.split(","), args.backbone, collection, BM25(collection), args.batch_size, args.docs)


def measure(methods: list[str], backbone: str, collection: Collection, bm25: BM25, batch_size: int,
            docs: int) -> dict[str, tuple[Counter[str] | None, Counter[str], Counter[str]]]:  # fmt: skip
    """Print and return each method's syncs per training step and per encoding call of ``docs`` and 4 × ``docs``."""
    header(f"Host synchronisations ({backbone}; a step of {batch_size} queries)")
    print(f"| method | training step | encoding {docs} docs | encoding {4 * docs} docs | where (step / encoding) |")
    print("|---|---|---|---|---|")
    found = {}
    for method in methods:
        step, few, many = found[method] = method_syncs(method, backbone, collection, bm25, batch_size, docs)
        sites = " / ".join(", ".join(f"{k} ×{n}" for k, n in c.most_common()) for c in (step or Counter(), many))
        count = "—" if step is None else sum(step.values())
        print(f"| {method} | {count} | {sum(few.values())} | {sum(many.values())} | {sites} |")
    return found


if __name__ == "__main__":
    main()
