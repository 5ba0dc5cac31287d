import numpy as np
import pytest
import torch

from retrieval_zoo.backbones import TinyRandomBackbone
from retrieval_zoo.index.encoded_corpus import cached_doc_encoder
from retrieval_zoo.methods.delade import DeLADE

CORPUS = {"a": "one", "b": "two two", "c": "three three three"}


def test_encodes_once_per_weights_and_reads_rows_back(tmp_path) -> None:
    calls: list[list[str]] = []
    model = torch.nn.Linear(2, 2)

    def encode(ids: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        calls.append(ids)
        lengths = torch.tensor([[len(CORPUS[d]) / 3.0] for d in ids])
        return torch.cat([lengths, -lengths, lengths / 7], dim=1), lengths.repeat(1, 2)

    def cached() -> object:
        return cached_doc_encoder(encode, CORPUS, model, "corpus-hash", {"max_length": 8}, batch_size=2,
                                  cache_dir=tmp_path)  # fmt: skip

    read = cached()
    assert sorted(d for batch in calls for d in batch) == ["a", "b", "c"]
    lexical, cls = read(["c", "a"])
    assert lexical.dtype == torch.float32 and cls.dtype == torch.float32
    direct_lexical, direct_cls = encode(["c", "a"])  # "three three three" is 17 characters, "one" 3
    assert torch.equal(lexical, direct_lexical) and torch.equal(cls, direct_cls)
    assert lexical[:, 0].tolist() == pytest.approx([17 / 3, 1.0])
    calls.clear()
    cached()  # same weights, corpus and settings: nothing is encoded again
    assert calls == []
    with torch.no_grad():
        model.weight.add_(1.0)
    cached()  # new weights: a new entry
    assert len(list((tmp_path / "encoded").iterdir())) == 2 and calls


def test_cached_dlrs_equal_the_directly_encoded_ones(tiny) -> None:
    model = DeLADE(TinyRandomBackbone(hidden_size=32), cls_dim=8, slices=128, doc_max_length=16).eval()
    model.validating_in_fit = True  # as in training's validation: no cache
    direct = model.build_retriever(tiny).index
    model.validating_in_fit = False
    first, second = model.build_retriever(tiny).index, model.build_retriever(tiny).index  # encode, then read back
    for index in (first, second):
        # float32 storage: the same values, and the same winning ids in every slice
        assert torch.equal(index.values, direct.values) and torch.equal(index.indices, direct.indices)
        assert index.docids == direct.docids


def test_a_cache_whose_documents_differ_is_refused(tmp_path) -> None:
    model = torch.nn.Linear(1, 1)
    encode = lambda ids: (torch.ones(len(ids), 3), None)  # noqa: E731
    cached_doc_encoder(encode, CORPUS, model, "same-hash", {}, batch_size=2, cache_dir=tmp_path)
    folder = next((tmp_path / "encoded").iterdir())
    (folder / "docids.json").write_text('["a", "c", "b"]')
    with pytest.raises(ValueError, match="do not match the corpus"):
        cached_doc_encoder(encode, CORPUS, model, "same-hash", {}, batch_size=2, cache_dir=tmp_path)
    assert np.load(folder / "lexical.npy").dtype == np.float32
