"""Evaluate a trained run directory, or an untrained method, beside BM25.

python evaluate.py run_dir=outputs/2026-11-21/12-00-00      # the best checkpoint of a train.py run
python evaluate.py method=bm25 dataset=msmarco_passage dataset.root=/data/msmarco
"""

from __future__ import annotations

from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from retrieval_zoo.pipeline import build_collection_and_bm25, evaluate_method


def load_trained(run_dir: Path) -> tuple[DictConfig, object]:
    """The resolved config and the best (else last) checkpoint's model of a ``train.py`` run directory."""
    cfg_path = run_dir / "run_config.yaml"
    if not cfg_path.exists():
        raise FileNotFoundError(f"{cfg_path} not found: run_dir must be a train.py output directory")
    cfg = OmegaConf.load(cfg_path)
    checkpoints = sorted((run_dir / "checkpoints").glob("*.ckpt"), key=lambda p: p.name == "last.ckpt")
    if not checkpoints:
        raise FileNotFoundError(f"no checkpoint under {run_dir / 'checkpoints'}")
    model = instantiate(cfg.method)
    model.load_state_dict(torch.load(checkpoints[0], map_location="cpu", weights_only=False)["state_dict"])
    print(f"[evaluate] {checkpoints[0]}")
    return cfg, model


@hydra.main(config_path="conf", config_name="evaluate", version_base="1.3")
def main(cfg: DictConfig) -> dict[str, dict[str, float]]:
    """Search the evaluation split, write the TREC run and results.json, print the table beside BM25.

    With ``run_dir``, the trained run's config is used, except ``dataset``/``bm25`` given on the command line.
    """
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    if cfg.run_dir:
        trained_cfg, model = load_trained(Path(cfg.run_dir))
        name = str(trained_cfg.method_name)
        overridden = {o.split("=")[0].lstrip("+~") for o in HydraConfig.get().overrides.task}
        taken = ["eval"] + [k for k in ("dataset", "bm25") if any(o.startswith(k) for o in overridden)]
        if "dataset" in taken:
            taken.append("dataset_name")
        for key in taken:  # replaced whole, not merged: another dataset has other keys
            OmegaConf.update(trained_cfg, key, OmegaConf.to_container(cfg, resolve=True)[key], merge=False)
        cfg = trained_cfg
    else:
        model, name = instantiate(cfg.method), str(cfg.method_name)
    collection, bm25 = build_collection_and_bm25(cfg)
    split = cfg.eval.split or collection.eval_split
    return evaluate_method(model, collection, bm25, split, cfg.eval.k, out_dir, name, cfg.eval.tune_queries)


if __name__ == "__main__":
    main()
