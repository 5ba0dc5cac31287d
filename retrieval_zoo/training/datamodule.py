"""The one DataModule every method trains on: groups of (query, positive, n negatives) over any collection.

Optional batch fields are filled only when the method declares it needs them (``method.needs``):
``bm25_scores`` (BM25 of every pair of the group), ``bm25_vectors`` (IDF of query terms and TF saturation of
document terms, whose inner product is BM25: RoC's q_bm25 and d_bm25) and ``teacher_scores`` (from a run file,
for distillation). All BM25 work happens once in :meth:`TriplesDataModule.setup`, before training, so no training
step waits on Java. Given the method's tokenizer, :meth:`TriplesDataModule.setup` tokenizes the corpus and the
training queries once into token caches (:class:`~retrieval_zoo.encoding.tokens.TokenCache`, memory-mapped, shared by
every run with the same tokenizer), and a batch gathers its :class:`~retrieval_zoo.encoding.tokens.Tokens` from them,
so the training step receives tensors and nothing tokenizes during training; the texts themselves come only to a method
that needs them (``texts``: an online teacher with its own tokenizer).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Literal, TypeVar

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader

from retrieval_zoo.bounds import NonNegative, Positive
from retrieval_zoo.cache import fingerprint
from retrieval_zoo.data.collections import TUNING_SHARE, Collection
from retrieval_zoo.data.corpus_store import corpus_ids
from retrieval_zoo.data.doc_rows import RankedRows
from retrieval_zoo.data.ranked_rows import cached_ranked_rows
from retrieval_zoo.encoding.tokens import TextTokenizer, TokenCache, Tokens, exact_matches
from retrieval_zoo.id_index import IdIndex
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.lexical.sparse_rows import SparseBatch
from retrieval_zoo.training.loaders import GroupDataset, ResumableLoader
from retrieval_zoo.training.lookups import PairTable, precompute_fields, restrict_to_teacher
from retrieval_zoo.training.negatives import GroupSampling, ShardedEpochSampler, judged_positives, negative_pool

FIELDS = frozenset({"bm25_scores", "bm25_vectors", "teacher_scores", "texts", "exact_match_counts"})
VALIDATION_HOLDOUT = 300  # training queries validated on without a validation split (data.val_queries: null)


T = TypeVar("T")


def required(value: T | None, field: str) -> T:
    """A batch field the method reads, which the DataModule makes only when the method ``needs`` it."""
    if value is None:
        raise ValueError(f"the batch has no {field}: the method reads it, so its ``needs`` must name it")
    return value


@dataclass
class TrainBatch:
    """One training step's groups. B queries, G = 1 + n documents per query (column 0 is the positive).

    Attributes:
        qids: (B,) query ids.
        queries: (B,) query texts; None when the DataLoader tokenized them and the method needs no texts.
        docids: (B, G) document ids.
        docs: (B·G,) document texts, row-major; None as ``queries``.
        bm25_scores: (B, G) BM25(q, d), when the method needs it.
        bm25_query_vectors: (B,) term → IDF, when the method needs BM25 vectors; with the method's ``term_keys``,
            the same as tensors of (row, term key, weight) entries.
        bm25_doc_vectors: (B·G,) term → BM25 TF saturation, likewise.
        teacher_scores: (B, G) teacher scores, when the method distils.
        query_tokens: (B, Lq) the queries' tokens, when the DataModule has the method's tokenizer.
        doc_tokens: (B·G, Ld) the documents' tokens, likewise.
        exact_match_counts: (B·G,) each document's tokens that occur in its query (RoC's |X_EM|, Eq. 10), counted on
            the host from the tokens, when the method needs them: a NumPy array, which stays on the host.
    """

    qids: list[str]
    queries: list[str] | None
    docids: list[list[str]]
    docs: list[str] | None
    bm25_scores: torch.Tensor | None = None
    bm25_query_vectors: list[dict[str, float]] | SparseBatch | None = None
    bm25_doc_vectors: list[dict[str, float]] | SparseBatch | None = None
    teacher_scores: torch.Tensor | None = None
    query_tokens: Tokens | None = None
    doc_tokens: Tokens | None = None
    exact_match_counts: np.ndarray | None = None

    @property
    def query_input(self) -> Tokens | list[str]:
        """The queries as an encoder takes them: their tokens when the DataLoader made them, else their texts."""
        return self.query_tokens if self.query_tokens is not None else self.queries

    def pin_memory(self) -> TrainBatch:
        """The batch with its tensors in page-locked memory (the DataLoader's ``pin_memory``)."""
        pinned = {f.name: getattr(self, f.name) for f in fields(self)}
        pinned = {n: v.pin_memory() for n, v in pinned.items() if isinstance(v, torch.Tensor | Tokens)}
        return replace(self, **pinned)

    @property
    def doc_input(self) -> Tokens | list[str]:
        """The documents as an encoder takes them (see :attr:`query_input`)."""
        return self.doc_tokens if self.doc_tokens is not None else self.docs


class TriplesDataModule(L.LightningDataModule):
    """Training groups and validation queries for any method.

    Args:
        collection: The collection (train split for training, ``val_split`` for validation).
        bm25: BM25 over the collection, for the negative pool and the BM25 fields.
        batch_size: Global number of queries per optimizer step; must divide by the world size.
        n_negatives: Negatives per query.
        negatives_run: A TREC run file to draw negatives from; None = BM25's top ``negative_depth``.
        negative_depth: Depth of the pool taken from the run.
        random_negatives: Draw negatives uniformly from the corpus (ablation).
        teacher_run: A run file of teacher scores (needed for ``teacher_scores``). Only pairs it scores are sampled;
            a query without a scored positive and a scored negative is not trained on (both counts are printed).
        needs: Batch fields the method needs (a subset of :data:`FIELDS`).
        seed: Seed of the per-(qid, epoch) sampling.
        epochs: Epochs whose groups are precomputed for random negatives' BM25 scores (None: trainer's max).
        val_split: Split of the validation queries.
        val_queries: Validation queries, a fixed subset of the judged ones (None = all).
        num_workers: DataLoader workers (the JVM lives in its own process, so they may fork); ``auto``: none on CPUs,
            where they would compete with the step for the cores, and up to 4 per process on an accelerator.
        holdout_queries: Judged training queries kept out of training (:meth:`Collection.tuning_qids`), on which
            evaluation tunes fusion weights such as CLEAR's λ_test.
        tokenizer: The method's :class:`~retrieval_zoo.encoding.tokens.TextTokenizer` (``train.py`` passes it): batches
            carry tokens from the token caches; None leaves the texts for the method to tokenize.
        term_keys: Terms → their keys (RoC's projection hashes them; ``train.py`` passes ``method.term_keys()``):
            the BM25 vectors are then stored as CSR arrays once and batches carry them as tensors, not dicts.
    """

    def __init__(
        self,
        collection: Collection,
        bm25: BM25,
        batch_size: Positive = 64,
        n_negatives: Positive = 1,
        negatives_run: str | None = None,
        negative_depth: Positive = 100,
        random_negatives: bool = False,
        teacher_run: str | None = None,
        needs: frozenset[str] | list[str] = frozenset(),
        seed: int = 13,
        epochs: Positive | None = None,
        val_split: str = "dev",
        val_queries: NonNegative | None = 300,
        num_workers: NonNegative | Literal["auto"] = "auto",
        holdout_queries: NonNegative = 0,
        tokenizer: TextTokenizer | None = None,
        term_keys: Callable[[list[str]], np.ndarray] | None = None,
    ) -> None:
        super().__init__()
        if num_workers != "auto" and (not isinstance(num_workers, int) or num_workers < 0):
            raise ValueError(f"data.num_workers must be 'auto' or a number ≥ 0, not {num_workers!r}")
        unknown = set(needs) - FIELDS
        if unknown:
            raise ValueError(f"unknown batch fields {sorted(unknown)}; known: {sorted(FIELDS)}")
        if "teacher_scores" in needs and not teacher_run:
            raise ValueError("the method distils (needs teacher_scores) but data.teacher_run is not set")
        self.collection, self.bm25, self.needs = collection, bm25, frozenset(needs)
        self.batch_size, self.n_negatives, self.seed, self.epochs = batch_size, n_negatives, seed, epochs
        self.negatives_run, self.negative_depth, self.random_negatives = negatives_run, negative_depth, random_negatives
        self.teacher_run, self.val_split, self.val_queries = teacher_run, val_split, val_queries
        self.val_held_out: list[str] = []  # training queries validated on, where the collection has no val_split
        if val_split not in collection.qrels:  # decided before any BM25 search or tokenization
            self.val_held_out = collection.validation_qids(val_queries or VALIDATION_HOLDOUT, holdout_queries)
            print(f"[data] {collection.name} has no {val_split!r} judgements: validating on {len(self.val_held_out):,} "
                  f"judged {collection.train_split!r} queries held out of training (data.val_split names another "
                  f"split; the evaluation split only if named)")  # fmt: skip
            self.val_split = collection.train_split
        self.num_workers, self.holdout_queries, self.tokenizer = num_workers, holdout_queries, tokenizer
        self.term_keys, self.term_rows = term_keys, None
        self.sampling: GroupSampling | None = None
        self.train_loader: ResumableLoader | None = None
        self.resume_position: dict[str, int] | None = None

    def setup(self, stage: str | None = None) -> None:
        """Build the pool and sampling, and precompute every BM25 and teacher field, once, before training."""
        if self.sampling is not None:
            return
        split = self.collection.train_split
        qrels = self.collection.qrels[split]
        judged = self.collection.judged_queries(split)
        tuning = self.collection.tuning_qids(self.holdout_queries)
        if tuning:
            cap = self.holdout_queries
            print(f"[data] {len(tuning):,} of {len(judged):,} judged {split} queries held out to tune fusion weights "
                  f"on ({TUNING_SHARE:.0%}, at most eval.tune_queries={cap}); trained on the rest")  # fmt: skip
        held_out = set(tuning) | set(self.val_held_out)
        queries = {q: t for q, t in judged.items() if q not in held_out}
        self.train_qids = sorted(queries)
        unjudged = len(self.collection.queries[split]) - len(queries) - len(held_out)
        if unjudged:
            print(f"[data] {unjudged:,} {split} queries have no relevant document and are not trained on")
        docs, qids = corpus_ids(self.collection.corpus), self.train_qids  # the rows of every table below
        if self.negatives_run:
            bm25_run, run = None, self._read_rows(self.negatives_run, qids, docs, self.negative_depth)
        else:
            bm25_run = run = self.bm25.search_rows({q: queries[q] for q in qids}, self.negative_depth, docs)
        positives = judged_positives(qrels, qids, docs)
        pool = negative_pool(run, positives, len(docs))
        teacher = self._read_rows(self.teacher_run, qids, docs, None) if "teacher_scores" in self.needs else None
        if teacher is not None:
            if self.random_negatives:
                raise ValueError(f"data.random_negatives draws pairs the teacher run {self.teacher_run} never scored")
            positives, pool, kept = restrict_to_teacher(self.teacher_run, teacher, positives, pool)
            self.train_qids = [qids[row] for row in kept]
        self.sampling = GroupSampling(
            row_of={qid: row for row, qid in enumerate(qids)},
            positives=positives,
            pool=pool,
            docs=docs,
            n_negatives=self.n_negatives,
            seed=self.seed,
            random_negatives=self.random_negatives,
        )
        empty = int((pool.counts()[[self.sampling.row_of[q] for q in self.train_qids]] == 0).sum())
        if empty and not self.random_negatives:
            print(
                f"[data] {empty:,} of {len(self.train_qids):,} training queries have no negative in the pool; "
                "they take random negatives"
            )
        epochs = self.epochs or epochs_to_prepare(self.trainer, len(self.train_qids), self.batch_size)
        self.tables = precompute_fields(
            self.needs,
            self.bm25,
            queries,
            self.sampling,
            self.train_qids,
            epochs,
            bm25_run,
            teacher,
            qids,
            self.term_keys,
        )
        if self.tokenizer is not None:  # every text tokenized once, read by memory map (retrieval_zoo.encoding.tokens)
            corpus, all_queries = self.collection.corpus, self.collection.queries[split]
            self.doc_cache = TokenCache.build(corpus, self.tokenizer, "doc", self.collection.corpus_fingerprint)
            content = fingerprint(sorted(all_queries.items()))  # the queries' own text: a few MB, hashed in a blink
            self.query_cache = TokenCache.build(all_queries, self.tokenizer, "query", content)
        self.term_rows = self.tables.pop("term_rows", None)
        if self.val_held_out:
            self.val_qids = self.val_held_out
        else:
            val_queries = self.collection.judged_queries(self.val_split)
            self.val_qids = sorted(val_queries)[: self.val_queries] if self.val_queries else sorted(val_queries)
        self.val_numbers = {qid: number for number, qid in enumerate(self.val_qids)}  # the metrics' query index

    def _read_rows(self, path: str, qids: list[str], docs: IdIndex, depth: int | None) -> RankedRows:
        """A run file's rankings of ``qids``, whose query and document ids must all belong to the collection."""
        return cached_ranked_rows(path, self.collection.queries[self.collection.train_split], qids, docs, depth)

    def _world(self) -> tuple[int, int]:
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    def train_dataloader(self) -> DataLoader:
        """Per-rank groups: ``batch_size / world_size`` queries each, from a distinct shard; resumable mid-epoch."""
        rank, world = self._world()
        if self.batch_size % world:
            raise ValueError(f"data.batch_size={self.batch_size} does not divide by the world size {world}")
        sampler = ShardedEpochSampler(len(self.train_qids), self.seed, rank, world)
        accelerated = self.trainer is not None and self.trainer.strategy.root_device.type == "cuda"
        workers = self.num_workers
        if workers == "auto":
            workers = min(4, max(1, (os.cpu_count() or 1) // world - 1)) if accelerated else 0
        self.train_loader = ResumableLoader(
            GroupDataset(self.train_qids, self.sampling),
            batch_size=self.batch_size // world,
            sampler=sampler,
            drop_last=True,
            collate_fn=self.collate,
            num_workers=workers,
            persistent_workers=workers > 0,
            pin_memory=accelerated,  # page-locked batches copy to the GPU asynchronously
            # No generator of its own: each epoch's iterator draws its workers' base seed from the global torch RNG,
            # which moves the dropout masks of the steps after it. The README's tables were measured with that draw
            # (a loader generator, 19aaea9..8f91ae6, moved them); tests/test_datamodule.py pins it.
        )
        if self.resume_position is not None:
            self.train_loader.load_state_dict(self.resume_position)
            self.resume_position = None
        return self.train_loader

    def state_dict(self) -> dict[str, int]:
        """Saved in checkpoints: the training epoch and how many of its batches were trained on."""
        return self.train_loader.state_dict() if self.train_loader is not None else {}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume the sampler where the checkpoint's run stopped (applied when the training loader is built)."""
        if state:
            self.resume_position = state
            if self.train_loader is not None:
                self.train_loader.load_state_dict(state)

    def on_before_batch_transfer(self, batch: object, dataloader_idx: int) -> object:
        """Count the training batches of the epoch as they reach the training step (the resume position)."""
        if self.trainer is not None and self.trainer.training and isinstance(batch, TrainBatch):
            epoch, batches = self.train_loader.consumed
            current = self.trainer.current_epoch
            self.train_loader.consumed = (current, batches + 1 if epoch == current else 1)
        return batch

    def val_dataloader(self) -> DataLoader:
        """Batches of this rank's validation query ids (every ``world``-th: none twice, as a padding sampler would).

        The validation callback retrieves for them; its metrics gather every rank's queries.
        """
        rank, world = self._world()
        if len(self.val_qids) < world:
            raise ValueError(f"{len(self.val_qids)} validation queries cannot be dealt to {world} ranks: every rank "
                             "needs one (raise data.val_queries)")  # fmt: skip
        return DataLoader(self.val_qids[rank::world], batch_size=256, collate_fn=list)

    def collate(self, items: list[tuple[str, list[str]]]) -> TrainBatch:
        """Turn (qid, group) items into a :class:`TrainBatch`, filling only the needed fields."""
        queries = self.collection.queries[self.collection.train_split]
        corpus = self.collection.corpus
        qids = [qid for qid, _ in items]
        docids = [group for _, group in items]
        flat = [d for group in docids for d in group]
        texts = self.tokenizer is None or "texts" in self.needs
        batch = TrainBatch(qids, [queries[q] for q in qids] if texts else None, docids,
                           [corpus[d] for d in flat] if texts else None)  # fmt: skip
        if self.tokenizer is not None:
            batch.query_tokens, batch.doc_tokens = self.query_cache.tokens(qids), self.doc_cache.tokens(flat)
            if "exact_match_counts" in self.needs:
                special = self.tokenizer.tokenizer.all_special_ids
                matches = exact_matches(batch.doc_tokens.ids, batch.query_tokens.ids, special)
                batch.exact_match_counts = matches.sum(dim=1).numpy()
        tables: dict[str, PairTable] = self.tables
        if "bm25_scores" in self.needs:
            batch.bm25_scores = tables["bm25_scores"].matrix(qids, docids)
        if "teacher_scores" in self.needs:
            batch.teacher_scores = tables["teacher_scores"].matrix(qids, docids)
        if "bm25_vectors" in self.needs and self.term_rows is not None:
            (query_ids, queries_csr), (doc_ids, docs_csr) = self.term_rows["query"], self.term_rows["doc"]
            batch.bm25_query_vectors = queries_csr.gather(torch.from_numpy(query_ids.known_rows(qids, "BM25 IDF")))
            batch.bm25_doc_vectors = docs_csr.gather(torch.from_numpy(doc_ids.known_rows(flat, "BM25 vectors")))
        elif "bm25_vectors" in self.needs:
            batch.bm25_query_vectors = [tables["query_idf"][q] for q in qids]
            batch.bm25_doc_vectors = [tables["doc_weights"][d] for d in flat]
        return batch


def epochs_to_prepare(trainer: L.Trainer | None, train_queries: int, batch_size: int) -> int:
    """The epochs whose groups are precomputed: ``trainer.max_epochs``, or those ``max_steps`` reach when it is -1.

    A recipe that counts in steps (``max_epochs: -1``) runs as many epochs as its steps need on the given data.
    """
    if trainer is None:
        return 1
    if trainer.max_epochs is not None and trainer.max_epochs > 0:
        return trainer.max_epochs
    if trainer.max_steps is None or trainer.max_steps <= 0:
        raise ValueError("trainer.max_epochs=-1 trains until trainer.max_steps: give max_steps > 0")
    steps_per_epoch = max(1, train_queries // batch_size // max(1, trainer.accumulate_grad_batches))
    return -(-trainer.max_steps // steps_per_epoch)
