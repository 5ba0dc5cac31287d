"""Run a registry's jobs: ``train.py`` / ``evaluate.py`` subprocesses in content-addressed, resumable directories.

A job's directory is named by a hash of its command (script, overrides, seed, and for an evaluation the directory of
the run it evaluates), of the code that runs it (every file under ``retrieval_zoo/`` and ``conf/``, ``train.py``,
``evaluate.py``, ``constraints.txt``) and of the numeric stack (torch's version and CPU capability). A job whose
``results.json`` exists is not run again; a changed file of the code runs everything again, as a guard should. A
killed job reruns in its own directory, where ``train.py``'s ``resume_from=auto`` resumes from its last checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from retrieval_zoo.cache import cache_root, fingerprint
from retrieval_zoo.reproduce.registry import Job

HERE = Path(__file__).resolve().parent  # this package: it reads numbers, it does not make them
ROOT = HERE.parents[1]
CODE = ("retrieval_zoo", "train.py", "evaluate.py", "constraints.txt")  # the configs are in retrieval_zoo/conf
QUIET = ("logger=csv", "trainer.enable_progress_bar=false")  # the numbers do not depend on either


def code_digest(root: Path = ROOT) -> str:
    """A hash of every file that decides a job's numbers (compiled files and this package aside)."""
    digest = hashlib.sha256()
    for entry in CODE:
        path = root / entry
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in (f for f in files if "__pycache__" not in f.parts and not f.is_relative_to(HERE)):
            digest.update(str(file.relative_to(root)).encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


NUMERICS_ENV = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "DNNL_MAX_CPU_ISA", "OMP_NUM_THREADS")


def stack() -> dict[str, str]:
    """What besides the code moves the numbers: torch's version and the CPU kernels it dispatches to.

    The variables that choose kernels or threads join it when they are set (the cross-machine measurement sets them).
    """
    chosen = {name: os.environ[name] for name in NUMERICS_ENV if os.environ.get(name)}
    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(), **chosen}


class Runner:
    """Runs (or, dry, prints) each job's command once per seed, under ``<cache>/reproduce/<hash>``.

    Args:
        root: The checkout whose ``train.py`` and ``evaluate.py`` run (its code is hashed into the directories).
        cache_dir: Where job directories live (default: ``$RETRIEVAL_ZOO_CACHE/reproduce``).
        dry_run: Print the commands, run nothing.
        echo: Where progress lines go.
    """

    def __init__(
        self, root: Path = ROOT, cache_dir: Path | None = None, dry_run: bool = False, echo: Callable = print
    ) -> None:
        self.root, self.dry_run, self.echo = root, dry_run, echo
        self.cache_dir = cache_dir or cache_root() / "reproduce"
        self.code = code_digest(root)
        self.stack = stack()

    def command(self, job: Job, seed: int, evaluated: Path | None) -> list[str]:
        """The job's command line for one seed (an evaluation takes the evaluated run's seed with it)."""
        head = [sys.executable, f"{job.script}.py"]
        if job.script == "evaluate":  # evaluate.py has no logger group
            where = [f"run_dir={evaluated}"] if evaluated is not None else []
            return head + [*where, *job.overrides, *([] if evaluated else [f"seed={seed}"]), *QUIET[1:]]
        return head + [*job.overrides, f"seed={seed}", *QUIET]

    def directory(self, job: Job, seed: int, evaluated: Path | None) -> Path:
        """The job's content-addressed output directory for one seed."""
        key = fingerprint(job.script, job.overrides, seed, str(evaluated), self.code, self.stack)
        return self.cache_dir / f"{job.script}-{seed}-{key}"  # the same command in two tables runs once

    def run(self, job: Job, seed: int, evaluated: Path | None = None) -> Path:
        """The directory holding the job's ``results.json`` for ``seed``, running the job unless it is already there."""
        out = self.directory(job, seed, evaluated)
        command = [*self.command(job, seed, evaluated), f"hydra.run.dir={out}"]
        printable = shlex.join(["python", *command[1:]])
        if self.dry_run:
            self.echo(f"  {printable}")
            return out
        if (out / "results.json").exists():
            self.echo(f"  cached  {printable}")
            return out
        out.mkdir(parents=True, exist_ok=True)
        self.echo(f"  running {printable}  (log: {out / 'reproduce.log'})")
        started = time.perf_counter()
        with (out / "reproduce.log").open("a") as log:
            env = {**os.environ, "HYDRA_FULL_ERROR": "1"}
            code = subprocess.run(command, cwd=self.root, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
        if code != 0 or not (out / "results.json").exists():
            tail = "".join((out / "reproduce.log").read_text().splitlines(keepends=True)[-25:])
            raise RuntimeError(f"{printable} failed with exit code {code}; the end of {out / 'reproduce.log'}:\n{tail}")
        self.echo(f"  done in {time.perf_counter() - started:.0f} s")
        return out

    def results(self, directory: Path) -> dict:
        """A finished job's ``results.json``."""
        return json.loads((directory / "results.json").read_text())
