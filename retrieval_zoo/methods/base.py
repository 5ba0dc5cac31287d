"""The shared LightningModule under every method.

A method subclasses :class:`RetrievalMethod`, receives its :class:`retrieval_zoo.encoder.Encoder` from the config,
and supplies ``encode_query``, ``encode_doc``, ``score``, the named ``losses`` it sums, and the representations it
produces (``representations``; :mod:`retrieval_zoo.index.representations`), which decide the indexes that search it.
The base sums and logs the losses and builds AdamW with a linear warm-up. Validation is first-stage retrieval
through the run's index on a dev subset (:class:`retrieval_zoo.validation.RetrievalValidation`), so checkpoints are
selected on retrieval quality.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar

import lightning as L
import numpy as np
import torch

from retrieval_zoo.batching import QueryPrep, Texts
from retrieval_zoo.cache import fingerprint
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.encoder import Encoder
from retrieval_zoo.loggers import log_histogram
from retrieval_zoo.resume import RNG_KEY, RandomState
from retrieval_zoo.tokens import CachedTexts, TextTokenizer, TokenCache, TokenizedBatch
from retrieval_zoo.training.datamodule import TrainBatch

QUANTILES = (0.1, 0.5, 0.9)


class Optim:
    """AdamW with linear warm-up, then a decay, as a pure function of the global step.

    Args:
        lr: Peak learning rate.
        weight_decay: AdamW decoupled weight decay.
        warmup_steps: Steps of linear warm-up from 0.
        decay: ``"constant"`` after warm-up, ``"linear"`` to 0 at the last training step, or ``"halve"``: halved at
            the start of every epoch after the first ``halve_after_epochs`` (RoC §4.1).
        betas: Adam betas.
        halve_after_epochs: Full-rate epochs before halving starts (``decay="halve"``).
    """

    def __init__(
        self,
        lr: float = 1e-3,
        weight_decay: float = 0.01,
        warmup_steps: int = 50,
        decay: str = "linear",
        betas: tuple[float, float] = (0.9, 0.999),
        halve_after_epochs: int = 3,
    ) -> None:
        if decay not in ("constant", "linear", "halve"):
            raise ValueError(f"optim.decay must be 'constant', 'linear' or 'halve', not {decay!r}")
        self.lr, self.weight_decay, self.warmup_steps, self.decay = lr, weight_decay, warmup_steps, decay
        self.betas, self.halve_after_epochs = (float(betas[0]), float(betas[1])), halve_after_epochs

    def factor(self, step: int, total_steps: int, steps_per_epoch: int | None = None) -> float:
        """Learning-rate multiplier at global step ``step`` of ``total_steps``."""
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        if self.decay == "linear" and total_steps > self.warmup_steps:
            return max(0.0, (total_steps - step) / (total_steps - self.warmup_steps))
        if self.decay == "halve":
            if not steps_per_epoch:
                raise ValueError("optim.decay='halve' needs the number of steps per epoch")
            return 0.5 ** max(0, step // steps_per_epoch + 1 - self.halve_after_epochs)
        return 1.0


class RetrievalMethod(L.LightningModule):
    """Base of every method.

    Class attributes:
        needs: Optional batch fields the method reads (see :data:`retrieval_zoo.training.datamodule.FIELDS`).
        trainable: False for methods without parameters (BM25, off-the-shelf term vectors): the apps skip training,
            and indexes encode their corpus on demand.
        representations: What the method produces for an index to search, its own first (``vectors``,
            ``term_weights``, ``csf_bags``, ``lexical_semantic``, ``bm25``; :mod:`retrieval_zoo.index.representations`).

    Args:
        encoder: The text encoder (None for methods without one, e.g. BM25).
        optim: Optimiser settings.
        val_k: Depth of validation retrieval; R@val_k is logged beside MRR@10.
    """

    needs: frozenset[str] = frozenset()  # a class's default; a method whose fields depend on its settings sets its own
    trainable: ClassVar[bool] = True
    representations: ClassVar[tuple[str, ...]] = ()

    def __init__(self, encoder: Encoder | None = None, optim: Optim | None = None, val_k: int = 100) -> None:
        super().__init__()
        self.encoder = encoder
        self.optim, self.val_k = optim or Optim(), val_k
        self._random_state = RandomState()

    @property
    def encode_batch_size(self) -> int:
        """Texts per forward pass when an index encodes many."""
        if self.encoder is None:
            raise TypeError(f"{type(self).__name__} has no encoder: it encodes nothing")
        return self.encoder.batch_size

    # --- what a method supplies -------------------------------------------------------------------------
    def losses(self, batch: TrainBatch) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Named losses to sum, and named diagnostics to log, for one batch."""
        raise NotImplementedError

    def text_tokenizer(self) -> TextTokenizer | None:
        """What the DataLoader tokenizes training batches with (the encoder's), or None for a method without one."""
        return self.encoder.text_tokenizer() if self.encoder is not None else None

    def term_keys(self) -> Callable[[list[str]], np.ndarray] | None:
        """Terms → keys under which the DataModule stores BM25 vectors as tensors (RoC's projection), or None."""
        return None

    def corpus_texts(self, collection: Collection) -> Callable[[list[str]], Texts]:
        """Document ids → what encoding reads of them: their cached tokens, or texts for a method without a tokenizer.

        The corpus is tokenized once (:class:`~retrieval_zoo.tokens.TokenCache`, shared with training's batches).
        """
        corpus, tokenizer = collection.corpus, self.text_tokenizer()
        if tokenizer is None:
            return lambda ids: [corpus[d] for d in ids]
        cache = TokenCache.build(corpus, tokenizer, "doc", collection.corpus_fingerprint)
        return lambda ids: CachedTexts(cache, ids)

    def encoders(self) -> list[Encoder]:
        """The method's text encoders (a fusion's SPLADE and dense ones), in module order."""
        return [module for module in self.modules() if isinstance(module, Encoder)]

    def cache_queries(self, queries: Mapping[str, str]) -> None:
        """Tokenize a query set (id → text) once for every encoder of the method, which then reads their tokens.

        Evaluation and validation call it before they search, so query encoding reads a token cache as training does.
        """
        content = fingerprint(sorted(queries.items()))
        for encoder in self.encoders():
            encoder.cache_texts(queries, "query", content)

    def query_lengths(self, texts: list[str]) -> list[int] | None:
        """Each query's length in tokens, from the token cache of :meth:`cache_queries`.

        Query batches are ordered by it, as corpus batches are; None for texts not cached (or a method without an
        encoder): they go by characters.
        """
        encoders = self.encoders()
        return encoders[0].token_lengths(texts, "query") if encoders else None

    def prepare_queries(self, texts: list[str]) -> TokenizedBatch:
        """A batch of query texts with each encoder's tokens for them: from :meth:`cache_queries`'s cache, or tokenized.

        Retrievers run it where batches are prepared ahead (:func:`retrieval_zoo.batching.prepared_batches`: in
        DataLoader workers beside an accelerator), so a query typed at search time is tokenized there, not in the step.
        """
        return TokenizedBatch(texts, {encoder.token_key: encoder.texts_tokens(texts, "query")
                                      for encoder in self.encoders()})  # fmt: skip

    def query_prep(self) -> QueryPrep:
        """How retrievers batch this method's queries: ordered by their length in tokens, tokens prepared ahead."""
        return QueryPrep(self.query_lengths, self.prepare_queries)

    def encoding_settings(self) -> dict:
        """What besides the weights changes the method's encoding of a corpus (hashed into its cache key)."""
        doc_max_length = self.encoder.max_length["doc"] if self.encoder is not None else None
        return {"method": type(self).__name__, "doc_max_length": doc_max_length}

    # --- shared training ----------------------------------------------------------------------------------
    def _generators(self) -> dict[str, torch.Generator]:
        """The method's own random generators (e.g. RoC's masking), saved and restored with checkpoints."""
        return {name: value for name, value in vars(self).items() if isinstance(value, torch.Generator)}

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Save the random states, so a resumed run draws what an uninterrupted one would."""
        checkpoint[RNG_KEY] = RandomState.capture(self._generators())

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """Keep the saved random states for the first resumed step."""
        self._random_state.restore_later(checkpoint.get(RNG_KEY))

    def on_train_batch_start(self, batch: TrainBatch, batch_idx: int) -> None:
        """On the first step after a resume, restore the random states saved with the checkpoint."""
        self._random_state.apply(self._generators())

    def training_step(self, batch: TrainBatch, batch_idx: int) -> torch.Tensor:
        """Sum the method's named losses; log each as ``train/loss/<name>`` and diagnostics as ``train/<name>``."""
        losses, diagnostics = self.losses(batch)
        total = torch.stack(list(losses.values())).sum()
        size = len(batch.qids)
        for name, value in losses.items():  # under DDP, the mean over ranks: the global batch's loss
            self.log(f"train/loss/{name}", value, batch_size=size, sync_dist=True)
        for name, value in diagnostics.items():
            if value.numel() == 1:
                self.log(f"train/{name}", value, batch_size=size)
            else:
                self._log_distribution(f"train/{name}", value.detach(), size)
        self.log("train/loss", total, prog_bar=True, batch_size=size, sync_dist=True)
        return total

    def _log_distribution(self, name: str, values: torch.Tensor, batch_size: int) -> None:
        """A non-scalar diagnostic: mean, std and quantiles as scalars, and a histogram where the logger draws one."""
        values = values.float().flatten()
        self.log(f"{name}/mean", values.mean(), batch_size=batch_size)
        self.log(f"{name}/std", values.std() if values.numel() > 1 else values.new_zeros(()), batch_size=batch_size)
        for q, value in zip(QUANTILES, torch.quantile(values, values.new_tensor(QUANTILES)), strict=True):
            self.log(f"{name}/p{round(q * 100)}", value, batch_size=batch_size)
        if self.trainer.global_step % self.trainer.log_every_n_steps == 0:  # type: ignore[attr-defined]  # Trainer's property
            log_histogram(self.loggers, name, values, self.trainer.global_step)

    def configure_optimizers(self) -> dict:  # type: ignore[override]  # Lightning's OptimizerLRSchedulerConfig dict
        """AdamW (no decay on biases and LayerNorm) with the step-wise schedule of :class:`Optim`."""
        decay: list[torch.nn.Parameter] = []
        no_decay: list[torch.nn.Parameter] = []
        for name, param in self.named_parameters():
            if param.requires_grad:
                (no_decay if param.ndim < 2 or "LayerNorm" in name else decay).append(param)
        groups = [{"params": decay, "weight_decay": self.optim.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        optimizer = torch.optim.AdamW(groups, lr=self.optim.lr, betas=self.optim.betas)
        total = int(self.trainer.estimated_stepping_batches)
        epochs = self.trainer.max_epochs if self.trainer.max_epochs and self.trainer.max_epochs > 0 else None
        per_epoch = max(1, total // epochs) if epochs else None
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: self.optim.factor(step, total, per_epoch))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    # --- validation: retrieval through the run's index (retrieval_zoo.validation.RetrievalValidation) ----------
    def validation_step(self, qids: list[str], batch_idx: int) -> None:
        """Nothing here: the validation callback retrieves for the batch's query ids through the run's index."""
