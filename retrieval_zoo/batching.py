"""Length-sorted batched encoding of many texts into row-aligned float32 tensors, with progress."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from tqdm import tqdm

from retrieval_zoo.tokens import CachedTexts, Tokens

Texts = list[str] | CachedTexts  # what the encoding helpers batch: texts, or ids whose tokens are cached
LengthsOf = Callable[[list[str]], list[int] | None]  # texts → their lengths in tokens, or None: go by characters


def by_characters(texts: list[str]) -> None:
    """No token lengths known (a :data:`LengthsOf`): the texts are ordered by their length in characters."""
    return None


def take(texts: Texts, rows: list[int]) -> list[str] | Tokens:
    """The items at ``rows``: a list of texts, or the cached texts' padded tokens."""
    return texts.take(rows) if isinstance(texts, CachedTexts) else [texts[i] for i in rows]


def read(texts: Texts) -> list[str] | Tokens:
    """All of ``texts`` as an encoder reads them: the texts, or the cached texts' padded tokens."""
    return take(texts, list(range(len(texts))))


def length_sorted_batches(texts: Texts, batch_size: int, lengths: list[int] | None = None) -> list[list[int]]:
    """Indices of ``texts`` in batches of similar length (longest first), so padding is minimal.

    ``lengths`` gives the length of each item when the items are not the texts themselves (document ids); cached
    texts carry theirs in tokens; plain texts are measured in characters.
    """
    if lengths is None:
        lengths = texts.lengths if isinstance(texts, CachedTexts) else [len(t) for t in texts]
    if len(lengths) != len(texts):
        raise ValueError(f"{len(lengths)} lengths for {len(texts)} items")
    order = sorted(range(len(texts)), key=lengths.__getitem__, reverse=True)
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def encode_all(
    encode: Callable[[list[str]], torch.Tensor],
    texts: list[str],
    batch_size: int,
    desc: str = "encode",
    lengths: list[int] | None = None,
) -> np.ndarray:
    """Encode ``texts`` in length-sorted batches (by ``lengths`` when given) and return float32 vectors in order."""
    if not texts:
        raise ValueError("nothing to encode")
    vectors = encode_payload(lambda batch: {"vectors": encode(batch)}, texts, batch_size, desc, lengths)["vectors"]
    return vectors.numpy()


@torch.inference_mode()
def encode_payload(
    encode: Callable[[list[str] | Tokens], dict[str, torch.Tensor | None]],
    texts: Texts,
    batch_size: int,
    desc: str,
    lengths: list[int] | None = None,
) -> dict[str, torch.Tensor]:
    """Named row-aligned float32 tensors of ``texts``, encoded in length-sorted batches, in the input order.

    ``encode`` maps a batch of texts (or, for cached texts, their tokens) to named (n, ...) tensors; a name whose value
    is None is left out. When the items are ids, ``lengths`` gives the length of the text each stands for, so
    batches still group similar lengths.
    """
    out: dict[str, torch.Tensor] = {}
    batches = length_sorted_batches(texts, batch_size, lengths)
    for batch in tqdm(batches, desc=desc, unit="batch", leave=False, mininterval=5):
        for name, value in encode(take(texts, batch)).items():
            if value is None:
                continue
            if name not in out:
                out[name] = torch.empty((len(texts), *value.shape[1:]), dtype=torch.float32)
            out[name][batch] = value.float().cpu()
    return out
