"""The precision a run's trainer computes in, for the encodings that run outside Lightning's steps.

Lightning runs its training, validation and predict steps inside its precision plugin's context (autocast for
``16-mixed`` and ``bf16-mixed``), with the model cast for the ``-true`` precisions, but not its callback hooks or
what a program does after ``predict``. Validation indexes the corpus and searches its queries in hooks; an
evaluation, a search, :class:`retrieval_zoo.Retriever` and the CIFF export encode their queries (and an index that
encodes on demand, its corpus) after the corpus's predict. They run inside :func:`encoding_precision` with the run
trainer's plugin, and each encoding call inside :func:`encoding`, so under ``trainer=gpu`` (``bf16-mixed``) every text
is encoded as the training batches and the corpus are, not the queries in float32 against documents in bfloat16.
Scoring stays outside: an index's products of query and document representations run in float32 whatever the
precision (autocast would take them to bfloat16, and a CPU has no bfloat16 sparse product). Under ``32-true``, the
CPU default, nothing changes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar

import lightning as L
import torch
from lightning.pytorch.plugins import Precision

# where Lightning says which devices it found and that it autocasts: the run's own trainers have said it already
LIGHTNING_INFO = "lightning.pytorch.utilities.rank_zero"

_PRECISION: ContextVar[Precision | None] = ContextVar("encoding precision", default=None)


def trainer_precision(make_trainer: Callable[..., L.Trainer]) -> Precision:
    """The precision plugin of the trainer ``make_trainer`` builds (the run's ``trainer`` config, partially applied).

    The trainer is built without a logger, checkpoints or a progress bar, and without its notices; nothing runs.
    """
    notices = logging.getLogger(LIGHTNING_INFO)
    level = notices.level
    notices.setLevel(logging.WARNING)
    try:
        trainer = make_trainer(logger=False, enable_checkpointing=False, enable_model_summary=False,
                               enable_progress_bar=False)  # fmt: skip
    finally:
        notices.setLevel(level)
    return trainer.precision_plugin


@contextmanager
def encoding_precision(precision: Precision, module: torch.nn.Module) -> Iterator[None]:
    """Within: each encoding call (:func:`encoding`) in ``precision``'s forward context, ``module`` cast as it casts.

    Args:
        precision: The run trainer's plugin (:func:`trainer_precision`, or a fitting trainer's ``precision_plugin``).
        module: The method; the ``-true`` precisions cast it in place, as Lightning does before its steps.
    """
    precision.convert_module(module)
    token = _PRECISION.set(precision)
    try:
        yield
    finally:
        _PRECISION.reset(token)


def encoding() -> AbstractContextManager:
    """The context of one call of a model's encoder: the run trainer's inside :func:`encoding_precision`, else none.

    Around the encoder call alone, not what is done with its output (scoring, listing), which stays in float32.
    """
    precision = _PRECISION.get()
    return nullcontext() if precision is None else precision.forward_context()
