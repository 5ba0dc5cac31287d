"""A corpus encoded in shards: what every index is built from, on one process or many.

The corpus, in its file order, is cut into shards of ``shard_size`` documents. Each shard's encoding (a dict of
tensors: dense vectors, lexical and [CLS] vectors, or bags of CSFs) is written to its own file, atomically, so a
killed encoding resumes from the shards already complete and never trusts a half-written one; under DDP each rank
writes its share (:mod:`retrieval_zoo.encoding.corpus`). A folder holds one model's encoding of one corpus: a
``manifest.json`` records the documents and the shard size, and opening a folder for another corpus is an error.
During training's validation the shards are encoded on demand instead, one at a time, and never stored.

Indexes are built shard by shard, and search over a sharded index merges each shard's top k (:func:`merge_topk`).
"""

from __future__ import annotations

import heapq
import json
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import torch

from retrieval_zoo.cache import atomic_path, write_json
from retrieval_zoo.data.formats import Run
from retrieval_zoo.id_index import IdIndex, joined_sha256
from retrieval_zoo.term_matrix import csr, dense_rows, is_csr, parts, to_csr

Payload = dict[str, torch.Tensor]
ShardEncoder = Callable[[list[str]], Payload]


def docids_digest(docids: Sequence[str] | IdIndex) -> str:
    """SHA-256 of the document ids in order, joined by line feeds."""
    return joined_sha256(docids)


class CorpusShards:
    """The encoded shards of a corpus, in files under ``folder``, or encoded on demand (:meth:`on_demand`).

    Args:
        docids: The corpus's document ids, in order: a list, or a corpus's :class:`~retrieval_zoo.id_index.IdIndex`
            (kept as it is: no list of every id).
        shard_size: Documents per shard (the last one may be shorter).
        folder: Where the shard files live.
    """

    def __init__(self, docids: Sequence[str] | IdIndex, shard_size: int, folder: str | Path | None = None) -> None:
        if shard_size < 1:
            raise ValueError(f"shard_size must be at least 1, not {shard_size}")
        if not docids:
            raise ValueError("cannot shard an empty corpus")
        self.docids, self.shard_size = docids if isinstance(docids, IdIndex) else list(docids), shard_size
        self.ranges = [(s, min(s + shard_size, len(docids))) for s in range(0, len(docids), shard_size)]
        self.folder = Path(folder) if folder is not None else None
        self._encode: ShardEncoder | None = None
        if self.folder is not None:
            self._check_manifest(self.folder)

    @classmethod
    def on_demand(cls, docids: Sequence[str] | IdIndex, encode: ShardEncoder, shard_size: int) -> CorpusShards:
        """Shards that ``encode`` (document ids → encoding) computes each time they are read; nothing is stored."""
        shards = cls(docids, shard_size)
        shards._encode = encode
        return shards

    def _check_manifest(self, folder: Path) -> None:
        """Write the manifest of a new folder; refuse a folder that holds another corpus or shard size."""
        manifest = {"documents": len(self.docids), "shard_size": self.shard_size, "shards": len(self.ranges),
                    "docids_sha256": docids_digest(self.docids)}  # fmt: skip
        path = folder / "manifest.json"
        if not path.exists():
            write_json(path, manifest)
            return
        try:
            found = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"{path}: damaged ({error}); delete the folder {self.folder} to re-encode") from None
        if found != manifest:
            differs = sorted(k for k in manifest if found.get(k) != manifest[k])
            raise ValueError(f"{path}: the encoded shards there were written for another corpus or shard size "
                             f"({', '.join(differs)} differ); delete the folder to re-encode")  # fmt: skip

    def __len__(self) -> int:
        return len(self.ranges)

    def shard_docids(self, shard: int) -> list[str]:
        """The document ids of ``shard``, in order."""
        start, stop = self.ranges[shard]
        return self.docids[start:stop]

    def path(self, shard: int) -> Path:
        """The file of ``shard``."""
        if self.folder is None:
            raise ValueError("shards encoded on demand have no files")
        return self.folder / f"shard-{shard:05d}.pt"

    def missing(self) -> list[int]:
        """The shards not yet written; a damaged file (not a complete torch archive) is removed and counts as one."""
        if self.folder is None:
            return []
        for shard in range(len(self)):
            path = self.path(shard)
            if path.exists() and not zipfile.is_zipfile(path):
                print(f"[encode] {path} is damaged (not a complete torch archive): encoding shard {shard} again")
                path.unlink(missing_ok=True)  # another rank may have removed it first
        return [s for s in range(len(self)) if not self.path(s).exists()]

    def write(self, shard: int, payload: Payload, rank: int = 0) -> None:
        """Store ``shard``'s encoding (atomically, when in files); ``rank`` records which process encoded it.

        A sparse CSR matrix (term weights, :mod:`retrieval_zoo.term_matrix`) is stored as its entries and read back
        as CSR. A dense mostly-zero matrix is stored the same way and read back dense, the same values: a shard of
        4,096 SPLADE vectors takes 5 MB on disk instead of 500.
        """
        payload = {name: value.detach().cpu() for name, value in payload.items()}
        sparse = {name: to_rows(value) for name, value in payload.items() if is_csr(value) or mostly_zero(value)}
        dense = {name: value for name, value in payload.items() if name not in sparse}
        record = {"documents": len(self.shard_docids(shard)), "rank": rank, "tensors": dense, "sparse": sparse,
                  "csr": sorted(name for name in sparse if is_csr(payload[name]))}  # fmt: skip
        with atomic_path(self.path(shard)) as tmp:
            torch.save(record, tmp)

    def read(self, shard: int) -> Payload:
        """``shard``'s encoding; an error names the file when it is missing or was written for other documents."""
        if self._encode is not None:
            with torch.inference_mode():
                return {name: value.detach() for name, value in self._encode(self.shard_docids(shard)).items()}
        path = self.path(shard)
        if not path.exists():
            raise FileNotFoundError(f"{path}: shard {shard} of {len(self)} was never written; encode the corpus first")
        try:
            record = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:  # truncated, overwritten, another format: name the file, not torch's internals
            raise ValueError(f"{path}: shard {shard} is damaged (torch cannot read it: {type(error).__name__}); "
                             "delete the file and encode again (missing shards are re-encoded)") from None  # fmt: skip
        if record["documents"] != len(self.shard_docids(shard)):
            raise ValueError(f"{path}: holds {record['documents']} documents, shard {shard} has "
                             f"{len(self.shard_docids(shard))}; delete the folder to re-encode")  # fmt: skip
        as_csr = set(record.get("csr", ()))
        return record["tensors"] | {name: from_rows(**rows, as_csr=name in as_csr)
                                    for name, rows in record.get("sparse", {}).items()}  # fmt: skip

    def encode_into(self, encode: ShardEncoder, shards: Iterable[int], rank: int = 0) -> None:
        """Encode each of ``shards`` with ``encode`` (document ids → encoding) and write it, ``rank`` recorded."""
        with torch.inference_mode():
            for shard in shards:
                self.write(shard, encode(self.shard_docids(shard)), rank)

    def writer_rank(self, shard: int) -> int:
        """The rank of the process that wrote ``shard``'s file."""
        return int(torch.load(self.path(shard), map_location="cpu", weights_only=True)["rank"])

    def __iter__(self) -> Iterator[tuple[list[str], Payload]]:
        """(document ids, encoding) of each shard, in corpus order."""
        for shard in range(len(self)):
            yield self.shard_docids(shard), self.read(shard)


def mostly_zero(value: torch.Tensor) -> bool:
    """A floating matrix whose non-zero entries, stored with their column ids, take less room than the whole."""
    return value.dim() == 2 and value.is_floating_point() and value.numel() > 0 and (
        2 * int(torch.count_nonzero(value)) < value.numel())  # fmt: skip


def to_rows(value: torch.Tensor) -> dict[str, torch.Tensor]:
    """A (n, m) matrix's non-zero entries (a CSR one's entries): ``offsets`` (n + 1,), int32 ``columns``, ``values``."""
    offsets, columns, values = parts(to_csr(value))
    shape = torch.tensor(value.shape)
    return {"offsets": offsets, "columns": columns.to(torch.int32), "values": values, "shape": shape}


def from_rows(
    offsets: torch.Tensor, columns: torch.Tensor, values: torch.Tensor, shape: torch.Tensor, as_csr: bool = False
) -> torch.Tensor:
    """The matrix :func:`to_rows` stored, as CSR or dense."""
    matrix = csr(offsets, columns, values, int(shape[1]))
    return matrix if as_csr else dense_rows(matrix)


def merge_topk(runs: Iterable[Run], k: int) -> Run:
    """The top ``k`` of each query over several shards' runs (document ids are disjoint across shards).

    Equal scores keep the order of the shards, then of each shard's run.
    """
    merged: dict[str, list[tuple[float, int, str]]] = {}
    position = 0
    for run in runs:
        for qid, docs in run.items():
            bucket = merged.setdefault(qid, [])
            for docid, score in docs.items():
                bucket.append((score, -position, docid))
                position += 1
    return {qid: {d: s for s, _, d in heapq.nlargest(k, hits)} for qid, hits in merged.items()}
