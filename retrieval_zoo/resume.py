"""Resume after a kill: find the checkpoint to resume from, and restore the random state with it.

Rerunning the command of a killed ``train.py`` run resumes it (``resume_from=auto``, the default): from the
``last.ckpt`` of the job's own directory (a SLURM job requeued by submitit reruns in it), else from the newest
unfinished run (no ``results.json``) under the same output root whose saved config equals this one. Lightning
restores the weights, the optimizer, the schedule and the loop counters; the training DataLoader restores its sampler
position (:class:`retrieval_zoo.training.datamodule.ResumableLoader`); and :class:`RandomState` restores the random
generators at the first resumed step, so dropout draws what it would have drawn and a resumed run ends where an
uninterrupted one does.
"""

from __future__ import annotations

import os
import random
import signal
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import lightning as L
import numpy as np
import torch
import yaml
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities.exceptions import SIGTERMException

from retrieval_zoo.cache import atomic_path

RNG_KEY = "retrieval_zoo_rng"


def find_checkpoint(resume_from: str | None, out_dir: Path, config: dict) -> str | None:
    """The checkpoint to resume from: ``resume_from`` itself, or with ``auto`` the last one of this run's config.

    Args:
        resume_from: A checkpoint path, ``auto``, or None (start fresh).
        out_dir: This job's output directory (``outputs/<date>/<time>_<method>`` or a multirun job's).
        config: This run's resolved config (what ``run_config.yaml`` holds).
    """
    if resume_from != "auto":
        if resume_from and not Path(resume_from).exists():
            raise FileNotFoundError(f"resume_from={resume_from}: no such checkpoint")
        if resume_from:
            check_checkpoint(Path(resume_from))
        return resume_from
    own = out_dir / "checkpoints" / "last.ckpt"
    if own.exists():
        return str(own)
    unfinished = []
    for saved in output_root(out_dir).glob("**/run_config.yaml"):
        run = saved.parent
        last = run / "checkpoints" / "last.ckpt"
        finished = (run / "results.json").exists()
        if run != out_dir and last.exists() and not finished and yaml.safe_load(saved.read_text()) == config:
            unfinished.append(last)
    if not unfinished:
        return None
    newest = max(unfinished, key=lambda p: p.stat().st_mtime)
    print(f"[resume] an unfinished run with this config: resuming from {newest}")
    return str(newest)


def check_checkpoint(path: Path) -> None:
    """Fail unless ``path`` is a Lightning checkpoint: a torch zip archive whose pickle holds its training state.

    Reads the archive's directory and its small pickle only (no tensor), so a multi-GB checkpoint is checked in
    milliseconds, before Lightning would fail on it with torch's own unpickling message.
    """
    if not zipfile.is_zipfile(path):
        raise ValueError(f"resume_from={path}: not a checkpoint (not a torch archive, or truncated); "
                         "give a .ckpt that train.py wrote under <run>/checkpoints/")  # fmt: skip
    with zipfile.ZipFile(path) as archive:
        pickles = [name for name in archive.namelist() if name.split("/")[-1] == "data.pkl"]
        state = archive.read(pickles[0]) if pickles else b""
    missing = [key for key in ("state_dict", "global_step", "optimizer_states") if key.encode() not in state]
    if missing:
        raise ValueError(f"resume_from={path}: a torch file but not a Lightning training checkpoint "
                         f"(no {', '.join(missing)}); give a .ckpt that train.py wrote")  # fmt: skip


def output_root(out_dir: Path) -> Path:
    """Where the runs of the same app live.

    The first folder of ``out_dir`` below the working directory (``outputs`` or ``multirun``), or ``out_dir``'s
    parent when it lies elsewhere.
    """
    out_dir, cwd = out_dir.resolve(), Path.cwd().resolve()
    if out_dir.is_relative_to(cwd) and out_dir != cwd:
        return cwd / out_dir.relative_to(cwd).parts[0]
    return out_dir.parent


class RandomState:
    """Saves Python's, NumPy's and torch's random states (and a module's own generators) in checkpoints."""

    def __init__(self) -> None:
        self.pending: dict | None = None

    @staticmethod
    def capture(generators: dict[str, torch.Generator]) -> dict:
        """The current states."""
        name, keys, position, has_gauss, gauss = np.random.get_state()  # as tensors and numbers: weights_only loads
        numpy = (name, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, gauss)
        state = {"python": random.getstate(), "numpy": numpy, "torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            state["cuda"] = torch.cuda.get_rng_state_all()
        state["generators"] = {name: g.get_state() for name, g in generators.items()}
        return state

    def restore_later(self, state: dict | None) -> None:
        """Keep a loaded checkpoint's states until :meth:`apply` (the first resumed training step)."""
        self.pending = state

    def apply(self, generators: dict[str, torch.Generator]) -> None:
        """Set the kept states, once."""
        if self.pending is None:
            return
        state, self.pending = self.pending, None
        random.setstate(state["python"])
        name, keys, position, has_gauss, gauss = state["numpy"]
        np.random.set_state((name, keys.numpy().astype(np.uint32), position, has_gauss, gauss))
        torch.set_rng_state(state["torch"])
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])
        for name, generator_state in state["generators"].items():
            generators[name].set_state(generator_state)


SIGTERM_EXIT = 128 + signal.SIGTERM  # what a shell reports for a process ended by SIGTERM


@contextmanager
def exit_code_on_sigterm() -> Iterator[None]:
    """A run that Lightning stopped on SIGTERM (a scheduler's pre-emption) exits with :data:`SIGTERM_EXIT`.

    Lightning catches SIGTERM in its loops and ends them with ``SIGTERMException``, a ``SystemExit`` without a code,
    so the process would exit with 0 and a job array or a requeue script would take the run for done.
    """
    try:
        yield
    except SIGTERMException as stop:
        print(f"[run] stopped by SIGTERM: exit code {SIGTERM_EXIT}; the same command resumes from the last checkpoint",
              flush=True)  # fmt: skip
        raise SystemExit(SIGTERM_EXIT) from stop


class KillAtStep(Callback):
    """Kill the process after training step ``step`` with ``signal``.

    SIGKILL allows no cleanup, as an OOM kill or a late pre-emption; SIGTERM is what a scheduler sends first.

    For checking that a rerun resumes: ``python train.py debug=kill_at_step ...``, then the same command without it.
    """

    def __init__(self, step: int, signal: Literal["SIGKILL", "SIGTERM"] = "SIGKILL") -> None:
        self.step, self.signal = step, signal

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        """Send the signal once the step is reached."""
        if trainer.global_step >= self.step:
            print(f"[kill_at_step] {self.signal} after step {trainer.global_step}", flush=True)
            os.kill(os.getpid(), signal.Signals[self.signal])


class AtomicCheckpointIO(TorchCheckpointIO):
    """Checkpoints written to a temporary sibling and renamed into place.

    A kill mid-write leaves no partial ``last.ckpt`` for the rerun to trust (Lightning's own save writes the target
    file in place).
    """

    def save_checkpoint(self, checkpoint: dict, path: str | Path, storage_options: object | None = None) -> None:
        """Save ``checkpoint`` to ``path`` atomically (local paths; others go through Lightning's writer)."""
        if "://" in str(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        with atomic_path(path) as tmp:
            torch.save(checkpoint, tmp)
