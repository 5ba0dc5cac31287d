"""Corpus encoding as Lightning predict: each process encodes its share of the shards, on any number of devices.

``trainer.predict`` runs under the trainer's strategy, so ``trainer=ddp`` (or ``trainer.strategy=ddp
trainer.devices=2`` on CPUs) encodes the corpus on every device: rank r takes the missing shards r, r + world, ...,
and a prediction writer stores each shard as soon as it is encoded (:class:`retrieval_zoo.index.shards.CorpusShards`).
The shard files live under a folder named by a hash of the model's weights, its encoding settings, the corpus
files and the shard size, so a killed encoding resumes with the shards it had not finished, and retrieval-time
variants of one model (DLR slicing, λ, pruning) skip the encoder altogether.
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
from retrieval_zoo.index.shards import CorpusShards, Payload
from retrieval_zoo.methods.base import RetrievalMethod


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
        method: The method whose :meth:`RetrievalMethod.encode_corpus_shard` encodes documents.
        shards: Where the shards go.
        corpus: docid → text.
        digest: :func:`weights_digest` of ``method``.
    """

    def __init__(self, method: RetrievalMethod, shards: CorpusShards, corpus: dict[str, str], digest: str) -> None:
        super().__init__()
        self.method, self.shards, self.corpus, self.digest = method, shards, corpus, digest

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
        return self.method.encode_corpus_shard([self.corpus[d] for d in self.shards.shard_docids(int(shard[0]))])


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
    collection: Collection,
    make_trainer: Callable[..., L.Trainer],
    shard_size: int,
    cache_dir: str | Path | None = None,
) -> tuple[CorpusShards | None, bool]:
    """Encode ``collection``'s corpus with ``method`` into cached shards, by Lightning predict.

    Args:
        method: The (trained) method; one without :attr:`RetrievalMethod.encodes_corpus` (BM25, the untrained
            fusions) indexes without a corpus encoder of its own, and nothing is encoded.
        collection: Whose corpus to encode.
        make_trainer: Builds the predict trainer from keyword arguments (the run's ``trainer`` config, partially
            applied): its accelerator, devices and strategy decide where encoding runs.
        shard_size: Documents per shard.
        cache_dir: Cache root; default :func:`retrieval_zoo.cache.cache_root`.

    Returns:
        The shards (None when the method does not encode its corpus), and whether this process is rank 0: under
        DDP, the other ranks have done their share and leave the rest to rank 0.
    """
    if not method.encodes_corpus:
        return None, rank_zero_only.rank == 0
    digest = weights_digest(method)
    key = fingerprint("corpus-shards", digest, collection.corpus_fingerprint, method.encoding_settings(), shard_size)
    folder = Path(cache_dir or cache_root()) / "encoded" / key
    docids = list(collection.corpus)
    shards = CorpusShards(docids, shard_size, folder)
    done = len(shards) - len(shards.missing())
    if done == len(shards):
        print(f"[encode] all {len(shards)} corpus shards from the cache: {folder}")
        return shards, rank_zero_only.rank == 0
    print(f"[encode] {done} of {len(shards)} corpus shards already in {folder}; encoding the rest")
    trainer = make_trainer(logger=False, callbacks=[ShardWriter(shards)], enable_checkpointing=False,
                           use_distributed_sampler=False, enable_model_summary=False)  # fmt: skip
    trainer.predict(ShardEncoding(method, shards, collection.corpus, digest), return_predictions=False)
    if trainer.is_global_zero and shards.missing():
        raise RuntimeError(f"{folder}: shards {shards.missing()} are still missing after encoding")
    return shards, trainer.is_global_zero
