"""A ``train.py`` run directory read back: its saved config and its model with the best checkpoint loaded."""

from __future__ import annotations

from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf


def trained_config(run_dir: Path) -> DictConfig:
    """The resolved config a ``train.py`` run directory saved."""
    path = Path(run_dir) / "run_config.yaml"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: run_dir must be a train.py output directory")
    return OmegaConf.load(path)


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
