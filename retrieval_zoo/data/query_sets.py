"""The queries a search runs (``search.py queries=...``): a split of the collection, a file, or an ir_datasets id.

A query set needs no judgements. ``queries`` names one of:

- a split of the searched collection (``dev``, ``test``, ...): every query of it, judged or not; unset, the
  collection's evaluation split;
- a TSV file of ``qid<TAB>text`` lines (``.tsv``, or ``.tsv.gz``), as MS MARCO and TREC DL topics are distributed;
- a BEIR JSONL file of ``{"_id": ..., "text": ...}`` records (``.jsonl``, or ``.jsonl.gz``);
- ``irds:<id>``: the queries of an ir_datasets dataset (the ``irds`` extra), judged or not.

Files are read as the collections' own files are (:mod:`retrieval_zoo.data.formats`): a line that is not UTF-8, has no
tab, an empty or repeated id or an empty text is an error naming the file and the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from retrieval_zoo.cache import fingerprint
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.formats import FormatError, read_beir_jsonl, read_id_text_tsv

IRDS_PREFIX = "irds:"
TSV_SUFFIXES = (".tsv", ".tsv.gz")
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz")


@dataclass(frozen=True)
class QuerySource:
    """A set of queries to search.

    Attributes:
        name: What its files are named after (``run.<name>.trec``): the split, the file's stem or the dataset id.
        origin: Where it came from, as given (``dev``, a path, ``irds:<id>``).
        queries: qid → text, in the source's order.
    """

    name: str
    origin: str
    queries: dict[str, str]

    @property
    def fingerprint(self) -> str:
        """A digest of the ids and texts (the ``search.json`` of a run records it)."""
        return fingerprint(sorted(self.queries.items()))


def read_query_set(spec: str | None, collection: Collection) -> QuerySource:
    """The query set ``spec`` names (module docstring); a clear error for anything else."""
    if spec is None:
        spec = collection.eval_split
    if spec in collection.queries:
        return QuerySource(spec, spec, dict(collection.queries[spec]))
    if spec.startswith(IRDS_PREFIX):
        from retrieval_zoo.data.irds import import_irds, queries_of

        dataset_id = spec.removeprefix(IRDS_PREFIX)
        return checked(QuerySource(file_safe(dataset_id), spec, queries_of(import_irds(), dataset_id)))
    if spec.endswith(TSV_SUFFIXES):
        return checked(QuerySource(file_safe(stem(spec)), spec, read_id_text_tsv(spec, "query")))
    if spec.endswith(JSONL_SUFFIXES):
        return checked(QuerySource(file_safe(stem(spec)), spec, read_beir_jsonl(spec, "query")))
    splits = ", ".join(sorted(collection.queries))
    raise ValueError(
        f"queries={spec}: not a split of {collection.name} ({splits}), nor a .tsv or .jsonl file (.gz allowed), nor "
        f"{IRDS_PREFIX}<ir_datasets id>"
    )


def checked(source: QuerySource) -> QuerySource:
    """``source``, refused when it holds no query."""
    if not source.queries:
        raise FormatError(source.origin, None, "no queries")
    return source


def stem(path: str) -> str:
    """A query file's name without its suffixes (``topics.dl19.tsv.gz`` → ``topics.dl19``)."""
    name = Path(path).name
    for suffix in (*TSV_SUFFIXES, *JSONL_SUFFIXES):
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


def file_safe(name: str) -> str:
    """``name`` with what a file name should not hold (``/``, spaces, ...) as ``_``."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name).strip("._") or "queries"
