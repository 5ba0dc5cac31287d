"""CLEAR and its Table 1 ablations through train.py, as a user sweeps them, on the tiny slice."""

import csv
import json
from pathlib import Path

import pytest

from tests.conftest import beir_layout
from tests.test_end_to_end import run_app, tiny_dataset


@pytest.mark.slow
def test_clear_and_its_ablations_compose_and_run(tiny_dir: Path, tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    run_app(
        "train.py", "-m", "method=clear", "experiment=clear,clear_constant_margin,clear_random_negatives",
        *tiny_dataset(tiny_dir),
        "backbone=tiny_random", "trainer=cpu", "trainer.max_epochs=1", "data.batch_size=8", "data.val_queries=10",
        "data.negative_depth=50", "eval.tune_queries=10", "eval.k=100", "index.depth=100",
        "logger=wandb", f"hydra.sweep.dir={sweep}",
    )  # fmt: skip
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir() and (p / "results.json").exists())
    assert len(jobs) == 3
    configs = [(job / ".hydra" / "overrides.yaml").read_text() for job in jobs]
    assert [c.count("experiment=clear\n") + c.count("experiment=clear_constant_margin") for c in configs] == [1, 1, 0]
    for job in jobs:
        results = json.loads((job / "results.json").read_text())
        assert set(results["metrics"]) == {"BM25", "clear", "clear (lexical)", "clear (semantic)"}
        assert results["metrics"]["clear (lexical)"] == pytest.approx(results["metrics"]["BM25"])
        roc = results["complementarity"]  # RoC Eq. 1 of BM25 (S) vs. the embedding (D) at 10
        assert roc["k"] == 10 and roc["D-S"] + roc["D∩S"] == roc["D"] and 0 <= roc["RoC"] <= 1
        assert (job / "roc.dev.png").exists() and (job / "tuning.dev.png").exists()
        tuning = results["tuning"]
        extended = (tuning["extended"] or {}).get("values", [])  # past the grid's edge when its best lay there
        assert tuning["queries"] == 10 and len(tuning["curve"]) == 10 + len(extended)
        assert tuning["parameter"] == "lexical_weight"
        assert str(tuning["value"]) in tuning["curve"] and tuning["measure"] == "MRR@10"
        assert (job / "run.dev.semantic.trec").exists()
        # The margin's distribution went to wandb as a histogram (the offline run's log holds it).
        logs = list((job / "wandb").glob("offline-run-*/run-*.wandb"))
        assert logs and b"train/margin" in logs[0].read_bytes() and b"histogram" in logs[0].read_bytes()
        # ... and the lambda_test tuning curve as a wandb table.
        assert list(job.glob("wandb/offline-run-*/files/media/table/eval/tuning/curve*.table.json"))
        assert list(job.glob("wandb/offline-run-*/files/media/images/eval/complementarity/venn*.png"))

    # evaluate.py re-tunes lambda_test on the run's own held-out slice, over a grid given on the command line.
    again = tmp_path / "evaluate"
    grid = "index.weight_grid=[0.5,1.0,2.0]"
    run_app("evaluate.py", f"run_dir={jobs[0]}", "method=clear", grid, f"hydra.run.dir={again}")
    retuned = json.loads((again / "results.json").read_text())
    extended = {str(v) for v in (retuned["tuning"]["extended"] or {}).get("values", [])}
    assert retuned["tuning"]["queries"] == 10 and set(retuned["tuning"]["curve"]) == {"0.5", "1.0", "2.0"} | extended
    assert retuned["k"] == 100  # the run's evaluation settings carry over
    # Without a tuning option, evaluate.py uses the lambda_test the run tuned: the run's numbers, tuned once.
    reused = tmp_path / "reused"
    run_app("evaluate.py", f"run_dir={jobs[0]}", f"hydra.run.dir={reused}")
    trained, evaluated = (json.loads((d / "results.json").read_text()) for d in (jobs[0], reused))
    assert evaluated["tuning"] == {} and evaluated["metrics"]["clear"] == pytest.approx(trained["metrics"]["clear"])
    # Zero-shot on a BEIR directory, which has no training split: the run's lambda_test, nothing tuned.
    zero_shot = tmp_path / "zero_shot"
    beir_root = beir_layout(tiny_dir, tmp_path / "beir")
    run_app("evaluate.py", f"run_dir={jobs[0]}", "dataset=beir", f"dataset.root={beir_root}", "dataset.name=tiny_beir",
            f"hydra.run.dir={zero_shot}")  # fmt: skip
    results = json.loads((zero_shot / "results.json").read_text())
    assert results["collection"] == "tiny_beir" and results["tuning"] == {} and "clear" in results["metrics"]
    # Tuning on more queries than training held out would tune on trained-on queries: refused.
    failed = run_app("evaluate.py", f"run_dir={jobs[0]}", "eval.tune_queries=50", f"hydra.run.dir={again}", ok=False)
    assert "held out only 10 training queries" in failed


@pytest.mark.slow
def test_margin_distribution_is_logged_as_scalars(tiny_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "clear"
    run_app(
        "train.py", "method=clear", *tiny_dataset(tiny_dir), "backbone=tiny_random", "trainer=cpu",
        "trainer.max_epochs=1", "trainer.log_every_n_steps=1", "data.batch_size=8", "data.val_queries=10",
        "data.negative_depth=50", "eval.k=100", "index.depth=100", "logger=csv", f"hydra.run.dir={out}",
    )  # fmt: skip
    rows = list(csv.DictReader((out / "csv" / "metrics.csv").open()))
    logged = {key for row in rows for key, value in row.items() if value}
    expected = {f"train/margin/{s}" for s in ("mean", "std", "p10", "p50", "p90", "fraction_nonpositive")}
    assert expected | {"train/loss/hinge", "train/accuracy", "train/triplets_active"} <= logged
    p10 = [float(r["train/margin/p10"]) for r in rows if r["train/margin/p10"]]
    p90 = [float(r["train/margin/p90"]) for r in rows if r["train/margin/p90"]]
    assert all(low <= high for low, high in zip(p10, p90, strict=True)) and len(p10) == 120 // 8  # one row per step
