"""A built index kept in a folder (``index_dir=...``), loaded by later searches and evaluations.

The folder holds the index family's own files (:meth:`Index.save`: faiss shards, a Lucene index's folder, BMP's or
Seismic's file, CSurF's lists, ...), ``index.json`` (what it was built from: the method and its weights' digest, the
collection and its corpus fingerprint, the index config and encoding settings; the files' sizes) and
``checksum.sha256``, written last: the SHA-256 of ``index.json`` and of every file, subfolders' included. A folder is

- *ready* when its checksum holds and it was built from this model, corpus and settings: it is loaded, nothing encoded
  or built;
- *another index* when it holds a complete index built from something else: refused, naming what differs, both ways;
- *damaged* when it has no checksum (a build that did not finish) or the checksum fails: said, rebuilt, never read;
- *absent* (missing or empty): built and written.

The whole folder is written beside its place and renamed into it, so a killed build leaves nothing a later run trusts.
The fusion weight is not part of the identity: tuning sets it on the loaded retriever as on a built one.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Literal

from retrieval_zoo.cache import atomic_path, file_digest
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.index.index import Index
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.retriever import Retriever

MANIFEST, CHECKSUM = "index.json", "checksum.sha256"
FORMAT = 1
TUNING_KEYS = ("weight", "weight_grid", "tune_measure", "extend_grid")  # set per search, not at build
State = Literal["absent", "ready", "other", "damaged"]


def index_identity(method_name: str, model_digest: str, collection: Collection, index_name: str, index_config: dict,
                   encoding: dict) -> dict:  # fmt: skip
    """What a saved index was built from (``index.json``'s ``built_from``)."""
    settings = {key: value for key, value in index_config.items() if key not in TUNING_KEYS}
    return {"method": method_name, "model": model_digest, "collection": collection.name,
            "corpus": collection.corpus_fingerprint, "index": index_name, "index_settings": settings,
            "encoding": encoding}  # fmt: skip


class SavedIndex:
    """The index folder ``folder`` for an index built from ``identity`` (:func:`index_identity`)."""

    def __init__(self, folder: str | Path, identity: dict) -> None:
        self.folder, self.identity = Path(folder), json.loads(json.dumps(identity, sort_keys=True, default=str))
        self.problem = ""

    def state(self) -> State:
        """What the folder holds (module docstring); ``problem`` says what is wrong with a damaged one."""
        if not self.folder.exists() or not any(self.folder.iterdir()):
            return "absent"
        manifest, checksum = self.folder / MANIFEST, self.folder / CHECKSUM
        if not checksum.exists() or not manifest.exists():
            self.problem = f"no {CHECKSUM}: its build did not finish"
            return "damaged"
        try:
            found = json.loads(manifest.read_text(encoding="utf-8"))
            files = found["files"]
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as error:
            self.problem = f"{MANIFEST} is unreadable ({error})"
            return "damaged"
        if checksum.read_text(encoding="utf-8").strip() != folder_checksum(self.folder, sorted(files)):
            self.problem = f"its files do not match {CHECKSUM} (changed or cut short since the build)"
            return "damaged"
        if found.get("built_from") != self.identity:
            self.problem = differences(found.get("built_from") or {}, self.identity)
            return "other"
        return "ready"

    def load_or_build(self, index: Index, method: object, collection: Collection, bm25: BM25,
                      shards: CorpusShards | None) -> Retriever:  # fmt: skip
        """The saved retriever when the folder is ready; else the one ``index`` builds, written into the folder."""
        state = self.state()
        if state == "other":
            raise ValueError(f"{self.folder} holds another index: {self.problem}. Give another index_dir, or delete "
                             "this one to build it again")  # fmt: skip
        if state == "ready":
            print(f"[index] loading the saved index in {self.folder}")
            return index.load(method, collection, bm25, self.folder)
        if state == "damaged":
            print(f"[index] {self.folder} is damaged ({self.problem}): building it again")
        retriever = index.build(method, collection, bm25, shards)
        refusal = index.save_refusal(retriever)
        if refusal:
            print(f"[index] index={self.identity['index']} {refusal}: built, nothing written to {self.folder}")
            return retriever
        with atomic_path(self.folder) as tmp:
            tmp.mkdir()
            index.save(retriever, tmp)
            files = sorted(path.relative_to(tmp).as_posix() for path in tmp.rglob("*") if path.is_file())
            sizes = {name: (tmp / name).stat().st_size for name in files}
            manifest = {"format": FORMAT, "built_from": self.identity, "files": sizes, "bytes": sum(sizes.values())}
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            (tmp / CHECKSUM).write_text(folder_checksum(tmp, files) + "\n", encoding="utf-8")
        print(f"[index] saved in {self.folder} ({sum(sizes.values()) / 2**20:.1f} MiB)")
        return retriever


def folder_checksum(folder: Path, files: list[str]) -> str:
    """SHA-256 over ``index.json`` and each of ``files`` (relative path and content digest), in path order.

    Each file's digest is :func:`retrieval_zoo.cache.file_digest`'s, remembered while the file keeps its size and
    time stamps, so checking a folder again in the same process (before loading it) reads nothing twice.
    """
    digest = hashlib.sha256()
    for name in [MANIFEST, *files]:
        digest.update(f"{name}\0{file_digest(folder / name)}\n".encode())
    return digest.hexdigest()


def differences(saved: dict, ours: dict) -> str:
    """What differs between a saved index's identity and this run's, naming both values."""
    keys = sorted(k for k in set(saved) | set(ours) if saved.get(k) != ours.get(k))
    return "; ".join(f"{key} {short(saved.get(key))} there, {short(ours.get(key))} here" for key in keys)


def short(value: object) -> str:
    """A value for a message: a long digest cut to 12 characters."""
    text = json.dumps(value, sort_keys=True) if isinstance(value, dict) else str(value)
    return text[:12] if isinstance(value, str) and len(value) == 64 else text
