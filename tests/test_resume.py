"""Fault tolerance: a run killed mid-epoch and rerun resumes from its last checkpoint at the same sampler position
and ends with the metrics of an uninterrupted run."""

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from retrieval_zoo.evaluation.compare import main as compare_main
from retrieval_zoo.resume import RandomState, find_checkpoint
from retrieval_zoo.training.negatives import ShardedEpochSampler
from tests.test_end_to_end import run_app, tiny_dataset


def test_sampler_resumes_mid_epoch_at_the_same_position() -> None:
    sampler = ShardedEpochSampler(20, seed=3, rank=1, world_size=2)
    sampler.set_epoch(2)
    full = list(sampler)
    sampler.resume_at(epoch=2, consumed=4)
    assert list(sampler) == full[4:]
    assert list(sampler) == full  # the skip applies to one pass only
    sampler.resume_at(epoch=1, consumed=4)  # a position of another epoch is not applied
    assert list(sampler) == full


def test_random_state_restores_draws(tmp_path: Path) -> None:
    generator = torch.Generator().manual_seed(5)
    state = RandomState.capture({"masking": generator})
    expected = (torch.rand(3), torch.rand(2, generator=generator), np.random.rand(2))
    torch.rand(7), torch.rand(1, generator=generator), np.random.rand(3)  # what a killed run drew after its checkpoint
    restore = RandomState()
    restore.restore_later(state)
    restore.apply({"masking": generator})
    assert torch.equal(torch.rand(3), expected[0]) and torch.equal(torch.rand(2, generator=generator), expected[1])
    assert np.array_equal(np.random.rand(2), expected[2])
    torch.save(state, tmp_path / "state.pt")
    torch.load(tmp_path / "state.pt", weights_only=True)  # checkpoints stay loadable without unpickling code


def unfinished_run(root: Path, name: str, config: dict, finished: bool = False) -> Path:
    run = root / name
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.ckpt").write_bytes(b"x")
    (run / "run_config.yaml").write_text(yaml.safe_dump(config))
    if finished:
        (run / "results.json").write_text("{}")
    return run / "checkpoints" / "last.ckpt"


def test_auto_resume_finds_the_newest_unfinished_run_of_the_same_config(tmp_path: Path) -> None:
    config = {"method_name": "dense", "seed": 13}
    root = tmp_path / "outputs"
    unfinished_run(root, "day/old", config)
    time.sleep(0.01)
    newest = unfinished_run(root, "day/new", config)
    unfinished_run(root, "day/done", config, finished=True)
    unfinished_run(root, "day/other", {**config, "seed": 14})
    os.utime(newest.parent.parent / "run_config.yaml")
    here = root / "day" / "now"
    assert find_checkpoint("auto", here, config) == str(newest)
    assert find_checkpoint("auto", here, {**config, "seed": 99}) is None
    assert find_checkpoint(None, here, config) is None
    own = unfinished_run(root, "day/now", config)  # a requeued job: its own directory first
    assert find_checkpoint("auto", here, config) == str(own)
    with pytest.raises(FileNotFoundError, match="no such checkpoint"):
        find_checkpoint(str(tmp_path / "missing.ckpt"), here, config)


@pytest.mark.slow
def test_killed_run_resumes_and_ends_like_an_uninterrupted_one(tiny_dir: Path, tmp_path: Path) -> None:
    command = [
        *tiny_dataset(tiny_dir), "backbone=tiny_random", "logger=csv", "trainer=cpu", "trainer.max_epochs=2",
        "data.batch_size=16", "data.val_queries=10", "eval.k=100", "checkpoint_steps.every_n_train_steps=2",
    ]  # fmt: skip
    whole = tmp_path / "whole"
    run_app("train.py", *command, f"hydra.run.dir={whole}")
    killed = tmp_path / "killed"
    output = run_app("train.py", *command, "debug=kill_at_step", "callbacks.kill.step=5", f"hydra.run.dir={killed}",
                     ok=False)  # fmt: skip
    assert "SIGKILL after step 5" in output and not (killed / "results.json").exists()
    saved = torch.load(killed / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert saved["global_step"] == 4 and saved["epoch"] == 0  # mid-epoch: 7 steps per epoch
    assert saved["TriplesDataModule"] == {"epoch": 0, "batches": 4}  # the sampler position
    output = run_app("train.py", *command, f"hydra.run.dir={killed}")
    assert f"resuming from {killed / 'checkpoints' / 'last.ckpt'}" in output
    resumed, uninterrupted = (json.loads((d / "results.json").read_text()) for d in (killed, whole))
    assert resumed["metrics"]["dense"] == pytest.approx(uninterrupted["metrics"]["dense"], abs=1e-6)
    last = torch.load(killed / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == 14

    # The two output directories compared on their dev queries (qrels from the run's dataset config), BM25 first.
    table = compare_main([str(whole), str(killed), "--bm25", "--measures", "MRR@10", "--out", str(tmp_path / "cmp")])
    assert "Baseline: BM25." in table and "| dense (killed) | MRR@10 |" in table
    rows = json.loads((tmp_path / "cmp" / "comparison.json").read_text())["rows"]
    assert rows[0]["wins"] + rows[0]["losses"] + rows[0]["ties"] == 30
    assert {k: v for k, v in rows[1].items() if k != "system"} == {k: v for k, v in rows[0].items() if k != "system"}


@pytest.mark.slow
def test_a_run_stopped_by_sigterm_exits_non_zero(tiny_dir: Path, tmp_path: Path) -> None:
    """A scheduler's SIGTERM stops Lightning's loop; the run must not exit 0, which a job array takes for done."""
    import subprocess
    import sys

    from tests.test_end_to_end import REPO

    command = [
        *tiny_dataset(tiny_dir), "backbone=tiny_random", "logger=csv", "trainer=cpu", "trainer.max_epochs=2",
        "data.batch_size=16", "data.val_queries=10", "eval.k=100", "checkpoint_steps.every_n_train_steps=2",
        "debug=kill_at_step", "callbacks.kill.step=3", "callbacks.kill.signal=SIGTERM", f"hydra.run.dir={tmp_path}",
    ]  # fmt: skip
    env = {**os.environ, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "train.py", *command], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 143, done.stdout[-2000:] + done.stderr[-2000:]
    assert "SIGTERM after step 3" in done.stdout and "stopped by SIGTERM: exit code 143" in done.stdout
    assert not (tmp_path / "results.json").exists()


def test_resume_from_a_file_that_is_not_a_checkpoint_names_it(tmp_path: Path) -> None:
    junk, weights, checkpoint = tmp_path / "junk.ckpt", tmp_path / "weights.pt", tmp_path / "last.ckpt"
    junk.write_bytes(b"not a checkpoint")
    torch.save({"encoder.weight": torch.zeros(2)}, weights)
    torch.save({"state_dict": {"w": torch.zeros(2)}, "global_step": 4, "optimizer_states": [], "epoch": 0}, checkpoint)
    with pytest.raises(ValueError, match=r"resume_from=.*junk.ckpt: not a checkpoint"):
        find_checkpoint(str(junk), tmp_path, {})
    with pytest.raises(ValueError, match=r"weights.pt: a torch file but not a Lightning training checkpoint"):
        find_checkpoint(str(weights), tmp_path, {})
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(checkpoint.read_bytes()[:-100])
    with pytest.raises(ValueError, match="not a checkpoint"):
        find_checkpoint(str(truncated), tmp_path, {})
    assert find_checkpoint(str(checkpoint), tmp_path, {}) == str(checkpoint)
