"""Two-stage GIP search (delade-dhr.md §3.4, Eq. 18) over a corpus held in several :class:`GipIndex` shards.

The first stage keeps the K′ best documents of the whole corpus, as over one index: approximate GIP scores every
document of every shard and one selection keeps the corpus's K′; the inner-product stage (faiss, which returns a
top k) gives each shard's own top min(K′, its size), merged into the corpus's K′ as the shards are read. The exact GIP
(Eq. 11) then re-ranks those K′, each candidate scored in the shard that holds it: the batch's (query, document)
pairs sorted by shard, gathered and summed a chunk at a time. Searching each shard in two stages on its own would
keep K′ documents a shard, and a shard no larger than K′ (4,096 documents against K′ = 10,000 by default) would
be searched exactly, whatever the corpus's size.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from tqdm import tqdm

from retrieval_zoo.data.formats import Run
from retrieval_zoo.index.terms.gip_search import GipIndex
from retrieval_zoo.retriever import ranked_run

FIRST_STAGE_ELEMENTS = 1 << 28  # a query batch's approximate scores of the corpus: 1 GiB in float32


def search_shards(
    indexes: Sequence[GipIndex],
    values: np.ndarray,
    indices: np.ndarray,
    qids: list[str],
    k: int,
    first_stage: str,
    theta: float,
    candidates: int,
    batch_size: int = 64,
) -> Run:
    """Top ``k`` by exact GIP among the corpus's K′ = ``candidates`` best documents by ``first_stage``.

    Args:
        indexes: The corpus's shards, in corpus order, on one device.
        values: (Q, M) query values.
        indices: (Q, M) query indices.
        qids: Query ids, in row order.
        k: Documents returned per query.
        first_stage: ``approximate_gip`` or ``inner_product`` (:meth:`GipIndex.search`).
        theta: θ of the approximate GIP.
        candidates: K′, capped by the corpus's size.
        batch_size: Queries scored together.
    """
    sizes = [len(index.docids) for index in indexes]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    depth = min(candidates, int(offsets[-1]))
    if first_stage == "approximate_gip":  # a batch's scores of the whole corpus, within FIRST_STAGE_ELEMENTS
        batch_size = max(1, min(batch_size, FIRST_STAGE_ELEMENTS // max(1, int(offsets[-1]))))
    run: Run = {}
    for start in tqdm(range(0, len(qids), batch_size), desc="gip search", unit="batch", leave=False):
        batch = slice(start, start + batch_size)
        q_values, q_indices = indexes[0].queries(values[batch], indices[batch])
        if first_stage == "approximate_gip":
            best = corpus_approximate_top(indexes, offsets, q_values, q_indices, theta, depth)
        else:
            best = merged_first_stage(indexes, offsets, first_stage, q_values, q_indices, theta, depth, values[start:])
        exact = exact_pairs(indexes, offsets, q_values, q_indices, best[1])
        top_scores, order = exact.topk(min(k, depth), dim=1)
        top_rows = best[1].gather(1, order).cpu().numpy()
        names = shard_names(indexes, offsets, top_rows)
        run.update(ranked_run(qids[batch], np.arange(top_rows.size).reshape(top_rows.shape),
                              top_scores, names))  # fmt: skip
    return run


def corpus_approximate_top(
    indexes: Sequence[GipIndex], offsets: np.ndarray, q_values: torch.Tensor, q_indices: torch.Tensor, theta: float,
    depth: int,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(Q, depth) approximate GIP scores and corpus rows: each shard's scores of every document, then one top K′.

    One selection among a query's N scores, instead of one among K′ + 4,096 scores for each of the corpus's shards
    (245 of them at 1,000,000 documents) when each shard's top is merged into the K′ so far.
    """
    scores = torch.empty(q_values.shape[0], int(offsets[-1]), dtype=torch.float32, device=q_values.device)
    for index, begin, end in zip(indexes, offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
        scores[:, begin:end] = index.approximate_scores(q_values, q_indices, theta)
    return scores.topk(depth, dim=1)


def merged_first_stage(
    indexes: Sequence[GipIndex], offsets: np.ndarray, first_stage: str, q_values: torch.Tensor,
    q_indices: torch.Tensor, theta: float, depth: int, raw_values: np.ndarray,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(Q, depth) first-stage scores and corpus rows: each shard's own top, merged into the corpus's K′ so far."""
    best: tuple[torch.Tensor, torch.Tensor] | None = None
    for index, offset in zip(indexes, offsets[:-1].tolist(), strict=True):
        scores, rows = index.first_stage_top(
            first_stage, q_values, q_indices, theta, min(depth, len(index.docids)), raw_values
        )
        rows = rows.long() + offset
        if best is not None:
            scores, rows = torch.cat([best[0], scores], dim=1), torch.cat([best[1], rows], dim=1)
            scores, order = scores.topk(min(depth, scores.shape[1]), dim=1)
            rows = rows.gather(1, order)
        best = scores, rows
    assert best is not None
    return best


def exact_pairs(
    indexes: Sequence[GipIndex], offsets: np.ndarray, q_values: torch.Tensor, q_indices: torch.Tensor,
    rows: torch.Tensor,
) -> torch.Tensor:  # fmt: skip
    """(Q, K′) exact GIP of each query with its candidates, given by corpus row (Q, K′), shard by shard.

    Each pair is scored by :meth:`GipIndex.row_scores`, as a candidate of one index's re-ranking is.
    """
    per_query = rows.shape[1]
    flat = rows.reshape(-1)
    order = flat.argsort()
    corpus_rows, query_of = flat[order], order // per_query
    bounds = torch.searchsorted(corpus_rows, torch.from_numpy(offsets).to(corpus_rows.device)).tolist()  # one sync
    scores = torch.empty(flat.shape[0], dtype=torch.float32, device=rows.device)
    for s, index in enumerate(indexes):
        step = max(1, index.chunk_elements // max(1, q_values.shape[1]))
        for begin in range(bounds[s], bounds[s + 1], step):
            pairs = slice(begin, min(begin + step, bounds[s + 1]))
            local, query = corpus_rows[pairs] - int(offsets[s]), query_of[pairs]
            scores[order[pairs]] = index.row_scores(local, q_values[query], q_indices[query])
    return scores.view(rows.shape)


def shard_names(indexes: Sequence[GipIndex], offsets: np.ndarray, rows: np.ndarray) -> list[str]:
    """The document ids of (Q, k) corpus rows, flattened: each looked up in the shard that holds it."""
    flat = rows.reshape(-1)
    shard_of = np.searchsorted(offsets, flat, side="right") - 1
    local = flat - offsets[shard_of]
    return [str(indexes[s].docids[r]) for s, r in zip(shard_of.tolist(), local.tolist(), strict=True)]
