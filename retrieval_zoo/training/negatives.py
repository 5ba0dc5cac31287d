"""Negative pools and deterministic group sampling.

A pool is read from any run (BM25's top N today, a trained model's own run for hard negatives); judged
positives are never in it. Sampling is a pure function of (qid, seed, epoch), so it is the same under any number
of workers or ranks and after a resume.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch.utils.data

from retrieval_zoo.data.formats import Qrels, Run, ranked


def negative_pool(run: Run, qrels: Qrels, depth: int) -> dict[str, list[str]]:
    """The top ``depth`` documents of each query of ``run``, in rank order, minus any judged positive."""
    pool = {}
    for qid, scores in run.items():
        positives = {d for d, g in qrels.get(qid, {}).items() if g > 0}
        pool[qid] = [d for d, _ in ranked(scores)[:depth] if d not in positives]
    return pool


def query_rng(qid: str, seed: int, epoch: int) -> np.random.Generator:
    """A generator seeded by (qid, seed, epoch) alone."""
    qhash = int.from_bytes(hashlib.sha256(qid.encode()).digest()[:8], "little")
    return np.random.default_rng([seed, epoch, qhash])


@dataclass
class GroupSampling:
    """How a training group (one positive, n negatives) is drawn for a query.

    Attributes:
        positives: qid → judged relevant docids (grade > 0).
        pool: qid → candidate negatives (may be empty for a query).
        corpus_ids: All docids, for random negatives and as the fallback of an empty pool.
        n_negatives: Negatives per query.
        seed: Global seed.
        random_negatives: Draw negatives uniformly from the corpus instead of the pool (ablation).
    """

    positives: dict[str, list[str]]
    pool: dict[str, list[str]]
    corpus_ids: list[str]
    n_negatives: int
    seed: int
    random_negatives: bool = False

    def group(self, qid: str, epoch: int) -> list[str]:
        """[positive, negative_1, …, negative_n] for ``qid`` at ``epoch``."""
        rng = query_rng(qid, self.seed, epoch)
        positives = self.positives[qid]
        positive = positives[int(rng.integers(len(positives)))]
        candidates = self.pool.get(qid, [])
        if self.random_negatives or not candidates:
            return [positive, *self._random_negatives(rng, set(positives))]
        replace = len(candidates) < self.n_negatives
        picks = rng.choice(len(candidates), size=self.n_negatives, replace=replace)
        return [positive, *(candidates[i] for i in picks)]

    def _random_negatives(self, rng: np.random.Generator, positives: set[str]) -> list[str]:
        negatives: list[str] = []
        while len(negatives) < self.n_negatives:
            docid = self.corpus_ids[int(rng.integers(len(self.corpus_ids)))]
            if docid not in positives:
                negatives.append(docid)
        return negatives


class ShardedEpochSampler(torch.utils.data.Sampler[tuple[int, int]]):
    """Yields (query index, epoch): a seeded shuffle per epoch, then this rank's contiguous-stride shard.

    Every rank sees the same number of indices (the tail that does not divide evenly is dropped, as
    ``DistributedSampler(drop_last=True)`` does), so no rank waits on another at the last step. After
    :meth:`resume_at`, the next pass over that epoch starts where a killed run stopped.

    Args:
        num_items: Training queries.
        seed: Shuffle seed.
        rank: This process's rank.
        world_size: Number of processes.
        shuffle: Shuffle per epoch (else index order).
    """

    def __init__(self, num_items: int, seed: int, rank: int = 0, world_size: int = 1, shuffle: bool = True) -> None:
        self.num_items, self.seed, self.rank, self.world_size, self.shuffle = num_items, seed, rank, world_size, shuffle
        self.epoch = 0
        self.skip: tuple[int, int] = (0, 0)  # (epoch, indices of it already trained on)

    def resume_at(self, epoch: int, consumed: int) -> None:
        """Skip this rank's first ``consumed`` indices of ``epoch`` on the next pass over it (mid-epoch resume)."""
        self.skip = (epoch, consumed)

    def set_epoch(self, epoch: int) -> None:
        """Called by Lightning at the start of each epoch."""
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_items // self.world_size

    def __iter__(self) -> Iterator[tuple[int, int]]:
        order = np.arange(self.num_items)
        if self.shuffle:
            np.random.default_rng([self.seed, self.epoch]).shuffle(order)
        shard = order[: len(self) * self.world_size][self.rank :: self.world_size]
        skip_epoch, consumed = self.skip
        self.skip = (0, 0)
        start = consumed if skip_epoch == self.epoch else 0
        return iter((int(i), self.epoch) for i in shard[start:])
