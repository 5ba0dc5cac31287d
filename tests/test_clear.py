import pytest
import torch

from retrieval_zoo.index.vectors.union import HybridRetriever, Union
from retrieval_zoo.methods.clear import CLEAR
from retrieval_zoo.training.datamodule import TrainBatch
from tests.conftest import CLEAR_MARKERS, clear_encoder, float32_rounding


def test_markers_are_single_added_tokens() -> None:
    model = CLEAR(clear_encoder())
    tokenizer = model.encoder.tokenizer
    for marker in CLEAR_MARKERS.values():
        ids = tokenizer(f"{marker} hello", add_special_tokens=False)["input_ids"]
        assert len(ids) == 2 and ids[0] >= 30522  # a new id, not split into word pieces
    assert model.encoder.model.get_input_embeddings().num_embeddings == len(tokenizer)
    ids, _ = model.encoder.tokenize(["hello"], "query")  # the query side's texts start with <QRY>
    assert ids[0, 1].item() == tokenizer.convert_tokens_to_ids(CLEAR_MARKERS["query"])


def test_embedding_ignores_padding() -> None:
    """Eq. 2–3 average real tokens only: a text's vector is the same alone and padded beside a longer one."""
    model = CLEAR(clear_encoder()).eval()
    with torch.inference_mode():
        alone = model.encode_doc(["short text"])
        padded = model.encode_doc(["short text", "a much longer document that forces padding on the first"])
    # padding changes the batch's GEMM shapes, hence the order of each hidden unit's sums (width 32, 2 layers)
    assert torch.allclose(alone[0], padded[0], rtol=0, atol=float32_rounding(32 * 2) * float(alone.abs().max()))


def test_losses_use_the_bm25_residual() -> None:
    model = CLEAR(clear_encoder(), lambda_train=0.1, xi=1.0)
    batch = TrainBatch(
        qids=["q1", "q2"], queries=["alpha", "beta"], docids=[["p1", "n1"], ["p2", "n2"]],
        docs=["alpha doc", "other", "beta doc", "more"], bm25_scores=torch.tensor([[30.0, 5.0], [2.0, 4.0]]),
    )  # fmt: skip
    losses, diagnostics = model.losses(batch)
    assert set(losses) == {"hinge"}
    # Margins (Eq. 6): 1 − 0.1·25 = −1.5 and 1 − 0.1·(−2) = 1.2.
    assert torch.allclose(diagnostics["margin"], torch.tensor([[-1.5], [1.2]]))
    assert diagnostics["margin/fraction_nonpositive"].item() == 0.5


def test_normalised_margin_option() -> None:
    model = CLEAR(clear_encoder(), lambda_train=1.0, margin_normalization="pair_max")
    batch = TrainBatch(
        qids=["q1"], queries=["alpha"], docids=[["p1", "n1"]], docs=["alpha doc", "other"],
        bm25_scores=torch.tensor([[20.0, 5.0]]),
    )  # fmt: skip
    assert model.losses(batch)[1]["margin"].item() == pytest.approx(1 - (20 - 5) / 20)
    with pytest.raises(ValueError, match="margin_normalization"):
        CLEAR(clear_encoder(), margin_normalization="softmax")


LEXICAL_EVERYWHERE = {"a": 10.0, "b": 8.0, "c": 2.0, "d": 9.0}  # BM25(q, ·) over the whole corpus
DENSE_EVERYWHERE = {"a": 0.5, "b": 1.0, "c": 3.0, "d": 2.0}  # s_emb(q, ·)


class FakeBM25:
    def search(self, queries, k):
        return {"q": dict(sorted(LEXICAL_EVERYWHERE.items(), key=lambda kv: -kv[1])[:k])}

    def candidate_scores(self, queries, candidates):
        return {q: {d: LEXICAL_EVERYWHERE[d] for d in docs} for q, docs in candidates.items()}


class FakeDense:
    def search(self, queries, k):
        return {"q": dict(sorted(DENSE_EVERYWHERE.items(), key=lambda kv: -kv[1])[:k])}

    def candidate_scores(self, queries, candidates):
        return {q: {d: DENSE_EVERYWHERE[d] for d in docs} for q, docs in candidates.items()}


def test_fusion_ranks_the_union_by_eq_8_with_each_side_scoring_every_document() -> None:
    # BM25 top 2 = {a, d}, dense top 2 = {c, d}; the union {a, c, d} ranked by 0.5·BM25 + s_emb, each score exact:
    # a: 0.5·10 + 0.5 = 5.5, c: 0.5·2 + 3 = 4.0, d: 0.5·9 + 2 = 6.5.
    retriever = HybridRetriever(FakeBM25(), FakeDense(), weight=0.5, depth=2)
    run = retriever.search({"q": "text"}, k=3)
    assert run["q"] == pytest.approx({"d": 6.5, "a": 5.5, "c": 4.0})
    assert list(run["q"]) == ["d", "a", "c"]


def test_floor_union_scores_give_a_missing_document_the_sides_lowest_score() -> None:
    # The issue's four documents: with floors, c takes BM25's 2nd score (9) and a the dense side's 2nd (2):
    # a: 0.5·10 + 2 = 7.0, c: 0.5·9 + 3 = 7.5, d: 6.5; exact scoring ranks [d, a, c] instead of [c, a, d].
    retriever = HybridRetriever(FakeBM25(), FakeDense(), weight=0.5, depth=2, union_scores="floor")
    run = retriever.search({"q": "text"}, k=3)
    assert run["q"] == pytest.approx({"c": 7.5, "a": 7.0, "d": 6.5})
    assert list(run["q"]) == ["c", "a", "d"]
    with pytest.raises(ValueError, match="union_scores must be one of"):
        HybridRetriever(FakeBM25(), FakeDense(), weight=0.5, union_scores="approximate")


def test_a_side_alone_reuses_the_fused_search() -> None:
    calls = []

    class CountingDense(FakeDense):
        def search(self, queries, k):
            calls.append(k)
            return super().search(queries, k)

    retriever = HybridRetriever(FakeBM25(), CountingDense(), weight=0.5, depth=2)
    retriever.search({"q": "text"}, k=3)
    assert retriever.fused_parts == ("lexical", "semantic")
    assert {part: retriever.side(part, {"q": "text"}, 1) for part in retriever.fused_parts} == {
        "lexical": {"q": {"a": 10.0}},
        "semantic": {"q": {"c": 3.0}},
    }
    assert calls == [2]  # one dense search, shared by the fusion and the dense-only run
    retriever.side("semantic", {"q": "text"}, 5)  # deeper than the fusion's depth: a search of its own
    assert calls == [2, 5]


def test_tune_picks_the_best_lambda_on_held_out_queries() -> None:
    class Lex:
        def search(self, queries, k):
            return {"q": {"rel": 2.0, "x": 9.0}}

    class Dense:
        def search(self, queries, k):
            return {"q": {"rel": 5.0, "x": 1.0}}

    index = Union(weighted="lexical", weight_grid=(0.0, 0.5, 0.9), tune_measure="MRR@10")
    retriever = HybridRetriever(Lex(), Dense(), weight=0.9, weighted="lexical", depth=2, union_scores="floor")
    chosen = index.tune(retriever, {"q": "text"}, {"q": {"rel": 1}})
    # rel − x = (5 − 1) + λ·(2 − 9): rel ranks first for λ < 4/7, so 0.0 and 0.5 tie at MRR 1; ties go to the smaller.
    assert chosen["curve"] == {0.0: 1.0, 0.5: 1.0, 0.9: 0.5} and chosen["parameter"] == "lexical_weight"
    assert chosen["value"] == 0.0 == retriever.weight


def test_tuning_averages_over_the_held_out_queries_only(tiny, tiny_bm25, tmp_path) -> None:
    import json

    from retrieval_zoo.evaluation.stages import evaluate_method

    model = CLEAR(clear_encoder()).eval()
    index = Union(weighted="lexical", weight_grid=(0.9,), tune_measure="MRR@10", depth=50)
    evaluate_method(model, index, tiny, tiny_bm25, "dev", 20, tmp_path, "clear", tune_queries=10)
    results = json.loads((tmp_path / "results.json").read_text())
    tuning = results["tuning"]
    assert tuning["queries"] == 10
    metrics, below = results["metrics"], results["below_best_part"]  # the guard over every measure of the fusion
    for measure, value in metrics["clear"].items():
        best = max(metrics["clear (lexical)"][measure], metrics["clear (semantic)"][measure])
        assert (measure in below) == (value < best), measure
    # Averaged over all 120 training queries instead, the MRR could not exceed 10/120.
    assert tuning["curve"]["0.9"] > 0.5
