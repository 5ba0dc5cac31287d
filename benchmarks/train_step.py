"""Training-step overhead of a method over its bare encoder, side by side on the same batch.

The method's step is everything ``training_step`` does (query and document encoding, scores, losses, backward) on
a batch from the DataModule as ``train.py`` builds it, whose tokens come from the token caches. The bare step
replays the very token tensors the method gave its encoder (captured by a hook), with a trivial loss, and backward;
the two are timed in alternation. The ratio is the cost of the method's machinery on top of the backbone (1.0 =
free). ``benchmarks/gpu_throughput.py`` measures the same on any device and backbone, with encoding and search.

    python -m benchmarks.train_step [--method dense|clear|roc|delade_cls|csurf] [--batch-size 64] [--negatives 1]
"""

from __future__ import annotations

import argparse
import contextlib

from benchmarks.common import composed, header
from benchmarks.gpu_throughput import step_ratio
from retrieval_zoo.data.collections import embedded
from retrieval_zoo.lexical.bm25 import BM25
from retrieval_zoo.training.datamodule import TriplesDataModule

METHODS = ("dense", "clear", "roc", "delade_cls", "csurf")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--negatives", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--method", choices=sorted(METHODS), default="dense")
    args = parser.parse_args()
    collection = embedded("default")
    model = composed("method", args.method)
    datamodule = TriplesDataModule(
        collection,
        BM25(collection),
        batch_size=args.batch_size,
        n_negatives=args.negatives,
        needs=model.needs,
        epochs=1,
        tokenizer=model.text_tokenizer(),  # as train.py: the batch carries tokens from the token caches
    )
    datamodule.setup("fit")
    batch = next(iter(datamodule.train_dataloader()))
    # The bare step replays exactly the token tensors the method feeds its encoder (markers, truncation and all).
    bare, method = step_ratio(model, args.method, batch, contextlib.nullcontext, args.repeat)
    header(f"{args.method} training step vs. bare encoder forward + backward")
    print(f"{args.batch_size} queries × (1 + {args.negatives}) documents, SPLADE-tiny encoder, fp32\n")
    print("| step | seconds | ratio |\n|---|---|---|")
    print(f"| bare encoder fwd + bwd (with the MLM head for delade_cls) | {bare:.3f} | 1.00 |")
    print(f"| {args.method} (encode + losses + bwd) | {method:.3f} | {method / bare:.2f} |")


if __name__ == "__main__":
    main()
