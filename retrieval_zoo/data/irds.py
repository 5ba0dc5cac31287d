"""Collections read through ir_datasets (``dataset=irds``; the ``irds`` extra): the field's catalogue by id.

``python train.py dataset=irds dataset.id=msmarco-passage/train/judged dataset.eval_id=msmarco-passage/dev/small``.
``id`` gives the training queries and qrels (split ``train``) and the corpus; ``eval_id``, which must share that
corpus, the evaluation queries and qrels (split ``dev``); without it ``id``'s queries are evaluated. Texts are each
record's ``default_text()`` (a BEIR document's title and text).

The corpus is streamed from ``docs_iter()`` into the project's corpus store (:mod:`retrieval_zoo.data.corpus_store`:
memory-mapped, nothing per document held as Python objects), built once into the artifact cache under the id of the
dataset that owns the documents (``ir_datasets.docs_parent_id``), ir_datasets' version and the documents file's path,
size and time, where ir_datasets names the file; the SHA-256 of what was
streamed, recorded with it, is the corpus's fingerprint, as a file's content is for the TSV and BEIR loaders. Queries
and qrels are read whole (as those loaders read them) and checked: an empty text, or a qrel naming an unknown query or
document, is an error naming the dataset, the record and the problem. ``scoreddocs_run`` writes ``id``'s scored
documents (a BM25 run shipped with the dataset) as a TREC run file, for ``data.negatives_run`` or
``data.teacher_run``.

ir_datasets downloads a dataset on its first use. Where that fails (no network), the first read fails at once with
the dataset id and how to fetch it on a machine with network. ``register`` runs a Python file first, so that datasets
of one's own, registered with ir_datasets' API (``ir_datasets.registry.register``), load by id like the others.
"""

from __future__ import annotations

import hashlib
import runpy
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import chain
from pathlib import Path
from typing import Any

from retrieval_zoo.cache import atomic_path, cache_root, entry_lock, fingerprint, sealed
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.corpus_store import FILES, FORMAT, CorpusStore, build_from
from retrieval_zoo.data.formats import FormatError, Qrels

INSTALL = "pip install -c constraints.txt -e '.[irds]' (ir_datasets==0.6.3)"


def import_irds() -> Any:
    """The ``ir_datasets`` module; a clear error with the install command when it is missing."""
    try:
        import ir_datasets
    except ImportError:
        raise ImportError(f"dataset=irds needs ir_datasets, which is not installed: {INSTALL}") from None
    return ir_datasets


@contextmanager
def fetching(irds: Any, dataset_id: str, part: str) -> Iterator[None]:
    """Turn ir_datasets' failure to read ``part`` of ``dataset_id`` (a download offline) into a clear error."""
    try:
        yield
    except FormatError:
        raise
    except Exception as error:
        home = irds.util.home_path()
        raise RuntimeError(
            f"ir_datasets could not read the {part} of {dataset_id!r} ({type(error).__name__}: {str(error)[:300]}). "
            f"ir_datasets downloads a dataset on first use: on a machine with network, fetch it with "
            f"`ir_datasets export {dataset_id} {part} > /dev/null`, then copy its folder {home} (IR_DATASETS_HOME) "
            "to this machine"
        ) from error


def load(irds: Any, dataset_id: str) -> Any:
    """``ir_datasets.load(dataset_id)``; an unknown id is a clear error."""
    try:
        return irds.load(dataset_id)
    except KeyError:
        raise ValueError(f"ir_datasets has no dataset {dataset_id!r} (dataset.id): see ir-datasets.com for the ids, "
                         "or register your own (dataset.register)") from None  # fmt: skip


def texts(records: Iterator[Any], source: str, key: str, what: str) -> Iterator[tuple[str, str]]:
    """(id, default text) of each record; an empty text is an error naming the record."""
    for number, record in enumerate(records, start=1):
        text = record.default_text()
        if not text.strip():
            raise FormatError(source, number, f"empty {what} text for id {getattr(record, key)!r}")
        yield getattr(record, key), text


def docs_file_stamp(dataset: Any) -> list:
    """The path, size and modification time of the file ir_datasets reads the documents from, where it says.

    A dataset of one's own whose file changes is then read again. Empty where ir_datasets names no file, or before
    the download.
    """
    try:
        path = Path(dataset.docs_path(force=False))
        stat = path.stat()
    except (AttributeError, NotImplementedError, OSError, TypeError):
        return []
    return [str(path.resolve()), stat.st_size, stat.st_mtime_ns]


def corpus(irds: Any, dataset: Any, dataset_id: str) -> tuple[CorpusStore, str]:
    """The store of the documents of ``dataset`` (built into the cache when missing) and their content's SHA-256."""
    owner = irds.docs_parent_id(dataset_id)
    source = f"ir_datasets:{owner} docs"
    key = fingerprint("corpus-store", FORMAT, "irds", owner, irds.__version__, docs_file_stamp(dataset))
    folder = cache_root() / "corpus" / key
    with entry_lock(folder):
        if not sealed(folder, FILES, "corpus"):
            with fetching(irds, dataset_id, "docs"), atomic_path(folder) as tmp:
                build_from(texts(dataset.docs_iter(), source, "doc_id", "document"), source, tmp)
    store = CorpusStore(folder)
    return store, store.facts()["digest"]


def queries_of(irds: Any, dataset_id: str, dataset: Any | None = None) -> dict[str, str]:
    """``dataset_id``'s queries, id → default text; an empty text or a repeated id is an error naming the record."""
    dataset = load(irds, dataset_id) if dataset is None else dataset
    if not dataset.has_queries():
        raise ValueError(f"ir_datasets' {dataset_id!r} has no queries")
    queries: dict[str, str] = {}
    source = f"ir_datasets:{dataset_id} queries"
    with fetching(irds, dataset_id, "queries"):
        for number, (qid, text) in enumerate(texts(dataset.queries_iter(), source, "query_id", "query"), start=1):
            if qid in queries:
                raise FormatError(source, number, f"duplicate query id {qid!r}")
            queries[qid] = text
    return queries


def queries_and_qrels(irds: Any, dataset_id: str, documents: CorpusStore, digest: Any) -> tuple[dict[str, str], Qrels]:
    """``dataset_id``'s queries and qrels, checked against each other and ``documents``, fed into ``digest``."""
    dataset = load(irds, dataset_id)
    for part in ("queries", "qrels"):
        if not getattr(dataset, f"has_{part}")():
            raise ValueError(f"ir_datasets' {dataset_id!r} has no {part}: dataset.id and dataset.eval_id need both")
    queries = queries_of(irds, dataset_id, dataset)
    qrels: Qrels = {}
    source = f"ir_datasets:{dataset_id} qrels"
    with fetching(irds, dataset_id, "qrels"):
        for number, qrel in enumerate(dataset.qrels_iter(), start=1):
            bad = ("query", qrel.query_id) if qrel.query_id not in queries else ("document", qrel.doc_id)
            if qrel.query_id not in queries or qrel.doc_id not in documents:
                raise FormatError(source, number, f"unknown {bad[0]} id {bad[1]!r}")
            if qrel.doc_id in qrels.setdefault(qrel.query_id, {}):
                raise FormatError(source, number, f"duplicate judgement for ({qrel.query_id!r}, {qrel.doc_id!r})")
            qrels[qrel.query_id][qrel.doc_id] = int(qrel.relevance)
    for qid in sorted(queries):
        digest.update(f"q{qid}\t{queries[qid]}\n".encode())
    for qid in sorted(qrels):
        digest.update(f"r{qid}\t{sorted(qrels[qid].items())}\n".encode())
    return queries, qrels


def write_scoreddocs(irds: Any, dataset_id: str, path: Path) -> None:
    """``dataset_id``'s scored documents as a TREC run file at ``path`` (kept when there; written atomically)."""
    if path.exists():
        return
    dataset, seen = load(irds, dataset_id), set()
    if not dataset.has_scoreddocs():
        raise ValueError(f"dataset.scoreddocs_run: ir_datasets' {dataset_id!r} has no scored documents")
    with fetching(irds, dataset_id, "scoreddocs"), atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as out:
        group: list = []
        for scored in chain(dataset.scoreddocs_iter(), [None]):  # streamed: a query's documents come together
            if group and (scored is None or scored.query_id != group[0].query_id):
                if group[0].query_id in seen:
                    raise FormatError(f"ir_datasets:{dataset_id} scoreddocs", None,
                                      f"query {group[0].query_id!r} listed in two places")  # fmt: skip
                seen.add(group[0].query_id)
                ranked = sorted(group, key=lambda s: -s.score)
                out.writelines(f"{s.query_id} Q0 {s.doc_id} {rank} {s.score} irds\n" for rank, s in
                               enumerate(ranked, start=1))  # fmt: skip
                group = []
            if scored is not None:
                group.append(scored)


def irds(
    id: str,  # noqa: A002  dataset.id, as ir_datasets names it
    eval_id: str | None = None,
    name: str | None = None,
    register: str | None = None,
    scoreddocs_run: str | None = None,
) -> Collection:
    """A collection read through ir_datasets (module docstring).

    Args:
        id: The training queries and qrels (split ``train``), and the corpus: ``msmarco-passage/train/judged``.
        eval_id: The evaluation queries and qrels (split ``dev``), over the same corpus; null: ``id``'s.
        name: Collection name in run tags; null: ``id`` with ``/`` as ``-``.
        register: A Python file run first (it registers datasets of one's own with ir_datasets' API).
        scoreddocs_run: Where ``id``'s scored documents are written as a TREC run (null: not written).
    """
    irds_module = import_irds()
    if register:
        if not Path(register).is_file():
            raise FileNotFoundError(f"dataset.register: {register} does not exist")
        runpy.run_path(register)
    dataset = load(irds_module, id)
    if eval_id and irds_module.docs_parent_id(eval_id) != irds_module.docs_parent_id(id):
        raise ValueError(f"dataset.eval_id={eval_id!r} searches other documents than dataset.id={id!r} "
                         f"({irds_module.docs_parent_id(eval_id)} vs {irds_module.docs_parent_id(id)})")  # fmt: skip
    documents, corpus_digest = corpus(irds_module, dataset, id)
    digest = hashlib.sha256()
    splits = {"train": id, **({"dev": eval_id} if eval_id else {})}
    queries, qrels = {}, {}
    for split, split_id in splits.items():
        queries[split], qrels[split] = queries_and_qrels(irds_module, split_id, documents, digest)
    if scoreddocs_run:
        write_scoreddocs(irds_module, id, Path(scoreddocs_run))
    return Collection(name or id.replace("/", "-"), documents, queries, qrels, [], "train",
                      "dev" if eval_id else "train", [],
                      {"corpus": corpus_digest, "queries_and_qrels": digest.hexdigest()})  # fmt: skip
