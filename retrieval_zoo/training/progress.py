"""Training progress a batch job's log shows: tqdm's bar in a terminal, plain lines when the output is a file.

Under a scheduler the output goes to a file, where tqdm's bar redraws one line with carriage returns and shows
nothing readable for minutes. :func:`progress_bar` picks the bar in a terminal and :class:`LineProgress` elsewhere: a
line every few percent of an epoch or every few minutes, whichever comes first, with the step, the rate, the time
left and the progress-bar metrics (the training loss, validation's MRR@10).
"""

from __future__ import annotations

import datetime
import sys
import time
from typing import Any, Literal

import lightning as L
from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar


def progress_bar(
    style: Literal["auto", "bar", "lines"] = "auto", every_percent: float = 5.0, every_seconds: float = 300.0
) -> ProgressBar:
    """The trainer's progress display: ``bar`` (tqdm), ``lines`` (:class:`LineProgress`), or ``auto``.

    ``auto`` is the bar when standard error is a terminal, else lines.

    Args:
        style: Which display.
        every_percent: With lines, one every this share of an epoch (in percent).
        every_seconds: With lines, one at least every this many seconds.
    """
    if every_percent <= 0 or every_seconds <= 0:
        raise ValueError(f"progress.every_percent and every_seconds must be > 0, not {every_percent}, {every_seconds}")
    if style == "bar" or (style == "auto" and sys.stderr.isatty()):
        return TQDMProgressBar()
    return LineProgress(every_percent, every_seconds)


class LineProgress(ProgressBar):
    """A plain line of training progress every ``every_percent`` of an epoch or ``every_seconds``, and at its end."""

    def __init__(self, every_percent: float = 5.0, every_seconds: float = 300.0) -> None:
        super().__init__()
        self.every_percent, self.every_seconds = every_percent, every_seconds
        self.enabled = True
        self.epoch_started = self.last_time = 0.0
        self.last_percent = 0.0
        self.epoch_total: int | float = 0

    def disable(self) -> None:
        """Print nothing (Lightning disables the bar on ranks other than 0)."""
        self.enabled = False

    def enable(self) -> None:
        """Print again."""
        self.enabled = True

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Start the epoch's clock and fix its length.

        Lightning's count of the epoch's batches shrinks with the steps left of ``max_steps`` as they are taken, so
        it is read once, here.
        """
        self.epoch_started = self.last_time = time.monotonic()
        self.last_percent = 0.0
        self.epoch_total = self.total_train_batches

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """A line when the epoch has advanced ``every_percent`` or ``every_seconds`` have passed since the last."""
        if not self.enabled:
            return
        done, total, now = batch_idx + 1, self.epoch_total, time.monotonic()
        finite = isinstance(total, int) and total > 0
        percent = 100.0 * done / total if finite else 0.0
        if not (done == total or percent - self.last_percent >= self.every_percent
                or now - self.last_time >= self.every_seconds):  # fmt: skip
            return
        self.last_percent, self.last_time = percent, now
        rate = done / max(now - self.epoch_started, 1e-9)
        where = f"{done}/{total} ({percent:.0f}%)" if finite else f"{done}"
        left = f", {datetime.timedelta(seconds=round((total - done) / rate))} left in the epoch" if finite else ""
        shown = {k: v for k, v in self.get_metrics(trainer, pl_module).items() if k != "v_num"}  # not the logger's id
        metrics = "".join(f", {name} {_short(value)}" for name, value in shown.items())
        epochs = f"/{trainer.max_epochs}" if trainer.max_epochs and trainer.max_epochs > 0 else ""
        print(f"[train] epoch {trainer.current_epoch + 1}{epochs}: batch {where}, step {trainer.global_step}, "
              f"{rate:.2f} batches/s{left}{metrics}", flush=True)  # fmt: skip


def _short(value: object) -> str:
    """A metric as a progress line shows it: floats to 4 significant digits."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


class StepBudget(L.Callback):
    """Says at the start of training when ``trainer.max_steps`` cannot be reached within ``trainer.max_epochs``.

    A recipe counts its length in optimizer steps (CSurF: 120) with an epoch limit that its own collection never
    reaches; on a smaller collection the epochs run out first, and training would stop early without a word.
    """

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Compare the step budget with the steps the epochs give on this data."""
        if shortfall(trainer.max_steps, trainer.max_epochs, int(trainer.estimated_stepping_batches)):
            print(f"[train] warning: trainer.max_steps={trainer.max_steps} will not be reached: "
                  f"trainer.max_epochs={trainer.max_epochs} give {int(trainer.estimated_stepping_batches):,} steps on "
                  "this data; raise trainer.max_epochs (or set it to -1 to count in steps alone)")  # fmt: skip


def shortfall(max_steps: int | None, max_epochs: int | None, steps: int) -> bool:
    """Whether a positive step budget exceeds the ``steps`` that ``max_epochs`` (positive) give."""
    return bool(max_steps and max_steps > 0 and max_epochs and max_epochs > 0 and steps < max_steps)
