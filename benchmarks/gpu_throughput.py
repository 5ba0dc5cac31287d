"""How busy each method keeps the accelerator: training step, corpus encoding and search against the bare encoder.

Per method, side by side in one run on one device (``--device cuda|cpu``) and backbone (``--backbone``, any
``conf/backbone`` name; ``bert_base_random`` is bert-base's size, randomly initialised, no download):
- **step ÷ bare step** (trained methods): ``losses(batch)`` + backward on a batch from the DataModule as ``train.py``
  builds it (its tokens from the token caches), against a replay of the very token tensors the method fed its
  backbones through the backbones alone with a trivial loss;
- **encoding docs/s and ÷ replay** (every method, the untrained fusions included): the corpus encoding of the index
  the method's config picks (``Index.doc_encoder``, the path evaluation runs) over ``--docs`` documents, against a
  replay of the token tensors it produced through the backbones alone (none for BM25's DLRs).
- **search ms/query** (CSurF's inverted lists, on the device): over ``--queries`` dev queries of the collection.
The bare backbone is the whole one, its MLM head included: SPLADE, DeLADE and CSurF, which read the logits
themselves, are compared with the masked LM's own forward over the full (batch, length, |V|) logits.
With ``--precision bf16`` the steps and encodings run under bf16 autocast, as ``trainer=gpu`` does; ``--compile``
compiles every backbone (what ``method.encoder.compile=true`` does). ``--end-to-end`` also times ``python train.py``
with the given trainer.

    python -m benchmarks.gpu_throughput [--device cuda] [--backbone bert_base_random] [--methods dense,csurf]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial

import torch
from lightning.fabric.utilities.apply_func import move_data_to_device

from benchmarks.common import (
    autocast_for,
    composed,
    composed_class,
    first_batch,
    header,
    searching_for,
    side_by_side,
    small_bags,
    synced,
)
from benchmarks.host_syncs import report_syncs, train_step
from benchmarks.recorded_bm25 import bm25_recording
from retrieval_zoo.data.collections import Collection, embedded
from retrieval_zoo.encoding.encoder import Encoder
from retrieval_zoo.index.csurf.csf import InvertedLists
from retrieval_zoo.lexical.lucene_bm25 import BM25

METHODS = ("dense", "clear", "roc", "delade_cls", "csurf", "dlr_splade", "dhr_bm25_dense")


def encoder_models(model: torch.nn.Module) -> dict[torch.nn.Module, torch.nn.Module]:
    """Each backbone the method runs, whole and as the transformer below its MLM head → the whole backbone.

    The bare encoder is the whole backbone, its MLM head included: a method that reads the logits itself (SPLADE's
    chunked max) is compared with the masked LM's own forward.
    """
    models = [m.model for m in model.modules() if isinstance(m, Encoder)]
    return {module: m for m in models for module in (m, m.base_model)}


def captured(model: torch.nn.Module, run: Callable[[], object]) -> list[tuple[torch.nn.Module, dict]]:
    """(whole backbone, keyword inputs) of each outermost backbone call while ``run()`` ran: what the bare replays."""
    calls: list[tuple[torch.nn.Module, dict]] = []
    depth = [0]
    whole = encoder_models(model)

    def before(module: torch.nn.Module, _args: tuple, kwargs: dict) -> None:
        if depth[0] == 0:
            calls.append((whole[module], kwargs))
        depth[0] += 1

    def after(*_: object) -> None:
        depth[0] -= 1

    hooks = [m.register_forward_pre_hook(before, with_kwargs=True) for m in whole]
    hooks += [m.register_forward_hook(after) for m in whole]
    try:
        run()
    finally:
        for hook in hooks:
            hook.remove()
    return calls


def step_ratio(model: torch.nn.Module, batch: object, autocast: object, repeat: int) -> tuple[float, float]:
    """(bare step s, method step s) on one batch, timed in alternation."""

    method_step = partial(train_step, model, batch, autocast)
    bare_step = bare_replay(model, captured(model, method_step), autocast)
    timings = side_by_side({"bare": synced(bare_step), "method": synced(method_step)}, repeat=repeat)
    return timings["bare"], timings["method"]


def bare_replay(
    model: torch.nn.Module, calls: list[tuple[torch.nn.Module, dict]], autocast: object
) -> Callable[[], None]:
    """The bare backbone's step on a method step's ``captured`` calls: each output summed, backward, grads cleared."""

    def bare_step() -> None:
        with autocast():
            total = torch.stack([first_output(module(**kwargs)).float().sum() for module, kwargs in calls]).sum()
        total.backward()
        model.zero_grad(set_to_none=True)

    return bare_step


def fixed_cost_inputs(
    method: str, overrides: Sequence[str], collection: Collection, bm25: BM25
) -> tuple[object, object]:
    """(model, batch) of ``--fixed-cost``'s step: 2 queries × (1 + 1) documents of at most 8 tokens, tiny_random.

    (None, None) for a method that does not train (whose encoder, if any, has no lengths to set).
    """
    if not composed_class("method", method).trainable:
        return None, None
    lengths = ("method.encoder.query_max_length=8", "method.encoder.doc_max_length=8")
    model = composed("method", method, "backbone=tiny_random", *lengths, *overrides)
    small_bags(model)
    return model, first_batch(model, collection, bm25, batch_size=2)


def first_output(output: object) -> torch.Tensor:
    """The logits or last hidden states of a backbone's output."""
    return output[0]


def encoding_ratio(model: torch.nn.Module, index: object, docids: list[str], autocast: object, collection: object,
                   bm25: BM25) -> tuple[float | None, float]:  # fmt: skip
    """(replay s or None without an encoder, method s) encoding ``docids`` through the method's index, as evaluation
    does."""
    encode = index.doc_encoder(model, collection, bm25)

    def project() -> None:
        with torch.inference_mode(), autocast():
            encode(docids)

    calls = captured(model, project)

    def replay() -> None:
        with torch.inference_mode(), autocast():
            for module, kwargs in calls:
                module(**kwargs)

    if not calls:  # BM25's DLRs: no encoder
        return None, side_by_side({"method": synced(project)}, repeat=2)["method"]
    timings = side_by_side({"replay": synced(replay), "method": synced(project)}, repeat=2)
    return timings["replay"], timings["method"]


def fixed_cost(args: argparse.Namespace, collection: Collection, bm25: BM25, autocast: object) -> None:
    """Each trained method's step where compute is negligible, against the bare backbone's on the same tensors.

    2 queries × (1 + 1) documents of at most 8 tokens on the tiny test backbone: what is left is the fixed cost of a
    step (Python, small ops, host syncs), which a GPU waits through when nothing overlaps it.
    """
    device = torch.device(args.device)
    header(f"Fixed cost of a step on {device}: 2 queries × (1 + 1) documents, 8 tokens, tiny_random")
    print("| method | bare step (ms) | step (ms) | step ÷ bare |\n|---|---|---|---|")
    for method in args.methods.split(","):
        model, batch = fixed_cost_inputs(method, args.override, collection, bm25)
        if batch is None:
            continue
        batch = move_data_to_device(batch, device)
        bare, step = step_ratio(model.to(device).train(), batch, autocast, max(args.repeat, 20))
        print(f"| {method} | {1000 * bare:.2f} | {1000 * step:.2f} | {step / bare:.2f} |")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line's settings."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--backbone", default="splade_tiny")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--docs", type=int, default=1024)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--end-to-end", default=None, help="a trainer config: also time `python train.py trainer=…`")
    parser.add_argument("--fixed-cost", action="store_true", help="also each step at tiny sizes ÷ the bare one's")
    parser.add_argument("--sync-debug", action="store_true", help="CUDA: print each step's and encoding's host syncs")
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        help="a Hydra override for each method's config (e.g. method.step_shapes=fixed with --methods csurf)",
    )
    parser.add_argument("--bm25", default=None, help="record=FILE or replay=FILE: BM25's Java answers (recorded_bm25)")
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    collection = embedded("default")
    with bm25_recording(collection, args.bm25) as bm25:
        measure(args, collection, bm25)


def measure(args: argparse.Namespace, collection: Collection, bm25: BM25) -> None:
    """Print the table for ``args.methods`` on ``collection`` (the tests run it on a tiny one)."""
    device = torch.device(args.device)
    docids = list(collection.corpus)[: args.docs]
    autocast = autocast_for(device, args.precision)

    header(f"Throughput on {device} ({args.backbone}, {args.precision}{', compiled' if args.compile else ''})")
    print("| method | bare step (s) | step (s) | step ÷ bare | encoding docs/s | replay docs/s | project ÷ replay |")
    print("|---|---|---|---|---|---|---|")
    for method in args.methods.split(","):
        model, index = composed("method", method, f"backbone={args.backbone}", *args.override, also=("index",))
        if args.backbone.endswith("_random"):
            small_bags(model, splade=True)  # CSurF's bags, SPLADE's vectors as small as trained ones
        model = model.to(device)
        for encoder in (m for m in model.modules() if isinstance(m, Encoder)) if args.compile else ():
            encoder.compile_model()  # what method.encoder.compile=true does, for every backbone of the method
        bare = step = None
        if model.trainable:
            batch = move_data_to_device(first_batch(model, collection, bm25, args.batch_size), device)
            bare, step = step_ratio(model.train(), batch, autocast, args.repeat)
            if args.sync_debug:
                report_syncs(f"{method} step", partial(train_step, model, batch, autocast))
        replay, project = encoding_ratio(model.eval(), index, docids, autocast, collection, bm25)
        if args.sync_debug:
            encode = index.doc_encoder(model, collection, bm25)
            with torch.inference_mode(), autocast():
                report_syncs(f"{method} encoding of {args.batch_size} docs", partial(encode, docids[: args.batch_size]))
        n = len(docids)
        steps = f"{bare:.4f} | {step:.4f} | {step / bare:.2f}" if step else "— | — | —"
        replayed = f"{n / replay:,.0f} | {replay / project:.2f}" if replay else "— | —"
        print(f"| {method} | {steps} | {n / project:,.0f} | {replayed} |")
        if method == "csurf" and args.queries > 0:
            queries = dict(list(collection.judged_queries("dev").items())[: args.queries])
            with torch.inference_mode(), searching_for(device, args.precision)(model):
                retriever = InvertedLists().build(model, collection, bm25)
                seconds = side_by_side({"search": synced(partial(retriever.search, queries, 1000))}, repeat=2)
            print(f"\nCSurF search on {retriever.device}: {1000 * seconds['search'] / len(queries):.1f} ms a query "
                  f"({len(queries)} dev queries, k = 1000, best of 2 after a warm-up)\n")  # fmt: skip
    if args.fixed_cost:
        fixed_cost(args, collection, bm25, autocast)
    if args.end_to_end:
        started = time.perf_counter()
        out = tempfile.mkdtemp(prefix="gpu_throughput-")
        command = [sys.executable, "train.py", f"trainer={args.end_to_end}", "logger=csv", f"hydra.run.dir={out}"]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        print(f"\n`python train.py trainer={args.end_to_end}`: {time.perf_counter() - started:.0f} s end to end")


if __name__ == "__main__":
    main()
