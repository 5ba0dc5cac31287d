"""The command lines: ``retrieval-zoo-train`` (``python train.py``), ``retrieval-zoo-evaluate`` and ``-search``.

They compose the configs shipped in the package (``retrieval_zoo/conf``, Hydra's ``pkg://`` search path), so an
installed package runs from any directory; the checkout's ``train.py``, ``evaluate.py`` and ``search.py`` call these
mains. ``python -m retrieval_zoo train|evaluate|search ...`` does the same.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import hydra
import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from retrieval_zoo.config_check import check_config
from retrieval_zoo.data.query_sets import read_query_set
from retrieval_zoo.evaluation.config import configured_model
from retrieval_zoo.evaluation.pipeline import (
    build_collection_and_bm25,
    encode_and_evaluate,
    encode_and_search,
    identity,
    run_config,
)
from retrieval_zoo.loggers import finish, log_results
from retrieval_zoo.resume import AtomicCheckpointIO, exit_code_on_sigterm, find_checkpoint
from retrieval_zoo.run_output import logged_job
from retrieval_zoo.training.progress import StepBudget

CONFIGS = "pkg://retrieval_zoo.conf"


@hydra.main(config_path=CONFIGS, config_name="train", version_base="1.3")
def train_main(cfg: DictConfig) -> dict[str, dict[str, float]] | float:
    """Train → index → search → evaluate; returns the metrics table, or with ``objective`` the method's value of it.

    What the run prints is also written to ``train.log`` in its folder.
    """
    return logged_job(partial(train_and_evaluate, cfg))


def train_and_evaluate(cfg: DictConfig, out_dir: Path) -> dict[str, dict[str, float]] | float:
    """The run in ``out_dir``: see :func:`main`."""
    check_config(cfg)
    L.seed_everything(cfg.seed, workers=True)
    torch.set_float32_matmul_precision("high")
    collection, bm25 = build_collection_and_bm25(cfg)
    config = run_config(cfg)
    OmegaConf.save(OmegaConf.create(config), out_dir / "run_config.yaml")
    model, index = instantiate(cfg.method), instantiate(cfg.index)
    names = identity(cfg)
    logger = instantiate(cfg.logger, _partial_=True)(
        save_dir=str(out_dir), run_name=out_dir.name, group=names["method"],
        tags=[f"backbone:{names['backbone']}", f"dataset:{names['dataset']}", f"index:{names['index']}"],
        config=config,
    )  # fmt: skip
    make_trainer = partial(instantiate(cfg.trainer, _partial_=True), default_root_dir=str(out_dir))
    try:
        if model.trainable:
            datamodule = instantiate(cfg.data, _partial_=True)(
                collection=collection,
                bm25=bm25,
                needs=model.needs,
                tokenizer=model.text_tokenizer(),
                term_keys=model.term_keys(),
            )
            checkpoint = instantiate(cfg.checkpoint, dirpath=str(out_dir / "checkpoints"))
            steps = instantiate(cfg.checkpoint_steps, dirpath=str(out_dir / "checkpoints"))
            extra = [instantiate(callback) for callback in cfg.callbacks.values()]
            validation = instantiate(cfg.validation, index=index, bm25=bm25)
            callbacks = [validation, checkpoint, steps, StepBudget(), *extra]
            if cfg.trainer.enable_progress_bar:  # a bar in a terminal, lines in a file
                callbacks.append(instantiate(cfg.progress))
            trainer = make_trainer(logger=logger, callbacks=callbacks, plugins=[AtomicCheckpointIO()])
            resume = find_checkpoint(cfg.resume_from, out_dir, config)
            if resume:
                print(f"[train] resuming from {resume}")
            with exit_code_on_sigterm():
                trainer.fit(model, datamodule=datamodule, ckpt_path=resume)
            best = checkpoint.best_model_path or checkpoint.last_model_path
            if best:
                model.load_state_dict(torch.load(best, map_location="cpu", weights_only=False)["state_dict"])
                print(f"[train] best checkpoint: {best}")
        summary = encode_and_evaluate(cfg, model, index, collection, bm25, make_trainer, out_dir, names["method"])
        if summary is None:  # under DDP, rank 0 alone evaluates and writes the results
            return 0.0 if cfg.objective else {}
        log_results(logger, summary, out_dir)
        if cfg.objective:  # what an optimising sweeper (Optuna) maximises
            return summary["metrics"][summary["system"]][cfg.objective]
        return summary["metrics"]
    finally:
        finish(logger)


@hydra.main(config_path=CONFIGS, config_name="evaluate", version_base="1.3")
def evaluate_main(cfg: DictConfig) -> dict[str, dict[str, float]]:
    """Search the evaluation split, write the TREC run and results.json, print the table beside BM25.

    With ``run_dir`` (or ``model_dir``, a run exported by ``python -m retrieval_zoo.export``), the trained run's
    config is used (its evaluation settings and held-out tuning slice included), with the command line's
    ``dataset``, ``bm25``, ``eval.*`` and ``method.*`` values on top, and the fusion weight the run tuned
    (:func:`reuse_tuned_weight`). What the run prints is also written to ``evaluate.log`` in its folder.
    """
    return logged_job(partial(search_and_evaluate, cfg))


def search_and_evaluate(cfg: DictConfig, out_dir: Path) -> dict[str, dict[str, float]]:
    """The evaluation in ``out_dir``: see :func:`main`."""
    cfg, model = configured_model(cfg, list(HydraConfig.get().overrides.task))
    name, index = str(cfg.method_name), instantiate(cfg.index)
    collection, bm25 = build_collection_and_bm25(cfg)
    make_trainer = partial(instantiate(cfg.trainer, _partial_=True), default_root_dir=str(out_dir))
    summary = encode_and_evaluate(cfg, model, index, collection, bm25, make_trainer, out_dir, name)
    if summary is None:  # under DDP, rank 0 alone evaluates and writes the results
        return {}
    return summary["metrics"]


@hydra.main(config_path=CONFIGS, config_name="search", version_base="1.3")
def search_main(cfg: DictConfig) -> dict:
    """Search any query set, judged or not, with a trained run, an export or an untrained method; write TREC runs.

    Configured as an evaluation is (``run_dir``, ``model_dir``, the tuned fusion weight), with ``queries=`` naming a
    split, a TSV or BEIR JSONL file or an ``irds:<id>`` (:mod:`retrieval_zoo.data.query_sets`). What it prints is
    also written to ``search.log`` in its folder.
    """
    return logged_job(partial(search_queries, cfg))


def search_queries(cfg: DictConfig, out_dir: Path) -> dict:
    """The search in ``out_dir``: see :func:`search_main`."""
    cfg, model = configured_model(cfg, list(HydraConfig.get().overrides.task))
    name, index = str(cfg.method_name), instantiate(cfg.index)
    collection, bm25 = build_collection_and_bm25(cfg)
    source = read_query_set(cfg.queries, collection)  # a bad query file fails before anything is encoded
    make_trainer = partial(instantiate(cfg.trainer, _partial_=True), default_root_dir=str(out_dir))
    return encode_and_search(cfg, model, index, collection, bm25, make_trainer, out_dir, name, source) or {}
