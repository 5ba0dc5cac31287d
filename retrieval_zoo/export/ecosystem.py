"""The files that let sentence-transformers load an exported folder without this package.

The folder is :mod:`retrieval_zoo.export.folder`'s.

A method whose vectors are its encoder's pooled hidden states (the dense reference, CLEAR's embedding, RoC's [CLS]
side: :class:`~retrieval_zoo.methods.dense.DenseBiEncoder`'s own ``encode_query`` / ``encode_doc``) loads as a
``SentenceTransformer``: a ``Transformer`` module over the encoder's subfolder, a ``Pooling`` module with the
method's pooling (mean over real tokens, or [CLS]), the markers as prompts (``"<QRY> "``: the encoder prefixes a
marker and a space) and dot-product similarity. SPLADE's term weights alone (``dlr_splade``, delade-dhr.md Eq. 20)
load as a ``SparseEncoder``: the ``Transformer`` in its fill-mask task and ``SpladePooling`` (max, log(1 + ReLU)), and
so do CSurF's expansion weights w_t, with a pooling module shipped in the folder that leaves the special tokens out
(``trust_remote_code=True``).
Each side keeps its length (``query_length``, ``document_length``: ``encode_query`` / ``encode_document`` cut
texts where the method does). Other methods have no stock equivalent and load with ``retrieval_zoo.load``
(:func:`retrieval_zoo.export.exported.load`): DeLADE's Eq. 23 activation, CSurF's CSF vectors, RoC's BM25 projection
beside the [CLS] vector.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from retrieval_zoo.cache import write_json
from retrieval_zoo.encoding.encoder import Encoder
from retrieval_zoo.methods.csurf import CSurF
from retrieval_zoo.methods.dense import DenseBiEncoder
from retrieval_zoo.methods.dhr_fusion import DhrFusion

PROMPT_NAMES = {"query": "query", "doc": "document"}  # the encoder's sides → sentence-transformers' prompt names
TRANSFORMER = "sentence_transformers.base.modules.transformer.Transformer"
POOLING = "sentence_transformers.sentence_transformer.modules.pooling.Pooling"
SPLADE_POOLING = "sentence_transformers.sparse_encoder.modules.splade_pooling.SpladePooling"
MODELING_CSURF = (
    Path(__file__).resolve().parents[1] / "hub_modules" / "modeling_csurf.py"
)  # copied, never imported here


def is_pooled_dense(model: torch.nn.Module) -> bool:
    """Whether ``model``'s vectors are its encoder's pooled hidden states, as a ``SentenceTransformer`` computes."""
    kind = type(model)
    return (isinstance(model, DenseBiEncoder) and kind.encode_query is DenseBiEncoder.encode_query
            and kind.encode_doc is DenseBiEncoder.encode_doc)  # fmt: skip


def is_splade(model: torch.nn.Module) -> bool:
    """Whether ``model`` is SPLADE's term weights alone (``dlr_splade``), as a ``SparseEncoder`` computes them."""
    return isinstance(model, DhrFusion) and model.lexical == "splade" and model.dense is None


def is_csurf_expansion(model: torch.nn.Module) -> bool:
    """Whether ``model`` is CSurF whose term weights are its expansion weights w_t (its bags hold the expansions)."""
    return isinstance(model, CSurF) and model.bags in ("both", "expansion")


def write_modules(folder: Path, modules: dict[str, str], model_type: str, prompts: dict[str, str]) -> None:
    """``modules.json`` (module folder → type, in order) and ``config_sentence_transformers.json``."""
    listed = [{"idx": i, "name": str(i), "path": path, "type": kind} for i, (path, kind) in enumerate(modules.items())]
    write_json(folder / "modules.json", listed)
    config = {"model_type": model_type, "prompts": prompts, "default_prompt_name": None, "similarity_fn_name": "dot"}
    write_json(folder / "config_sentence_transformers.json", config)


def write_transformer(encoder: Encoder, folder: Path, task: str, output: str) -> None:
    """The encoder's ``sentence_bert_config.json``: its task, and its query and document lengths."""
    write_json(folder / "sentence_bert_config.json", {
        "transformer_task": task, "modality_config": {"text": {"method": "forward", "method_output_name": output}},
        "module_output_name": "token_embeddings", "query_length": encoder.max_length["query"],
        "document_length": encoder.max_length["doc"],
    })  # fmt: skip


def write_sentence_transformers(encoder: Encoder, folder: Path, subfolder: str) -> None:
    """The files that make ``folder`` a ``SentenceTransformer`` (module docstring)."""
    write_transformer(encoder, folder / subfolder, "feature-extraction", "last_hidden_state")
    pooling = {"embedding_dimension": encoder.hidden_size, "pooling_mode": encoder.pooling, "include_prompt": True}
    write_json(folder / "1_Pooling" / "config.json", pooling)
    prompts = {PROMPT_NAMES[side]: f"{marker} " for side, marker in encoder.markers.items()}
    write_modules(folder, {subfolder: TRANSFORMER, "1_Pooling": POOLING}, "SentenceTransformer", prompts)


def write_sparse_encoder(encoder: Encoder, folder: Path, subfolder: str, csurf: bool = False) -> None:
    """The files that make ``folder`` a ``SparseEncoder``: log(1 + ReLU) of the MLM logits, max-pooled (Eq. 20).

    With ``csurf``, CSurF's expansion weights: the special tokens are not sources (csurf.md §3.2), which
    :mod:`retrieval_zoo.hub_modules.modeling_csurf`, copied into the folder, adds to ``SpladePooling`` (loaded with
    ``trust_remote_code=True``).
    """
    write_transformer(encoder, folder / subfolder, "fill-mask", "logits")
    # sentence-transformers' "relu" is SPLADE's log(1 + ReLU(x)); its "log1p_relu" takes log(1 + ·) once more
    pooling = {"pooling_strategy": "max", "activation_function": "relu", "embedding_dimension": encoder.vocab_size}
    name, kind = "1_SpladePooling", SPLADE_POOLING
    if csurf:
        shutil.copy(MODELING_CSURF, folder / "modeling_csurf.py")
        pooling["special_ids"] = sorted(encoder.tokenizer.all_special_ids)
        name, kind = "1_CsurfPooling", "modeling_csurf.CsurfPooling"
    write_json(folder / name / "config.json", pooling)
    prompts = {PROMPT_NAMES[side]: f"{marker} " for side, marker in encoder.markers.items()}
    write_modules(folder, {subfolder: TRANSFORMER, name: kind}, "SparseEncoder", prompts)
