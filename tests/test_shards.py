"""Sharded corpus encoding: the shard store, merging shards' top k, and encoding by Lightning predict with resume."""

import os
from functools import partial

import lightning as L
import pytest
import torch

from retrieval_zoo.encoding.corpus import encode_corpus
from retrieval_zoo.id_index import IdIndex
from retrieval_zoo.index.shards import CorpusShards, merge_topk
from retrieval_zoo.index.terms.gip import Gip
from retrieval_zoo.index.vectors.faiss import Faiss
from retrieval_zoo.methods.delade import DeLADE
from retrieval_zoo.methods.dense import DenseBiEncoder
from retrieval_zoo.retriever import ranked_run
from tests.conftest import float32_rounding, tiny_encoder

DOCIDS = ["a", "b", "c", "d", "e"]
CPU_TRAINER = partial(L.Trainer, accelerator="cpu", devices=1, enable_progress_bar=False)


def payload(ids: list[str]) -> dict[str, torch.Tensor]:
    return {"vectors": torch.tensor([[float(ord(d))] for d in ids])}


def test_shards_are_written_read_back_and_listed_missing(tmp_path) -> None:
    shards = CorpusShards(DOCIDS, 2, tmp_path)
    assert shards.ranges == [(0, 2), (2, 4), (4, 5)] and shards.missing() == [0, 1, 2]
    shards.write(1, payload(shards.shard_docids(1)), rank=1)
    (tmp_path / ".shard-00000.pt.x1y2.pt").write_bytes(b"half a file")  # a killed writer's temporary
    assert shards.missing() == [0, 2]  # the temporary is never taken for shard 0
    assert shards.read(1)["vectors"].flatten().tolist() == [ord("c"), ord("d")] and shards.writer_rank(1) == 1
    with pytest.raises(FileNotFoundError, match="shard-00000.pt: shard 0 of 3 was never written"):
        shards.read(0)


def test_mostly_zero_matrices_are_stored_as_their_entries_and_read_back_equal(tmp_path) -> None:
    lexical = torch.zeros(3, 100_000)
    lexical[0, 7], lexical[2, 99_999], lexical[2, 0] = 1.5, 0.25, 3.0
    vectors = torch.randn(3, 4)  # dense: stored whole
    shards = CorpusShards(["a", "b", "c"], 3, tmp_path)
    shards.write(0, {"lexical": lexical, "vectors": vectors})
    record = torch.load(shards.path(0), weights_only=True)
    assert set(record["tensors"]) == {"vectors"} and record["sparse"]["lexical"]["columns"].tolist() == [7, 0, 99_999]
    assert record["sparse"]["lexical"]["offsets"].tolist() == [0, 1, 1, 3]  # row 1 holds nothing
    assert shards.path(0).stat().st_size < 4 * lexical.numel() / 100  # 1.2 MB whole
    read = shards.read(0)
    assert torch.equal(read["lexical"], lexical) and torch.equal(read["vectors"], vectors)


def test_a_folder_of_another_corpus_or_shard_size_is_refused(tmp_path) -> None:
    CorpusShards(DOCIDS, 2, tmp_path)
    with pytest.raises(ValueError, match=r"manifest.json: .*another corpus or shard size \(docids_sha256, documents"):
        CorpusShards(DOCIDS[:4], 2, tmp_path)
    with pytest.raises(ValueError, match=r"\(shard_size, shards differ\)"):
        CorpusShards(DOCIDS, 3, tmp_path)


def test_a_shard_file_with_the_wrong_document_count_is_refused(tmp_path) -> None:
    shards = CorpusShards(DOCIDS, 2, tmp_path)
    torch.save({"documents": 3, "rank": 0, "tensors": payload(["a", "b", "c"])}, shards.path(0))
    with pytest.raises(ValueError, match="shard-00000.pt: holds 3 documents, shard 0 has 2"):
        shards.read(0)


def test_on_demand_shards_encode_each_read_and_store_nothing() -> None:
    calls: list[list[str]] = []
    shards = CorpusShards.on_demand(DOCIDS, lambda ids: calls.append(ids) or payload(ids), 3)
    assert shards.missing() == [] and [ids for ids, _ in shards] == [["a", "b", "c"], ["d", "e"]]
    assert torch.cat([part["vectors"] for _, part in shards]).flatten().tolist() == [float(ord(d)) for d in DOCIDS]
    assert len(calls) == 4  # two shards, read twice


def test_merge_topk_by_hand() -> None:
    first = {"q": {"a": 3.0, "b": 1.0}, "r": {}}
    second = {"q": {"c": 2.0, "d": 1.0}, "r": {"e": 0.5}}
    merged = merge_topk([first, second], 3)
    assert list(merged["q"].items()) == [("a", 3.0), ("c", 2.0), ("b", 1.0)]  # the tie keeps the first shard's
    assert merged["r"] == {"e": 0.5}
    assert merge_topk([{"q": {}}], 5) == {"q": {}}


def test_encoding_by_lightning_predict_is_cached_and_resumes_from_complete_shards(tiny, tiny_bm25, tmp_path) -> None:
    model = DenseBiEncoder(tiny_encoder(batch_size=64)).eval()
    encode = lambda: encode_corpus(model, Faiss(), tiny, tiny_bm25, CPU_TRAINER, shard_size=150, cache_dir=tmp_path)  # noqa: E731
    shards, rank_zero = encode()
    assert rank_zero and len(shards) == 3 and shards.missing() == []
    with torch.inference_mode():
        direct = model.encode_doc([tiny.corpus[d] for d in shards.shard_docids(2)])
    atol = float32_rounding(32 * 2) * float(direct.abs().max())  # other batches: other GEMM shapes, sum orders
    assert torch.allclose(shards.read(2)["vectors"], direct, rtol=0, atol=atol)
    # A kill after shard 0 and 2 were written: the rerun encodes shard 1 alone, and leaves the others untouched.
    stamps = {s: os.stat(shards.path(s)).st_mtime_ns for s in (0, 2)}
    shards.path(1).unlink()
    again, _ = encode()
    assert again.folder == shards.folder and again.missing() == []
    assert {s: os.stat(shards.path(s)).st_mtime_ns for s in (0, 2)} == stamps
    with torch.no_grad():
        model.encoder.model.embeddings.word_embeddings.weight.add_(0.1)
    changed, _ = encode()
    assert changed.folder != shards.folder  # new weights: a new cache entry


def test_dlrs_from_predicted_shards_equal_the_on_demand_ones(tiny, tiny_bm25, tmp_path) -> None:
    model = DeLADE(tiny_encoder(mlm_head=True, doc_max_length=16), cls_dim=8).eval()
    gip = Gip(slices=128)
    shards, _ = encode_corpus(model, gip, tiny, tiny_bm25, CPU_TRAINER, shard_size=400, cache_dir=tmp_path)
    with torch.inference_mode():
        on_demand = gip.build(model, tiny, tiny_bm25).index
        from_files = gip.build(model, tiny, tiny_bm25, shards).index
    # float32 storage: the same values, and the same winning ids in every slice
    assert torch.equal(from_files.values, on_demand.values) and torch.equal(from_files.indices, on_demand.indices)
    assert from_files.docids.tolist() == on_demand.docids.tolist()


def test_a_damaged_shard_or_manifest_is_encoded_again_or_named(tmp_path, capsys) -> None:
    shards = CorpusShards(DOCIDS, 2, tmp_path)
    for shard in range(len(shards)):
        shards.write(shard, payload(shards.shard_docids(shard)))
    whole = shards.path(1).read_bytes()
    shards.path(1).write_bytes(whole[: len(whole) // 2])  # truncated: a full disk, a copy cut short
    assert shards.missing() == [1] and not shards.path(1).exists()  # encoded again, not trusted, and said
    assert "shard-00001.pt is damaged (not a complete torch archive): encoding shard 1 again" in capsys.readouterr().out
    shards.path(1).write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match=r"shard-00001.pt: shard 1 is damaged .*delete the file"):
        shards.read(1)
    (tmp_path / "manifest.json").write_text('{"documents": 5, "sha')
    with pytest.raises(ValueError, match=r"manifest.json: damaged .*delete the folder"):
        CorpusShards(DOCIDS, 2, tmp_path)


def test_predict_steps_receive_tensors_and_encode_cached_tokens(tiny, tiny_bm25, tmp_path, monkeypatch) -> None:
    """Corpus encoding by predict: each step gets a shard number as a tensor, and the encoder gets tokens, not texts."""
    from retrieval_zoo.encoding.corpus import ShardEncoding
    from retrieval_zoo.encoding.encoder import Encoder

    steps, handed = [], []
    predict_step, tokenize = ShardEncoding.predict_step, Encoder.tokenize
    monkeypatch.setattr(
        ShardEncoding, "predict_step", lambda self, shard: steps.append(shard) or predict_step(self, shard)
    )
    monkeypatch.setattr(
        Encoder, "tokenize", lambda self, texts, side: handed.append(texts) or tokenize(self, texts, side)
    )
    model = DenseBiEncoder(tiny_encoder(batch_size=64)).eval()
    encode_corpus(model, Faiss(), tiny, tiny_bm25, CPU_TRAINER, shard_size=150, cache_dir=tmp_path)
    assert len(steps) == 3 and all(isinstance(s, torch.Tensor) and s.dtype == torch.long for s in steps)
    assert handed and all(type(texts).__name__ == "Tokens" for texts in handed)


@pytest.mark.parametrize("as_index", [True, False])
def test_ranked_run_names_each_querys_rows_in_order(as_index: bool) -> None:
    ids = ["d9", "d1", "d5", "d3"]
    docids = IdIndex(ids) if as_index else ids
    rows, scores = torch.tensor([[2, 0, 3], [1, 3, 0]]), torch.tensor([[3.0, 2.0, 0.0], [1.5, -1.0, 0.5]])
    run = ranked_run(["q1", "q2"], rows, scores, docids)
    assert run == {"q1": {"d5": 3.0, "d9": 2.0, "d3": 0.0}, "q2": {"d1": 1.5, "d3": -1.0, "d9": 0.5}}
    assert list(run["q2"]) == ["d1", "d3", "d9"]  # best first, as the rows came
    matched = ranked_run(["q1", "q2"], rows, scores, docids, positive_only=True)
    assert matched == {"q1": {"d5": 3.0, "d9": 2.0}, "q2": {"d1": 1.5, "d9": 0.5}}
    # rows of different lengths (an index that returns fewer than k for some queries)
    assert ranked_run(["a", "b"], [[3], []], [[1.0], []], docids) == {"a": {"d3": 1.0}, "b": {}}
