"""Integer impacts written as CIFF, the Common Index File Format (Lin et al., ECIR 2020), through ``ciff-toolkit``.

CIFF is the field's interchange format for inverted indexes: a header, one postings list per term (documents as
gaps from the previous one, each with a term frequency), then one record per document. Learned sparse indexes put
each posting's integer impact in the frequency field, as Anserini's and PISA's SPLADE exports do, so BMP
(``bmp.ciff2bmp``, which :mod:`retrieval_zoo.index.terms.bmp` builds its index with), PISA (``ciff2pisa``) and Lucene
(``lucene-ciff``) index it as they index their own.

The lists come from document-major shards (:func:`retrieval_zoo.index.terms.impact.shard_impacts`): the impacts are
spilled to a folder as arrays, shard by shard, then transposed a range of terms at a time, so that at most
``budget`` postings are held at once (each range is one pass over the spilled arrays, read by memory map). Lists
come out in lexicographic order of their terms, as Lucene's exports have them, each list's documents in corpus
order. The file is written beside its final name and renamed when complete.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.index.terms.impact import shard_impacts

INSTALL = "pip install --no-deps ciff-toolkit==0.2.2 (README, Setup: its pin protobuf<5 predates protobuf 5)"
LIST_BUDGET = 32_000_000  # postings transposed at once: about 0.6 GB of arrays
TermList = tuple[str, np.ndarray, np.ndarray]  # a term, its documents' rows (ascending) and their impacts


def import_ciff_toolkit() -> Any:
    """``ciff_toolkit``'s message types and writer; a clear error with the install command when it is missing."""
    try:
        from ciff_toolkit import ciff_pb2, write
    except ImportError:
        raise ImportError(f"CIFF needs ciff-toolkit, which is not installed: {INSTALL}") from None
    return ciff_pb2, write


@dataclass
class SpilledImpacts:
    """A corpus's impacts spilled to ``folder``, shard by shard, with the counts a CIFF header needs.

    Attributes:
        folder: Holds ``<i>.rows.npy``, ``<i>.terms.npy`` and ``<i>.impacts.npy`` for each shard ``i``.
        shards: How many shards were spilled.
        doc_lengths: (n,) int64, each document's impacts summed (CIFF's ``doclength`` of an impact index).
        df: (|V|,) int64, the documents each term id has an impact in.
    """

    folder: Path
    shards: int
    doc_lengths: np.ndarray
    df: np.ndarray

    def arrays(self, shard: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One shard's (nnz,) rows, term ids and impacts, memory-mapped."""
        names = ("rows", "terms", "impacts")
        return tuple(np.load(self.folder / f"{shard}.{name}.npy", mmap_mode="r") for name in names)


def spill(shards: CorpusShards, discard: int, scale: float, folder: Path) -> SpilledImpacts:
    """Quantize the shards' lexical vectors (one scale for the corpus) and write them to ``folder`` as arrays."""
    folder.mkdir(parents=True, exist_ok=True)
    lengths, df, first = [], np.zeros(0, dtype=np.int64), 0
    for shard, (offsets, terms, impacts) in enumerate(shard_impacts(shards, discard, scale)):
        counts = np.diff(offsets)
        rows = np.repeat(np.arange(first, first + len(counts), dtype=np.int64), counts)
        for name, array in (("rows", rows), ("terms", terms), ("impacts", impacts)):
            np.save(folder / f"{shard}.{name}.npy", array)
        lengths.append(np.bincount(rows - first, weights=impacts, minlength=len(counts)).astype(np.int64))
        shard_df = np.bincount(terms)
        df = np.pad(df, (0, max(0, len(shard_df) - len(df))))
        df[: len(shard_df)] += shard_df
        first += len(counts)
    return SpilledImpacts(folder, len(lengths), np.concatenate(lengths), df)


def term_lists(
    spilled: SpilledImpacts, term_names: Callable[[list[int]], list[str]], budget: int = LIST_BUDGET
) -> tuple[int, Iterator[TermList]]:
    """The spilled impacts, term-major: the number of lists and the lists, in lexicographic order of their names.

    Args:
        spilled: What :func:`spill` wrote.
        term_names: Term ids → their names in the file (unique).
        budget: Postings transposed at once (a term with more is transposed alone).
    """
    ids = np.flatnonzero(spilled.df)
    names = term_names(ids.tolist())
    if len(set(names)) != len(names):
        raise ValueError("term names repeat: a CIFF file holds one postings list per distinct term")
    order = sorted(range(len(ids)), key=names.__getitem__)
    ids, names = ids[order], [names[i] for i in order]
    ends = np.cumsum(spilled.df[ids])
    chunks, start = [], 0
    while start < len(ids):  # consecutive terms whose postings sum to at most the budget (one at least)
        stop = max(start + 1, int(np.searchsorted(ends, (ends[start - 1] if start else 0) + budget, side="right")))
        chunks.append((start, stop))
        start = stop

    def lists() -> Iterator[TermList]:
        position = np.full(len(spilled.df), -1, dtype=np.int64)
        for start, stop in tqdm(chunks, desc="CIFF postings", unit="part", leave=False):
            position[ids[start:stop]] = np.arange(stop - start)
            picked = [_picked(spilled.arrays(shard), position) for shard in range(spilled.shards)]
            where, rows, impacts = (np.concatenate(parts) for parts in zip(*picked, strict=True))
            by_term = np.argsort(where, kind="stable")  # each term's documents stay in corpus order
            bounds = np.concatenate([[0], np.cumsum(spilled.df[ids[start:stop]])])
            rows, impacts = rows[by_term], impacts[by_term]
            for j in range(stop - start):
                yield names[start + j], rows[bounds[j] : bounds[j + 1]], impacts[bounds[j] : bounds[j + 1]]
            position[ids[start:stop]] = -1

    return len(ids), lists()


def _picked(arrays: tuple[np.ndarray, ...], position: np.ndarray) -> tuple[np.ndarray, ...]:
    """A shard's postings of the terms ``position`` places (≥ 0): their places, rows and impacts."""
    rows, terms, impacts = arrays
    where = position[terms]
    kept = where >= 0
    return where[kept], rows[kept], impacts[kept]


def write_ciff(
    path: str | Path, lists: Iterable[TermList], num_lists: int, doc_names: Iterable[str], doc_lengths: np.ndarray,
    description: str,
) -> Path:  # fmt: skip
    """Write a CIFF file (gzipped when ``path`` ends in ``.gz``); the documents are numbered by their order.

    Args:
        path: The file to write; it appears complete or not at all.
        lists: ``num_lists`` (term, (df,) rows ascending, (df,) impacts) in the order the file keeps.
        num_lists: How many lists ``lists`` yields.
        doc_names: Each document's name in the collection (CIFF's ``collection_docid``), in row order.
        doc_lengths: (n,) each document's length (an impact index: its impacts summed).
        description: The header's description: what was exported, and how.
    """
    ciff, write = import_ciff_toolkit()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial" + (".gz" if path.suffix == ".gz" else ""))
    total, count = int(doc_lengths.sum()), len(doc_lengths)
    header = ciff.Header(version=1, num_postings_lists=num_lists, num_docs=count, total_postings_lists=num_lists,
                         total_docs=count, total_terms_in_collection=total, average_doclength=total / max(count, 1),
                         description=description)  # fmt: skip
    writer = write.CiffWriter(partial)
    try:
        writer.write_header(header)
        writer.write_postings_lists(_postings_list(ciff, term, rows, impacts) for term, rows, impacts in lists)
        writer.write_documents(
            ciff.DocRecord(docid=row, collection_docid=name, doclength=int(length))
            for row, (name, length) in enumerate(zip(doc_names, doc_lengths.tolist(), strict=True))
        )
        writer.close()
    except BaseException:
        writer.writer.close()  # the header came first, so everything went to the one file (ciff-toolkit's order)
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, path)
    return path


def _postings_list(ciff: Any, term: str, rows: np.ndarray, impacts: np.ndarray) -> Any:
    """One CIFF postings list: documents as gaps (the first from 0), impacts as frequencies."""
    message = ciff.PostingsList(term=term, df=len(rows), cf=int(impacts.sum()))
    add = message.postings.add
    for gap, impact in zip(np.diff(rows, prepend=0).tolist(), impacts.tolist(), strict=True):
        add(docid=gap, tf=impact)
    return message
