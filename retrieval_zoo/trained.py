"""A ``train.py`` run directory read back: its saved config and its model with the best checkpoint loaded."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf


def trained_config(run_dir: Path) -> DictConfig:
    """The resolved config a ``train.py`` run directory saved, its classes found where this version keeps them."""
    path = Path(run_dir) / "run_config.yaml"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: run_dir must be a train.py output directory")
    cfg = OmegaConf.load(path)
    if not isinstance(cfg, DictConfig):
        raise ValueError(f"{path}: expected a mapping, not a list")
    relocate_targets(cfg, path)
    return cfg


def relocate_targets(node: DictConfig | ListConfig, path: Path, where: str = "") -> None:
    """Point each ``_target_`` of a saved config whose module has moved at the one class of that name in the package.

    A run written before a module moved names its old path; the class keeps its name. A target that names no class
    of the package, or a name two classes share, fails here with the file and the key.
    """
    items = node.items_ex(resolve=False) if isinstance(node, DictConfig) else enumerate(node)
    for key, value in list(items):
        at = f"{where}.{key}" if where else str(key)
        if isinstance(value, DictConfig | ListConfig):
            relocate_targets(value, path, at)
        elif key == "_target_" and isinstance(value, str) and value.startswith("retrieval_zoo.") and not found(value):
            name = value.rsplit(".", 1)[1]
            homes = [m for m in package_modules() if isinstance(getattr(m, name, None), type) and
                     getattr(m, name).__module__ == m.__name__]  # fmt: skip
            if len(homes) != 1:
                raise ValueError(f"{path}: {at} = {value}: no such class in this version of retrieval_zoo"
                                 + (f" (several named {name})" if homes else ""))  # fmt: skip
            node[key] = f"{homes[0].__name__}.{name}"
            print(f"[trained] {path}: {at} {value} is now {node[key]}")


def found(target: str) -> bool:
    """Whether ``module.Class`` imports."""
    module, name = target.rsplit(".", 1)
    try:
        return hasattr(importlib.import_module(module), name)
    except ImportError:
        return False


@cache
def package_modules() -> list:
    """Every module of retrieval_zoo, imported once (only when a saved target has moved)."""
    import retrieval_zoo

    names = [info.name for info in pkgutil.walk_packages(retrieval_zoo.__path__, "retrieval_zoo.")]
    return [importlib.import_module(name) for name in names if not name.endswith("__main__")]


def without_teacher(method: DictConfig) -> DictConfig:
    """``method`` without its distillation teacher, which trains the run; the trained model needs none."""
    return OmegaConf.merge(method, {"teacher": None}) if method.get("teacher") is not None else method


def newest(checkpoints: list[Path]) -> tuple[Path, dict]:
    """The checkpoint of the highest global step among ``checkpoints``, and its contents (tensors memory-mapped)."""
    loaded = [(path, torch.load(path, map_location="cpu", weights_only=False, mmap=True)) for path in checkpoints]
    return max(loaded, key=lambda found: found[1].get("global_step", -1))


def best_checkpoint(run_dir: Path) -> Path:
    """The checkpoint a ``train.py`` run kept as best by its monitored measure (``val/MRR@10``), else its newest.

    Two callbacks write ``last*.ckpt``: the every-N-steps one and the epoch-end one, which Lightning names
    ``last-v1.ckpt`` when the other already holds ``last.ckpt`` (or the reverse). So the choice never rests on the
    order of file names: the one kept checkpoint (``checkpoint.save_top_k=1``, the default); with several, the best
    path that the newest checkpoint's monitoring callback records; with none, the newest by global step.
    """
    folder = Path(run_dir) / "checkpoints"
    found = sorted(folder.glob("*.ckpt"))
    if not found:
        raise FileNotFoundError(f"no checkpoint under {folder}")
    kept = [path for path in found if not path.name.startswith("last")]
    if len(kept) == 1:
        return kept[0]
    path, latest = newest(found)
    if not kept:
        return path
    states = latest.get("callbacks", {}).values()
    best = next(
        (Path(s["best_model_path"]).name for s in states if s.get("monitor") and s.get("best_model_path")), None
    )
    if best is None or folder / best not in kept:
        raise FileNotFoundError(f"{path}: records no best checkpoint among {[p.name for p in kept]} of {folder}")
    return folder / best


def load_trained(run_dir: Path, cfg: DictConfig) -> torch.nn.Module:
    """The model of ``cfg.method`` with the best (else newest) checkpoint of a ``train.py`` run loaded."""
    checkpoint = best_checkpoint(run_dir)
    model = instantiate(without_teacher(cfg.method))
    model.load_state_dict(torch.load(checkpoint, map_location="cpu", weights_only=False)["state_dict"])
    print(f"[trained] {checkpoint}")
    return model
