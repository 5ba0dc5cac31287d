"""Encodings outside Lightning's steps run in the run trainer's precision (bf16-mixed: CPU autocast here).

Validation's index and queries (callback hooks), an evaluation's queries (after the corpus's predict) and a loaded
``retrieval_zoo.Retriever``'s queries; the corpus cache and saved indexes are keyed by the precision; the scoring
of every retriever family stays in float32.
"""

from __future__ import annotations

import math
from functools import partial
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from hydra.utils import instantiate
from lightning.pytorch.plugins import MixedPrecision, Precision
from omegaconf import OmegaConf

from benchmarks.common import small_bags
from retrieval_zoo.encoding.precision import encoding, encoding_precision, trainer_precision
from retrieval_zoo.evaluation.pipeline import encode_then, saved_index
from retrieval_zoo.index.vectors.faiss import Faiss
from retrieval_zoo.methods.dense import DenseBiEncoder
from retrieval_zoo.search_api import Retriever
from retrieval_zoo.training.validation import RetrievalValidation
from tests.conftest import tiny_encoder
from tests.test_method_index_matrix import composed

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
    with encoding_precision(trainer_precision(FP32), model), encoding():
        assert not torch.is_autocast_enabled("cpu")
    with encoding_precision(trainer_precision(BF16), model):
        assert not torch.is_autocast_enabled("cpu")  # what is done with the encodings: float32
        with encoding():  # an encoder's call
            assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    with encoding():
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
        retriever = Faiss().build(model, tiny, tiny_bm25, shards)
        retriever.search({"q": "a query"}, 10)
        model.calls.append(("scoring", torch.is_autocast_enabled("cpu")))
        return shards

    with torch.no_grad():
        bf16_shards = encode_then(cfg, model, Faiss(), tiny, tiny_bm25, BF16, then)
        assert [call for call in model.calls if call[0] != "doc"] == [("query", True), ("scoring", False)]
        assert all(autocast for side, autocast in model.calls if side == "doc")  # Lightning's predict
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

    def search(queries: dict[str, str], k: int) -> dict:  # whether an encoder's call would autocast
        with encoding():
            return {q: {"d": float(torch.is_autocast_enabled("cpu"))} for q in queries}

    searcher = SimpleNamespace(search=search)
    loaded = Retriever(cfg, model, tiny, searcher, {}, trainer_precision(BF16))
    assert loaded.search_batch({"q": "a query"}, 10) == {"q": {"d": 1.0}}
    assert Retriever(cfg, model, tiny, searcher, {}).search_batch({"q": "a query"}, 10) == {"q": {"d": 0.0}}


# a pair for each way of scoring after the encoder's call: faiss, BM25 fused with faiss, RoC's concatenation, a
# sparse product in torch (the engines' impacts are read from the same encode_payload), GIP, CSurF's lists
FAMILIES = [("dense", "faiss"), ("clear", "union_clear"), ("roc", "concatenated"), ("dlr_splade", "sparse"),
            ("delade_cls", "gip"), ("csurf", "csf")]  # fmt: skip


@pytest.mark.parametrize(("method_name", "index_name"), FAMILIES)
def test_each_retriever_family_builds_and_searches_on_bf16_encodings(method_name, index_name, tiny, tiny_bm25) -> None:
    """The encoders autocast, the scoring does not: a CPU has no bfloat16 sparse product (``index=sparse`` failed so
    when the whole search autocast), and a bfloat16 product would round every score to 8 bits."""
    cfg = composed(method_name, index_name)
    torch.manual_seed(0)
    model, index = instantiate(cfg.method).eval(), instantiate(cfg.index)
    small_bags(model)
    queries = dict(list(tiny.judged_queries("dev").items())[:8])
    with torch.inference_mode(), encoding_precision(MixedPrecision("bf16-mixed", "cpu"), model):
        retriever = index.build(model, tiny, tiny_bm25)  # its corpus encoded on demand, in bf16 too
        run = retriever.search(queries, 10)
        fused, parts = retriever.search_with_parts(queries, 10, 20)
    assert run.keys() == queries.keys() and fused == run and parts.keys() == set(retriever.fused_parts)
    assert any(run.values()) and all(math.isfinite(score) for docs in run.values() for score in docs.values())


def test_the_ciff_export_encodes_documents_and_queries_in_the_trainers_precision(tiny_dir, tmp_path) -> None:
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    from retrieval_zoo.export.ciff import export
    from tests.test_end_to_end import REPO, tiny_dataset

    overrides = ["method=dlr_splade", *tiny_dataset(tiny_dir), "trainer.precision=bf16-mixed",
                 f"encode.cache_dir={tmp_path / 'cache'}", f"out={tmp_path / 'out'}"]  # fmt: skip
    with initialize_config_dir(config_dir=str(REPO / "retrieval_zoo" / "conf"), version_base="1.3"):
        cfg = compose("export_ciff", overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)  # the identity keys read hydra's choices
    model = instantiate(cfg.method)
    forwards: list[bool] = []  # whether autocast was on at each forward pass of the encoder below the MLM head
    model.encoder.model.base_model.register_forward_hook(lambda *_: forwards.append(torch.is_autocast_enabled("cpu")))
    (tmp_path / "out").mkdir()
    summary = export(cfg, model, tmp_path / "out")
    assert summary["documents"] == len(tiny_dir.joinpath("collection.tsv").read_text().splitlines())
    assert len(forwards) > 2 and all(forwards)  # the corpus (encoded on demand: nothing trained) and the queries
