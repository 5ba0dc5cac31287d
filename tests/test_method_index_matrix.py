"""Every method × index pair that applies, on a tiny random backbone created here (skips only where a pair
cannot apply: BM25 has no vectors for faiss, a dense model has no Lucene postings).

Each index is also built from the corpus cut into shards of 37 documents (11 shards): searching the shards and
merging their top k must give the one-shard run, for every exact index (HNSW graphs differ by construction).
"""

import numpy as np
import pytest
import torch

from retrieval_zoo.backbones import TinyRandomBackbone
from retrieval_zoo.index.concatenated import ConcatenatedRetriever
from retrieval_zoo.index.csf import CsfRetriever
from retrieval_zoo.index.dense import DenseRetriever, FaissIndex
from retrieval_zoo.index.dhr import DhrRetriever
from retrieval_zoo.index.hybrid import HybridRetriever
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.index.sparse import SparseRetriever
from retrieval_zoo.lexical.bm25 import BM25
from retrieval_zoo.methods.bm25 import BM25Method
from retrieval_zoo.methods.clear import CLEAR
from retrieval_zoo.methods.csurf import CSurF
from retrieval_zoo.methods.delade import DeLADE
from retrieval_zoo.methods.dense import DenseBiEncoder
from retrieval_zoo.methods.dhr_fusion import DhrFusion
from retrieval_zoo.methods.roc import RoC

METHODS = [
    "bm25",
    "dense_mean",
    "dense_cls",
    "clear",
    "roc",
    "roc_exact",
    "delade",
    "delade_cls",
    "dlr_bm25",
    "dlr_splade",
    "csurf",
]
INDEXES = ["lucene", "faiss_flat", "faiss_hnsw", "union", "concatenated", "gip", "sparse", "inverted"]
APPLIES = {
    "bm25": {"lucene"},
    "dense_mean": {"faiss_flat", "faiss_hnsw"},
    "dense_cls": {"faiss_flat", "faiss_hnsw"},
    "clear": {"faiss_flat", "faiss_hnsw", "union"},  # its embedding alone, or BM25 ∪ embedding
    "roc": {"faiss_flat", "faiss_hnsw", "concatenated"},  # its [CLS] part alone, or [projected BM25 ; [CLS]] exactly
    "roc_exact": {"faiss_flat", "faiss_hnsw", "union"},  # its [CLS] part alone, or exact BM25 ∪ [CLS] (naive sum)
    # the full |V| (+ [CLS]) vectors by inner product (faiss, the paper's FlatIP, or one sparse matrix with
    # slices=0), or densified and searched by GIP
    "delade": {"faiss_flat", "faiss_hnsw", "gip", "sparse"},
    "delade_cls": {"faiss_flat", "faiss_hnsw", "gip", "sparse"},
    "dlr_bm25": {"gip", "sparse"},  # off-the-shelf term vectors: no single dense vector to hand to faiss
    "dlr_splade": {"gip", "sparse"},
    "csurf": {"inverted"},  # bags of CSFs: neither one vector per text nor one term vector; inverted lists only
}
RETRIEVERS = {
    "lucene": BM25,
    "union": HybridRetriever,
    "concatenated": ConcatenatedRetriever,
    "gip": DhrRetriever,
    "sparse": SparseRetriever,
    "inverted": CsfRetriever,
}


def make(method: str, index: str = "gip"):
    slices = 0 if index == "sparse" else 128
    if method == "bm25":
        return BM25Method(threads=2)
    if method == "clear":
        return CLEAR(TinyRandomBackbone(hidden_size=32), encode_batch_size=64, retrieval_depth=20).eval()
    if method.startswith("dlr"):
        lexical = method.split("_")[1]
        return DhrFusion(lexical, backbone=TinyRandomBackbone(hidden_size=32), slices=slices, max_length=16).eval()
    if method.startswith("delade"):
        cls_dim = 8 if method == "delade_cls" else 0
        return DeLADE(TinyRandomBackbone(hidden_size=32), cls_dim=cls_dim, slices=slices, doc_max_length=16).eval()
    if method == "csurf":
        model = CSurF(TinyRandomBackbone(hidden_size=32), vector_dim=8, doc_max_length=16).eval()
        with torch.no_grad():  # about 1 logit in 300 positive: small bags, as a trained model's
            model.encoder.cls.predictions.bias.fill_(-0.3)
        return model
    if method.startswith("roc"):
        fusion = "exact" if method == "roc_exact" else "projected"
        return RoC(TinyRandomBackbone(hidden_size=32), fusion_lexical=fusion, encode_batch_size=64).eval()
    pooling = method.split("_")[1]
    return DenseBiEncoder(TinyRandomBackbone(hidden_size=32), pooling=pooling, encode_batch_size=64).eval()


def sharded(model, tiny, size: int = 37, encode=None) -> CorpusShards:
    """The tiny corpus encoded by ``model`` on demand, in shards of ``size`` documents."""
    encode = encode or model.encode_corpus_shard
    return CorpusShards.on_demand(list(tiny.corpus), lambda ids: encode([tiny.corpus[d] for d in ids]), size)


def assert_same_run(merged: dict, whole: dict) -> None:
    """The same documents with the same scores, up to the order of ties and float round-off."""
    assert merged.keys() == whole.keys()
    for qid, docs in whole.items():
        assert np.allclose(list(merged[qid].values()), list(docs.values()), atol=1e-4)
        tied_at_the_end = min(docs.values(), default=0.0)
        assert {d for d, s in docs.items() if s > tied_at_the_end + 1e-4} <= set(merged[qid])


@pytest.mark.parametrize("index", INDEXES)
@pytest.mark.parametrize("method", METHODS)
def test_method_index(method: str, index: str, tiny) -> None:
    if index not in APPLIES[method]:
        pytest.skip(f"{method} has no {index} representation")
    model = make(method, index)
    queries = dict(list(tiny.judged_queries("dev").items())[:10])
    if index in RETRIEVERS:
        retriever = model.build_retriever(tiny)
        assert isinstance(retriever, RETRIEVERS[index])
        run = retriever.search(queries, 20)
        assert all(0 < len(docs) <= 20 for docs in run.values())
        if model.encodes_corpus:
            assert_same_run(model.build_retriever(tiny, sharded(model, tiny)).search(queries, 20), run)
        return
    factory = {"faiss_flat": "Flat", "faiss_hnsw": "HNSW32"}[index]
    vectors = lambda texts: {"vectors": model.encode_doc(texts)}  # noqa: E731
    retriever = DenseRetriever(model, sharded(model, tiny, len(tiny.corpus), vectors), factory=factory, batch_size=64)
    run = retriever.search(queries, 10)
    if factory == "Flat":
        many = DenseRetriever(model, sharded(model, tiny, encode=vectors), factory=factory, batch_size=64)
        assert len(many.index._parts) == 11
        assert_same_run(many.search(queries, 10), run)
    # Brute force with the method's own score function is the reference.
    with torch.inference_mode():
        docids = list(tiny.corpus)
        d = model.encode_doc([tiny.corpus[x] for x in docids])
        q = model.encode_query(list(queries.values()))
        scores = model.score(q, d)
        top = scores.topk(10, dim=1)
    column = {docid: i for i, docid in enumerate(docids)}
    for row, qid in enumerate(queries):
        exact = [docids[i] for i in top.indices[row].tolist()]
        # The index returns each document with the score the method gives it (up to batching round-off) ...
        returned = [scores[row, column[x]].item() for x in run[qid]]
        assert np.allclose(returned, list(run[qid].values()), atol=1e-4)
        if factory == "Flat":  # ... and Flat returns the exact top 10 (ties within round-off may swap).
            assert np.allclose(sorted(run[qid].values(), reverse=True), top.values[row].numpy(), atol=1e-4)
        else:
            assert len(set(run[qid]) & set(exact)) >= 8


def test_faiss_rejects_mismatched_ids() -> None:
    with pytest.raises(ValueError, match="2 vectors for 3 document ids"):
        FaissIndex().build(np.zeros((2, 4), dtype=np.float32), ["a", "b", "c"])


def test_dense_on_a_local_distilbert_directory(tmp_path) -> None:
    """backbone.path: any local Hugging Face directory, here a tiny random DistilBERT (no token_type_ids)."""
    from transformers import DistilBertConfig, DistilBertForMaskedLM

    from retrieval_zoo.backbones import Backbone

    tokenizer = TinyRandomBackbone().load_tokenizer()
    config = DistilBertConfig(vocab_size=tokenizer.vocab_size, dim=32, n_layers=1, n_heads=2, hidden_dim=64)
    DistilBertForMaskedLM(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    model = DenseBiEncoder(Backbone("local_distilbert", path=str(tmp_path)), pooling="cls")
    vectors = model.encode_doc(["a document", "another, longer document"])
    assert vectors.shape == (2, 32)
    with pytest.raises(FileNotFoundError, match="has no config.json"):
        Backbone("missing", path=str(tmp_path / "nope")).source()
