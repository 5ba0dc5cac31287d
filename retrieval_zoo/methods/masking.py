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

    The matches are found for the whole batch on its device and the masks written in one scatter; only the random
    draws run row by row, on the CPU generator, in the order that has always drawn them (one ``rand`` and one
    ``randperm`` a document), so a seed masks what it always masked.

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
    counts = matches.sum(dim=1).cpu()  # one transfer: the draws below run on the CPU generator, as they always have
    positions = matches.nonzero()[:, 1].cpu().split(counts.tolist())
    chosen_rows, chosen_columns = [], []
    for row, (found, n) in enumerate(zip(positions, counts.tolist(), strict=True)):  # the draws, row by row
        exact = fraction * n
        count = int(exact) + int(torch.rand((), generator=generator) < exact - int(exact))
        if count:
            chosen_columns.append(found[torch.randperm(n, generator=generator)[:count]])
            chosen_rows.append(torch.full((count,), row))
    masked = doc_ids.clone()
    if chosen_rows:  # one scatter on the device
        masked[torch.cat(chosen_rows).to(doc_ids.device), torch.cat(chosen_columns).to(doc_ids.device)] = mask_id
    return masked
