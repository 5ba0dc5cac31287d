"""Encodings outside Lightning's steps run in the run trainer's precision (bf16-mixed: CPU autocast here).

Validation's index and queries (callback hooks), an evaluation's queries (after the corpus's predict) and a loaded
``retrieval_zoo.Retriever``'s queries; the corpus cache and saved indexes are keyed by the precision.
"""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace

import lightning as L
import torch
from lightning.pytorch.plugins import MixedPrecision, Precision
from omegaconf import OmegaConf

from retrieval_zoo.encoding.precision import encoding_precision, trainer_precision
from retrieval_zoo.evaluation.pipeline import encode_then, saved_index
from retrieval_zoo.index.vectors.faiss import Faiss
from retrieval_zoo.methods.dense import DenseBiEncoder
from retrieval_zoo.search_api import Retriever
from retrieval_zoo.training.validation import RetrievalValidation
from tests.conftest import tiny_encoder

FP32 = partial(L.Trainer, accelerator="cpu", devices=1, enable_progress_bar=False)
BF16 = partial(FP32, precision="bf16-mixed")


class Recording(DenseBiEncoder):
    """The dense method, noting for each encoding call whether CPU autocast was on."""

    def __init__(self) -> None:
        super().__init__(tiny_encoder(batch_size=64))
        self.calls: list[tuple[str, bool]] = []

    def encode_query(self, texts):  # noqa: ANN001, ANN201
        self.calls.append(("query", torch.is_autocast_enabled("cpu")))
        return super().encode_query(texts)

    def encode_doc(self, texts):  # noqa: ANN001, ANN201
        self.calls.append(("doc", torch.is_autocast_enabled("cpu")))
        return super().encode_doc(texts)


def test_the_plugin_is_the_trainers() -> None:
    assert isinstance(trainer_precision(BF16), MixedPrecision) and trainer_precision(BF16).precision == "bf16-mixed"
    assert type(trainer_precision(FP32)) is Precision and trainer_precision(FP32).precision == "32-true"
    model = Recording()
    with encoding_precision(trainer_precision(FP32), model):
        assert not torch.is_autocast_enabled("cpu")
    with encoding_precision(trainer_precision(BF16), model):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    assert not torch.is_autocast_enabled("cpu")
    true_bf16 = partial(FP32, precision="bf16-true")
    with encoding_precision(trainer_precision(true_bf16), model):  # the -true precisions cast the model, as Lightning
        assert next(model.parameters()).dtype == torch.bfloat16


def test_validation_indexes_and_searches_in_the_trainers_precision(tiny, tiny_bm25) -> None:
    model = Recording().eval()
    qids = sorted(tiny.judged_queries("dev"))[:4]
    datamodule = SimpleNamespace(collection=tiny, val_split="dev", val_qids=qids,
                                 val_numbers={q: n for n, q in enumerate(qids)})  # fmt: skip
    trainer = SimpleNamespace(datamodule=datamodule, world_size=1, precision_plugin=MixedPrecision("bf16-mixed", "cpu"))
    validation = RetrievalValidation(Faiss(), tiny_bm25)
    with torch.no_grad():
        validation.on_validation_epoch_start(trainer, model)
        validation.on_validation_batch_end(trainer, model, None, qids, 0)
    assert {side for side, _ in model.calls} == {"doc", "query"}
    assert all(autocast for _, autocast in model.calls), model.calls


def test_an_evaluation_encodes_its_queries_as_its_corpus(tiny, tiny_bm25, tmp_path) -> None:
    model = Recording().eval()
    cfg = OmegaConf.create({"encode": {"shard_size": 400, "cache_dir": str(tmp_path)}})

    def then(shards):  # noqa: ANN001, ANN202
        model.calls.append(("after", torch.is_autocast_enabled("cpu")))
        return shards

    with torch.no_grad():
        bf16_shards = encode_then(cfg, model, Faiss(), tiny, tiny_bm25, BF16, then)
        assert model.calls and all(autocast for _, autocast in model.calls), model.calls  # predict, then the rest
        model.calls.clear()
        fp32_shards = encode_then(cfg, model, Faiss(), tiny, tiny_bm25, FP32, then)
    assert model.calls and not any(autocast for _, autocast in model.calls)  # encoded again: another cache entry
    assert bf16_shards.folder != fp32_shards.folder
    vectors = bf16_shards.read(0)["vectors"], fp32_shards.read(0)["vectors"]
    assert not torch.equal(*vectors)  # bfloat16 products: not float32's vectors, so never served for them


def test_saved_indexes_and_a_loaded_retriever_keep_the_precision(tiny, tmp_path) -> None:
    model = Recording().eval()
    cfg = OmegaConf.create({"index_dir": str(tmp_path), "method_name": "dense", "index_name": "faiss",
                            "index": {"_target_": "retrieval_zoo.index.vectors.faiss.Faiss"}})  # fmt: skip
    bf16, fp32 = (saved_index(cfg, model, tiny, trainer).identity for trainer in (BF16, FP32))
    assert bf16["encoding"]["precision"] == "bf16-mixed" and fp32["encoding"]["precision"] == "32-true"

    searcher = SimpleNamespace(search=lambda queries, k: {q: {"d": float(torch.is_autocast_enabled("cpu"))}
                                                          for q in queries})  # fmt: skip
    loaded = Retriever(cfg, model, tiny, searcher, {}, trainer_precision(BF16))
    assert loaded.search_batch({"q": "a query"}, 10) == {"q": {"d": 1.0}}
    assert Retriever(cfg, model, tiny, searcher, {}).search_batch({"q": "a query"}, 10) == {"q": {"d": 0.0}}
