"""Helpers shared by the benchmark scripts: timing and a plain matmul reference."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def seconds(fn: Callable[[], object], repeat: int = 3, warmup: int = 1) -> float:
    """Best-of-``repeat`` wall time of ``fn()`` after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def side_by_side(fns: dict[str, Callable[[], object]], repeat: int = 5, warmup: int = 1) -> dict[str, float]:
    """Best-of-``repeat`` wall time of each function, timed in alternation so that load from other processes
    hits every function alike."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeat):
        for name, fn in fns.items():
            started = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - started)
    return best


def matmul_gflops(size: int = 2048, dtype: torch.dtype = torch.float32) -> float:
    """GFLOP/s of a plain square torch matmul, the roofline every encoder figure is divided by."""
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    return 2 * size**3 / seconds(lambda: torch.mm(a, b), repeat=5) / 1e9


def composed(group: str, name: str, *overrides: str, also: tuple[str, ...] = ()) -> object:
    """``conf/<group>/<name>.yaml`` as train.py composes it (default backbone), instantiated: config is the registry.

    With ``also``, a tuple: that group's object and then each other group's of the same composition (e.g. the
    index a method's config picks).
    """
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    conf = Path(__file__).resolve().parents[1] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose("train", [f"{group}={name}", *overrides])
    return tuple(instantiate(cfg[g]) for g in (group, *also)) if also else instantiate(cfg[group])


def small_bags(model: torch.nn.Module) -> None:
    """A random MLM head expands to most of the vocabulary: a negative bias keeps CSurF's bags small, as trained.

    Without it a randomly initialised CSurF (``backbone=tiny_random``, ``bert_base_random``) matches nearly every
    token of every document, and its inverted lists take tens of GB on the tiny test collection.
    """
    if hasattr(model, "vector_projection"):
        with torch.no_grad():
            model.encoder.model.cls.predictions.bias.fill_(-0.3)


def header(title: str) -> None:
    """Print a benchmark title with the machine's thread count."""
    print(f"\n## {title}  (torch {torch.__version__}, {torch.get_num_threads()} threads)\n")


def first_batch(model: object, collection: object, bm25: object, batch_size: int) -> object:
    """The first training batch the DataModule gives ``model`` on ``collection``, as ``train.py`` builds it (tokens
    from the token caches, the method's BM25 fields), on the CPU."""
    from retrieval_zoo.training.datamodule import TriplesDataModule

    datamodule = TriplesDataModule(collection, bm25, batch_size=batch_size, needs=model.needs, epochs=1,
                                   tokenizer=model.text_tokenizer(), term_keys=model.term_keys())  # fmt: skip
    datamodule.setup("fit")
    return next(iter(datamodule.train_dataloader()))
