"""CSurF's expansion weights as a sentence-transformers ``SparseEncoder`` module (csurf.md §3.2 and §3.5).

w_t = max_i log(1 + ReLU(logit_i[t])) over the text's tokens i other than its special ones ([CLS], [SEP], padding),
which CSurF never takes as sources: ``SpladePooling`` (max, log(1 + ReLU)) with the special tokens left out of the
max. ``python -m retrieval_zoo.export`` copies this file into an exported CSurF folder, which then loads with
``SparseEncoder(folder, trust_remote_code=True)``; it imports nothing from retrieval_zoo.
"""

from __future__ import annotations

import torch
from sentence_transformers.sparse_encoder.modules import SpladePooling


class CsurfPooling(SpladePooling):
    """``SpladePooling`` over the tokens CSurF grounds surface forms to: special tokens are not sources.

    Args:
        special_ids: The tokenizer's special token ids ([CLS], [SEP], [PAD], ...).
        pooling_strategy: ``max`` (CSurF's w_t).
        activation_function: ``relu``: log(1 + ReLU(x)) in sentence-transformers' naming.
        embedding_dimension: |V|.
    """

    config_keys: list[str] = [*SpladePooling.config_keys, "special_ids"]

    def __init__(
        self, special_ids: list[int] | None = None, pooling_strategy: str = "max", activation_function: str = "relu",
        embedding_dimension: int | None = None,
    ) -> None:  # fmt: skip
        super().__init__(pooling_strategy, activation_function, embedding_dimension)
        self.special_ids = list(special_ids or [])

    def forward(self, features: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """SpladePooling with the special tokens masked out as sources."""
        ids, mask = features["input_ids"], features["attention_mask"]
        special = torch.tensor(self.special_ids, device=ids.device, dtype=ids.dtype)
        sources = (mask.bool() & ~torch.isin(ids, special)).to(mask.dtype)
        pooled = super().forward({**features, "attention_mask": sources})
        return {**features, "sentence_embedding": pooled["sentence_embedding"]}
