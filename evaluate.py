"""Evaluate a trained run directory, or an untrained method, beside BM25.

python evaluate.py run_dir=outputs/2026-11-21/12-00-00      # the best checkpoint of a train.py run
python evaluate.py model_dir=exports/clear                    # a run exported by python -m retrieval_zoo.export
python evaluate.py method=bm25 dataset=msmarco_passage dataset.root=/data/msmarco
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import hydra
import lightning as L
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig

from retrieval_zoo.config_check import check_config
from retrieval_zoo.evaluation_config import evaluation_config
from retrieval_zoo.exported import load, manifest
from retrieval_zoo.pipeline import build_collection_and_bm25, encode_and_evaluate
from retrieval_zoo.run_output import logged_job
from retrieval_zoo.trained import load_trained, trained_config


@hydra.main(config_path="conf", config_name="evaluate", version_base="1.3")
def main(cfg: DictConfig) -> dict[str, dict[str, float]]:
    """Search the evaluation split, write the TREC run and results.json, print the table beside BM25.

    With ``run_dir`` (or ``model_dir``, a run exported by ``python -m retrieval_zoo.export``), the trained run's
    config is used (its evaluation settings and held-out tuning slice included), with the command line's
    ``dataset``, ``bm25``, ``eval.*`` and ``method.*`` values on top, and the fusion weight the run tuned
    (:func:`reuse_tuned_weight`). What the run prints is also written to ``evaluate.log`` in its folder.
    """
    return logged_job(partial(search_and_evaluate, cfg))


def search_and_evaluate(cfg: DictConfig, out_dir: Path) -> dict[str, dict[str, float]]:
    """The evaluation in ``out_dir``: see :func:`main`."""
    if cfg.run_dir and cfg.model_dir:
        raise ValueError("give run_dir (a train.py run) or model_dir (an export of one), not both")
    if cfg.run_dir or cfg.model_dir:
        run_dir, overrides = Path(cfg.run_dir or cfg.model_dir), list(HydraConfig.get().overrides.task)
        exported = bool(cfg.model_dir)
        if exported:
            manifest(run_dir)  # an exported folder, of this format: else a clear error naming the file
        cfg = evaluation_config(cfg, run_dir, overrides, trained_config(run_dir))
        check_config(cfg)
        model = load(run_dir, cfg) if exported else load_trained(run_dir, cfg)
    else:
        check_config(cfg)
        L.seed_everything(cfg.seed)  # an untrained model's initialisation, the same on every rank
        model = instantiate(cfg.method)
    name, index = str(cfg.method_name), instantiate(cfg.index)
    collection, bm25 = build_collection_and_bm25(cfg)
    make_trainer = partial(instantiate(cfg.trainer, _partial_=True), default_root_dir=str(out_dir))
    summary = encode_and_evaluate(cfg, model, index, collection, bm25, make_trainer, out_dir, name)
    if summary is None:  # under DDP, rank 0 alone evaluates and writes the results
        return {}
    return summary["metrics"]


if __name__ == "__main__":
    main()
