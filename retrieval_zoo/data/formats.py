"""Readers and writers for MS MARCO TSV, BEIR JSONL and TREC run files, with validation.

Every reader raises :class:`FormatError` naming the file, the 1-based line and the problem; nothing is dropped
silently. Files ending in ``.gz`` are read and written compressed.
"""

from __future__ import annotations

import codecs
import gzip
import json
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO

from retrieval_zoo.cache import atomic_path

Run = dict[str, dict[str, float]]
"""qid → {docid: score}."""
Qrels = dict[str, dict[str, int]]
"""qid → {docid: relevance grade}."""


class FormatError(ValueError):
    """A malformed input file: names the file, the line and the problem."""

    def __init__(self, path: str | Path, line: int | None, problem: str) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {problem}")
        self.path, self.line, self.problem = str(path), line, problem


def open_text(path: str | Path, mode: str = "r") -> IO[str]:
    """Open a text file, transparently gzip-compressed when the name ends in ``.gz``."""
    path = Path(path)
    if "r" in mode and not path.exists():
        raise FormatError(path, None, "file not found")
    if path.suffix == ".gz":
        return gzip.open(path, mode + "t", encoding="utf-8")  # type: ignore[return-value]
    return open(path, mode, encoding="utf-8")


def numbered_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, line without its ending) of a UTF-8 text file, gzip-compressed or plain.

    Lines end at a line feed only: a stray carriage return inside a text stays in it. Raises :class:`FormatError` for
    a missing file, a UTF-8 byte-order mark (a BOM would otherwise become part of the first id) and bytes that are not
    UTF-8, naming the line and the byte offset in it.
    """
    path = Path(path)
    if not path.exists():
        raise FormatError(path, None, "file not found")
    with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
                raise FormatError(path, 1, "the file starts with a UTF-8 byte-order mark (BOM): save it without one")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                context = raw[max(0, err.start - 20) : err.end + 20]
                raise FormatError(path, lineno, f"not UTF-8 at byte {err.start} of the line: {context!r}") from None
            yield lineno, line.rstrip("\n").rstrip("\r")


def _rows(path: str | Path, ncols: tuple[int, ...], sep: str | None = "\t") -> Iterator[tuple[int, list[str]]]:
    """Yield (line number, fields) of a delimited file, checking the field count of every non-blank line."""
    for lineno, line in numbered_lines(path):
        yield lineno, _fields(path, lineno, line, ncols, sep)


def _fields(path: str | Path, lineno: int, line: str, ncols: tuple[int, ...], sep: str | None) -> list[str]:
    """The fields of one line of a delimited file; a blank line or another field count is an error."""
    if not line.strip():
        raise FormatError(path, lineno, "blank line")
    fields = line.split(sep) if sep else line.split()
    if len(fields) not in ncols:
        expected = " or ".join(map(str, ncols))
        raise FormatError(path, lineno, f"expected {expected} fields, found {len(fields)}: {line[:80]!r}")
    return fields


def id_text_fields(path: str | Path, lineno: int, line: str, what: str) -> tuple[str, str]:
    """The id and text of one ``id<TAB>text`` line, neither empty."""
    key, text = _fields(path, lineno, line, (2,), "\t")
    if not text.strip():
        raise FormatError(path, lineno, f"empty text for {what} {key!r}")
    if not key:
        raise FormatError(path, lineno, f"empty {what} id")
    return key, text


def beir_record(path: str | Path, lineno: int, line: str, what: str) -> tuple[str, str]:
    """The id and text of one BEIR JSONL line: title and text joined, whitespace collapsed, neither empty."""
    if not line.strip():
        raise FormatError(path, lineno, "blank line")
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise FormatError(path, lineno, f"invalid JSON: {err.msg}") from None
    if not isinstance(record, dict) or "_id" not in record or "text" not in record:
        raise FormatError(path, lineno, "a record needs '_id' and 'text'")
    if not isinstance(record["_id"], str):
        raise FormatError(path, lineno, f"'_id' must be a string, not {json.dumps(record['_id'])}")
    text = " ".join(str(p) for p in (record.get("title") or "", record["text"]) if p).strip()
    if not text:
        raise FormatError(path, lineno, f"empty text for {what} {record['_id']!r}")
    if not record["_id"]:
        raise FormatError(path, lineno, f"empty {what} id")
    return record["_id"], " ".join(text.split())


def _put_unique(table: dict, key: str, value: object, path: str | Path, lineno: int, what: str) -> None:
    if not key:
        raise FormatError(path, lineno, f"empty {what} id")
    if key in table:
        raise FormatError(path, lineno, f"duplicate {what} id {key!r}")
    table[key] = value


def read_id_text_tsv(path: str | Path, what: str = "document") -> dict[str, str]:
    """Read an MS MARCO ``id<TAB>text`` file (queries.*.tsv; a corpus goes to :mod:`.corpus_store`) into a dict."""
    table: dict[str, str] = {}
    for lineno, line in numbered_lines(path):
        key, text = id_text_fields(path, lineno, line, what)
        _put_unique(table, key, text, path, lineno, what)
    return table


def read_qrels(path: str | Path) -> Qrels:
    """Read TREC/MS MARCO qrels: ``qid 0 docid rel`` (tab or space separated), or BEIR's headed 3-column TSV."""
    qrels: Qrels = {}
    header = next(iter(numbered_lines(path)), (1, ""))[1]
    beir = header.lower().startswith("query-id")
    for lineno, fields in _rows(path, (3,) if beir else (4,), sep="\t" if beir else None):
        if beir and lineno == 1:
            continue
        qid, docid, rel = (fields[0], fields[1], fields[2]) if beir else (fields[0], fields[2], fields[3])
        try:
            grade = int(rel)
        except ValueError:
            raise FormatError(path, lineno, f"relevance {rel!r} is not an integer") from None
        if docid in qrels.setdefault(qid, {}):
            raise FormatError(path, lineno, f"duplicate judgement for ({qid!r}, {docid!r})")
        qrels[qid][docid] = grade
    if not qrels:
        raise FormatError(path, None, "no judgements: the split has no query to train on or evaluate")
    return qrels


def read_triples(path: str | Path) -> Iterator[tuple[str, str, str]]:
    """Read MS MARCO's official train triples: ``query<TAB>positive passage<TAB>negative passage`` (texts)."""
    for lineno, fields in _rows(path, (3,)):
        if not all(f.strip() for f in fields):
            raise FormatError(path, lineno, "empty text in triple")
        yield fields[0], fields[1], fields[2]


def read_run(path: str | Path) -> Run:
    """Read a TREC run file: ``qid Q0 docid rank score tag``."""
    run: Run = {}
    for lineno, fields in _rows(path, (6,), sep=None):
        qid, _, docid, _, score, _ = fields
        try:
            value = float(score)
        except ValueError:
            raise FormatError(path, lineno, f"score {score!r} is not a number") from None
        if not math.isfinite(value):
            raise FormatError(path, lineno, f"score {score!r} is not finite")
        if docid in run.setdefault(qid, {}):
            raise FormatError(path, lineno, f"document {docid!r} appears twice for query {qid!r}")
        run[qid][docid] = value
    return run


def ranked(scores: Mapping[str, float]) -> list[tuple[str, float]]:
    """Sort (docid, score) by descending score, ties broken by docid descending as trec_eval does."""
    return sorted(scores.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)


def top_k(run: Run, k: int) -> Run:
    """Keep the ``k`` best documents of each query, in trec_eval's order (see :func:`ranked`)."""
    return {qid: dict(ranked(scores)[:k]) for qid, scores in run.items()}


RUN_SCORE_DECIMALS = 6


def as_written(run: Run) -> Run:
    """The run with the scores a TREC run file holds (rounded to :data:`RUN_SCORE_DECIMALS`).

    Evaluating this, rather than the full-precision run, gives exactly what trec_eval gives on the file: rounding
    can turn near-ties into ties, which trec_eval breaks by document id.
    """
    return {qid: {d: round(score, RUN_SCORE_DECIMALS) for d, score in docs.items()} for qid, docs in run.items()}


def write_run(path: str | Path, run: Run, tag: str = "retrieval_zoo") -> None:
    """Write a TREC run file atomically, queries in id order and documents ranked as trec_eval reads them back."""
    with atomic_path(path) as tmp, open_text(tmp, "w") as f:
        for qid in sorted(run):
            # as_written's scores in ranked's order, without building their dicts; a query's lines in one write
            written = sorted(
                ((round(score, RUN_SCORE_DECIMALS), docid) for docid, score in run[qid].items()), reverse=True
            )
            lines = [
                f"{qid} Q0 {docid} {rank} {score:.{RUN_SCORE_DECIMALS}f} {tag}\n"
                for rank, (score, docid) in enumerate(written, start=1)
            ]
            f.write("".join(lines))


def write_id_text_tsv(path: str | Path, table: Mapping[str, str]) -> None:
    """Write an ``id<TAB>text`` file atomically."""
    with atomic_path(path) as tmp, open_text(tmp, "w") as f:
        for key, text in table.items():
            f.write(f"{key}\t{' '.join(text.split())}\n")


def write_qrels(path: str | Path, qrels: Qrels) -> None:
    """Write TREC qrels atomically."""
    with atomic_path(path) as tmp, open_text(tmp, "w") as f:
        for qid, judged in qrels.items():
            for docid, rel in judged.items():
                f.write(f"{qid}\t0\t{docid}\t{rel}\n")


def read_beir_jsonl(path: str | Path, what: str) -> dict[str, str]:
    """Read BEIR queries.jsonl (or a corpus.jsonl, which :mod:`.corpus_store` reads to disk) into id → text."""
    table: dict[str, str] = {}
    for lineno, line in numbered_lines(path):
        key, text = beir_record(path, lineno, line, what)
        _put_unique(table, key, text, path, lineno, what)
    return table
