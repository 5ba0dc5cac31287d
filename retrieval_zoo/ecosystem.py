"""The files that let sentence-transformers load an exported folder (:mod:`retrieval_zoo.export`) without this package.

A method whose vectors are its encoder's pooled hidden states (the dense reference, CLEAR's embedding, RoC's [CLS]
side: :class:`~retrieval_zoo.methods.dense.DenseBiEncoder`'s own ``encode_query`` / ``encode_doc``) loads as a
``SentenceTransformer``: a ``Transformer`` module over the encoder's subfolder, a ``Pooling`` module with the
method's pooling (mean over real tokens, or [CLS]), and the markers as prompts (``"<QRY> "``: the encoder prefixes a
marker and a space), scored by dot product. One ``max_seq_length`` serves both sides: the document side's (queries
longer than the method's query length are cut later there than here). Other methods have no such equivalent
(DeLADE's Eq. 23 activation, CSurF's CSF vectors, RoC's BM25 projection beside the [CLS] vector) and load with
:func:`retrieval_zoo.exported.load`.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from retrieval_zoo.encoder import Encoder
from retrieval_zoo.methods.dense import DenseBiEncoder

PROMPT_NAMES = {"query": "query", "doc": "document"}  # the encoder's sides → sentence-transformers' prompt names


def is_pooled_dense(model: torch.nn.Module) -> bool:
    """Whether ``model``'s vectors are its encoder's pooled hidden states, as a ``SentenceTransformer`` computes."""
    kind = type(model)
    return (isinstance(model, DenseBiEncoder) and kind.encode_query is DenseBiEncoder.encode_query
            and kind.encode_doc is DenseBiEncoder.encode_doc)  # fmt: skip


def write_json(path: Path, content: dict) -> None:
    """``content`` as indented JSON at ``path`` (its folder made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content, indent=2) + "\n")


def write_sentence_transformers(encoder: Encoder, folder: Path, subfolder: str) -> None:
    """``modules.json``, the pooling and prompts that make ``folder`` a ``SentenceTransformer`` (module docstring)."""
    kinds = {subfolder: "Transformer", "1_Pooling": "Pooling"}
    modules = [{"idx": i, "name": str(i), "path": path, "type": f"sentence_transformers.models.{kind}"}
               for i, (path, kind) in enumerate(kinds.items())]  # fmt: skip
    (folder / "modules.json").write_text(json.dumps(modules, indent=2) + "\n")
    write_json(folder / subfolder / "sentence_bert_config.json",
               {"max_seq_length": encoder.max_length["doc"], "do_lower_case": False})  # fmt: skip
    write_json(folder / "1_Pooling" / "config.json", {
        "word_embedding_dimension": encoder.hidden_size, "pooling_mode_cls_token": encoder.pooling == "cls",
        "pooling_mode_mean_tokens": encoder.pooling == "mean", "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False, "include_prompt": True,
    })  # fmt: skip
    prompts = {PROMPT_NAMES[side]: f"{marker} " for side, marker in encoder.markers.items()}
    write_json(folder / "config_sentence_transformers.json",
               {"model_type": "SentenceTransformer", "prompts": prompts, "default_prompt_name": None,
                "similarity_fn_name": "dot"})  # fmt: skip
