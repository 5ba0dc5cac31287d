"""Shared encoder machinery: tokenisation, pooling, and length-sorted batched corpus encoding."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from tqdm import tqdm


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Average of the token vectors over real tokens only (CLEAR Eq. 2–3). (B, L, H), (B, L) → (B, H)."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)


def cls_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The first ([CLS]) token's vector (DPR; RoC Eq. 6). (B, L, H) → (B, H)."""
    return hidden[:, 0]


POOLING: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {"mean": mean_pool, "cls": cls_pool}


def length_sorted_batches(texts: list[str], batch_size: int) -> list[list[int]]:
    """Indices of ``texts`` in batches of similar length (longest first), so padding is minimal."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


@torch.inference_mode()
def encode_all(
    encode: Callable[[list[str]], torch.Tensor], texts: list[str], batch_size: int, desc: str = "encode"
) -> np.ndarray:
    """Encode ``texts`` in length-sorted batches and return float32 vectors in the input order."""
    out: np.ndarray | None = None
    for batch in tqdm(length_sorted_batches(texts, batch_size), desc=desc, unit="batch", leave=False, mininterval=5):
        vectors = encode([texts[i] for i in batch]).float().cpu().numpy()
        if out is None:
            out = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
        out[batch] = vectors
    if out is None:
        raise ValueError("nothing to encode")
    return out
