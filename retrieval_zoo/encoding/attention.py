"""SDPA attention that never asks the GPU whether a batch has padding: no host synchronisation per forward.

transformers' ``sdpa`` attention tests ``padding_mask.all()`` on every forward, to drop an all-ones mask and reach
the flash kernel: on CUDA that reads a device value on the host, so every backbone call stops the CPU until the GPU
catches up (two per training step of a siamese method). :data:`SDPA_MASKED` is the same attention with the padding
mask always built, which the memory-efficient SDPA kernel takes; the backbones switch to it when they load.
"""

from __future__ import annotations

from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

SDPA_MASKED = "sdpa_masked"


def _always_masked(*args: object, allow_is_bidirectional_skip: bool = False, **kwargs: object) -> object:
    """:func:`sdpa_mask` that never skips the mask (the skip is what reads the device)."""
    return sdpa_mask(*args, allow_is_bidirectional_skip=False, **kwargs)


AttentionInterface.register(SDPA_MASKED, sdpa_attention_forward)
AttentionMaskInterface.register(SDPA_MASKED, _always_masked)


def without_host_sync(model: PreTrainedModel) -> PreTrainedModel:
    """``model`` with its SDPA attention switched to :data:`SDPA_MASKED` (eager or flash attention stay as they are)."""
    if model.config._attn_implementation == "sdpa":
        model.set_attn_implementation(SDPA_MASKED)
    return model
