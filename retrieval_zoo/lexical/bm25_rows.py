"""BM25's document vectors of a whole corpus as CSR rows over its sorted vocabulary, built in parts and cached.

RoC's d_bm25 (Eq. 3: each analysed term's TF saturation, whose inner product with the query's IDF vector is BM25)
or the full BM25 weights, for every document: what ``dlr_bm25`` and ``dhr_bm25_dense`` index. Lucene gives them one
document at a time (:meth:`BM25.document_term_weights`, from each document's term vector), so the corpus is read in
parts of ``PART`` documents, each written to the cache as soon as it is done (a killed build resumes at the next
part), with its own sorted vocabulary. Joined, each term's column is its position in the sorted union of the parts'
vocabularies: the corpus's analysed vocabulary, as a dict of every document's bag gave it. The joined arrays are
cached beside the parts (which are then removed), keyed by the corpus, the index format and (k1, b), and read
back by memory map.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from retrieval_zoo.cache import atomic_path, entry_lock, fingerprint, seal, sealed
from retrieval_zoo.lexical.lucene_bm25 import BM25, INDEX_FORMAT
from retrieval_zoo.lexical.sparse_rows import SparseRows

PART = 50_000  # documents whose bags are held at a time
FILES = ("offsets.npy", "columns.npy", "weights.npy", "words.json")


def document_rows(bm25: BM25, saturation_only: bool = True) -> tuple[SparseRows, list[str]]:
    """Every document's BM25 vector (TF saturation alone with ``saturation_only``), in corpus order, cached.

    Returns:
        The rows (row i: the corpus's i-th document; columns ascending in each row) and the vocabulary in column
        order (sorted).
    """
    corpus = bm25.collection.corpus
    key = fingerprint(bm25.collection.corpus_fingerprint, INDEX_FORMAT, bm25.k1, bm25.b, saturation_only, len(corpus))
    folder = bm25.cache / "bm25" / "doc-rows" / key
    with entry_lock(folder):
        if not sealed(folder, FILES, "bm25"):
            parts = folder.with_name(f"{folder.name}.parts")
            with atomic_path(folder) as tmp:
                join(write_parts(bm25, saturation_only, parts), tmp)
                seal(tmp, FILES, documents=len(corpus), saturation_only=saturation_only)
            shutil.rmtree(parts)
    rows = SparseRows([], {})
    with warnings.catch_warnings():  # read-only memory maps, which nothing writes to
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        arrays = [torch.from_numpy(np.load(folder / name, mmap_mode="r")) for name in FILES[:3]]
    rows.offsets, rows.columns, rows.weights = arrays
    return rows, json.loads((folder / "words.json").read_text())


def as_bytes(terms: list[str]) -> np.ndarray:
    """Analysed terms (no whitespace in any) as one UTF-8 byte array, a line feed between two."""
    return np.frombuffer("\n".join(terms).encode("utf-8"), dtype=np.uint8)


def from_bytes(data: np.ndarray) -> list[str]:
    """The terms :func:`as_bytes` wrote."""
    return data.tobytes().decode("utf-8").split("\n") if len(data) else []


def write_parts(bm25: BM25, saturation_only: bool, parts: Path) -> list[Path]:
    """Each part's rows under its own sorted vocabulary (``terms``), written atomically; parts already written kept."""
    docids, paths = list(bm25.collection.corpus), []
    parts.mkdir(parents=True, exist_ok=True)
    for number, start in enumerate(tqdm(range(0, len(docids), PART), desc="bm25 document vectors", unit="part")):
        path = parts / f"part-{number:05d}.npz"
        paths.append(path)
        if path.exists():
            continue
        bags = bm25.document_term_weights(docids[start : start + PART], saturation_only=saturation_only)
        terms = sorted(set().union(*bags))
        local = SparseRows(bags, {term: i for i, term in enumerate(terms)})
        with atomic_path(path) as tmp, open(tmp, "wb") as out:
            np.savez(out, offsets=local.offsets.numpy(), columns=local.columns.numpy().astype(np.int32),
                     weights=local.weights.numpy(), terms=as_bytes(terms))  # fmt: skip
    return paths


def join(paths: list[Path], folder: Path) -> None:
    """The parts as one CSR over the sorted union of their vocabularies, columns ascending in each row."""
    folder.mkdir(parents=True)
    loaded = [np.load(path) for path in paths]
    words = sorted(set().union(*(from_bytes(part["terms"]) for part in loaded)))
    column_of = {word: i for i, word in enumerate(words)}
    offsets, columns, weights, total = [np.zeros(1, dtype=np.int64)], [], [], 0
    for part in loaded:
        local_to_global = np.asarray([column_of[t] for t in from_bytes(part["terms"])], dtype=np.int64)
        part_offsets, part_columns = part["offsets"], local_to_global[part["columns"]]
        rows = np.repeat(np.arange(len(part_offsets) - 1), np.diff(part_offsets))
        order = np.lexsort((part_columns, rows))  # each row's entries in column order (bags keep Lucene's order)
        offsets.append(part_offsets[1:] + total)
        columns.append(part_columns[order]), weights.append(part["weights"][order])
        total += len(part_columns)
    np.save(folder / "offsets.npy", np.concatenate(offsets))
    np.save(folder / "columns.npy", np.concatenate(columns).astype(np.int32) if columns else np.zeros(0, np.int32))
    np.save(folder / "weights.npy", np.concatenate(weights) if weights else np.zeros(0, dtype=np.float32))
    (folder / "words.json").write_text(json.dumps(words))
