"""Does validation over a candidate pool pick the checkpoints that validation over the whole corpus picks?

Two ``train.py`` runs of one config and seed with the csv logger, one with ``validation.corpus=full`` and one with
``validation.corpus=pool``: on a CPU the training is the same in both (checked here: every logged training loss
equal), so the runs differ only in what each epoch's validation indexes. Prints each epoch's MRR@10 and R@100 side by
side, the epoch each run's checkpoint callback keeps (the best MRR@10), and Kendall's τ between the two rankings of
the epochs by each measure.

python train.py logger=csv trainer.max_epochs=8 validation.corpus=full hydra.run.dir=runs/full
python train.py logger=csv trainer.max_epochs=8 validation.corpus=pool validation.pool_depth=10 hydra.run.dir=runs/pool
python -m benchmarks.pool_agreement runs/full runs/pool
"""

from __future__ import annotations

import argparse
import csv
from itertools import combinations
from pathlib import Path

MEASURES = ("val/MRR@10", "val/R@100")


def logged(run_dir: Path) -> tuple[list[dict[str, float]], list[str]]:
    """A run's validation measures by epoch (epoch order) and its logged training losses, from ``csv/metrics.csv``."""
    path = run_dir / "csv" / "metrics.csv"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: train with logger=csv")
    with open(path, newline="") as lines:
        rows = list(csv.DictReader(lines))
    epochs = [{"epoch": int(r["epoch"])} | {m: float(r[m]) for m in MEASURES} for r in rows if r.get(MEASURES[0])]
    return sorted(epochs, key=lambda e: e["epoch"]), [r["train/loss"] for r in rows if r.get("train/loss")]


def kendall_tau(first: list[float], second: list[float]) -> float:
    """Kendall's τ-a of two scorings of the same items: (concordant − discordant pairs) / all pairs; ties count 0."""
    signs = [((a1 > a2) - (a1 < a2)) * ((b1 > b2) - (b1 < b2))
             for (a1, b1), (a2, b2) in combinations(zip(first, second, strict=True), 2)]  # fmt: skip
    return sum(signs) / len(signs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("full", type=Path, help="the run validated over the whole corpus")
    parser.add_argument("pool", type=Path, help="the same config validated over a candidate pool")
    args = parser.parse_args()
    (full, full_losses), (pool, pool_losses) = logged(args.full), logged(args.pool)
    if full_losses != pool_losses or [e["epoch"] for e in full] != [e["epoch"] for e in pool]:
        raise ValueError("the two runs did not train the same (their logged losses or epochs differ): same config "
                         "and seed, on a CPU, are needed")  # fmt: skip
    print(f"training identical: {len(full_losses)} logged losses equal\n")
    print("| epoch | full MRR@10 | pool MRR@10 | full R@100 | pool R@100 |\n|---|---|---|---|---|")
    for f, p in zip(full, pool, strict=True):
        cells = " | ".join(f"{run[m]:.4f}" for m in MEASURES for run in (f, p))
        print(f"| {f['epoch']} | {cells} |")
    best = [max(run, key=lambda e: e[MEASURES[0]])["epoch"] for run in (full, pool)]
    print(f"\ncheckpoint kept (best MRR@10): full epoch {best[0]}, pool epoch {best[1]}")
    for measure in MEASURES:
        tau = kendall_tau([e[measure] for e in full], [e[measure] for e in pool])
        print(f"Kendall τ of the epochs ranked by {measure}: {tau:.3f}")


if __name__ == "__main__":
    main()
