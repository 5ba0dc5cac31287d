"""Search from what was built: a saved index loaded against built, the dev queries searched, one query's latency.

For each (method, index) pair, on the embedded collection and the default backbone (untrained weights: the sizes and
times are a trained model's), in one run:

- **encode corpus**: the corpus encoded into a fresh cache (what a first search pays before building);
- **build index**: the index built from the cached encoding (``Index.build``);
- **load saved**: the same index written (``Index.save``) and read back (``Index.load``): what ``index_dir`` saves.

Then the 1,200 dev queries searched at k = 1000 (``search_batch``), and ``search(text, k=10)`` for 20 single dev
queries (median; the first query's warm-up left out). Targets: loading ≤ 10% of building; one query at k = 10
≤ 50 ms for dense, CLEAR and RoC on 2 CPU cores, ≤ 100 ms for the others. By default one pair per index family.

A flat faiss index's build is a copy of the vectors and its load maps a file, a fixed cost that is a sizeable share
of a copy of the embedded corpus's 10,000 vectors. ``--flat-sizes`` measures how the two grow: a ``Flat`` index of
random 128-d vectors built, saved and loaded at each size (best of 3 each), as the dense and union families do.

    python -m benchmarks.search_api [--pairs dense:faiss,clear:union,...] [--flat-sizes 10000,100000,1000000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from benchmarks.common import header
from retrieval_zoo.data.collections import embedded
from retrieval_zoo.evaluation.pipeline import build_collection_and_bm25, encode_for_index
from retrieval_zoo.index.vectors.faiss import FaissIndex
from retrieval_zoo.search_api import Retriever

T = TypeVar("T")

PAIRS = (
    "dense:faiss,clear:union,roc:concatenated,roc:union,delade_cls:gip,delade_cls:sparse,csurf:csf,csurf:bmp,"
    "csurf:lucene_impact,csurf:seismic"
)


def seconds_of(fn: Callable[[], T]) -> tuple[float, T]:
    """(wall seconds, result) of ``fn()``."""
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def measure(pairs: list[tuple[str, str]], folder: Path) -> list[dict]:
    """Each pair's figures (module docstring)."""
    dev = embedded("default").judged_queries("dev")
    return [measure_pair(method, index, folder, dev) for method, index in pairs]


def measure_pair(method: str, index_name: str, folder: Path, dev: dict[str, str]) -> dict:
    """One (method, index) pair's figures."""
    cache, saved = folder / f"cache-{method}-{index_name}", folder / f"{method}-{index_name}"
    overrides = [f"method={method}", f"index={index_name}", f"encode.cache_dir={cache}", "eval.tune_queries=0"]
    retriever = Retriever.load(None, overrides=overrides)  # the model, collection and BM25, warmed
    cfg, model, collection = retriever.cfg, retriever.model, retriever.collection
    _, bm25 = build_collection_and_bm25(cfg)
    index = instantiate(cfg.index)
    trainer = partial(instantiate(cfg.trainer, _partial_=True), default_root_dir=str(folder))
    fresh = OmegaConf.merge(cfg.encode, {"cache_dir": str(folder / f"fresh-{method}-{index_name}")})
    encode, _ = seconds_of(partial(encode_for_index, model, index, collection, bm25, trainer, fresh))
    shards, _ = encode_for_index(model, index, collection, bm25, trainer, cfg.encode)  # the cached encoding
    with torch.inference_mode():
        build, built = seconds_of(partial(index.build, model, collection, bm25, shards))
        saved.mkdir()
        index.save(built, saved)
        load, _ = seconds_of(partial(index.load, model, collection, bm25, saved))
    dev_seconds, _ = seconds_of(partial(retriever.search_batch, dev, 1000))
    latencies = [seconds_of(partial(retriever.search, text, 10))[0] for text in list(dev.values())[:21]]
    retriever.close()
    return {
        "pair": f"{method} × {index_name}",
        "encode": encode,
        "build": build,
        "load": load,
        "dev": dev_seconds,
        "one_query_ms": 1000 * statistics.median(latencies[1:]),
    }  # the first query's warm-up left out


def flat_growth(sizes: list[int], folder: Path, dim: int = 128) -> list[dict]:
    """A flat faiss index of ``n`` random vectors for each ``n`` in ``sizes``: build and load seconds (best of 3)."""
    rows = []
    for size in sizes:
        vectors = np.random.default_rng(0).random((size, dim), dtype=np.float32)
        shards = [(np.arange(size).astype(str), vectors)]
        build = min(seconds_of(partial(FaissIndex("Flat").build_sharded, shards))[0] for _ in range(3))
        saved = folder / f"flat-{size}"
        saved.mkdir()
        FaissIndex("Flat").build_sharded(shards).save(saved)
        load = min(seconds_of(partial(FaissIndex("Flat").load, saved))[0] for _ in range(3))
        rows.append({"size": size, "build": build, "load": load})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", default=PAIRS, help="method:index pairs, comma-separated; none: only --flat-sizes")
    parser.add_argument("--flat-sizes", default="", help="vector counts for a flat faiss index's build and load")
    args = parser.parse_args()
    pairs = [tuple(pair.split(":")) for pair in args.pairs.split(",")] if args.pairs != "none" else []
    with tempfile.TemporaryDirectory(prefix="search_api-") as folder:
        rows = measure(pairs, Path(folder))  # type: ignore[arg-type]
        flat = flat_growth([int(size) for size in args.flat_sizes.split(",") if size], Path(folder))
    if flat:
        header("A flat faiss index of random 128-d vectors: built from the vectors, and loaded once saved")
        print("| vectors | build (ms) | load saved (ms) | load ÷ build |\n|---|---|---|---|")
        for r in flat:
            build, load = 1000 * r["build"], 1000 * r["load"]
            print(f"| {r['size']:,} | {build:.2f} | {load:.2f} | {load / build:.3f} |")
    if not rows:
        return
    header("Search API on debian_descriptions-default: Retriever.load, the dev queries, one query")
    print("| method × index | encode corpus (s) | build index (s) | load saved (s) | load ÷ build | 1,200 dev queries, "
          "k = 1000 (s) | one query, k = 10 (ms) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['pair']} | {r['encode']:.1f} | {r['build']:.3f} | {r['load']:.3f} | "
              f"{r['load'] / r['build']:.2f} | {r['dev']:.1f} | {r['one_query_ms']:.0f} |")  # fmt: skip


if __name__ == "__main__":
    main()
