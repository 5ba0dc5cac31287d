"""The jobs behind the command lines (:mod:`retrieval_zoo.cli`): train, evaluate and search, each in its run folder.

:mod:`retrieval_zoo.cli` imports this module (torch, Lightning, the pipeline) only once Hydra has read the command
line and a job runs, so ``--help``, ``--cfg`` and a mistyped command answer without that import.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

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

T = TypeVar("T")


def run_logged(job: Callable[[DictConfig, Path], T], cfg: DictConfig) -> T:
    """``job(cfg, out_dir)`` in the run's folder, what it prints also written to the folder's log."""
    return logged_job(partial(job, cfg))


def train_and_evaluate(cfg: DictConfig, out_dir: Path) -> dict[str, dict[str, float]] | float:
    """The run in ``out_dir``: see :func:`retrieval_zoo.cli.train_main`."""
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


def search_and_evaluate(cfg: DictConfig, out_dir: Path) -> dict[str, dict[str, float]]:
    """The evaluation in ``out_dir``: see :func:`retrieval_zoo.cli.evaluate_main`."""
    cfg, model = configured_model(cfg, list(HydraConfig.get().overrides.task))
    name, index = str(cfg.method_name), instantiate(cfg.index)
    collection, bm25 = build_collection_and_bm25(cfg)
    make_trainer = partial(instantiate(cfg.trainer, _partial_=True), default_root_dir=str(out_dir))
    summary = encode_and_evaluate(cfg, model, index, collection, bm25, make_trainer, out_dir, name)
    if summary is None:  # under DDP, rank 0 alone evaluates and writes the results
        return {}
    return summary["metrics"]


def search_queries(cfg: DictConfig, out_dir: Path) -> dict:
    """The search in ``out_dir``: see :func:`retrieval_zoo.cli.search_main`."""
    cfg, model = configured_model(cfg, list(HydraConfig.get().overrides.task))
    name, index = str(cfg.method_name), instantiate(cfg.index)
    collection, bm25 = build_collection_and_bm25(cfg)
    source = read_query_set(cfg.queries, collection)  # a bad query file fails before anything is encoded
    make_trainer = partial(instantiate(cfg.trainer, _partial_=True), default_root_dir=str(out_dir))
    return encode_and_search(cfg, model, index, collection, bm25, make_trainer, out_dir, name, source) or {}
