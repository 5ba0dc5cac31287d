"""Negative pools and deterministic group sampling, over corpus rows.

A pool is read from any run (BM25's top N today, a trained model's own run for hard negatives); judged
positives are never in it. Pools and positives are CSR arrays of corpus rows
(:class:`~retrieval_zoo.data.doc_rows.DocRows`), so 500k training queries × 1,000 candidates are 2 GB of int32, not
half a billion Python strings. Sampling is a pure function of (qid, seed, epoch), so it is the same under any number
of workers or ranks and after a resume.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch.utils.data

from retrieval_zoo.data.doc_rows import DocRows, RankedRows, entry_rows, row_blocks
from retrieval_zoo.data.formats import Qrels
from retrieval_zoo.id_index import IdIndex, find_sorted


def judged_positives(qrels: Qrels, qids: Sequence[str], docs: IdIndex) -> DocRows:
    """Each query's relevant documents (grade > 0) as corpus rows, in docid order."""
    named = [sorted(d for d, g in qrels[q].items() if g > 0) for q in qids]
    rows = docs.rows([d for positives in named for d in positives])
    offsets = np.concatenate(([0], np.cumsum([len(p) for p in named], dtype=np.int64)))
    return DocRows(offsets, rows.astype(np.int32))


def negative_pool(run: RankedRows, positives: DocRows, n_docs: int) -> DocRows:
    """Every row of ``run`` (already cut to the pool's depth), in rank order, minus the query's judged positives.

    Written into one array as long as the run (its tail, left by the positives, is never touched, so never
    resident): at 500M entries, a list of blocks joined at the end held three copies (6.7 GiB, not 1.9).
    """
    positive_keys = np.sort(entry_rows(positives.offsets) * n_docs + positives.docs)
    docs, counts, filled = np.empty(len(run.docs), dtype=np.int32), np.zeros(len(run), dtype=np.int64), 0
    for start, end in row_blocks(run.offsets):
        rows = entry_rows(run.offsets, start, end)
        doc = np.asarray(run.docs[run.offsets[start] : run.offsets[end]])
        negative = ~find_sorted(positive_keys, rows * n_docs + doc)[1]
        kept = doc[negative]
        docs[filled : filled + len(kept)] = kept
        filled += len(kept)
        counts[start:end] = np.bincount(rows[negative] - start, minlength=end - start)
    return DocRows(np.concatenate(([0], np.cumsum(counts))), docs[:filled])


def query_rng(qid: str, seed: int, epoch: int) -> np.random.Generator:
    """A generator seeded by (qid, seed, epoch) alone."""
    qhash = int.from_bytes(hashlib.sha256(qid.encode()).digest()[:8], "little")
    return np.random.default_rng([seed, epoch, qhash])


@dataclass
class GroupSampling:
    """How a training group (one positive, n negatives) is drawn for a query.

    Attributes:
        row_of: qid → its row in ``positives`` and ``pool``.
        positives: Judged relevant corpus rows (grade > 0) per query row.
        pool: Candidate negatives per query row (a row may be empty).
        docs: The corpus's ids; random negatives are drawn over its rows, the fallback of an empty pool.
        n_negatives: Negatives per query.
        seed: Global seed.
        random_negatives: Draw negatives uniformly from the corpus instead of the pool (ablation).
    """

    row_of: Mapping[str, int]
    positives: DocRows
    pool: DocRows
    docs: IdIndex
    n_negatives: int
    seed: int
    random_negatives: bool = False

    def group_rows(self, qid: str, epoch: int) -> np.ndarray:
        """(1 + n,) corpus rows: [positive, negative_1, …, negative_n] for ``qid`` at ``epoch``."""
        rng = query_rng(qid, self.seed, epoch)
        row = self.row_of[qid]
        positives = self.positives.row(row)
        positive = int(positives[int(rng.integers(len(positives)))])
        candidates = self.pool.row(row)
        if self.random_negatives or not len(candidates):
            return np.asarray([positive, *self._random_negatives(rng, set(positives.tolist()))], dtype=np.int64)
        replace = len(candidates) < self.n_negatives
        picks = rng.choice(len(candidates), size=self.n_negatives, replace=replace)
        return np.concatenate(([positive], candidates[picks])).astype(np.int64)

    def group(self, qid: str, epoch: int) -> list[str]:
        """[positive, negative_1, …, negative_n] for ``qid`` at ``epoch``, as document ids."""
        return self.docs.names(self.group_rows(qid, epoch))

    def _random_negatives(self, rng: np.random.Generator, positives: set[int]) -> list[int]:
        negatives: list[int] = []
        while len(negatives) < self.n_negatives:
            row = int(rng.integers(len(self.docs)))
            if row not in positives:
                negatives.append(row)
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
