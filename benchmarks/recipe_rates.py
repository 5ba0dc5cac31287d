"""The MS MARCO recipes in hours: each ``*_msmarco`` recipe's training step and corpus encoding on one device.

For each recipe (``conf/experiment/*_msmarco.yaml``) its method is built at its backbone's size, randomly
initialised (``bert_base_random``; 6 layers for distilbert), with the recipe's batch (queries × (1 + negatives)),
max lengths, encoding batch and precision. Batches come from the DataModule on the embedded collection (the method's
BM25 fields included) with every text stretched to the recipe's max length by repeating its own tokens: MS MARCO
passages are shorter than 256 word pieces on average, so the times are upper bounds. A step is the forward, backward
and AdamW update; the median of ``--repeat`` steps is taken after warm-up. Hours follow from the recipe's steps (its
global batch over MS MARCO's 502,939 judged training queries, times its epochs) and from 8,841,823 passages encoded
at the measured rate; 8 GPUs are projected as one GPU's hours ÷ 8 (each takes 1/8 of the global batch). Distillation
recipes are timed without their KL term (the teacher's scores come from a run file; the KL over B × G scores costs
little), and their negatives from the DataModule's BM25 run.

    python -m benchmarks.recipe_rates --device cuda --precision bf16 [--bm25 replay=.gpu/bm25.pkl.gz]
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

import torch
from lightning.fabric.utilities.apply_func import move_data_to_device

from benchmarks.common import autocast_for, first_batch, header, seconds, small_bags, synced
from benchmarks.recorded_bm25 import bm25_recording
from retrieval_zoo.data.collections import Collection, embedded
from retrieval_zoo.encoding.tokens import Tokens

RECIPES = ("clear_msmarco", "roc_msmarco", "delade_cls_msmarco", "csurf_msmarco", "csurf_hn_msmarco")
TRAIN_QUERIES = 502_939  # MS MARCO passage's judged training queries
PASSAGES = 8_841_823
POOL = 500_500  # a recipe's validation pool: 500 queries × BM25's top 1,000 plus their judged passages (at most)
LAYERS = {"distilbert_base_uncased": 6}  # backbones shallower than bert-base: their random stand-in's depth
DISTILLING = ("method.kd_weight=0", "data.negatives_run=null", "data.teacher_run=null")


def recipe_config(recipe: str, stand_in: str = "bert_base_random") -> tuple[object, str]:
    """``experiment=<recipe>`` as train.py composes it, on the embedded collection, with a random backbone of the
    recipe's size (no download) and no run files; and the name of the backbone it stands for."""
    from hydra import compose, initialize_config_dir

    conf = Path(__file__).resolve().parents[1] / "retrieval_zoo" / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        backbone = compose("train", [f"experiment={recipe}"]).backbone.name
        overrides = [f"experiment={recipe}", "dataset=debian_descriptions", f"backbone={stand_in}"]
        if backbone in LAYERS:
            overrides.append(f"backbone.num_layers={LAYERS[backbone]}")
        if "kd" in recipe or "_hn_" in recipe:
            overrides += DISTILLING
        return compose("train", overrides), backbone


def stretched(tokens: Tokens, length: int) -> Tokens:
    """Each row's own tokens (between its first and last) repeated to fill ``length``: every text at max length."""
    rows = []
    for ids, mask in zip(tokens.ids, tokens.mask, strict=True):
        real = ids[mask.bool()]
        inner = real[1:-1] if len(real) > 2 else real
        filled = inner.repeat(math.ceil((length - 2) / len(inner)))[: length - 2]
        rows.append(torch.cat([real[:1], filled, real[-1:]]))
    ids = torch.stack(rows)
    return Tokens(ids, torch.ones_like(ids))


def recipe_batch(cfg: object, model: torch.nn.Module, collection: Collection, bm25: object) -> object:
    """The DataModule's first batch at the recipe's batch size and negatives, its texts at max length."""
    batch = first_batch(model, collection, bm25, cfg.data.batch_size, cfg.data.n_negatives)
    lengths = model.encoder.max_length
    batch.query_tokens = stretched(batch.query_tokens, lengths["query"])
    batch.doc_tokens = stretched(batch.doc_tokens, lengths["doc"])
    return batch


def measure(recipe: str, args: argparse.Namespace, collection: Collection, bm25: object) -> str:
    """The recipe's table row."""
    from hydra.utils import instantiate

    device = torch.device(args.device)
    cfg, backbone = recipe_config(recipe, args.backbone)
    model = instantiate(cfg.method)
    small_bags(model)  # a random MLM head expands to most of the vocabulary; CSurF's bags as trained
    batch = move_data_to_device(recipe_batch(cfg, model, collection, bm25), device)
    if args.batches_only:
        return f"| {recipe} | batch built |"
    model = model.to(device).train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)

    autocast = autocast_for(device, args.precision)

    def step() -> None:
        with autocast():
            losses, _ = model.losses(batch)
        torch.stack(list(losses.values())).sum().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    step_s = seconds(synced(step), args.repeat, warmup=2, statistic=statistics.median)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else float("nan")
    model.eval()
    size = model.encode_batch_size
    docs = stretched(batch.doc_tokens, model.encoder.max_length["doc"])
    docs = Tokens(docs.ids.repeat(math.ceil(size / len(docs.ids)), 1)[:size], docs.mask[:1].expand(size, -1))

    def encode() -> None:
        with torch.inference_mode(), autocast():
            model.encode_doc(docs)

    docs_per_s = size / seconds(synced(encode), args.repeat, warmup=2, statistic=statistics.median)
    per_epoch = math.ceil(TRAIN_QUERIES / cfg.data.batch_size)
    steps, epochs = per_epoch * cfg.trainer.max_epochs, cfg.trainer.max_epochs
    hours = steps * step_s / 3600
    layers = LAYERS.get(backbone, 12)
    return (f"| `{recipe}` | {backbone} ({layers} layers) | {cfg.data.batch_size} × "
            f"{1 + cfg.data.n_negatives} | {model.encoder.max_length['query']} / {model.encoder.max_length['doc']} | "
            f"{step_s:.3f} | {peak:.1f} | {per_epoch:,} × {epochs} | {hours:.1f} | {hours / 8:.1f} | "
            f"{docs_per_s:,.0f} | {PASSAGES / docs_per_s / 3600:.2f} | {POOL / docs_per_s / 60:.1f} |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="bf16")
    parser.add_argument("--backbone", default="bert_base_random", help="random stand-in (tiny_random: smoke test)")
    parser.add_argument("--recipes", default=",".join(RECIPES))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--bm25", default=None, help="record=FILE or replay=FILE: BM25's Java answers (recorded_bm25)")
    parser.add_argument("--batches-only", action="store_true", help="build the batches (to record BM25), time none")
    args = parser.parse_args()
    collection = embedded("default")
    header(f"MS MARCO recipes on {args.device} ({args.precision}, {args.backbone} standing in)")
    print("| recipe | backbone | batch | max lengths q / d | step (s) | peak GiB | steps | training h, 1 GPU | "
          "8 GPUs (projected) | encoding docs/s | 8.8M passages (h) | pool of 500,500 (min) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    with bm25_recording(collection, args.bm25) as bm25:
        for recipe in args.recipes.split(","):
            print(measure(recipe, args, collection, bm25), flush=True)


if __name__ == "__main__":
    main()
