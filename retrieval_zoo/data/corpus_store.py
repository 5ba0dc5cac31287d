"""A corpus on disk, read by memory map: documents by id without holding the corpus as Python objects.

A corpus file (MS MARCO ``id<TAB>text`` TSV or BEIR ``corpus.jsonl``, plain or gzip) is read once, line by line,
checked as the readers of :mod:`retrieval_zoo.data.formats` check it, and written to a folder of the artifact cache
keyed by the file's content:

- ``texts.bin``: every text's UTF-8 bytes, end to end, in corpus order;
- ``offsets.npy``: (N + 1,) int64 byte offsets of the texts;
- ``ids.npy``: (N,) the ids (numpy unicode); ``order.npy``: (N,) the rows in id order; ``sorted.npy``: the ids in
  that order (the lookup's binary search);
- ``ready.json``: the counts and file sizes, written last: a folder without it, or whose files differ from it, is
  built again.

:class:`CorpusStore` is a ``Mapping[str, str]`` over that folder: ``corpus[docid]`` is a binary search and a slice
of the memory-mapped texts, and iterating streams ids or (id, text) pairs in corpus order. Every array is memory-
mapped, ids included: opening a store allocates next to nothing, and what it reads stays in the page cache, which
the kernel can drop (``benchmarks/corpus_memory.py`` measures it at MS MARCO's size). The build holds a chunk of ids
as Python strings at a time. A duplicate id is found after the pass, by sorting, and named by the first line that
repeats an earlier id, as the in-memory reader names it.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from collections.abc import Callable, ItemsView, Iterable, Iterator, ValuesView
from collections.abc import Mapping as MappingABC
from pathlib import Path

import numpy as np
from tqdm import tqdm

from retrieval_zoo.cache import atomic_path, cache_root, entry_lock, file_digest, fingerprint, seal, sealed
from retrieval_zoo.data.formats import FormatError, beir_record, id_text_fields, numbered_lines
from retrieval_zoo.id_index import IdIndex

FORMAT = 2  # bumped when the folder's layout changes: older folders are then built again
CHUNK = 1 << 20  # ids held as Python strings at a time while building
FILES = ("texts.bin", "offsets.npy", "ids.npy", "order.npy", "sorted.npy")
READERS: dict[str, Callable[[Path, int, str], tuple[str, str]]] = {
    "tsv": lambda path, lineno, line: id_text_fields(path, lineno, line, "document"),
    "beir": lambda path, lineno, line: beir_record(path, lineno, line, "document"),
}


class CorpusStore(MappingABC):
    """docid → text over a built folder (module docstring); open one with :func:`corpus_store`.

    Args:
        folder: The built folder.
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.offsets = np.load(self.folder / "offsets.npy", mmap_mode="r")
        self.texts_bytes = np.memmap(self.folder / "texts.bin", dtype=np.uint8, mode="r") if self.offsets[-1] else b""
        ids, order, in_order = (np.load(self.folder / name, mmap_mode="r") for name in FILES[2:])
        self.index = IdIndex.presorted(ids, order, in_order)

    def __reduce__(self) -> tuple:  # pickled as its folder, never as the mapped arrays
        return CorpusStore, (self.folder,)

    def facts(self) -> dict:
        """What the build recorded in ``ready.json``: the counts, the source, the content's SHA-256."""
        return json.loads((self.folder / "ready.json").read_text())

    def __len__(self) -> int:
        return len(self.index)

    def text(self, row: int) -> str:
        """The text of corpus row ``row``."""
        return bytes(self.texts_bytes[self.offsets[row] : self.offsets[row + 1]]).decode("utf-8")

    def __getitem__(self, docid: str) -> str:
        row = int(self.index.rows([docid])[0]) if isinstance(docid, str) else -1
        if row < 0:
            raise KeyError(docid)
        return self.text(row)

    def __contains__(self, docid: object) -> bool:
        return isinstance(docid, str) and int(self.index.rows([docid])[0]) >= 0

    def __iter__(self) -> Iterator[str]:
        return iter(self.index)

    def items(self) -> ItemsView:
        """(id, text) pairs in corpus order, streamed."""
        return _StreamedItems(self)

    def values(self) -> ValuesView:
        """Texts in corpus order, streamed."""
        return _StreamedValues(self)

    def pairs(self) -> Iterator[tuple[str, str]]:
        """(id, text) in corpus order, read sequentially."""
        for row, docid in enumerate(self):
            yield docid, self.text(row)


class _StreamedItems(ItemsView):
    def __iter__(self) -> Iterator[tuple[str, str]]:
        return self._mapping.pairs()


class _StreamedValues(ValuesView):
    def __iter__(self) -> Iterator[str]:
        return (text for _, text in self._mapping.pairs())


def corpus_store(path: str | Path, kind: str, cache_dir: str | Path | None = None) -> CorpusStore:
    """The store of the corpus file ``path`` (``kind``: ``tsv`` or ``beir``), built into the cache when missing.

    Raises:
        FormatError: A malformed line, an empty id or text, a duplicate id (named by file and line), a missing file.
    """
    path = Path(path)
    if not path.exists():
        raise FormatError(path, None, "file not found")
    folder = Path(cache_dir or cache_root()) / "corpus" / fingerprint("corpus-store", FORMAT, kind, file_digest(path))
    with entry_lock(folder):
        if not sealed(folder, FILES, "corpus"):
            with atomic_path(folder) as tmp:
                build(path, kind, tmp)
    return CorpusStore(folder)


def build(path: Path, kind: str, folder: Path) -> None:
    """Read ``path`` line by line into a store in ``folder`` (module docstring)."""
    read_line = READERS[kind]
    build_from((read_line(path, lineno, line) for lineno, line in numbered_lines(path)), path, folder)


def build_from(records: Iterable[tuple[str, str]], source: str | Path, folder: Path) -> str:
    """Write (id, text) ``records`` into a store in ``folder``; the SHA-256 of their content.

    ``source`` names where they come from in errors (a file, or an ir_datasets id; a duplicate id is named by its
    record's number, the line of a file) and in ``ready.json``.
    """
    folder.mkdir(parents=True)
    id_chunks, ids, offsets, written, digest = [], [], array("q", [0]), 0, hashlib.sha256()
    name = Path(source).name if isinstance(source, Path) else str(source)
    with open(folder / "texts.bin", "wb") as texts:
        for docid, text in tqdm(records, desc=f"store {name}", unit=" docs", mininterval=5):
            data = text.encode("utf-8")
            digest.update(f"{len(docid)}:{docid}{len(data)}:".encode())
            digest.update(data)
            texts.write(data)
            written += len(data)
            offsets.append(written)
            ids.append(docid)
            if len(ids) == CHUNK:
                id_chunks.append(np.asarray(ids, dtype=str))
                ids = []
    id_chunks.append(np.asarray(ids, dtype=str))
    all_ids = np.concatenate(id_chunks) if len(id_chunks) > 1 else id_chunks[0]
    order = np.argsort(all_ids, kind="stable")
    repeated = np.flatnonzero(all_ids[order[1:]] == all_ids[order[:-1]])
    if len(repeated):  # the first line, in file order, that repeats an earlier id (rows are lines − 1)
        row = int(order[1:][repeated].min())
        raise FormatError(source, row + 1, f"duplicate document id {str(all_ids[row])!r}")
    np.save(folder / "offsets.npy", np.frombuffer(offsets, dtype=np.int64))
    np.save(folder / "ids.npy", all_ids)
    np.save(folder / "order.npy", order)
    np.save(folder / "sorted.npy", all_ids[order])
    seal(folder, FILES, documents=len(all_ids), source=str(source), digest=digest.hexdigest())
    return digest.hexdigest()


class CorpusSubset(MappingABC):
    """Some documents of a corpus, in its order: a read-only view (a validation pool), no texts copied.

    Args:
        corpus: The whole corpus.
        rows: Corpus rows of the documents kept (sorted and unique here).
    """

    def __init__(self, corpus: MappingABC, rows: np.ndarray) -> None:
        self.corpus, self.rows = corpus, np.unique(np.asarray(rows, dtype=np.int64))
        self.index = IdIndex(corpus_ids(corpus).ids[self.rows])

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, docid: str) -> str:
        if docid not in self:
            raise KeyError(docid)
        return self.corpus[docid]

    def __contains__(self, docid: object) -> bool:
        return isinstance(docid, str) and int(self.index.rows([docid])[0]) >= 0

    def __iter__(self) -> Iterator[str]:
        return iter(self.index)


def corpus_ids(corpus: MappingABC) -> IdIndex:
    """The document ids of ``corpus`` ↔ their rows: a store's or a subset's own index, or one built over a mapping."""
    return corpus.index if isinstance(corpus, CorpusStore | CorpusSubset) else IdIndex(corpus)
