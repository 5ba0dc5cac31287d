import random

import pytest
import torch

from retrieval_zoo.evaluation.metrics import evaluate
from retrieval_zoo.index.terms.fused_terms import bag_rows
from retrieval_zoo.index.terms.gip import Gip
from retrieval_zoo.lexical.sparse_rows import SparseRows
from retrieval_zoo.methods.dense import DenseBiEncoder
from retrieval_zoo.methods.dhr_fusion import DhrFusion
from retrieval_zoo.term_matrix import dense_rows
from tests.conftest import tiny_encoder


def test_bag_rows_places_weights_and_drops_unknown_terms() -> None:
    matrix = bag_rows([{"b": 2.0, "zzz": 9.0}, {"a": 1.0}], {"a": 0, "b": 1})
    assert matrix.layout == torch.sparse_csr and dense_rows(matrix).tolist() == [[0.0, 2.0], [1.0, 0.0]]


def loop_bag_matrix(bags: list[dict[str, float]], vocabulary: dict[str, int]) -> torch.Tensor:
    """The bags' matrix as it was built before issue 20: a Python loop over bags and terms."""
    matrix = torch.zeros(len(bags), len(vocabulary))
    for row, bag in enumerate(bags):
        for term, weight in bag.items():
            if term in vocabulary:
                matrix[row, vocabulary[term]] = weight
    return matrix


def test_bags_gather_any_rows_exactly_as_the_loop_did() -> None:
    rng = random.Random(0)
    words = [f"w{i}" for i in range(40)]
    vocabulary = {w: i for i, w in enumerate(words[:30])}  # w30..w39 are unknown: they match nothing
    bags = [{w: rng.uniform(0.1, 3.0) for w in rng.sample(words, rng.randint(0, 8))} for _ in range(25)]
    store = SparseRows(bags, vocabulary)
    rows = [7, 0, 24, 7, 3] + [i for i, bag in enumerate(bags) if not bag]  # any order, repeats, empty bags
    expected = loop_bag_matrix([bags[r] for r in rows], vocabulary)
    assert torch.equal(store.dense(torch.tensor(rows), 30), expected)
    assert torch.equal(dense_rows(bag_rows(bags, vocabulary)), loop_bag_matrix(bags, vocabulary))
    assert torch.equal(dense_rows(store.csr(torch.tensor(rows), 30)), expected)
    assert store.dense(torch.tensor([], dtype=torch.long), 30).shape == (0, 30)


def test_bm25_dlr_only_loses_what_collisions_hide(tiny, tiny_bm25) -> None:
    retriever = Gip(slices=256, first_stage=None).build(DhrFusion(lexical="bm25").eval(), tiny, tiny_bm25)
    queries = dict(list(tiny.judged_queries("dev").items())[:30])
    run = retriever.search(queries, 100)
    qids = list(queries)
    exact_query = dict(zip(qids, tiny_bm25.query_idf(list(queries.values())), strict=True))
    for qid in qids[:5]:
        docids = list(run[qid])[:10]
        for docid, bag in zip(docids, tiny_bm25.document_term_weights(docids, saturation_only=True), strict=True):
            exact = sum(w * bag.get(t, 0.0) for t, w in exact_query[qid].items())
            # A gate opens only on the same term, with that term's exact product; a collision can only hide one.
            assert run[qid][docid] <= exact * (1 + 2e-3) + 1e-3
    qrels = {q: tiny.qrels["dev"][q] for q in queries}
    dlr, bm25 = evaluate(run, qrels)["MRR@10"], evaluate(tiny_bm25.search(queries, 100), qrels)["MRR@10"]
    assert dlr > 0.8 * bm25  # 256 slices over this slice's vocabulary keep most of BM25


def test_bm25_plus_dense_dhr_adds_the_two_parts(tiny, tiny_bm25) -> None:
    dense = DenseBiEncoder(tiny_encoder(doc_max_length=32))
    model = DhrFusion(lexical="bm25", dense=dense).eval()
    retriever = Gip(slices=128, first_stage=None, weight=4.0).build(model, tiny, tiny_bm25)
    assert retriever.fused_parts == ("lexical", "semantic")
    queries = dict(list(tiny.judged_queries("dev").items())[:5])
    fused, lexical, semantic = (retriever.search(queries, 400, part=p) for p in (None, "lexical", "semantic"))
    reweighted = retriever.search(queries, 400, weight=8.0)  # λ at query time: the [CLS] part counts twice as much
    for qid, docs in fused.items():
        for docid in list(docs)[:10]:
            assert docs[docid] == pytest.approx(lexical[qid][docid] + semantic[qid][docid], abs=2e-2)
        for docid in list(reweighted[qid])[:10]:
            assert reweighted[qid][docid] == pytest.approx(lexical[qid][docid] + 2 * semantic[qid][docid], abs=4e-2)


def test_tuning_picks_the_best_lambda_on_held_out_queries(tiny, tiny_bm25) -> None:
    dense = DenseBiEncoder(tiny_encoder(doc_max_length=32))
    index = Gip(slices=128, first_stage=None, weight_grid=(0.0, 1.0, 100.0))
    retriever = index.build(DhrFusion(lexical="bm25", dense=dense).eval(), tiny, tiny_bm25)
    queries = dict(list(tiny.judged_queries("train").items())[:20])
    qrels = {q: tiny.qrels["train"][q] for q in queries}
    record = index.tune(retriever, queries, qrels)
    curve = record["curve"]
    assert record["value"] == max(curve, key=curve.get) and retriever.weight == record["value"]
    # a random encoder only adds noise to BM25: λ = 0 (BM25's DLR alone) is at least as good as λ = 100
    assert curve[0.0] >= curve[100.0]


def test_splade_dlr_runs_on_the_backbone_mlm(tiny, tiny_bm25) -> None:
    model = DhrFusion(
        lexical="splade", encoder=tiny_encoder(mlm_head=True, query_max_length=16, doc_max_length=16)
    ).eval()
    retriever = Gip(slices=128).build(model, tiny, tiny_bm25)
    assert retriever.slicing.discard == 570 and retriever.fused_parts == ()  # BERT's unused ids; no [CLS] part
    run = retriever.search(dict(list(tiny.judged_queries("dev").items())[:3]), 5)
    assert len(run) == 3 and all(len(docs) == 5 for docs in run.values())
    with pytest.raises(ValueError, match="lexical must be"):
        DhrFusion(lexical="tfidf")
    with pytest.raises(ValueError, match="needs an encoder with its MLM head"):
        DhrFusion(lexical="splade")


def test_evaluation_explains_what_the_dlr_matched(tiny, tiny_bm25, tmp_path) -> None:
    import json

    from retrieval_zoo.evaluation.stages import evaluate_method

    model, index = DhrFusion(lexical="bm25").eval(), Gip(slices=256, first_stage=None)
    summary = evaluate_method(model, index, tiny, tiny_bm25, "dev", 20, tmp_path, "dlr_bm25", explain=2)
    assert summary["index_bytes"] == len(tiny.corpus) * 256 * (2 + 1)
    # open slices per document: at most one per distinct term, and at most M
    bm25 = tiny_bm25.document_term_weights(list(tiny.corpus), saturation_only=True)
    terms = sum(len(bag) for bag in bm25) / len(bm25)
    assert 0.9 * terms <= summary["lexical_nonzero_per_doc"] <= min(terms, 256)
    records = [json.loads(line) for line in (tmp_path / "explain.dev.jsonl").read_text().splitlines()]
    assert len(records) == 6 and {r["qid"] for r in records} == set(list(tiny.judged_queries("dev"))[:2])
    for record in records:  # no [CLS] part: the score is the DLR's GIP, the sum of the matched products
        assert record["score"] == pytest.approx(record["lexical"], abs=1e-3)
        assert all(m["term"].isalnum() or "." in m["term"] for m in record["matches"])  # analysed words, not ids
        products = [m["query"] * m["doc"] for m in record["matches"]]
        assert products == sorted(products, reverse=True)


def test_evaluation_runs_an_untrained_fusion_in_eval_mode(tiny, tiny_bm25, tmp_path) -> None:
    """``dhr_bm25_dense`` is not trained, so nothing else switches its dense part's dropout off before retrieval."""
    from retrieval_zoo.evaluation.stages import evaluate_method

    model = DhrFusion(lexical="bm25", dense=DenseBiEncoder(tiny_encoder(doc_max_length=16)))
    assert model.dense.training  # as Hydra instantiates it
    index = Gip(slices=64, first_stage=None, weight_grid=(1.0,))
    runs = []
    for attempt in ("first", "second"):
        evaluate_method(model, index, tiny, tiny_bm25, "dev", 20, tmp_path / attempt, "dhr_bm25_dense")
        runs.append((tmp_path / attempt / "run.dev.trec").read_text())
    assert not model.dense.training and runs[0] == runs[1]  # with dropout on, the two runs differ
