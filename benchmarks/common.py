"""Helpers shared by the benchmark scripts: timing and a plain matmul reference."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import torch


def seconds(
    fn: Callable[[], object], repeat: int = 3, warmup: int = 1, statistic: Callable[[list[float]], float] = min
) -> float:
    """Wall time of ``fn()`` over ``repeat`` calls after ``warmup`` calls: the best by default, or ``statistic``."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistic(times)


def synced(fn: Callable[[], object]) -> Callable[[], None]:
    """``fn`` followed by a device synchronisation, so a timer sees the GPU's work finish."""

    def run() -> None:
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    return run


def autocast_for(device: torch.device, precision: str) -> Callable[[], contextlib.AbstractContextManager]:
    """A factory of the context a step or an encoding runs in: nothing in fp32, bf16 autocast as ``trainer=gpu``."""

    def autocast() -> contextlib.AbstractContextManager:
        if precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=torch.bfloat16)

    return autocast


Searching = Callable[[torch.nn.Module], contextlib.AbstractContextManager]


def searching_for(device: torch.device, precision: str) -> Searching:
    """A factory of the context an index is built and searched in, as the pipeline does after the corpus's predict.

    Each encoder call in bf16 autocast as ``trainer=gpu``, the scoring in float32
    (:mod:`retrieval_zoo.encoding.precision`).
    """
    from lightning.pytorch.plugins import MixedPrecision

    from retrieval_zoo.encoding.precision import encoding_precision

    def searching(model: torch.nn.Module) -> contextlib.AbstractContextManager:
        if precision == "fp32":
            return contextlib.nullcontext()
        return encoding_precision(MixedPrecision("bf16-mixed", device.type), model)

    return searching


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
    from hydra.utils import instantiate

    cfg = composed_config(group, name, *overrides)
    return tuple(instantiate(cfg[g]) for g in (group, *also)) if also else instantiate(cfg[group])


def composed_class(group: str, name: str) -> type:
    """The class ``conf/<group>/<name>.yaml`` instantiates (its ``_target_``), without building it."""
    from hydra.utils import get_class

    return get_class(composed_config(group, name)[group]._target_)


def composed_config(group: str, name: str, *overrides: str) -> object:
    """The train config with ``<group>=<name>`` and ``overrides``, composed as train.py composes it."""
    from pathlib import Path

    from hydra import compose, initialize_config_dir

    conf = Path(__file__).resolve().parents[1] / "retrieval_zoo" / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        return compose("train", [f"{group}={name}", *overrides])


def shortened(cfg: object, tokens: int) -> None:
    """Cap a composed config's queries and documents at ``tokens`` (each encoder it has: the method's, its dense
    part's), so that a random backbone encodes a corpus fast."""
    from omegaconf import OmegaConf

    for node in ("method.encoder", "method.dense.encoder"):
        if OmegaConf.select(cfg, node) is not None:
            OmegaConf.update(cfg, f"{node}.query_max_length", tokens)
            OmegaConf.update(cfg, f"{node}.doc_max_length", tokens)


TRAINED_BAG = 256  # about the CSFs a document a trained CSurF keeps (README: 230–500 on the embedded collection)


def small_bags(model: torch.nn.Module, csfs: int = TRAINED_BAG, splade: bool = False) -> None:
    """A random MLM head expands to most of the vocabulary: a negative bias keeps expansions as small as trained.

    For CSurF's bags and, with ``splade`` (a random backbone only: a trained one keeps its own bias), SPLADE's
    vectors (``dlr_splade``), the methods whose lexical part is the MLM head's log(1 + ReLU(·)). Without it a
    randomly initialised CSurF (``backbone=tiny_random``, ``bert_base_random``) matches nearly every token of every
    document, and its inverted lists take tens of GB on the tiny test collection. The bias is set from the model
    itself, not fixed: over 8 texts of 128 random tokens, minus the mean of each text's ``csfs``-th largest max-
    pooled logit, so about ``csfs`` surface forms expand per text whatever the backbone's size (a fixed −0.3 left
    bert-base's random head expanding 27,948 of 30,522 forms a document).
    """
    from retrieval_zoo.lexical.splade import max_pooled_logits
    from retrieval_zoo.methods.csurf import CSurF
    from retrieval_zoo.methods.dhr_fusion import DhrFusion

    splade = splade and isinstance(model, DhrFusion) and model.lexical == "splade"
    if not (isinstance(model, CSurF) or splade) or model.encoder is None:
        return
    backbone = model.encoder.model
    bias = backbone.cls.predictions.bias
    ids = torch.randint(999, backbone.config.vocab_size, (8, 128), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        bias.zero_()
        maxima = max_pooled_logits(backbone.eval(), ids.to(bias.device), torch.ones_like(ids, device=bias.device))[0]
        bias.fill_(-maxima.float().topk(min(csfs, maxima.shape[1]), dim=1).values[:, -1].mean().item())


def header(title: str) -> None:
    """Print a benchmark title with the machine's thread count."""
    print(f"\n## {title}  (torch {torch.__version__}, {torch.get_num_threads()} threads)\n")


def first_batch(model: object, collection: object, bm25: object, batch_size: int, n_negatives: int = 1) -> object:
    """The first training batch the DataModule gives ``model`` on ``collection``, as ``train.py`` builds it (tokens
    from the token caches, the method's BM25 fields), on the CPU."""
    from retrieval_zoo.training.datamodule import TriplesDataModule

    datamodule = TriplesDataModule(collection, bm25, batch_size=batch_size, n_negatives=n_negatives, needs=model.needs,
                                   epochs=1, tokenizer=model.text_tokenizer(), term_keys=model.term_keys())  # fmt: skip
    datamodule.setup("fit")
    return next(iter(datamodule.train_dataloader()))
