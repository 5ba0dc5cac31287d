"""RoC's input-level orthogonality (roc.md Eq. 10): masking a share of the document tokens that match the query."""

from __future__ import annotations

import torch


def mask_exact_matches(
    doc_ids: torch.Tensor,
    query_ids: torch.Tensor,
    fraction: float,
    mask_id: int,
    special_ids: list[int],
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """RoC's input-level orthogonality, Eq. 10: mask a random ``fraction`` of each document's exact-match tokens.

    X_EM holds the positions of document d whose token id occurs among its query's non-special token ids; they are
    replaced by [MASK]. Of its n positions, ⌊fraction·n⌋ are masked, plus one more with probability equal to the
    remainder, so the expected share is exactly ``fraction`` (the paper: 15%). Nothing else is touched.

    Args:
        doc_ids: (N, L) document input ids; document i belongs to query i // (N / B).
        query_ids: (B, Lq) query input ids.
        fraction: Share of exact-match positions to mask, in [0, 1].
        mask_id: The tokenizer's [MASK] id.
        special_ids: Ids never matched nor masked ([CLS], [SEP], [PAD], ...).
        generator: Random source on the CPU (seeded for reproducibility).

    Returns:
        (N, L) ids of the perturbed documents d'.
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"mask fraction must be in [0, 1], not {fraction}")
    group = doc_ids.shape[0] // query_ids.shape[0]
    special = torch.tensor(special_ids, device=doc_ids.device)
    owner = query_ids.repeat_interleave(group, dim=0)  # (N, Lq): each document's query
    matches = (doc_ids.unsqueeze(2) == owner.unsqueeze(1)).any(dim=2)  # (N, L)
    matches &= ~torch.isin(doc_ids, special)  # special ids match between query and document but never count
    masked = doc_ids.clone()
    for row in range(doc_ids.shape[0]):
        positions = matches[row].nonzero().flatten()
        exact = fraction * len(positions)
        count = int(exact) + int(torch.rand((), generator=generator) < exact - int(exact))
        if count:
            order = torch.randperm(len(positions), generator=generator)[:count]
            chosen = positions[order.to(positions.device)]
            masked[row, chosen] = mask_id
    return masked
