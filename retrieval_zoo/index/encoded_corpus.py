"""A trained model's full-vocabulary corpus vectors, encoded once and cached by content.

Densifying a corpus into DLRs/DHRs (or scoring it exactly) starts from each document's |V|-dimensional lexical vector
and its [CLS] vector. Encoding them is the expensive step; slicing them (M, strategy) or searching them exactly is
cheap. So after training, the vectors are stored once, under a folder named by a hash of the model's weights, the
corpus files and the truncation length, and every retrieval-time variant (``method.slices=256``,
``method.slicing=random``, ``method.slices=0``) reads them back instead of running the model again. Vectors are stored
as float32, so every index built from the cache equals the one built from the model: float16 would do for the DLR
values, but ties it creates between a slice's ids would move the stored positions. The folder is written to a
temporary sibling and renamed into place.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import torch

from retrieval_zoo.cache import atomic_path, cache_root, fingerprint
from retrieval_zoo.index.dhr import PartEncoder
from retrieval_zoo.index.sparse import encoded_batches


def weights_digest(module: torch.nn.Module) -> str:
    """SHA-256 of a module's parameters and buffers, by name, in a stable order."""
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


@torch.inference_mode()
def encode_to(folder: Path, encode_doc: PartEncoder, docids: list[str], texts: list[str], batch_size: int) -> None:
    """Write ``lexical.npy``, ``cls.npy`` (when there is a [CLS] part), both float32, and ``docids.json``."""
    lexical = cls = None
    for batch, part_lexical, part_cls in encoded_batches(encode_doc, docids, 0, batch_size, "encode corpus", texts):
        if lexical is None:
            lexical = np.lib.format.open_memmap(folder / "lexical.npy", "w+", np.float32,
                                                (len(docids), part_lexical.shape[1]))  # fmt: skip
            if part_cls is not None:
                cls = np.lib.format.open_memmap(folder / "cls.npy", "w+", np.float32, (len(docids), part_cls.shape[1]))
        lexical[batch] = part_lexical.numpy()
        if cls is not None:
            cls[batch] = part_cls.numpy()
    for array in (lexical, cls):
        if array is not None:
            array.flush()
    (folder / "docids.json").write_text(json.dumps(docids))


def cached_doc_encoder(
    encode_doc: PartEncoder,
    corpus: dict[str, str],
    model: torch.nn.Module,
    corpus_fingerprint: str,
    settings: dict,
    batch_size: int,
    cache_dir: str | Path | None = None,
) -> PartEncoder:
    """``encode_doc`` run once over the whole corpus and cached; returns an encoder that reads the cached rows.

    Args:
        encode_doc: Document ids → ((n, |V|) lexical, (n, c) [CLS] or None) vectors.
        corpus: docid → text.
        model: The module whose weights define the vectors (hashed into the cache key).
        corpus_fingerprint: The corpus files' content hash (:attr:`Collection.corpus_fingerprint`).
        settings: Whatever else changes the vectors (the method's class, truncation length), hashed into the key.
        batch_size: Documents per forward pass.
        cache_dir: Cache root; default :func:`retrieval_zoo.cache.cache_root`.
    """
    key = fingerprint("encoded-corpus", weights_digest(model), corpus_fingerprint, settings)
    folder = Path(cache_dir or cache_root()) / "encoded" / key
    docids = list(corpus)
    if not (folder / "docids.json").exists():
        with atomic_path(folder) as tmp:
            tmp.mkdir()
            encode_to(tmp, encode_doc, docids, [corpus[d] for d in docids], batch_size)
    else:
        print(f"[encode] corpus vectors from the cache: {folder}")
    if json.loads((folder / "docids.json").read_text()) != docids:
        raise ValueError(f"{folder}: cached document ids do not match the corpus; delete the folder to re-encode")
    lexical = np.load(folder / "lexical.npy", mmap_mode="r")
    cls = np.load(folder / "cls.npy", mmap_mode="r") if (folder / "cls.npy").exists() else None
    rows = {docid: row for row, docid in enumerate(docids)}

    def read(ids: list[str]) -> tuple[torch.Tensor, torch.Tensor | None]:
        index = [rows[d] for d in ids]
        return torch.from_numpy(lexical[index]), torch.from_numpy(cls[index]) if cls is not None else None

    return read
