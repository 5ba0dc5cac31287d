"""Corpus encoding for an index as Lightning predict: each process encodes its share of the shards, on any devices.

``trainer.predict`` runs under the trainer's strategy, so ``trainer=ddp`` (or ``trainer.strategy=ddp
trainer.devices=2`` on CPUs) encodes the corpus on every device: rank r takes the missing shards r, r + world, ...,
and a prediction writer stores each shard as soon as it is encoded (:class:`retrieval_zoo.index.shards.CorpusShards`).
A shard holds what the run's index needs of its documents (:meth:`retrieval_zoo.index.index.Index.doc_encoder`:
vectors, term weights or bags of CSFs). The shard files live under a folder named by a hash of the model's weights,
its encoding settings, the representation, the trainer's precision (``bf16-mixed`` vectors are not ``32-true``
ones), the corpus files and the shard size, so a killed encoding resumes with
the shards it had not finished, and retrieval-time variants of one model (DLR slicing, λ, pruning) skip the encoder
altogether.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning.pytorch.utilities import rank_zero_only
from torch.utils.data import DataLoader

from retrieval_zoo.cache import cache_root, fingerprint
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.corpus_store import corpus_ids
from retrieval_zoo.encoding.precision import trainer_precision
from retrieval_zoo.index.index import Index
from retrieval_zoo.index.shards import CorpusShards, Payload, ShardEncoder
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.methods.method import RetrievalMethod


def weights_digest(module: torch.nn.Module) -> str:
    """SHA-256 of a module's parameters and buffers, by name, in a stable order."""
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


class ShardEncoding(L.LightningModule):
    """Wraps a method for ``trainer.predict``: one predict step encodes one shard of the corpus.

    Args:
        method: The method (its weights move to the predict device with this module).
        shards: Where the shards go.
        encode: Document ids → what the index needs of them (:meth:`Index.doc_encoder`).
        digest: :func:`weights_digest` of ``method``.
    """

    def __init__(self, method: RetrievalMethod, shards: CorpusShards, encode: ShardEncoder, digest: str) -> None:
        super().__init__()
        self.method, self.shards, self.encode, self.digest = method, shards, encode, digest

    def predict_dataloader(self) -> DataLoader:
        """This rank's share of the shards rank 0 found missing (one list for all, taken before any is written).

        Every rank encodes with rank 0's weights into rank 0's folder: a rank whose weights differ (an untrained model
        initialised without a common seed) receives rank 0's.
        """
        strategy, rank_zero = self.trainer.strategy, self.trainer.is_global_zero
        if strategy.reduce_boolean_decision(self.digest != strategy.broadcast(self.digest, src=0), all=False):
            state = strategy.broadcast(self.method.state_dict() if rank_zero else None, src=0)
            self.method.load_state_dict(state)
        self.shards.folder = strategy.broadcast(self.shards.folder, src=0)
        missing = strategy.broadcast(self.shards.missing() if rank_zero else None, src=0)
        return DataLoader(missing[self.trainer.global_rank :: self.trainer.world_size], batch_size=1)

    def predict_step(self, shard: torch.Tensor) -> Payload:
        """The encoding of the documents of the (1,) ``shard``."""
        return self.encode(self.shards.shard_docids(int(shard[0])))


class ShardWriter(BasePredictionWriter):
    """Writes each encoded shard as soon as its predict step ends; waits for every rank at the end."""

    def __init__(self, shards: CorpusShards) -> None:
        super().__init__(write_interval="batch")
        self.shards = shards

    def write_on_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        prediction: Payload,
        batch_indices: list[int] | None,
        batch: torch.Tensor,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        """Store the shard atomically, with the rank that encoded it."""
        self.shards.write(int(batch[0]), prediction, trainer.global_rank)

    def on_predict_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Every rank reads the shards after this: wait until all are written."""
        trainer.strategy.barrier("corpus shards written")


def encode_corpus(
    method: RetrievalMethod,
    index: Index,
    collection: Collection,
    bm25: BM25,
    make_trainer: Callable[..., L.Trainer],
    shard_size: int,
    cache_dir: str | Path | None = None,
) -> tuple[CorpusShards | None, bool]:
    """Encode ``collection``'s corpus with ``method``, as ``index`` needs it, into cached shards by Lightning predict.

    Args:
        method: The (trained) method.
        index: The run's index; where it does not encode ahead (:meth:`Index.encodes_corpus`: BM25, off-the-shelf
            term vectors) nothing is encoded here.
        collection: Whose corpus to encode.
        bm25: The run's BM25 (for indexes whose encoding reads it).
        make_trainer: Builds the predict trainer from keyword arguments (the run's ``trainer`` config, partially
            applied): its accelerator, devices and strategy decide where encoding runs.
        shard_size: Documents per shard.
        cache_dir: Cache root; default :func:`retrieval_zoo.cache.cache_root`.

    Returns:
        The shards (None when the method does not encode its corpus), and whether this process is rank 0: under
        DDP, the other ranks have done their share and leave the rest to rank 0.
    """
    if not index.encodes_corpus(method):
        return None, rank_zero_only.rank == 0
    digest = weights_digest(method)
    precision = trainer_precision(make_trainer).precision
    settings = method.encoding_settings() | {"representation": index.representation(method), "precision": precision}
    key = fingerprint("corpus-shards", digest, collection.corpus_fingerprint, settings, shard_size)
    folder = Path(cache_dir or cache_root()) / "encoded" / key
    docids = corpus_ids(collection.corpus)
    shards = CorpusShards(docids, shard_size, folder)
    done = len(shards) - len(shards.missing())
    if done == len(shards):
        print(f"[encode] all {len(shards)} corpus shards from the cache: {folder}")
        return shards, rank_zero_only.rank == 0
    print(f"[encode] {done} of {len(shards)} corpus shards already in {folder}; encoding the rest")
    encode = index.doc_encoder(method, collection, bm25)
    return shards, predict_shards(method, shards, encode, make_trainer, digest)


def predict_shards(
    method: RetrievalMethod,
    shards: CorpusShards,
    encode: ShardEncoder,
    make_trainer: Callable[..., L.Trainer],
    digest: str | None = None,
) -> bool:
    """Encode ``shards``' missing shards by Lightning predict, each written as soon as it is encoded.

    Args:
        method: The method whose weights encode.
        shards: Where the shards go (a folder).
        encode: Document ids → a shard's payload (:meth:`Index.doc_encoder`).
        make_trainer: Builds the predict trainer from keyword arguments.
        digest: :func:`weights_digest` of ``method``, when already taken.

    Returns:
        Whether this process is rank 0.
    """
    # every shard, whatever debug/ (fast_dev_run, limits) does to training
    trainer = make_trainer(logger=False, callbacks=[ShardWriter(shards)], enable_checkpointing=False,
                           use_distributed_sampler=False, enable_model_summary=False, fast_dev_run=False,
                           limit_predict_batches=1.0)  # fmt: skip
    module = ShardEncoding(method, shards, encode, digest or weights_digest(method))
    trainer.predict(module, return_predictions=False)
    if trainer.is_global_zero and shards.missing():
        raise RuntimeError(f"{shards.folder}: shards {shards.missing()} are still missing after encoding")
    return trainer.is_global_zero
