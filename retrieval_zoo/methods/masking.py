"""RoC's input-level orthogonality (roc.md Eq. 10): masking a share of the document tokens that match the query."""

from __future__ import annotations

import numpy as np
import torch

from retrieval_zoo.encoding.tokens import exact_matches
from retrieval_zoo.host_work import host_only


def mask_exact_matches(
    doc_ids: torch.Tensor,
    query_ids: torch.Tensor,
    fraction: float,
    mask_id: int,
    special_ids: list[int],
    generator: torch.Generator | None = None,
    counts: np.ndarray | None = None,
) -> torch.Tensor:
    """RoC's input-level orthogonality, Eq. 10: mask a random ``fraction`` of each document's exact-match tokens.

    X_EM holds the positions of document d whose token id occurs among its query's non-special token ids
    (:func:`~retrieval_zoo.encoding.tokens.exact_matches`); they are replaced by [MASK]. Of its n positions,
    ⌊fraction·n⌋ are masked, plus one more with probability equal to the remainder, so the expected share is exactly
    ``fraction`` (the paper: 15%). Nothing else is touched.

    The draws run on the CPU generator a document at a time (one ``rand``, then one ``randperm(n)`` when something
    is masked), so a seed masks what it always masked on any device. They need only each document's n: given
    ``counts`` (the DataModule counts them on the host from the batch's tokens), nothing is read back from the
    device; the drawn match numbers go to the device in one copy and the matches are masked there in one pass.

    Args:
        doc_ids: (N, L) document input ids; document i belongs to query i // (N / B).
        query_ids: (B, Lq) query input ids.
        fraction: Share of exact-match positions to mask, in [0, 1].
        mask_id: The tokenizer's [MASK] id.
        special_ids: Ids never matched nor masked ([CLS], [SEP], [PAD], ...).
        generator: Random source on the CPU (seeded for reproducibility).
        counts: (N,) each document's number of exact matches, as the host counted them; None reads them from the
            device (one synchronisation: a batch made without the DataModule's tokens).

    Returns:
        (N, L) ids of the perturbed documents d'.
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"mask fraction must be in [0, 1], not {fraction}")
    matches = exact_matches(doc_ids, query_ids, special_ids)  # (N, L) on the device
    if counts is None:
        counts = matches.sum(dim=1).cpu().numpy()
    if counts.shape != (doc_ids.shape[0],):
        raise ValueError(f"exact-match counts of shape {counts.shape} for {doc_ids.shape[0]} documents")
    chosen = drawn_match_numbers(counts, fraction, doc_ids.shape[1], generator)
    number = (matches.cumsum(dim=1) - 1).clamp(min=0)  # each match's number among its document's matches, 0..n − 1
    chosen = chosen.to(doc_ids.device, non_blocking=True).gather(1, number) & matches
    return doc_ids.masked_fill(chosen, mask_id)


def drawn_match_numbers(
    counts: np.ndarray, fraction: float, length: int, generator: torch.Generator | None
) -> torch.Tensor:
    """(N, L) host booleans: True at the match numbers drawn for masking, ⌊fraction·n⌋ + a coin of each row's n."""
    chosen = torch.zeros((len(counts), length), dtype=torch.bool)
    with host_only("RoC's masking draws"):
        for row, n in enumerate(counts.tolist()):
            exact = fraction * n
            count = int(exact) + int(torch.rand((), generator=generator) < exact - int(exact))
            if count:
                chosen[row, torch.randperm(n, generator=generator)[:count]] = True
    return chosen
