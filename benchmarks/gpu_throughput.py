"""How busy each method keeps the accelerator: training step, corpus encoding and search against the bare encoder.

Per method, side by side in one run on one device (``--device cuda|cpu``) and backbone (``--backbone``, any
``conf/backbone`` name; ``bert_base_random`` is bert-base's size, randomly initialised, no download):
- **step ÷ bare step**: ``losses(batch)`` + backward on a batch from the DataModule as ``train.py`` builds it (its
  tokens from the token caches), against a replay of the very token tensors the method fed its encoder through the
  encoder alone with a trivial loss (CSurF: the transformer alone; it projects to the vocabulary itself);
- **encoding docs/s and ÷ replay**: the corpus encoding of the index the method's config picks
  (``Index.doc_encoder``, the path evaluation runs) over ``--docs`` documents, against an encoder-only replay of the
  token tensors it produced;
- **search ms/query** (CSurF's inverted lists, on the device): over ``--queries`` dev queries of the collection.
With ``--precision bf16`` the steps and encodings run under bf16 autocast, as ``trainer=gpu`` does; ``--compile``
compiles the backbone (``method.encoder.compile=true``). ``--end-to-end`` also times ``python train.py`` with the
given trainer.

    python -m benchmarks.gpu_throughput [--device cuda] [--backbone bert_base_random] [--methods dense,csurf]
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import torch

from benchmarks.common import composed, header, side_by_side
from retrieval_zoo.data.collections import embedded
from retrieval_zoo.index.csf import InvertedLists
from retrieval_zoo.lexical.bm25 import BM25
from retrieval_zoo.training.datamodule import TriplesDataModule

METHODS = ("dense", "clear", "roc", "delade_cls", "csurf")


def bare_encoder(model: torch.nn.Module, method: str) -> torch.nn.Module:
    """The module whose forward the bare step replays: the transformer (CSurF), else the encoder's model."""
    return model.encoder.model.base_model if method == "csurf" else model.encoder.model


def captured(encoder: torch.nn.Module, run: Callable[[], object]) -> list[dict]:
    """The keyword inputs ``encoder`` received while ``run()`` ran."""
    inputs: list[dict] = []
    hook = encoder.register_forward_pre_hook(lambda _m, _a, kwargs: inputs.append(kwargs), with_kwargs=True)
    try:
        run()
    finally:
        hook.remove()
    return inputs


def step_ratio(model: torch.nn.Module, method: str, batch: object, autocast: object, repeat: int) -> tuple:
    """(bare step s, method step s) on one batch, timed in alternation."""
    encoder = bare_encoder(model, method)

    def method_step() -> None:
        with autocast():
            losses, _ = model.losses(batch)
        torch.stack(list(losses.values())).sum().backward()
        model.zero_grad(set_to_none=True)

    inputs = captured(encoder, method_step)

    def bare_step() -> None:
        with autocast():
            total = torch.stack([encoder(**kwargs)[0].float().sum() for kwargs in inputs]).sum()
        total.backward()
        model.zero_grad(set_to_none=True)

    timings = side_by_side({"bare": synced(bare_step), "method": synced(method_step)}, repeat=repeat)
    return timings["bare"], timings["method"]


def encoding_ratio(model: torch.nn.Module, method: str, index: object, docids: list[str], autocast: object,
                   collection: object, bm25: BM25) -> tuple[float, float]:  # fmt: skip
    """(replay s, method s) encoding ``docids`` through the method's default index, as evaluation does."""
    encode = index.doc_encoder(model, collection, bm25)
    encoder = bare_encoder(model, method)

    def project() -> None:
        with torch.inference_mode(), autocast():
            encode(docids)

    inputs = captured(encoder, project)

    def replay() -> None:
        with torch.inference_mode(), autocast():
            for kwargs in inputs:
                encoder(**kwargs)

    timings = side_by_side({"replay": synced(replay), "method": synced(project)}, repeat=2)
    return timings["replay"], timings["method"]


def synced(fn: Callable[[], object]) -> Callable[[], None]:
    """``fn`` followed by a device synchronisation, so a timer sees the GPU's work finish."""

    def run() -> None:
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    return run


def main() -> None:
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
    args = parser.parse_args()
    device = torch.device(args.device)
    collection = embedded("default")
    bm25 = BM25(collection)
    docids = list(collection.corpus)[: args.docs]

    def autocast() -> contextlib.AbstractContextManager:
        if args.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=torch.bfloat16)

    header(f"Throughput on {device} ({args.backbone}, {args.precision}{', compiled' if args.compile else ''})")
    print("| method | bare step (s) | step (s) | step ÷ bare | encoding docs/s | replay docs/s | project ÷ replay |")
    print("|---|---|---|---|---|---|---|")
    for method in args.methods.split(","):
        compiled = [f"method.encoder.compile={args.compile}"]
        model, index = composed("method", method, f"backbone={args.backbone}", *compiled, also=("index",))
        model = model.to(device)
        datamodule = TriplesDataModule(collection, bm25, batch_size=args.batch_size, needs=model.needs, epochs=1,
                                       tokenizer=model.text_tokenizer())  # fmt: skip
        datamodule.setup("fit")
        batch = next(iter(datamodule.train_dataloader()))
        batch.query_tokens, batch.doc_tokens = batch.query_tokens.to(device), batch.doc_tokens.to(device)
        bare, step = step_ratio(model.train(), method, batch, autocast, args.repeat)
        replay, project = encoding_ratio(model.eval(), method, index, docids, autocast, collection, bm25)
        n = len(docids)
        print(f"| {method} | {bare:.4f} | {step:.4f} | {step / bare:.2f} | {n / project:,.0f} | {n / replay:,.0f} | "
              f"{replay / project:.2f} |")  # fmt: skip
        if method == "csurf":
            queries = dict(list(collection.judged_queries("dev").items())[: args.queries])
            with torch.inference_mode(), autocast():
                retriever = InvertedLists().build(model, collection, bm25)
                retriever.search(queries, 1000)
            print(f"\nCSurF search on {retriever.device}: {retriever.efficiency()['ms_per_query']:.1f} ms a query "
                  f"({len(queries)} dev queries, k = 1000)\n")  # fmt: skip
    if args.end_to_end:
        started = time.perf_counter()
        out = tempfile.mkdtemp(prefix="gpu_throughput-")
        command = [sys.executable, "train.py", f"trainer={args.end_to_end}", "logger=csv", f"hydra.run.dir={out}"]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        print(f"\n`python train.py trainer={args.end_to_end}`: {time.perf_counter() - started:.0f} s end to end")


if __name__ == "__main__":
    main()
