"""Run loggers: wandb (offline automatically when there is no key or no network), csv, or none."""

from __future__ import annotations

import netrc
import os
import socket
from collections.abc import Sequence
from pathlib import Path

import torch
from lightning.pytorch.loggers import CSVLogger, Logger, WandbLogger

WANDB_HOST = "api.wandb.ai"


def wandb_mode(timeout: float = 2.0) -> str:
    """``WANDB_MODE`` if set; else ``offline`` without an API key or without network, else ``online``.

    Deciding before ``wandb.init`` avoids wandb's immediate failure without a key, and its ~100 s hang with a
    key but no network.
    """
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    has_key = bool(os.environ.get("WANDB_API_KEY"))
    if not has_key:
        try:
            has_key = netrc.netrc().authenticators(WANDB_HOST) is not None
        except (FileNotFoundError, netrc.NetrcParseError):
            has_key = False
    if not has_key:
        return "offline"
    try:
        socket.create_connection((WANDB_HOST, 443), timeout=timeout).close()
    except OSError:
        return "offline"
    return "online"


def wandb_logger(
    save_dir: str,
    run_name: str,
    group: str,
    tags: list[str],
    config: dict,
    project: str = "retrieval_zoo",
    entity: str | None = None,
    log_artifacts: bool = False,
) -> WandbLogger:
    """wandb, online with a key and network, else offline (``conf/logger/wandb.yaml``).

    Args:
        save_dir: The job's output directory (Hydra's), so sweep jobs never share files.
        run_name: Run name.
        group: wandb group (the method), so runs of one method sit together.
        tags: wandb tags (index, backbone, dataset).
        config: The resolved run config, with method, index, backbone and dataset at its top.
        project: wandb project.
        entity: wandb entity (team), or None for the default.
        log_artifacts: Upload checkpoints (Lightning's ``log_model``) and the run files and results
            (:func:`log_results`) as wandb artifacts.
    """
    mode = wandb_mode()
    Path(save_dir).mkdir(parents=True, exist_ok=True)
    logger = WandbLogger(
        name=run_name, save_dir=save_dir, project=project, entity=entity, group=group, tags=tags, mode=mode,
        log_model=log_artifacts,
    )  # fmt: skip
    # Lightning hands wandb.init an ``anonymous`` key even when unset, and wandb then warns on every run that the
    # setting has no effect: leave the key out
    logger._wandb_init.pop("anonymous", None)
    logger.experiment.config.update(config, allow_val_change=True)
    return logger


def csv_logger(save_dir: str, run_name: str, group: str, tags: list[str], config: dict) -> CSVLogger:
    """Metrics as ``csv/metrics.csv`` in the job's directory (``conf/logger/csv.yaml``); the run's names unused."""
    return CSVLogger(save_dir=save_dir, name="csv", version="")


def no_logger(save_dir: str, run_name: str, group: str, tags: list[str], config: dict) -> bool:
    """No logger (``conf/logger/none.yaml``): Lightning's ``logger=False``."""
    return False


def finish(logger: Logger | bool) -> None:
    """End the wandb run of this job, so the next job of a multirun starts its own."""
    if isinstance(logger, WandbLogger):
        import wandb

        wandb.finish()


def log_histogram(loggers: Sequence[object], name: str, values: torch.Tensor, step: int) -> None:
    """Log ``values`` as a histogram to every logger that draws them (wandb); the others get the scalar summaries."""
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            import wandb

            logger.experiment.log({name: wandb.Histogram(values.cpu().numpy()), "trainer/global_step": step})


def log_results(logger: Logger | bool, summary: dict, out_dir: Path | None = None) -> None:
    """Log a run's evaluation: ``eval/<system>/<measure>``, and any tuned weight with its whole curve.

    Args:
        logger: The run's logger (False: nothing to log to).
        summary: What :func:`retrieval_zoo.evaluation.stages.evaluate_method` returns; its ``tuning`` may hold
            the tuned ``parameter``, its ``value`` and its ``curve``
            (:func:`~retrieval_zoo.evaluation.tuning.tuning_record`), and, for a hybrid, its ``complementarity``
            and figure.
        out_dir: The run's directory: with ``log_artifacts``, its TREC runs and results.json become an artifact.
    """
    if not logger:
        return
    metrics = {f"eval/{system}/{m}": v for system, measures in summary["metrics"].items() for m, v in measures.items()}
    tuning = summary.get("tuning") or {}
    if tuning:
        metrics[f"eval/tuning/{tuning['parameter']}"] = tuning["value"]
    metrics |= {f"eval/complementarity/{key}": v for key, v in (summary.get("complementarity") or {}).items()}
    metrics |= {f"eval/efficiency/{key}": v for key, v in (summary.get("efficiency") or {}).items()}
    logger.log_metrics(metrics)
    if not isinstance(logger, WandbLogger):
        return
    import wandb

    if tuning:
        parameter, measure = tuning["parameter"], tuning["measure"]
        table = wandb.Table(data=[[float(v), m] for v, m in tuning["curve"].items()], columns=[parameter, measure])
        title = f"{parameter} tuning on {tuning['queries']} held-out training queries"
        logger.experiment.log({"eval/tuning/curve": wandb.plot.line(table, parameter, measure, title=title)})
    if summary.get("complementarity_figure"):
        logger.experiment.log({"eval/complementarity/venn": wandb.Image(summary["complementarity_figure"])})
    moved = summary.get("moved_queries") or []
    if moved:  # CLEAR's Tables 3-4: where the method moved the relevant document most against BM25
        columns = ["direction", "qid", "query", "baseline_rank", "system_rank", "shift"]
        rows = [[row[c] for c in columns] for row in moved]
        logger.experiment.log({"eval/moved_queries": wandb.Table(columns=columns, data=rows)})
    logger.experiment.summary.update(metrics)  # the evaluation in the run summary, for the runs table
    if getattr(logger, "_log_model", False) and out_dir is not None:
        artifact = wandb.Artifact(f"runs-{logger.experiment.id}", type="run-files")
        for path in [*sorted(out_dir.glob("run.*.trec")), out_dir / "results.json"]:
            artifact.add_file(str(path))
        logger.experiment.log_artifact(artifact)
