"""What a run prints: also in its folder's log file, and without library notices a user cannot act on.

Hydra names a log file per job but fills it only with Python ``logging`` records, and the zoo prints its progress,
tables and errors: the file stayed empty. :func:`tee_output` copies standard output and standard error into it as
they are written, without the carriage-return redraws of progress bars (a terminal's animation, unreadable in a
file). Under DDP each rank other than 0 writes its own ``<name>.rank<r>.log`` beside it.
"""

from __future__ import annotations

import logging
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TypeVar

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from lightning.pytorch.utilities import rank_zero_only

Result = TypeVar("Result")


class _Tee:
    """A text stream that writes to ``stream`` and, without progress-bar redraws, to ``copy``."""

    def __init__(self, stream: IO[str], copy: IO[str]) -> None:
        self.stream, self.copy = stream, copy

    def write(self, text: str) -> int:
        if "\r" not in text:  # a redraw of a bar (tqdm writes "\r" + the bar) is for a terminal only
            self.copy.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.copy.flush()
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def __getattr__(self, name: str) -> object:  # encoding, fileno, ...: the terminal's
        return getattr(self.stream, name)


@contextmanager
def tee_output(log_file: Path) -> Iterator[IO[str]]:
    """Copy everything printed inside the block into ``log_file`` (appended, line-buffered), which it yields.

    Rank r > 0 of a distributed run writes ``<stem>.rank<r>.log`` instead.
    """
    rank = rank_zero_only.rank
    path = log_file if rank == 0 else log_file.with_name(f"{log_file.stem}.rank{rank}{log_file.suffix}")
    path.parent.mkdir(parents=True, exist_ok=True)
    stdout, stderr = sys.stdout, sys.stderr
    with open(path, "a", encoding="utf-8", buffering=1) as copy:
        sys.stdout, sys.stderr = _Tee(stdout, copy), _Tee(stderr, copy)
        try:
            yield copy
        finally:
            sys.stdout, sys.stderr = stdout, stderr


def logged_job(job: Callable[[Path], Result]) -> Result:
    """Run a Hydra job's body on its output folder, what it prints also in ``<job name>.log`` there, quietly.

    An error is printed once: Hydra reports it when the job returns, so here it goes to the log file alone, except in
    a multirun, where Hydra reports it only after the last job and it is printed at once.
    """
    quiet_library_notices()
    hydra_cfg = HydraConfig.get()
    out_dir = Path(hydra_cfg.runtime.output_dir)
    with tee_output(out_dir / f"{hydra_cfg.job.name}.log") as log:
        try:
            return job(out_dir)
        except Exception:
            traceback.print_exc(file=None if hydra_cfg.mode == RunMode.MULTIRUN else log)
            raise


# Lightning's notices that say nothing about the run: tips to install its cloud products, and the echo of the
# ``limit_predict_batches=1.0`` that corpus encoding sets so that a debug run still encodes every shard.
LIGHTNING_NOTICES = ("💡 Tip:", "was configured so 100% of the batches")


class _DropNotices(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not any(notice in record.getMessage() for notice in LIGHTNING_NOTICES)


def quiet_library_notices() -> None:
    """Silence what the libraries print on every run that no setting of the run can change (idempotent)."""
    # lightning 2.6's own use of a torch.utils._pytree name that torch deprecated
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(f, _DropNotices) for f in rank_zero.filters):
        rank_zero.addFilter(_DropNotices())
