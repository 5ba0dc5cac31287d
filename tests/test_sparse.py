import platform

import pytest
import torch

from retrieval_zoo.encoding.encoder import BERT_DISCARD
from retrieval_zoo.host_memory import release_freed_memory
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.index.terms.sparse import Sparse, SparseRetriever
from retrieval_zoo.methods.delade import DeLADE
from retrieval_zoo.methods.dense import DenseBiEncoder
from retrieval_zoo.methods.dhr_fusion import DhrFusion
from tests.conftest import tiny_encoder

LEXICAL = {  # text → (|V| = 5 lexical vector, 2-d [CLS] vector)
    "q1": ([9.0, 1.0, 0.0, 2.0, 0.0], [1.0, 0.0]),
    "q2": ([0.0, 0.0, 1.0, 0.0, 3.0], [0.0, 1.0]),
    "d1": ([5.0, 2.0, 0.0, 1.0, 0.0], [1.0, 1.0]),
    "d2": ([0.0, 0.0, 4.0, 0.0, 0.5], [2.0, 0.0]),
    "d3": ([0.0, 3.0, 0.0, 0.0, 1.0], [0.0, 0.0]),
}


def encode(texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor([LEXICAL[t][0] for t in texts]), torch.tensor([LEXICAL[t][1] for t in texts])


def test_sparse_search_by_hand() -> None:
    corpus = {"a": "d1", "b": "d2", "c": "d3"}

    def encode_shard(ids: list[str]) -> dict[str, torch.Tensor]:
        lexical, cls = encode([corpus[d] for d in ids])
        return {"lexical": lexical, "cls": cls}

    shards = CorpusShards.on_demand(list(corpus), encode_shard, 2)  # two shards: "a", "b" and "c"
    retriever = SparseRetriever.from_shards(encode, shards, lam=0.5, discard=1, batch_size=2)
    run = retriever.search({"x": "q1", "y": "q2"}, 3)
    # id 0 is discarded. q1: a = 1·2 + 2·1 + 0.5·1 = 4.5, b = 0.5·2 = 1, c = 1·3 = 3; q2: a = 0.5, b = 4 + 1.5 = 5.5,
    # c = 3.
    assert run["x"] == pytest.approx({"a": 4.5, "c": 3.0, "b": 1.0})
    assert list(run["x"]) == ["a", "c", "b"]
    assert run["y"] == pytest.approx({"b": 5.5, "c": 3.0, "a": 0.5})
    assert retriever.side("semantic", {"x": "q1"}, 2)["x"] == pytest.approx({"a": 0.5, "b": 1.0})
    assert retriever.side("lexical", {"x": "q1"}, 1)["x"] == pytest.approx({"a": 4.0})
    assert retriever.search({"x": "q1"}, 1, weight=2.0)["x"] == pytest.approx({"a": 6.0})  # 4 + 2·1
    # three queries: two batches of 2 and 1, their top k read at the end, each in its query's place
    three = retriever.search({"x": "q1", "y": "q2", "z": "q1"}, 3)
    assert list(three) == ["x", "y", "z"] and three["z"] == three["x"] == run["x"] and three["y"] == run["y"]
    assert retriever.search({}, 3) == {}
    # 6 non-zeros once id 0 is discarded (float32 values, int32 ids), 4 int32 row offsets, 3 x 2 float32 [CLS].
    assert retriever.nbytes == 6 * 8 + 4 * 4 + 6 * 4
    assert retriever.lexical_nonzero == 2.0


def test_the_fused_search_and_its_parts_from_one_product_keep_each_part_its_own() -> None:
    corpus = {"a": "d1", "b": "d2", "c": "d3"}
    shards = CorpusShards.on_demand(list(corpus), lambda ids: dict(zip(("lexical", "cls"), encode(
        [corpus[d] for d in ids]), strict=True)), 3)  # fmt: skip
    retriever = SparseRetriever.from_shards(encode, shards, lam=0.5, discard=1, batch_size=2)
    fused, parts = retriever.search_with_parts({"x": "q1", "y": "q2"}, 2, depth=3)
    # the fused sum is made in place of the lexical scores, after the lexical part's own top 3 is taken (values of
    # test_sparse_search_by_hand): lexical q1 a = 4, c = 3, b = 0 and q2 b = 5.5, c = 3, a = 0; semantic 0.5·<q, d>
    assert fused == {"x": pytest.approx({"a": 4.5, "c": 3.0}), "y": pytest.approx({"b": 5.5, "c": 3.0})}
    assert parts["lexical"]["x"] == pytest.approx({"a": 4.0, "c": 3.0, "b": 0.0})
    assert parts["lexical"]["y"] == pytest.approx({"b": 5.5, "c": 3.0, "a": 0.0})
    assert parts["semantic"]["x"] == pytest.approx({"b": 1.0, "a": 0.5, "c": 0.0})
    assert parts["semantic"]["y"] == pytest.approx({"a": 0.5, "b": 0.0, "c": 0.0})


def test_bm25_sparse_vectors_score_exactly_bm25(tiny, tiny_bm25) -> None:
    retriever = Sparse().build(DhrFusion(lexical="bm25").eval(), tiny, tiny_bm25)
    assert isinstance(retriever, SparseRetriever)
    queries = dict(list(tiny.judged_queries("dev").items())[:5])
    run, lucene = retriever.search(queries, 10), tiny_bm25.search(queries, 10)
    for qid in queries:  # BM25 as the inner product of IDF and TF-saturation vectors (RoC Eq. 3)
        top = list(run[qid])[0]
        assert run[qid][top] == pytest.approx(lucene[qid][top], rel=1e-3)
        assert run[qid][top] == pytest.approx(max(lucene[qid].values()), rel=1e-3)


def test_the_sparse_index_gives_the_exact_fused_training_score(tiny, tiny_bm25) -> None:
    model = DeLADE(tiny_encoder(mlm_head=True, doc_max_length=16), cls_dim=8, lambda_cls=2.0).eval()
    retriever = Sparse().build(model, tiny, tiny_bm25)
    # DeLADE's softmax vectors are dense: stored as a dense float32 matrix, smaller than CSR at this density; BERT's
    # unused leading ids are left out, as the DLRs drop them
    assert retriever.docs.layout == torch.strided and retriever.lexical_nonzero == model.vocab_size - BERT_DISCARD
    assert retriever.nbytes == len(tiny.corpus) * (model.vocab_size - BERT_DISCARD + 8) * 4
    queries = dict(list(tiny.judged_queries("dev").items())[:2])
    run = retriever.search(queries, 3)
    with torch.inference_mode():
        q = model.encode_query(list(queries.values()))
        for row, qid in enumerate(queries):
            docids = list(run[qid])
            d = model.encode_doc([tiny.corpus[x] for x in docids])
            d[:, :BERT_DISCARD] = 0  # the score of Eq. 13 over the ids the index keeps
            assert list(run[qid].values()) == pytest.approx((d @ q[row]).tolist(), rel=1e-4)


def test_dense_part_joins_the_exact_sparse_bm25(tiny, tiny_bm25) -> None:
    dense = DenseBiEncoder(tiny_encoder(doc_max_length=32))
    retriever = Sparse(weight=4.0).build(DhrFusion(lexical="bm25", dense=dense).eval(), tiny, tiny_bm25)
    queries = dict(list(tiny.judged_queries("dev").items())[:3])
    fused, lexical, semantic = (retriever.search(queries, 400, part=p) for p in (None, "lexical", "semantic"))
    for qid, docs in fused.items():
        for docid in list(docs)[:10]:
            assert docs[docid] == pytest.approx(lexical[qid][docid] + semantic[qid][docid], abs=1e-3)


def test_a_few_queries_are_encoded_once_for_the_fusion_and_each_part() -> None:
    from retrieval_zoo.lexical.lucene_bm25 import FEW_QUERIES
    from tests.test_impact import corpus

    calls: list[int] = []

    def encode(texts):
        calls.append(len(texts))
        return torch.tensor([[1.0, float(len(t)), 0.0] for t in texts]), torch.tensor([[0.5, 1.0] for _ in texts])

    shards = corpus([[1.0, 0.0, 2.0], [0.0, 1.0, 1.0], [3.0, 0.5, 0.0]], [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    retriever = SparseRetriever.from_shards(encode, shards, lam=0.5)
    queries = {"a": "x", "b": "yy"}
    fused = retriever.search(queries, 2)
    parts = {part: retriever.side(part, queries, 2) for part in ("lexical", "semantic")}
    assert calls == [2] and fused == retriever.search(queries, 2) and calls == [2]  # one encoding for all four
    assert parts["lexical"]["a"] != parts["semantic"]["a"] or parts["lexical"]["b"] != parts["semantic"]["b"]
    many = {f"q{i}": "z" * (i % 3 + 1) for i in range(FEW_QUERIES + 1)}  # a larger set is encoded each time
    retriever.search(many, 2)
    retriever.search(many, 2)
    assert calls[1:] == [FEW_QUERIES + 1] * 2


def test_the_build_hands_freed_memory_back_where_the_c_library_is_glibc() -> None:
    assert release_freed_memory() == (platform.libc_ver()[0] == "glibc")  # elsewhere a no-op that says so
