"""BM25 whose Java lookups are recorded where Java runs and replayed where it does not (a GPU machine).

pyserini's jar (164 MB) and Java cannot travel to an offline GPU machine that takes 64 MiB a call, yet CLEAR's
DataModule scores pairs outside the BM25 run, RoC reads BM25's term vectors, and the DHR fusions read query IDF, all
through the JVM. A benchmark run with ``--bm25 record=FILE`` on the CPU machine stores each such answer, keyed by the
call and its arguments, beside those the file already holds; the same run with ``--bm25 replay=FILE`` on the GPU
machine answers from the file, and a call that was not recorded is an error naming it. Runs and the Lucene index
come from the cache as they always do; a benchmark that also searches BM25 where it runs (``benchmarks.search_syncs``:
its pool, the unions' lexical side) records :data:`SEARCH_CALLS` too. An answer is keyed by the collection's corpus
as well, so one file serves a collection and a pool cut from it (:meth:`RecordedBM25.over`).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import pickle
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from retrieval_zoo.cache import atomic_path
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.id_index import IdIndex
from retrieval_zoo.lexical.lucene_bm25 import BM25

JAVA_CALLS = (
    "pair_scores",
    "candidate_scores",
    "document_term_weights",
    "query_idf",
    "analyze",
    "document_frequencies",
)
# BM25's searches, recorded only where a benchmark asks: the training DataModules' runs (8,530 queries' top 1,000)
# would outgrow a device call's 64 MiB, and they travel as cache entries (gpu_prepare.sh) instead
SEARCH_CALLS = ("search", "search_rows")


class RecordedBM25(BM25):
    """:class:`BM25` that records its Java answers to ``path`` (``mode="record"``) or answers from it (``"replay"``).

    Args:
        collection: The collection whose corpus is indexed.
        path: The record file (a gzipped pickle of call key → answer), written atomically by :meth:`save`.
        mode: ``record`` calls Java and keeps the answers; ``replay`` never calls Java.
        calls: The BM25 methods recorded and replayed (:data:`JAVA_CALLS`, plus :data:`SEARCH_CALLS` where a benchmark
            searches); any other runs as BM25's own.
        answers: Another recorder's answers to share (:meth:`over`); None reads them from ``path``.
    """

    def __init__(self, collection: Collection, path: str | Path, mode: Literal["record", "replay"],
                 calls: tuple[str, ...] = JAVA_CALLS, answers: dict[str, object] | None = None) -> None:  # fmt: skip
        super().__init__(collection)
        unknown = set(calls) - set(JAVA_CALLS + SEARCH_CALLS)
        if unknown:
            raise ValueError(f"not a recordable BM25 call: {sorted(unknown)}")
        self.path, self.mode, self.calls = Path(path), mode, calls
        self.answers: dict[str, object] = {} if answers is None else answers
        if answers is not None:
            return
        if mode == "replay" and not self.path.is_file():
            raise FileNotFoundError(f"{self.path}: no BM25 record; make one with --bm25 record={self.path}")
        if self.path.is_file():  # recording adds to what an earlier benchmark recorded: one file serves both
            with gzip.open(self.path, "rb") as f:
                self.answers = pickle.load(f)

    def over(self, collection: Collection) -> RecordedBM25:
        """A recorder of the same file, mode and calls over ``collection`` (a pool cut from this one), its answers
        shared with this one's (not read again): either saves both."""
        return RecordedBM25(collection, self.path, self.mode, self.calls, self.answers)

    def save(self) -> None:
        """Write the answers recorded so far (record mode)."""
        with atomic_path(self.path) as tmp, gzip.open(tmp, "wb") as f:
            pickle.dump(self.answers, f)

    def _answer(self, name: str, args: tuple, kwargs: dict) -> object:
        if name not in self.calls:
            return getattr(BM25, name)(self, *args, **kwargs)
        # JSON, not a pickle: a pickle of equal arguments differs with which of their strings are the same object
        keyed = json.dumps([self.collection.corpus_fingerprint, canonical(name, args), sorted(kwargs.items())])
        key = name + ":" + hashlib.sha256(keyed.encode()).hexdigest()
        if key not in self.answers:
            if self.mode == "replay":
                raise KeyError(f"{self.path}: BM25.{name} was not recorded for these arguments; record it again")
            self.answers[key] = getattr(BM25, name)(self, *args, **kwargs)
        return self.answers[key]


def canonical(name: str, args: tuple) -> tuple:
    """A call's arguments as the same on every machine and process: an id index by its digest (its pickle may hold
    the paths of the machine that built it), and ``candidate_scores``' candidates in sorted order (a union gathers them
    through sets, whose order changes from one process to the next; the answer, a run, does not depend on it)."""
    args = tuple(("IdIndex", a.digest) if isinstance(a, IdIndex) else a for a in args)
    if name == "candidate_scores":
        queries, candidates = args
        return queries, sorted((qid, sorted(docids)) for qid, docids in candidates.items())
    return args


def _replayable(name: str) -> object:
    def call(self: RecordedBM25, *args: object, **kwargs: object) -> object:
        return self._answer(name, args, kwargs)

    call.__name__ = name
    return call


for _name in JAVA_CALLS + SEARCH_CALLS:
    setattr(RecordedBM25, _name, _replayable(_name))


def bm25_for(collection: Collection, spec: str | None, calls: tuple[str, ...] = JAVA_CALLS) -> BM25:
    """``--bm25``'s BM25: plain (None), ``record=FILE`` or ``replay=FILE`` (recording ``calls``)."""
    if spec is None:
        return BM25(collection)
    mode, _, path = spec.partition("=")
    if mode not in ("record", "replay") or not path:
        raise ValueError(f"--bm25 {spec!r}: expected record=FILE or replay=FILE")
    return RecordedBM25(collection, path, mode, calls)  # type: ignore[arg-type]


@contextmanager
def bm25_recording(collection: Collection, spec: str | None, calls: tuple[str, ...] = JAVA_CALLS) -> Iterator[BM25]:
    """:func:`bm25_for`'s BM25 for the block's work, its answers saved when the block ends (record mode), failed or
    not: what a long benchmark recorded before an error is kept."""
    bm25 = bm25_for(collection, spec, calls)
    try:
        yield bm25
    finally:
        if isinstance(bm25, RecordedBM25) and bm25.mode == "record":
            bm25.save()
