"""``index_dir``: a built index written once with its manifest and checksum, loaded later, refused or rebuilt."""

import json

import pytest
import torch

from retrieval_zoo.index.saved import CHECKSUM, MANIFEST, SavedIndex, index_identity
from retrieval_zoo.index.terms.sparse import Sparse
from retrieval_zoo.index.vectors.concatenated import Concatenated
from retrieval_zoo.index.vectors.faiss import Faiss
from retrieval_zoo.index.vectors.union import Union
from retrieval_zoo.methods.delade import DeLADE
from retrieval_zoo.methods.roc import RoC
from tests.conftest import tiny_encoder


def identity(tiny, model: str = "m1", index: str = "union", settings: dict | None = None) -> dict:
    return index_identity("roc", model, tiny, index, settings or {"depth": 30, "weight": 2.0}, {"doc_max_length": 16})


class FaissInAFolder(Faiss):
    """Its files in a folder of their own, as an engine keeps them (a Lucene index, BMP's forward index)."""

    def save(self, retriever, folder):
        (folder / "engine").mkdir()
        super().save(retriever, folder / "engine")

    def load(self, method, collection, bm25, folder):
        return super().load(method, collection, bm25, folder / "engine")


def delade() -> DeLADE:
    return DeLADE(tiny_encoder(mlm_head=True, doc_max_length=16), cls_dim=8).eval()


def roc() -> RoC:
    return RoC(tiny_encoder(pooling="cls")).eval()


@pytest.mark.parametrize(
    ("make", "index"),
    [
        (roc, Faiss()),
        (roc, Union(depth=30, weight=2.0)),
        (roc, Concatenated(weight=0.5)),
        (delade, Sparse()),
        (roc, FaissInAFolder()),
    ],
    ids=["faiss", "union", "concatenated", "sparse", "subfolder"],
)
def test_a_saved_index_loads_to_the_runs_of_the_built_one(make, index, tiny, tiny_bm25, tmp_path, capsys) -> None:
    model = make()
    queries = dict(list(tiny.judged_queries("dev").items())[:10])
    saved = SavedIndex(tmp_path / "index", identity(tiny))
    assert saved.state() == "absent"
    with torch.inference_mode():
        built = saved.load_or_build(index, model, tiny, tiny_bm25, None)
        assert "[index] saved in" in capsys.readouterr().out and saved.state() == "ready"
        loaded = SavedIndex(tmp_path / "index", identity(tiny)).load_or_build(index, model, tiny, tiny_bm25, None)
        assert "[index] loading the saved index" in capsys.readouterr().out
        assert loaded.search(queries, 20) == built.search(queries, 20)
        for part in built.fused_parts:
            assert loaded.side(part, queries, 20) == built.side(part, queries, 20)
    manifest = json.loads((tmp_path / "index" / MANIFEST).read_text())
    assert manifest["built_from"]["corpus"] == tiny.corpus_fingerprint and manifest["bytes"] > 0
    inside = [name for name in manifest["files"] if "/" in name]  # an engine's own folder: each file checked
    if inside:
        (tmp_path / "index" / inside[0]).write_bytes(b"")
        assert saved.state() == "damaged" and "do not match" in saved.problem


def test_another_models_index_is_refused_and_a_damaged_one_rebuilt(tiny, tiny_bm25, tmp_path, capsys) -> None:
    model, index, folder = RoC(tiny_encoder(pooling="cls")).eval(), Faiss(), tmp_path / "index"
    with torch.inference_mode():
        SavedIndex(folder, identity(tiny)).load_or_build(index, model, tiny, tiny_bm25, None)
        other = SavedIndex(folder, identity(tiny, model="m2", settings={"depth": 50}))
        with pytest.raises(ValueError, match=r"holds another index: index_settings .*\"depth\": 30.* there, .*\"depth\""
                                             r": 50.* here; model m1 there, m2 here"):  # fmt: skip
            other.load_or_build(index, model, tiny, tiny_bm25, None)
        # the fusion weight is tuned per search, not part of what was built
        assert SavedIndex(folder, identity(tiny, settings={"depth": 30, "weight": 0.7})).state() == "ready"
        part = next(folder.glob("faiss-*.index"))
        part.write_bytes(part.read_bytes()[:100])  # cut short
        again = SavedIndex(folder, identity(tiny))
        assert again.state() == "damaged" and "do not match" in again.problem
        again.load_or_build(index, model, tiny, tiny_bm25, None)
        assert f"{folder} is damaged (its files do not match {CHECKSUM}" in capsys.readouterr().out
        assert again.state() == "ready"
        (folder / CHECKSUM).unlink()  # a build that did not finish
        assert again.state() == "damaged" and "did not finish" in again.problem
