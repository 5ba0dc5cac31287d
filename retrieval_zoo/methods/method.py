"""The shared LightningModule under every method.

A method subclasses :class:`RetrievalMethod` (:class:`BiEncoder` when it encodes queries and documents apart and
scores their pairs), receives its :class:`retrieval_zoo.encoding.encoder.Encoder` from the config, and supplies
``encode_query``, ``encode_doc``, ``score``, the named ``losses`` it sums, the optional batch fields it ``needs``, and
the representations it produces (``representations``; :mod:`retrieval_zoo.index.representations`), which decide the
indexes that search it.
The base sums and logs the losses and builds AdamW with a linear warm-up. Validation is first-stage retrieval
through the run's index on a dev subset (:class:`retrieval_zoo.training.validation.RetrievalValidation`), so
checkpoints are selected on retrieval quality.
"""

from __future__ import annotations

from typing import ClassVar, Generic, TypeVar

import lightning as L
import torch

from retrieval_zoo.encoding.encoder import Encoder
from retrieval_zoo.encoding.tokens import Tokens
from retrieval_zoo.loggers import log_histogram
from retrieval_zoo.methods.texts import EncoderTexts
from retrieval_zoo.resume import RNG_KEY, RandomState
from retrieval_zoo.training.datamodule import TrainBatch

QUANTILES = (0.1, 0.5, 0.9)
R = TypeVar("R")  # a bi-encoder's representation of a text (vectors, CSF bags)


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


class RetrievalMethod(EncoderTexts, L.LightningModule):
    """Base of every method: its losses and how they are trained.

    What the data and indexes read of its encoders is :class:`~retrieval_zoo.methods.texts.EncoderTexts`.

    Class attributes:
        trainable: False for methods without parameters (BM25, off-the-shelf term vectors): the apps skip training,
            and indexes encode their corpus on demand.
        representations: What the method produces for an index to search, its own first (``vectors``,
            ``term_weights``, ``csf_bags``, ``lexical_semantic``, ``bm25``; :mod:`retrieval_zoo.index.representations`).

    Args:
        encoder: The text encoder (None for methods without one, e.g. BM25).
        optim: Optimiser settings.
        val_k: Depth of validation retrieval; R@val_k is logged beside MRR@10.
    """

    trainable: ClassVar[bool] = True
    representations: ClassVar[tuple[str, ...]] = ()

    def __init__(self, encoder: Encoder | None = None, optim: Optim | None = None, val_k: int = 100) -> None:
        super().__init__()
        self.encoder = encoder
        self.optim, self.val_k = optim or Optim(), val_k
        self._random_state = RandomState()

    @property
    def needs(self) -> frozenset[str]:
        """Optional batch fields the method reads (``training.datamodule.FIELDS``), from its settings."""
        return frozenset()

    # --- what a method supplies -------------------------------------------------------------------------
    def losses(self, batch: TrainBatch) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Named losses to sum, and named diagnostics to log, for one batch."""
        raise NotImplementedError

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

    # --- validation: retrieval through the run's index (training.validation.RetrievalValidation) ---------------------
    def validation_step(self, qids: list[str], batch_idx: int) -> None:
        """Nothing here: the validation callback retrieves for the batch's query ids through the run's index."""


class BiEncoder(RetrievalMethod, Generic[R]):
    """A method that encodes queries and documents apart into representations of type ``R`` and scores their pairs.

    Dense vectors (``R`` = tensor: DPR, CLEAR, RoC, DeLADE) and CSurF's bags (``R`` = :class:`CsfBags`).
    """

    def encode_query(self, texts: list[str] | Tokens) -> R:
        """(B,) query texts, or their tokens → their representation."""
        raise NotImplementedError

    def encode_doc(self, texts: list[str] | Tokens) -> R:
        """(N,) document texts, or their tokens → their representation."""
        raise NotImplementedError

    def score(self, queries: R, docs: R) -> torch.Tensor:
        """Every query's score with every document: B and N representations → (B, N)."""
        raise NotImplementedError
