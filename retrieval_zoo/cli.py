"""The command lines: ``retrieval-zoo-train`` (``python train.py``), ``retrieval-zoo-evaluate`` and ``-search``.

They compose the configs shipped in the package (``retrieval_zoo/conf``, Hydra's ``pkg://`` search path), so an
installed package runs from any directory; the checkout's ``train.py``, ``evaluate.py`` and ``search.py`` call these
mains. ``python -m retrieval_zoo train|evaluate|search ...`` does the same. The jobs themselves
(:mod:`retrieval_zoo.jobs`: torch, Lightning, the pipeline) are imported once Hydra has read the command line, so
``--help``, ``--cfg job`` and a mistyped command answer in about a second instead of six.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

CONFIGS = "pkg://retrieval_zoo.conf"


@hydra.main(config_path=CONFIGS, config_name="train", version_base="1.3")
def train_main(cfg: DictConfig) -> dict[str, dict[str, float]] | float:
    """Train → index → search → evaluate; returns the metrics table, or with ``objective`` the method's value of it.

    What the run prints is also written to ``train.log`` in its folder.
    """
    from retrieval_zoo.jobs import run_logged, train_and_evaluate  # the heavy imports, once a job runs

    return run_logged(train_and_evaluate, cfg)


@hydra.main(config_path=CONFIGS, config_name="evaluate", version_base="1.3")
def evaluate_main(cfg: DictConfig) -> dict[str, dict[str, float]]:
    """Search the evaluation split, write the TREC run and results.json, print the table beside BM25.

    With ``run_dir`` (or ``model_dir``, a run exported by ``python -m retrieval_zoo.export``), the trained run's
    config is used (its evaluation settings and held-out tuning slice included), with the command line's
    ``dataset``, ``bm25``, ``eval.*`` and ``method.*`` values on top, and the fusion weight the run tuned
    (:func:`reuse_tuned_weight`). What the run prints is also written to ``evaluate.log`` in its folder.
    """
    from retrieval_zoo.jobs import run_logged, search_and_evaluate  # the heavy imports, once a job runs

    return run_logged(search_and_evaluate, cfg)


@hydra.main(config_path=CONFIGS, config_name="search", version_base="1.3")
def search_main(cfg: DictConfig) -> dict:
    """Search any query set, judged or not, with a trained run, an export or an untrained method; write TREC runs.

    Configured as an evaluation is (``run_dir``, ``model_dir``, the tuned fusion weight), with ``queries=`` naming a
    split, a TSV or BEIR JSONL file or an ``irds:<id>`` (:mod:`retrieval_zoo.data.query_sets`). What it prints is
    also written to ``search.log`` in its folder.
    """
    from retrieval_zoo.jobs import run_logged, search_queries  # the heavy imports, once a job runs

    return run_logged(search_queries, cfg)
