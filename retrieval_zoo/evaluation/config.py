"""How ``evaluate.py run_dir=...`` (or ``model_dir=...``) configures itself.

The trained run's config with the command line on top, the fusion weight the run tuned reused unless asked otherwise,
and tuning kept on held-out queries.
"""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from retrieval_zoo.config_check import check_config
from retrieval_zoo.export.exported import load, manifest
from retrieval_zoo.methods.method import RetrievalMethod
from retrieval_zoo.trained import load_trained, trained_config


def override_keys(overrides: list[str]) -> set[str]:
    """The keys a command line's overrides set (``dataset``, ``method.lambda_test_grid``, ...)."""
    return {o.split("=")[0].lstrip("+~") for o in overrides}


def gives(overrides: list[str], group: str) -> bool:
    """Whether the command line sets ``group`` or any key under it."""
    return any(k == group or k.startswith(f"{group}.") for k in override_keys(overrides))


def apply_overrides(trained: DictConfig, cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """The trained run's config, with what the command line gave on top.

    ``dataset``, ``bm25`` and ``index`` given on the command line replace the trained run's whole (another collection
    or index has other keys); ``trainer`` and ``encode`` are always this command's (the devices that encode the
    corpus); ``eval.*``, ``index.*`` and ``method.*`` keys replace single values (e.g. ``index.weight_grid``), with
    ``method=<the trained method>`` (or ``index=<its index>``) on the command line so that Hydra composes those keys.
    A run trained before indexes were a config group takes this command's index.
    """
    keys = override_keys(overrides)
    if "method" in keys and cfg.method_name != trained.method_name:
        raise ValueError(f"method={cfg.method_name} given, but the run_dir trained method={trained.method_name}")
    given = OmegaConf.to_container(cfg, resolve=True)
    for group in ("dataset", "bm25", "index"):
        if group in keys or (group != "index" and gives(overrides, group)) or group not in trained:
            OmegaConf.update(trained, group, given[group], merge=False)
            if group != "bm25":
                OmegaConf.update(trained, f"{group}_name", cfg.get(f"{group}_name"), merge=False)
    if "eval" not in trained:  # runs written before eval was saved with them
        trained.eval = given["eval"]
    for group in ("trainer", "encode"):  # where and how this evaluation encodes the corpus, not how the run trained
        OmegaConf.update(trained, group, given[group], merge=False)
    for key in sorted(k for k in keys if k.startswith(("eval.", "method.", "index."))):
        OmegaConf.update(trained, key, OmegaConf.select(cfg, key, throw_on_missing=True), merge=False)
    return trained


def reuse_tuned_weight(trained: DictConfig, run_dir: Path, trained_index: str, overrides: list[str]) -> None:
    """Evaluate with the fusion weight the run tuned (``results.json``'s ``tuning``), without tuning it again.

    ``trained`` is the run's config with the command line applied. The command line tunes again with
    ``eval.tune_queries=N`` (N > 0), ``index.weight_grid=[...]`` or ``index.extend_grid=...``, and sets a
    weight with ``index.weight=W``. Other
    index settings (``index.slices=256``) and method settings (``method.lexical_scale=lucene``) are tuned again as the
    run's config says, unless ``eval.tune_queries=0`` asks for the run's weight; another index than the run's keeps its
    own weight. On another collection
    (``dataset=...``, zero-shot) nothing is tuned unless asked: its training queries, if any, are not the run's.
    """
    keys = override_keys(overrides)
    asked = trained.eval.tune_queries if "eval.tune_queries" in keys else None
    if keys & {"index.weight_grid", "index.extend_grid", "index.weight"} or (asked or 0) > 0:
        return
    if gives(overrides, "dataset"):
        trained.eval.tune_queries = 0
    method_settings = any(k.startswith("method.") for k in keys)  # e.g. method.lexical_scale: other scores
    if asked is None and trained.eval.tune_queries > 0 and (gives(overrides, "index") or method_settings):
        return
    results = run_dir / "results.json"
    tuned = json.loads(results.read_text()).get("tuning") if results.exists() else None
    if not tuned or trained.index_name != trained_index:
        return
    trained.index.weight, trained.eval.tune_queries = tuned["value"], 0
    print(f"[evaluate] {tuned['parameter']} = {tuned['value']}, as the run tuned it on {tuned['queries']} held-out "
          "queries (eval.tune_queries=N tunes it again)")  # fmt: skip


def check_tuning_is_held_out(trained: DictConfig, overrides: list[str]) -> None:
    """λ tuning on the training collection must use queries the model did not train on."""
    other_collection = gives(overrides, "dataset")
    held_out = int(OmegaConf.select(trained, "data.holdout_queries", default=0) or 0)
    if not other_collection and trained.eval.tune_queries > held_out:
        raise ValueError(
            f"eval.tune_queries={trained.eval.tune_queries}, but the run held out only {held_out} training queries "
            "(data.holdout_queries): tuning on queries the model trained on would overfit the fusion weight; "
            "train with eval.tune_queries=N (experiment=clear holds out 500)"
        )


def evaluation_config(cfg: DictConfig, run_dir: Path, overrides: list[str], trained: DictConfig) -> DictConfig:
    """The config an evaluation of the run in ``run_dir`` (whose saved config is ``trained``) runs with.

    Args:
        cfg: This command's composed config.
        run_dir: The trained (or exported) run.
        overrides: This command line's overrides (Hydra's task overrides).
        trained: The run's saved config.
    """
    trained_index = str(trained.get("index_name"))
    merged = apply_overrides(trained, cfg, overrides)
    reuse_tuned_weight(merged, run_dir, trained_index, overrides)
    check_tuning_is_held_out(merged, overrides)
    return merged


def configured_model(cfg: DictConfig, overrides: list[str]) -> tuple[DictConfig, RetrievalMethod]:
    """The config an evaluation or a search runs with, and its model.

    With ``run_dir`` (or ``model_dir``) the trained run's config with the command line on top
    (:func:`retrieval_zoo.evaluation.config.evaluation_config`) and its best checkpoint (or exported weights);
    without, this config and an untrained method, seeded. ``overrides`` are the command line's (Hydra's task
    overrides): what of this config goes on top of the run's.
    """
    if cfg.run_dir and cfg.model_dir:
        raise ValueError("give run_dir (a train.py run) or model_dir (an export of one), not both")
    if not (cfg.run_dir or cfg.model_dir):
        check_config(cfg)
        L.seed_everything(cfg.seed)  # an untrained model's initialisation, the same on every rank
        return cfg, method(instantiate(cfg.method), "method")
    run_dir = Path(cfg.run_dir or cfg.model_dir)
    exported = bool(cfg.model_dir)
    if exported:
        manifest(run_dir)  # an exported folder, of this format: else a clear error naming the file
    extra = {key: cfg[key] for key in ("queries", "index_dir") if key in cfg}  # this command's, not the run's
    cfg = evaluation_config(cfg, run_dir, overrides, trained_config(run_dir))
    for key, value in extra.items():
        OmegaConf.update(cfg, key, value, force_add=True)
    check_config(cfg)
    return cfg, method(load(run_dir, cfg) if exported else load_trained(run_dir, cfg), str(run_dir))


def method(model: object, source: str) -> RetrievalMethod:
    """``model``, checked to be a retrieval method (``source`` names where its config came from)."""
    if not isinstance(model, RetrievalMethod):
        raise TypeError(f"{source}: the config's method is a {type(model).__name__}, not a retrieval method")
    return model
