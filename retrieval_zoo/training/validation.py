"""Validation by first-stage retrieval through the run's index, so checkpoints are selected on retrieval quality.

At the start of each validation epoch the corpus (``corpus: full``) or a candidate pool (``corpus: pool``: BM25's
top ``pool_depth`` of the validation queries and their judged documents, :mod:`retrieval_zoo.training.validation_pool`)
is indexed with the current weights by the same index the run evaluates with. Each rank searches its share of the
validation queries (the DataModule deals them out, every ``world``-th) to depth ``val_k``, and MRR@10 and R@val_k
over all of them are logged as ``val/MRR@10`` and ``val/R@<val_k>``: torchmetrics' retrieval metrics, gathered
across ranks, equal to trec_eval's (:mod:`retrieval_zoo.training.validation_metrics`).

The encoding is split over ranks too. In one process the documents are encoded on demand, a shard at a time, and
nothing is stored. Under DDP, rank r encodes the shards r, r + world, ... into a folder every rank reads
(``shards_dir``, by default ``validation-shards/`` in the run's directory: ranks on several nodes need it on a shared
file system), every rank builds the index from all the shards, and the folder is removed at the end of the epoch.
Both encode and search in the trainer's precision, as its steps run (:mod:`retrieval_zoo.encoding.precision`).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Literal

import lightning as L
from tqdm import tqdm

from retrieval_zoo.bounds import require_choice
from retrieval_zoo.cache import fingerprint
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.corpus_store import corpus_ids
from retrieval_zoo.encoding.precision import encoding_precision
from retrieval_zoo.index.index import Index, Retriever
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.training.validation_metrics import RankingMetrics
from retrieval_zoo.training.validation_pool import candidate_pool

Corpus = Literal["full", "pool"]


class RetrievalValidation(L.Callback):
    """Index the corpus or a pool, search each rank's validation queries, and log MRR@10 and recall over all.

    Args:
        index: The run's index.
        bm25: The run's BM25, for indexes that fuse or project it, and for the pool.
        corpus: ``full`` (every document) or ``pool`` (module docstring).
        pool_depth: BM25's documents per validation query in the pool; at least the depth of a fusing index's
            BM25 run (``index.depth``), whose documents must all be in the pool.
        shard_size: Documents per shard when ranks share the encoding.
        shards_dir: Where ranks write their shards (default: ``validation-shards`` in the trainer's root directory);
            each run takes a folder of its own there, named by a hash of its directory.
    """

    def __init__(
        self,
        index: Index,
        bm25: BM25,
        corpus: Corpus = "full",
        pool_depth: int = 1000,
        shard_size: int = 4096,
        shards_dir: str | None = None,
    ) -> None:
        require_choice("validation.corpus", corpus, Corpus)
        if shard_size < 1:
            raise ValueError(f"validation.shard_size must be at least 1, not {shard_size}")
        bm25_depth = getattr(index, "depth", 0)  # a union's: BM25's top depth, which must stay inside the pool
        if corpus == "pool" and bm25_depth > pool_depth:
            raise ValueError(f"validation.pool_depth={pool_depth} is below the index's BM25 depth {bm25_depth} "
                             "(index.depth): the fused BM25 run would reach outside the pool; raise "
                             "validation.pool_depth")  # fmt: skip
        self.index, self.bm25, self.corpus, self.pool_depth = index, bm25, corpus, pool_depth
        self.shard_size, self.shards_dir = shard_size, shards_dir
        self._retriever: Retriever | None = None
        self._metrics: RankingMetrics | None = None
        self._pool: tuple[tuple[str, ...], Collection] | None = None
        self._folder: Path | None = None

    def collection(self, datamodule: L.LightningDataModule) -> Collection:
        """What validation indexes: the whole collection, or its pool for the validation queries (built once)."""
        if self.corpus == "full":
            return datamodule.collection
        qids = tuple(datamodule.val_qids)
        if self._pool is None or self._pool[0] != qids:
            self._pool = (qids, candidate_pool(datamodule.collection, self.bm25, datamodule.val_split, list(qids),
                                               self.pool_depth))  # fmt: skip
        return self._pool[1]

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Index the corpus or pool with the current weights (shared over ranks); read the queries' tokens."""
        datamodule = trainer.datamodule
        queries = datamodule.collection.queries[datamodule.val_split]
        pl_module.cache_queries({q: queries[q] for q in datamodule.val_qids})
        collection = self.collection(datamodule)
        shards = None
        with encoding_precision(trainer.precision_plugin, pl_module):  # hooks run outside Lightning's autocast
            if trainer.world_size > 1 and self.index.encodes_corpus(pl_module):
                shards = self._encode_shares(trainer, pl_module, collection)
            self._retriever = self.index.build(pl_module, collection, self.bm25, shards)
        self._metrics = RankingMetrics(pl_module.val_k, pl_module.device)

    def shards_root(self, trainer: L.Trainer) -> Path:
        """This run's folder of validation shards: in its directory, or under ``shards_dir`` by a hash of it."""
        run_dir = Path(trainer.default_root_dir).resolve()
        if self.shards_dir is None:
            return run_dir / "validation-shards"
        return Path(self.shards_dir) / fingerprint("validation shards", str(run_dir))[:16]

    def _encode_shares(self, trainer: L.Trainer, pl_module: L.LightningModule, collection: Collection) -> CorpusShards:
        """Rank r encodes shards r, r + world, ... into the shared folder; every rank waits for all of them."""
        strategy, rank, world = trainer.strategy, trainer.global_rank, trainer.world_size
        root = Path(strategy.broadcast(str(self.shards_root(trainer)), src=0))
        folder = root / f"step{trainer.global_step}"
        docids = corpus_ids(collection.corpus)
        shards = None
        if trainer.is_global_zero:
            shutil.rmtree(root, ignore_errors=True)  # what a killed epoch of this run left: other weights
            shards = CorpusShards(docids, self.shard_size, folder)  # writes the manifest, once
        strategy.barrier("validation shards folder")
        if shards is None:  # the other ranks check the manifest rank 0 wrote
            shards = CorpusShards(docids, self.shard_size, folder)
        encode = self.index.doc_encoder(pl_module, collection, self.bm25)
        mine = range(rank, len(shards), world)
        shards.encode_into(encode, tqdm(mine, desc=f"[validation] rank {rank} encodes {len(mine)} of {len(shards)} "
                                        "shards", disable=not trainer.is_global_zero), rank)  # fmt: skip
        strategy.barrier("validation shards written")
        self._folder = folder
        return shards

    def on_validation_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: object, batch: list[str], batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        """Retrieve for a batch of this rank's validation query ids and add their rankings to the metrics."""
        datamodule = trainer.datamodule
        queries = datamodule.collection.queries[datamodule.val_split]
        qrels = datamodule.collection.qrels[datamodule.val_split]
        with encoding_precision(trainer.precision_plugin, pl_module):
            run = self._retriever.search({q: queries[q] for q in batch}, pl_module.val_k)
        self._metrics.update(run, {q: qrels[q] for q in batch}, datamodule.val_numbers)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Log MRR@10 and R@val_k over every rank's queries; remove the shared shards."""
        for name, value in self._metrics.compute().items():  # gathers every rank's rankings: the same on all
            pl_module.log(f"val/{name}", value, prog_bar=name == "MRR@10", sync_dist=True)
        self._retriever, self._metrics = None, None
        if self._folder is not None:
            trainer.strategy.barrier("validation searched")
            if trainer.is_global_zero:
                shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None
