"""A trained model as a self-contained folder, and back: what ``python -m retrieval_zoo.export`` writes.

The folder holds each encoder of the method as a Hugging Face model (``save_pretrained``: ``config.json``,
``model.safetensors``, the tokenizer with the method's markers) in a subfolder named after it (``encoder``,
``dense_encoder``), the method's other weights (RoC's projection, CSurF's φ_v, DeLADE's [CLS] layer) in
``retrieval_zoo.safetensors``, the run's config as ``run_config.yaml`` with each encoder's backbone pointing into the
folder, the run's ``results.json`` (its metrics and the fusion weight it tuned), ``retrieval_zoo.json`` (what is
where, the method and the format) and a model card, ``README.md``. :func:`load` rebuilds the method from that folder
alone: no checkpoint, no hub.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from retrieval_zoo.encoding.encoder import Encoder
from retrieval_zoo.trained import trained_config, without_teacher

FORMAT = 1  # bumped when the folder's layout changes: an older folder is refused, naming both
MANIFEST = "retrieval_zoo.json"
WEIGHTS = "retrieval_zoo.safetensors"


def encoder_modules(model: torch.nn.Module) -> dict[str, Encoder]:
    """The method's encoders by their module path (``encoder``, ``dense.encoder``)."""
    return {name: module for name, module in model.named_modules() if isinstance(module, Encoder)}


def folder_name(module_path: str) -> str:
    """An encoder's subfolder: its module path with ``_`` for ``.``."""
    return module_path.replace(".", "_")


def manifest(model_dir: Path) -> dict:
    """``retrieval_zoo.json`` of an exported folder, its format checked."""
    path = Path(model_dir) / MANIFEST
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: model_dir must be a folder written by python -m "
                                "retrieval_zoo.export")  # fmt: skip
    found = json.loads(path.read_text())
    if found.get("format") != FORMAT:
        raise ValueError(f"{path}: format {found.get('format')}, this retrieval_zoo reads format {FORMAT}: export the "
                         "run again with this version")  # fmt: skip
    return found


def backbones_at(method: DictConfig, model_dir: Path, encoders: dict[str, str]) -> DictConfig:
    """``method`` with each encoder's backbone loading from its subfolder of ``model_dir`` (absolute)."""
    method = OmegaConf.create(OmegaConf.to_container(method, resolve=True))
    for module_path, subfolder in encoders.items():
        node = OmegaConf.select(method, module_path)
        if node is None:
            raise ValueError(f"{Path(model_dir) / MANIFEST}: the method has no encoder at {module_path!r}")
        path = str((Path(model_dir) / subfolder).resolve())
        node.backbone = {"_target_": "retrieval_zoo.encoding.backbones.Backbone", "name": str(node.backbone.name),
                         "path": path, "has_mlm_head": bool(node.mlm_head)}  # fmt: skip
    return without_teacher(method)


def load(model_dir: str | Path, cfg: DictConfig | None = None) -> torch.nn.Module:
    """The method exported to ``model_dir``, its weights loaded (module docstring), in eval mode.

    Args:
        model_dir: The exported folder.
        cfg: A config whose ``method`` replaces the folder's (its encoder settings, e.g. a longer
            ``doc_max_length``); it must name the same method.
    """
    model_dir = Path(model_dir)
    found = manifest(model_dir)
    if cfg is not None and str(cfg.get("method_name")) != found["method_name"]:
        raise ValueError(f"{model_dir / MANIFEST} holds method={found['method_name']}, not "
                         f"method={cfg.get('method_name')}")  # fmt: skip
    method = cfg.method if cfg is not None else trained_config(model_dir).method  # its classes where they are
    with torch.random.fork_rng():  # what the folder does not hold (an unused pooler) is the same on every load,
        torch.manual_seed(0)  # so the weights' digest, which keys encoding caches and saved indexes, is too
        model = instantiate(backbones_at(method, model_dir, found["encoders"]))
    from safetensors.torch import load_file

    missing, unexpected = model.load_state_dict(load_file(model_dir / WEIGHTS), strict=False)
    from_encoders = tuple(f"{path}.model." for path in found["encoders"])
    missing = [key for key in missing if not key.startswith(from_encoders)]
    if unexpected or missing:
        raise ValueError(f"{model_dir / WEIGHTS} does not fit method={found['method_name']}: unexpected "
                         f"{unexpected[:5]}, missing {missing[:5]}")  # fmt: skip
    print(f"[exported] {model_dir} (method={found['method_name']})")
    return model.eval()
