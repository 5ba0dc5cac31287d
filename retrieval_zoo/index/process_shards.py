"""An index split by document over processes (one per GPU, or CPU processes): each holds its shards' part.

A corpus encoded in shards (:mod:`retrieval_zoo.index.shards`) is indexed shard by shard; with D processes in the
default process group, rank r keeps only the shards r, r + D, ... (:func:`own_shards`), so each holds about 1/D of
the index. Rank 0 drives the search, and the other ranks serve it (:class:`ShardedSearch`): for every batch of
queries, each rank scores its own shards, keeps its top k as (score, corpus row) tensors, and one all-gather brings
every rank's top k to every rank, where :func:`merge_rows` keeps the best k of all. An exact per-shard search stays
exact: a document in the global top k is in its own rank's top k. Ties are broken by corpus row, lowest first, on
one process as on many, so the merged ranking does not depend on D (tested against one process on 2 gloo ranks).

Pruning that takes the lowest share of the *whole* corpus's postings (CSurF's α) needs one threshold for all
ranks: :func:`lowest_share_masks` finds it exactly by bisection over the float bits with one all-reduce of counts a
step, then drops the ties at the threshold in corpus order, so D processes prune the same postings as one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

import torch
import torch.distributed as dist

from retrieval_zoo.data.formats import Run
from retrieval_zoo.distributed import collective_device, gather_rows, row_counts, world

STOP = "stop"
_SPLIT = ContextVar("split_over_processes", default=False)

T = TypeVar("T")


@contextmanager
def split_over_processes() -> Iterator[None]:
    """Indexes built inside split their shards over the process group (evaluation); outside, each holds all of them.

    Validation during training builds a whole index on every rank, each searching its own queries, so splitting is
    asked for where every rank searches the same queries: :func:`retrieval_zoo.evaluation.stages.evaluate_method` on
    rank 0 and :meth:`retrieval_zoo.index.index.Index.serve` on the others.
    """
    token = _SPLIT.set(True)
    try:
        yield
    finally:
        _SPLIT.reset(token)


@contextmanager
def whole_on_this_process() -> Iterator[None]:
    """An index made inside holds every shard on this process, even in :func:`split_over_processes` (a saved one)."""
    token = _SPLIT.set(False)
    try:
        yield
    finally:
        _SPLIT.reset(token)


def split_world() -> tuple[int, int]:
    """(rank, ranks) an index is split over: the process group's inside :func:`split_over_processes`, else (0, 1)."""
    return world() if _SPLIT.get() else (0, 1)


def own_shards(num_shards: int) -> list[int]:
    """The shard numbers this process indexes: r, r + D, ... of ``num_shards`` (all of them on one process)."""
    rank, size = split_world()
    if num_shards < size:
        raise ValueError(f"{num_shards} shards cannot be split over {size} processes: lower encode.shard_size")
    return list(range(rank, num_shards, size))


def all_sum(value: torch.Tensor) -> torch.Tensor:
    """The sum of ``value`` over every rank (the value itself on one process)."""
    if split_world()[1] == 1:
        return value
    total = value.to(collective_device()).clone()
    dist.all_reduce(total)
    return total.to(value.device)


def merge_rows(scores: torch.Tensor, rows: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The best ``k`` (score, row) pairs of each query: highest score first, ties by lowest row; row −1 is padding.

    Args:
        scores: (B, m) candidate scores (padding: −inf).
        rows: (B, m) their corpus rows.
        k: How many to keep.

    Returns:
        (B, min(k, m)) scores and rows, best first.
    """
    by_row = torch.argsort(torch.where(rows < 0, torch.iinfo(rows.dtype).max, rows), dim=1, stable=True)
    scores, rows = scores.gather(1, by_row), rows.gather(1, by_row)
    best = torch.argsort(scores, dim=1, descending=True, stable=True)[:, :k]
    return scores.gather(1, best), rows.gather(1, best)


def rank_zeros(value: T) -> T:
    """Rank 0's ``value`` on every rank of a split index (so that all batch the same queries alike)."""
    if split_world()[1] == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_topk(scores: torch.Tensor, rows: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every rank's (B, ≤ k) top candidates for the same B queries merged into the global top ``k``."""
    if split_world()[1] == 1:
        return merge_rows(scores, rows, k)
    device, sizes = scores.device, row_counts(scores.shape[1])  # candidates may differ between ranks
    gathered_scores, gathered_rows = (gather_rows(t.to(collective_device()).t().contiguous(), sizes)[0].t()
                                      for t in (scores, rows))  # fmt: skip
    merged = merge_rows(gathered_scores, gathered_rows, k)
    return merged[0].to(device), merged[1].to(device)


class ShardedSearch:
    """Rank 0's searches, run by every rank over its own shards: rank 0 sends each request, the others serve.

    Built inside :func:`split_over_processes` (the ranks it was split over are kept), or as a plain search.

    Args:
        search: (queries, k) → this rank's share of the answer; it may call :func:`gather_topk` (every rank makes
            the same collective calls in the same order, as they search the same queries the same way).
    """

    def __init__(self, search: Callable[[dict[str, str], int], Run]) -> None:
        self._search, self.split = search, split_world()[1] > 1

    def search(self, queries: dict[str, str], k: int) -> Run:
        """On rank 0: the answer for ``queries`` (the other ranks search with it)."""
        if not self.split:
            return self._search(queries, k)
        with split_over_processes():
            dist.broadcast_object_list([(queries, k)], src=0)
            return self._search(queries, k)

    def serve(self) -> None:
        """On ranks other than 0: search what rank 0 sends until it sends :meth:`stop`."""
        with split_over_processes():
            while True:
                request: list = [None]
                dist.broadcast_object_list(request, src=0)
                if request[0] == STOP:
                    return
                self._search(*request[0])

    def stop(self) -> None:
        """On rank 0: release the serving ranks."""
        if self.split:
            dist.broadcast_object_list([STOP], src=0)


def check_share(fraction: float) -> None:
    """A pruning share α must lie in [0, 1)."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"prune_fraction (α) must be in [0, 1), not {fraction}")


def lowest_share_masks(
    weights: Sequence[torch.Tensor], shards: Sequence[int], num_shards: int, fraction: float
) -> list[torch.Tensor]:
    """Masks that keep all but the ⌊fraction·n⌋ lowest of the whole corpus's n weights, the shards split over ranks.

    The same postings as one stable sort of every shard's weights in shard order would drop (ties at the threshold
    go in shard order, then in order within a shard), found without gathering any weight.

    Args:
        weights: This rank's shards' (n_s,) non-negative weights.
        shards: Their shard numbers.
        num_shards: Shards in the corpus.
        fraction: The share to drop, in [0, 1).
    """
    check_share(fraction)
    total = int(all_sum(torch.tensor([sum(len(w) for w in weights)]))[0])
    drop = int(fraction * total)
    if drop == 0:
        return [torch.ones_like(w, dtype=torch.bool) for w in weights]
    bits = [w.float().contiguous().view(torch.int32) for w in weights]  # ordered as the floats, for w ≥ 0

    def below(threshold: int) -> int:
        return int(all_sum(torch.tensor([sum(int((b < threshold).sum()) for b in bits)]))[0])

    low, high = 0, torch.iinfo(torch.int32).max  # the drop-th lowest weight's bits t: below(t) < drop ≤ below(t + 1)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if below(middle) < drop else (low, middle)
    threshold = low
    ties_to_drop = drop - below(threshold)
    equal = torch.zeros(num_shards, dtype=torch.long)
    for shard, b in zip(shards, bits, strict=True):
        equal[shard] = int((b == threshold).sum())
    equal = all_sum(equal)
    before = torch.cat([equal.new_zeros(1), equal.cumsum(0)[:-1]])  # ties in earlier shards
    masks = []
    for shard, b in zip(shards, bits, strict=True):
        quota = max(0, min(int(equal[shard]), ties_to_drop - int(before[shard])))
        keep = b >= threshold
        keep[(b == threshold).nonzero().squeeze(1)[:quota]] = False
        masks.append(keep)
    return masks
