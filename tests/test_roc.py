import pytest
import torch

from retrieval_zoo.evaluation.metrics import evaluate
from retrieval_zoo.index.vectors.concatenated import Concatenated
from retrieval_zoo.index.vectors.union import Union
from retrieval_zoo.methods.roc import RoC
from retrieval_zoo.training.datamodule import TrainBatch
from tests.conftest import tiny_encoder


def batch() -> TrainBatch:
    return TrainBatch(
        qids=["q1", "q2"], queries=["python library", "debian tools"], docids=[["p1", "n1"], ["p2", "n2"]],
        docs=["a python library for data", "other text", "debian tools and more", "more text"],
        bm25_query_vectors=[{"python": 2.0, "librari": 1.5}, {"debian": 1.0, "tool": 1.2}],
        bm25_doc_vectors=[{"python": 0.6, "librari": 0.5, "data": 0.4}, {"text": 0.5}, {"debian": 0.7}, {"text": 0.5}],
    )  # fmt: skip


def test_losses_are_nll_plus_weighted_orthogonality() -> None:
    model = RoC(tiny_encoder(pooling="cls"), mask_fraction=0.0, ortho_weight=1.0)
    losses, diagnostics = model.losses(batch())
    assert set(losses) == {"nll", "ortho"} and losses["ortho"].item() == pytest.approx(
        diagnostics["orthogonality"].item()
    )
    assert 0 < diagnostics["orthogonality"].item() < 2
    only_nll = RoC(tiny_encoder(pooling="cls"), mask_fraction=0.0, ortho_weight=0.0)
    assert set(only_nll.losses(batch())[0]) == {"nll"}
    # The lexical vectors are the fixed projection of the BM25 bags (no gradient reaches them).
    lex = model.lexical(batch().bm25_query_vectors)
    assert lex.shape == (2, 32) and not lex.requires_grad


def test_a_datamodule_batch_carries_the_exact_match_counts_the_masking_reads(tiny, tiny_bm25) -> None:
    from retrieval_zoo.encoding.tokens import exact_matches
    from retrieval_zoo.training.datamodule import TriplesDataModule

    model = RoC(tiny_encoder(pooling="cls"), mask_fraction=0.15)
    unmasked = RoC(tiny_encoder(), mask_fraction=0.0)
    assert "exact_match_counts" in model.needs and "exact_match_counts" not in unmasked.needs
    dm = TriplesDataModule(tiny, tiny_bm25, batch_size=4, n_negatives=1, needs=model.needs, epochs=1,
                           tokenizer=model.text_tokenizer(), term_keys=model.term_keys())  # fmt: skip
    dm.setup("fit")
    got = next(iter(dm.train_dataloader()))
    special = model.encoder.tokenizer.all_special_ids
    expected = exact_matches(got.doc_tokens.ids, got.query_tokens.ids, special).sum(dim=1)
    assert got.exact_match_counts.tolist() == expected.tolist() and expected.sum() > 0


def test_masking_happens_in_training_only(tiny, tiny_bm25, monkeypatch) -> None:
    model = RoC(tiny_encoder(pooling="cls"), mask_fraction=0.15)
    calls = []
    import retrieval_zoo.methods.roc as roc_module

    original = roc_module.mask_exact_matches
    monkeypatch.setattr(roc_module, "mask_exact_matches", lambda *a, **k: calls.append(1) or original(*a, **k))
    model.losses(batch())
    assert calls == [1]
    model.eval()
    retriever = Concatenated().build(model, tiny, tiny_bm25)
    queries = dict(list(tiny.judged_queries("dev").items())[:5])
    retriever.search(queries, 10)
    assert calls == [1]  # indexing and search never mask


def test_retriever_scores_eq_11_and_sides(tiny, tiny_bm25) -> None:
    model = RoC(tiny_encoder(pooling="cls")).eval()
    retriever = Concatenated(weight=0.5).build(model, tiny, tiny_bm25)
    queries = dict(list(tiny.judged_queries("dev").items())[:20])
    lexical, semantic = retriever.side("lexical", queries, 400), retriever.side("semantic", queries, 400)
    fused = retriever.search(queries, 10)
    for qid, docs in fused.items():
        for docid, score in docs.items():  # exact Eq. 11 over the whole corpus
            assert score == pytest.approx(lexical[qid][docid] + 0.5 * semantic[qid][docid], abs=1e-3)
    # Projected to only 32 dimensions BM25 is noisy, but far better than chance (MRR@10 ≈ 0.007 over 400 documents).
    qrels = {q: tiny.qrels["dev"][q] for q in queries}
    assert evaluate(lexical, qrels)["MRR@10"] > 0.15
    with pytest.raises(ValueError, match="unknown part"):
        retriever.side("dense", queries, 10)
    # Eq. 3's d_bm25 carries (k1 + 1); at Lucene's scale Score_lex is (k1 + 1) = 1.9 times smaller.
    model.lexical_scale = "lucene"
    lucene = Concatenated(weight=0.5).build(model, tiny, tiny_bm25).side("lexical", queries, 400)
    for qid, docs in lucene.items():
        for docid, score in docs.items():
            assert lexical[qid][docid] == pytest.approx(1.9 * score, rel=1e-4, abs=1e-5)
    with pytest.raises(ValueError, match="lexical_scale must be one of"):
        RoC(tiny_encoder(pooling="cls"), lexical_scale="bm25")


def test_exact_fusion_is_bm25_plus_lambda_cls_over_the_union(tiny, tiny_bm25) -> None:
    from retrieval_zoo.index.vectors.union import HybridRetriever

    model = RoC(tiny_encoder(pooling="cls")).eval()
    index = Union(depth=30, weight=2.0)
    retriever = index.build(model, tiny, tiny_bm25)
    assert isinstance(retriever, HybridRetriever)
    queries = dict(list(tiny.judged_queries("dev").items())[:10])
    lexical, semantic = retriever.side("lexical", queries, 30), retriever.side("semantic", queries, 30)
    assert lexical == tiny_bm25.search(queries, 30)  # Lucene's own BM25, not the projection
    union = [(q, d) for q in queries for d in sorted(lexical[q].keys() | semantic[q].keys())]
    bm25_everywhere = dict(zip(union, tiny_bm25.pair_scores(queries, union), strict=True))
    docids = sorted({d for _, d in union})
    with torch.inference_mode():
        dots = model.encode_query(list(queries.values())) @ model.encode_doc([tiny.corpus[d] for d in docids]).T
    cls = {q: dict(zip(docids, row.tolist(), strict=True)) for q, row in zip(queries, dots, strict=True)}
    for qid, docs in retriever.search(queries, 10).items():
        for docid, score in docs.items():  # Eq. 11 with exact BM25, both scores exact for every document
            assert score == pytest.approx(float(bm25_everywhere[qid, docid]) + 2.0 * cls[qid][docid], abs=1e-3)
    chosen = index.tune(retriever, queries, {q: tiny.qrels["dev"][q] for q in queries})
    assert chosen["value"] == retriever.weight and chosen["parameter"] == "semantic_weight"
    with pytest.raises(ValueError, match="weighted must be one of"):
        Union(weighted="bm25")


def test_tuning_picks_lambda_on_the_grid(tiny, tiny_bm25) -> None:
    model = RoC(tiny_encoder(pooling="cls")).eval()
    index = Concatenated(weight_grid=(0.0, 1.0))
    retriever = index.build(model, tiny, tiny_bm25)
    queries = dict(list(tiny.judged_queries("dev").items())[:10])
    chosen = index.tune(retriever, queries, {q: tiny.qrels["dev"][q] for q in queries})
    assert chosen["parameter"] == "semantic_weight" and set(chosen["curve"]) == {0.0, 1.0}
    assert chosen["measure"] == "MAP@1000" and chosen["value"] == retriever.weight
    assert torch.is_tensor(model.lexical([{}]))


@pytest.mark.slow
def test_roc_trains_and_evaluates_with_its_complementarity(tiny_dir, tmp_path) -> None:
    import json

    from tests.test_end_to_end import run_app, tiny_dataset

    out = tmp_path / "roc"
    run_app(
        "train.py", "method=roc", *tiny_dataset(tiny_dir), "backbone=tiny_random", "trainer=cpu",
        "trainer.max_epochs=1", "data.batch_size=8", "data.val_queries=10", "eval.k=100", "eval.tune_queries=10",
        "index.weight_grid=[0.0,1.0,2.0]", "logger=csv", f"hydra.run.dir={out}",
    )  # fmt: skip
    results = json.loads((out / "results.json").read_text())
    assert set(results["metrics"]) == {"BM25", "roc", "roc (lexical)", "roc (semantic)"}
    assert results["tuning"]["parameter"] == "semantic_weight" and results["tuning"]["measure"] == "MAP@1000"
    assert results["complementarity"]["U"] == 30 and (out / "roc.dev.png").exists()
    logged = (out / "csv" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"train/loss/nll", "train/loss/ortho", "train/orthogonality"} <= set(logged)


def test_a_batch_with_bm25_vectors_as_tensors_trains_exactly_as_with_dicts(tiny, tiny_bm25) -> None:
    from retrieval_zoo.lexical.sparse_rows import SparseBatch
    from retrieval_zoo.training.datamodule import TriplesDataModule

    model = RoC(tiny_encoder(pooling="cls"), mask_fraction=0.0).eval()
    settings = {"batch_size": 8, "needs": model.needs, "epochs": 1, "tokenizer": model.text_tokenizer()}
    tensors = TriplesDataModule(tiny, tiny_bm25, term_keys=model.term_keys(), **settings)
    dicts = TriplesDataModule(tiny, tiny_bm25, **settings)
    tensors.setup(), dicts.setup()
    items = [(q, tensors.sampling.group(q, 0)) for q in tensors.train_qids[:4]]
    fast, slow = tensors.collate(items), dicts.collate(items)
    assert isinstance(fast.bm25_doc_vectors, SparseBatch) and isinstance(slow.bm25_doc_vectors, list)
    assert torch.equal(model.lexical(fast.bm25_doc_vectors), model.lexical(slow.bm25_doc_vectors))
    assert torch.equal(model.lexical(fast.bm25_query_vectors), model.lexical(slow.bm25_query_vectors))
    with torch.no_grad():
        assert model.losses(fast)[0]["ortho"] == model.losses(slow)[0]["ortho"]  # the very same loss
