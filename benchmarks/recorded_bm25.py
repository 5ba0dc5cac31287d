"""BM25 whose Java lookups are recorded where Java runs and replayed where it does not (a GPU machine).

pyserini's jar (164 MB) and Java cannot travel to an offline GPU machine that takes 64 MiB a call, yet CLEAR's
DataModule scores pairs outside the BM25 run, RoC reads BM25's term vectors, and the DHR fusions read query IDF, all
through the JVM. A benchmark run with ``--bm25 record=FILE`` on the CPU machine stores each such answer, keyed by the
call and its arguments, beside those the file already holds; the same run with ``--bm25 replay=FILE`` on the GPU
machine answers from the file, and a call that was not recorded is an error naming it. Runs and the Lucene index
come from the cache as they always do.
"""

from __future__ import annotations

import gzip
import hashlib
import pickle
from pathlib import Path
from typing import Literal

from retrieval_zoo.cache import atomic_path
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.lexical.lucene_bm25 import BM25

JAVA_CALLS = (
    "pair_scores",
    "candidate_scores",
    "document_term_weights",
    "query_idf",
    "analyze",
    "document_frequencies",
)


class RecordedBM25(BM25):
    """:class:`BM25` that records its Java answers to ``path`` (``mode="record"``) or answers from it (``"replay"``).

    Args:
        collection: The collection whose corpus is indexed.
        path: The record file (a gzipped pickle of call key → answer), written atomically by :meth:`save`.
        mode: ``record`` calls Java and keeps the answers; ``replay`` never calls Java.
    """

    def __init__(self, collection: Collection, path: str | Path, mode: Literal["record", "replay"]) -> None:
        super().__init__(collection)
        self.path, self.mode = Path(path), mode
        self.answers: dict[str, object] = {}
        if mode == "replay" and not self.path.is_file():
            raise FileNotFoundError(f"{self.path}: no BM25 record; make one with --bm25 record={self.path}")
        if self.path.is_file():  # recording adds to what an earlier benchmark recorded: one file serves both
            with gzip.open(self.path, "rb") as f:
                self.answers = pickle.load(f)

    def save(self) -> None:
        """Write the answers recorded so far (record mode)."""
        with atomic_path(self.path) as tmp, gzip.open(tmp, "wb") as f:
            pickle.dump(self.answers, f)

    def _answer(self, name: str, args: tuple, kwargs: dict) -> object:
        key = name + ":" + hashlib.sha256(pickle.dumps((args, sorted(kwargs.items())))).hexdigest()
        if key not in self.answers:
            if self.mode == "replay":
                raise KeyError(f"{self.path}: BM25.{name} was not recorded for these arguments; record it again")
            self.answers[key] = getattr(BM25, name)(self, *args, **kwargs)
        return self.answers[key]


def _replayable(name: str) -> object:
    def call(self: RecordedBM25, *args: object, **kwargs: object) -> object:
        return self._answer(name, args, kwargs)

    call.__name__ = name
    return call


for _name in JAVA_CALLS:
    setattr(RecordedBM25, _name, _replayable(_name))


def bm25_for(collection: Collection, spec: str | None) -> BM25:
    """``--bm25``'s BM25: plain (None), ``record=FILE`` or ``replay=FILE``."""
    if spec is None:
        return BM25(collection)
    mode, _, path = spec.partition("=")
    if mode not in ("record", "replay") or not path:
        raise ValueError(f"--bm25 {spec!r}: expected record=FILE or replay=FILE")
    return RecordedBM25(collection, path, mode)  # type: ignore[arg-type]
