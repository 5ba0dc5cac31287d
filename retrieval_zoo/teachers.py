"""Online teachers: frozen models that score any (query, document) pair of a training batch, in-batch pairs included.

A teacher run file (``data.teacher_run``) scores only the documents it retrieved, so distillation from it covers
each query's own group. DeLADE+[CLS]'s "+" models (delade-dhr.md §4.2) distil with "KL divergence as the listwise
KD loss, which considers all the in-batch negatives" (after Lin et al., 2021): the teacher scores every query of the
batch against every document of the batch. A teacher here does that in the training loop, without gradients:

- :class:`TrainedBiEncoder`: a ``train.py`` run of this project whose method produces vectors (``dense``, ``clear``'s
  embedding, ``delade_cls``'s [ds_BoW ; √λ·[CLS]], ...), scoring by inner product;
- :class:`CrossEncoder`: a Hugging Face sequence-classification cross-encoder (a folder on disk, or a hub name on a
  machine with network), scoring every pair jointly, like the paper's ColBERT teacher or SPLADE's cross-encoders.

Teachers are not ``torch.nn.Module`` attributes of the student: they are neither trained nor saved in its checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from retrieval_zoo.trained import load_trained, trained_config


class Teacher(Protocol):
    """Anything that scores every query of a batch against every document of it."""

    def scores(self, queries: list[str], docs: list[str], device: torch.device) -> torch.Tensor:
        """(B,) query texts and (N,) document texts → (B, N) float32 scores on ``device``, without gradients."""
        ...

    def pair_scores(self, queries: list[str], docs: list[str], device: torch.device) -> torch.Tensor:
        """(N,) query texts and the (N,) documents paired with them → (N,) float32 scores, without gradients."""
        ...


@dataclass(frozen=True)
class TeacherRef:
    """A teacher held by a student without becoming its submodule, whatever its type.

    Neither trained, nor moved with the student, nor saved in its checkpoints (``nn.Module`` registers a module
    assigned to an attribute).
    """

    teacher: Teacher | None


class TrainedBiEncoder:
    """A trained run of a vectors method as a frozen teacher: s(q, d) = encode_query(q) · encode_doc(d).

    Args:
        run_dir: The ``train.py`` output directory (its ``run_config.yaml`` and best checkpoint).
    """

    def __init__(self, run_dir: str) -> None:
        self.run_dir = Path(run_dir)
        config = trained_config(self.run_dir)
        if "vectors" not in _method_class(config).representations:
            raise ValueError(f"{self.run_dir}: method={config.get('method_name')} produces no vectors to score with")
        self.model = load_trained(self.run_dir, config).eval().requires_grad_(False)

    @torch.no_grad()
    def scores(self, queries: list[str], docs: list[str], device: torch.device) -> torch.Tensor:
        """(B, N) inner products of the teacher's query and document vectors."""
        self.model.to(device)
        q, d = self.model.encode_query(queries).float(), self.model.encode_doc(docs).float()
        return q @ d.T

    @torch.no_grad()
    def pair_scores(self, queries: list[str], docs: list[str], device: torch.device) -> torch.Tensor:
        """(N,) inner products of each query's vector with its paired document's (queries repeat: encoded once)."""
        self.model.to(device)
        row = {text: i for i, text in enumerate(dict.fromkeys(queries))}
        q = self.model.encode_query(list(row)).float()[[row[text] for text in queries]]
        return (q * self.model.encode_doc(docs).float()).sum(dim=1)


class CrossEncoder:
    """A Hugging Face cross-encoder as a frozen teacher: s(q, d) = the first logit of ``[CLS] q [SEP] d [SEP]``.

    Args:
        model: A folder with a ``AutoModelForSequenceClassification`` and its tokenizer, or a hub name.
        max_length: Tokens of a pair.
        batch_size: Pairs per forward pass.
    """

    def __init__(self, model: str, max_length: int = 256, batch_size: int = 128) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.model = AutoModelForSequenceClassification.from_pretrained(model).eval().requires_grad_(False)
        self.max_length, self.batch_size = max_length, batch_size

    def scores(self, queries: list[str], docs: list[str], device: torch.device) -> torch.Tensor:
        """(B, N) logits of every (query, document) pair."""
        pairs = [(q, d) for q in queries for d in docs]
        return self.pair_scores([q for q, _ in pairs], [d for _, d in pairs], device).view(len(queries), len(docs))

    @torch.no_grad()
    def pair_scores(self, queries: list[str], docs: list[str], device: torch.device) -> torch.Tensor:
        """(N,) logits of the (query, document) pairs, ``batch_size`` pairs per forward pass."""
        self.model.to(device)
        pairs, out = list(zip(queries, docs, strict=True)), []
        for start in range(0, len(pairs), self.batch_size):
            chunk = pairs[start : start + self.batch_size]
            inputs = self.tokenizer(
                [q for q, _ in chunk], [d for _, d in chunk], truncation="only_second", max_length=self.max_length,
                padding=True, return_tensors="pt",
            ).to(device)  # fmt: skip
            out.append(self.model(**inputs).logits[:, 0].float())
        return torch.cat(out)


def _method_class(config) -> type:
    """The class a run config's ``method._target_`` names."""
    from hydra.utils import get_class

    return get_class(config.method._target_)
