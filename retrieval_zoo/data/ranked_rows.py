"""Runs as columnar arrays: each query's ranked documents as corpus rows and scores, never as Python dicts.

A run at MS MARCO training scale (500k queries × a top 1,000) holds 500M (query, document, score) entries: tens of
GB as dicts of dicts, 4 GB here (int32 document rows beside float32 scores, one CSR row per query), read back by
memory map. :func:`read_ranked_rows` streams TREC run files block by block and validates every line as
:func:`~retrieval_zoo.data.formats.read_run` does (errors name the file and the line). The queries of a file may
come in any order and interleave; each query's documents are ranked as trec_eval ranks them (score descending,
ties by document id descending) and cut to a depth. Nothing it holds grows with the run beyond one block.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from itertools import repeat
from pathlib import Path

import numpy as np

from retrieval_zoo.cache import atomic_path, cache_root, entry_lock, file_digest, fingerprint
from retrieval_zoo.data.doc_rows import RankedRows, entry_rows, row_blocks
from retrieval_zoo.data.formats import FormatError, _rows
from retrieval_zoo.data.run_blocks import run_blocks, without_cyclic_gc
from retrieval_zoo.id_index import IdIndex

BLOCK_LINES = 1 << 20  # lines parsed, and entries ranked, at a time
FORMAT = "ranked-rows-v1"


def read_ranked_rows(
    paths: Sequence[str | Path],
    queries: Mapping[str, object],
    qids: Sequence[str],
    docs: IdIndex,
    depth: int | None,
    folder: Path,
    block_lines: int = BLOCK_LINES,
) -> RankedRows:
    """Read TREC run files (``qid Q0 docid rank score tag``) into :class:`RankedRows` in ``folder``.

    Args:
        paths: Run files, read as one run (a run searched in parts).
        queries: Every valid query id (a query id outside it is an error; one outside ``qids`` is skipped).
        qids: The queries whose rankings are kept; row ``i`` is ``qids[i]`` (empty when the run lacks it).
        docs: The corpus's ids.
        depth: Documents kept per query, the best in trec_eval's order; None keeps all.
        folder: An empty folder the arrays are written into (and memory-mapped from).
        block_lines: Lines held at a time.

    Raises:
        FormatError: Naming the file and line of a malformed line, an unknown query or document id, a score that is
            not a finite number, or a document listed twice for a query; also a damaged gzip file.
    """
    row_of = {qid: i for i, qid in enumerate(qids)}
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        with without_cyclic_gc():  # millions of short-lived lists: each collection would walk them all
            parts = [_spill(Path(scratch), i, _parse_block(*block, queries, row_of, docs))
                     for i, block in enumerate(run_blocks(paths, block_lines))]  # fmt: skip
        counts = np.zeros(len(qids), dtype=np.int64)
        for part in parts:
            counts += np.bincount(np.load(part["rows"]), minlength=len(qids))
        offsets = np.concatenate(([0], np.cumsum(counts)))
        doc_all = _new_array(Path(scratch) / "docs.npy", np.int32, int(offsets[-1]))
        score_all = _new_array(Path(scratch) / "scores.npy", np.float64, int(offsets[-1]))
        filled = offsets[:-1].copy()
        for part in parts:  # scatter each block's entries after the entries earlier blocks gave the same query
            rows = np.load(part["rows"])
            order = np.argsort(rows, kind="stable")
            rows = rows[order]
            within = np.arange(len(rows)) - np.searchsorted(rows, rows)
            at = filled[rows] + within
            doc_all[at], score_all[at] = np.load(part["docs"])[order], np.load(part["scores"])[order]
            filled += np.bincount(rows, minlength=len(qids))
        return _rank_and_cut(offsets, doc_all, score_all, docs, depth, folder, paths, qids, block_lines)


def _parse_block(
    path: Path,
    first: int,
    lines: list[list[str]],
    queries: Mapping[str, object],
    row_of: dict[str, int],
    docs: IdIndex,
) -> dict[str, np.ndarray]:
    """One block's kept entries as arrays, checking its ids and scores (the line of a problem is ``first + i``)."""
    qids, docids, scores = [f[0] for f in lines], [f[2] for f in lines], [f[4] for f in lines]
    rows = np.fromiter(map(row_of.get, qids, repeat(-1)), dtype=np.int64, count=len(qids))
    unknown = next((i for i in np.flatnonzero(rows < 0) if qids[i] not in queries), None)
    if unknown is not None:
        raise FormatError(path, first + int(unknown), f"unknown query id {qids[unknown]!r}")
    doc_rows = docs.rows(docids)
    if (doc_rows < 0).any():
        i = int(np.argmax(doc_rows < 0))
        raise FormatError(path, first + i, f"unknown document id {docids[i]!r}")
    try:
        values = np.asarray(scores, dtype=np.float64)
    except ValueError:
        i = next(i for i, s in enumerate(scores) if not _is_number(s))
        raise FormatError(path, first + i, f"score {scores[i]!r} is not a number") from None
    if not np.isfinite(values).all():
        i = int(np.argmax(~np.isfinite(values)))
        raise FormatError(path, first + i, f"score {scores[i]!r} is not finite")
    kept = rows >= 0
    return {"rows": rows[kept], "docs": doc_rows[kept].astype(np.int32), "scores": values[kept]}


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _spill(scratch: Path, index: int, part: dict[str, np.ndarray]) -> dict[str, Path]:
    """Write a parsed block to disk, so that only one block is in memory at a time."""
    paths = {}
    for name, array in part.items():
        paths[name] = scratch / f"{index}-{name}.npy"
        np.save(paths[name], array)
    return paths


def _new_array(path: Path, dtype: type, size: int) -> np.ndarray:
    """A zeroed (size,) array: a memory-mapped ``.npy`` file at ``path``, or in memory when it is empty."""
    if not size:
        return np.zeros(0, dtype=dtype)
    return np.lib.format.open_memmap(path, "w+", dtype, (size,))


def _rank_and_cut(
    offsets: np.ndarray,
    doc_all: np.ndarray,
    score_all: np.ndarray,
    docs: IdIndex,
    depth: int | None,
    folder: Path,
    paths: Sequence[str | Path],
    qids: Sequence[str],
    block_lines: int,
) -> RankedRows:
    """Rank each query's entries in trec_eval's order, keep the best ``depth``, and write them into ``folder``."""
    counts = np.diff(offsets)
    kept = counts if depth is None else np.minimum(counts, depth)
    out_offsets = np.concatenate(([0], np.cumsum(kept)))
    out_docs = _new_array(folder / "docs.npy", np.int32, int(out_offsets[-1]))
    out_scores = _new_array(folder / "scores.npy", np.float32, int(out_offsets[-1]))
    for start, end in row_blocks(offsets, block_lines):
        first = int(offsets[start])
        rows = entry_rows(offsets, start, end)
        doc, score = np.asarray(doc_all[first : offsets[end]]), np.asarray(score_all[first : offsets[end]])
        _check_unique(rows, doc, docs, paths, qids)
        order = np.lexsort((-docs.id_rank[doc], -score, rows))
        rows, doc, score = rows[order], doc[order], score[order]
        keep = np.arange(len(rows)) + first - offsets[rows] < (depth if depth is not None else len(rows) + 1)
        out_docs[out_offsets[start] : out_offsets[end]] = doc[keep]
        out_scores[out_offsets[start] : out_offsets[end]] = score[keep]
    for array in (out_docs, out_scores):
        if isinstance(array, np.memmap):
            array.flush()
    if not len(out_docs):
        np.save(folder / "docs.npy", out_docs), np.save(folder / "scores.npy", out_scores)
    np.save(folder / "offsets.npy", out_offsets)
    return RankedRows.load(folder)


def _check_unique(rows: np.ndarray, doc: np.ndarray, docs: IdIndex, paths: Sequence, qids: Sequence[str]) -> None:
    """Fail on a document listed twice for one query, naming the line that repeats it."""
    order = np.lexsort((doc, rows))
    repeated = (rows[order][1:] == rows[order][:-1]) & (doc[order][1:] == doc[order][:-1])
    if not repeated.any():
        return
    at = order[int(np.argmax(repeated)) + 1]
    qid, docid = qids[rows[at]], docs.names([doc[at]])[0]
    seen = 0
    for path in map(Path, paths):
        for lineno, fields in _rows(path, (6,), sep=None):
            seen += fields[0] == qid and fields[2] == docid
            if seen == 2:
                raise FormatError(path, lineno, f"document {docid!r} appears twice for query {qid!r}")
    raise AssertionError("unreachable: the repeated entry was read from these files")


def cached_ranked_rows(
    path: str | Path, queries: Mapping[str, object], qids: Sequence[str], docs: IdIndex, depth: int | None
) -> RankedRows:
    """:func:`read_ranked_rows` of one run file, cached under the file's content, the queries, ids and depth."""
    key = fingerprint(file_digest(path), docs.digest, sorted(queries), list(qids), depth, FORMAT)
    folder = cache_root() / "runs" / f"rows-{key}"
    with entry_lock(folder):
        if not (folder / "offsets.npy").exists():  # written last
            with atomic_path(folder) as tmp:
                tmp.mkdir()
                read_ranked_rows([path], queries, qids, docs, depth, tmp)
    return RankedRows.load(folder)
