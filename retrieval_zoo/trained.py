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


def load_trained(run_dir: Path, cfg: DictConfig) -> torch.nn.Module:
    """The model of ``cfg.method`` with the best (else last) checkpoint of a ``train.py`` run directory loaded."""
    checkpoints = sorted((Path(run_dir) / "checkpoints").glob("*.ckpt"), key=lambda p: p.name == "last.ckpt")
    if not checkpoints:
        raise FileNotFoundError(f"no checkpoint under {Path(run_dir) / 'checkpoints'}")
    model = instantiate(without_teacher(cfg.method))
    model.load_state_dict(torch.load(checkpoints[0], map_location="cpu", weights_only=False)["state_dict"])
    print(f"[trained] {checkpoints[0]}")
    return model
