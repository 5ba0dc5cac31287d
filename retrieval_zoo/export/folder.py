"""A trained run exported as a self-contained Hugging Face-style folder (:mod:`retrieval_zoo.export.exported`).

python -m retrieval_zoo.export run_dir=outputs/<date>/<time>_clear out=exports/clear
python evaluate.py model_dir=exports/clear        # the run's own TREC run, from the folder alone
python -m retrieval_zoo.export method=dlr_splade out=exports/splade_tiny   # an untrained method with an encoder

The folder is built beside ``out`` and renamed into place when complete; ``out`` must be empty, missing, or an
earlier export of the same run or method (replaced). ``push_to_hub=<repo id>`` uploads it afterwards (``HF_TOKEN``
from the environment), through :func:`upload`.
"""

from __future__ import annotations

import json
from pathlib import Path

import hydra
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from retrieval_zoo.cache import atomic_path, write_json
from retrieval_zoo.config_check import check_config
from retrieval_zoo.export.ecosystem import (
    is_csurf_expansion,
    is_pooled_dense,
    is_splade,
    write_sentence_transformers,
    write_sparse_encoder,
)
from retrieval_zoo.export.exported import FORMAT, MANIFEST, WEIGHTS, encoder_modules, folder_name
from retrieval_zoo.export.model_card import ecosystem_usage, model_card
from retrieval_zoo.trained import load_trained, trained_config


def write_export(run: DictConfig, model: torch.nn.Module, results: dict, source: str, folder: Path) -> dict:
    """Everything of the module docstring, written into ``folder`` (a new directory).

    Args:
        run: The run's config (its ``run_config.yaml``), or the composed config of an untrained method.
        model: The method, its weights loaded.
        results: The run's ``results.json`` (empty for an untrained method).
        source: What was exported: the run directory, or ``method=<name>``.
        folder: Where.
    """
    from safetensors.torch import save_file

    modules = encoder_modules(model)
    encoders = {path: folder_name(path) for path in modules}
    folder.mkdir(parents=True)
    for path, encoder in modules.items():
        encoder.model.save_pretrained(folder / encoders[path], safe_serialization=True)
        encoder.tokenizer.save_pretrained(folder / encoders[path])
    own = tuple(f"{path}.model." for path in modules)
    rest = {key: value.detach().contiguous().clone() for key, value in model.state_dict().items()
            if not key.startswith(own)}  # fmt: skip
    save_file(rest, folder / WEIGHTS)
    if results:
        write_json(folder / "results.json", results)
    OmegaConf.save(run, folder / "run_config.yaml")
    loads_as, path, csurf = None, next(iter(modules), None), is_csurf_expansion(model)
    if len(modules) == 1 and is_pooled_dense(model):
        write_sentence_transformers(modules[path], folder, encoders[path])
        loads_as = "SentenceTransformer"
    elif len(modules) == 1 and (is_splade(model) or csurf):
        write_sparse_encoder(modules[path], folder, encoders[path], csurf=csurf)
        loads_as = "SparseEncoder"
    summary = {"format": FORMAT, "method_name": str(run.method_name), "source": source, "encoders": encoders,
               "weights": WEIGHTS, "index_name": str(run.get("index_name")), "tuning": results.get("tuning") or None,
               "sentence_transformers": loads_as,
               "method": OmegaConf.to_container(run.method, resolve=True)}  # fmt: skip
    write_json(folder / MANIFEST, summary)
    (folder / "README.md").write_text(model_card(run, results, encoders, ecosystem_usage(loads_as, csurf)))
    return summary


def check_out(out: Path, source: str) -> None:
    """``out`` may be missing, empty, or an export of ``source``; another model there is an error naming it."""
    if not out.exists() or not any(out.iterdir()):
        return
    found = out / MANIFEST
    if not found.exists():
        raise FileExistsError(f"{out} is not empty and holds no export ({MANIFEST}): pick another out=")
    earlier = json.loads(found.read_text()).get("source")
    if earlier != source:
        raise FileExistsError(f"{found}: {out} holds the export of {earlier}, not of {source}: pick another out=")


def what_to_export(cfg: DictConfig) -> tuple[DictConfig, torch.nn.Module, dict, str]:
    """(config, model, results, source) of ``run_dir``, or of an untrained method (``method=dlr_splade``)."""
    if cfg.run_dir:
        run_dir = Path(cfg.run_dir)
        if not (run_dir / "checkpoints").is_dir():
            raise FileNotFoundError(f"{run_dir / 'checkpoints'} not found: run_dir must be a train.py run with a "
                                    "checkpoint")  # fmt: skip
        run, results_path = trained_config(run_dir), run_dir / "results.json"
        results = json.loads(results_path.read_text()) if results_path.exists() else {}
        return run, load_trained(run_dir, run).eval(), results, str(run_dir.resolve())
    check_config(cfg)
    model = instantiate(cfg.method)
    if model.trainable or not encoder_modules(model):
        raise ValueError(f"method={cfg.method_name} has {'weights to train' if model.trainable else 'no encoder'}: "
                         "export a train.py run with run_dir=<run>, or an untrained method with an encoder "
                         "(method=dlr_splade)")  # fmt: skip
    run = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    for key in ("run_dir", "out", "push_to_hub"):
        run.pop(key)
    return run, model.eval(), {}, f"method={cfg.method_name}"


def upload(folder: Path, repo_id: str, api: object | None = None) -> str:
    """Upload ``folder`` to the hub repository ``repo_id`` (created private when missing); its URL."""
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()  # the token from HF_TOKEN or the login
    api.create_repo(repo_id, exist_ok=True, private=True)
    return str(api.upload_folder(folder_path=str(folder), repo_id=repo_id))


@hydra.main(config_path="pkg://retrieval_zoo.conf", config_name="export", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    """Export ``run_dir`` (or an untrained ``method``) into ``out`` (module docstring)."""
    out = Path(cfg.out)
    check_out(out, str(Path(cfg.run_dir).resolve()) if cfg.run_dir else f"method={cfg.method_name}")  # before loading
    run, model, results, source = what_to_export(cfg)
    with atomic_path(out) as building:  # an earlier export of the same source is replaced when this one is complete
        summary = write_export(run, model, results, source, building)
    print(f"[export] method={summary['method_name']} → {out}")
    if cfg.push_to_hub:
        print(f"[export] uploaded: {upload(out, str(cfg.push_to_hub))}")
    return summary


if __name__ == "__main__":
    main()
