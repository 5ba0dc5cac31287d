"""BMP as an index (retrieval_zoo/index/terms/bmp.py): quantization worked by hand, and bmp 0.2.8's limits kept."""

import sys

import pytest
import torch

from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.index.terms import bmp as bmp_index
from retrieval_zoo.index.terms.bmp import Bmp, BmpRetriever
from retrieval_zoo.index.terms.bmp_engine import SCORE_LIMIT, query_impacts
from retrieval_zoo.index.terms.impact import quantize

VOCAB = 6


def corpus(rows: list[list[float]], cls: list[list[float]] | None = None) -> CorpusShards:
    """Shards of documents d0, d1, ... whose lexical vectors are ``rows`` (and [CLS] vectors ``cls``)."""
    lexical = torch.tensor(rows)
    docids = [f"d{i}" for i in range(len(rows))]

    def encode(ids: list[str]) -> dict[str, torch.Tensor]:
        picked = [int(d[1:]) for d in ids]
        payload = {"lexical": lexical[picked]}
        return payload | ({"cls": torch.tensor(cls)[picked]} if cls else {})

    return CorpusShards.on_demand(docids, encode, shard_size=16)


def query_encoder(vectors: dict[str, list[float]], cls: dict[str, list[float]] | None = None):
    def encode(texts: list[str]) -> tuple[torch.Tensor, torch.Tensor | None]:
        lexical = torch.tensor([vectors[t] for t in texts])
        return lexical, torch.tensor([cls[t] for t in texts]) if cls else None

    return encode


def test_document_weights_round_to_impacts_by_one_scale() -> None:
    assert quantize(torch.tensor([0.0, 0.001, 0.004, 1.0, 2.0]), 255 / 2.0).tolist() == [0, 0, 1, 128, 255]


def test_query_impacts_put_the_largest_weight_at_32_and_leave_out_unmatched_terms() -> None:
    weights, term_max = torch.tensor([0.5, 1.0, 0.25, 0.0, 0.7]), torch.tensor([255, 255, 255, 255, 0])
    impacts, scale, cut = query_impacts(weights, term_max)
    assert scale == 32.0 and impacts.tolist() == [16, 32, 8, 0, 0] and cut == 0  # the last term: no document has it


def test_a_long_query_is_searched_coarser_then_cut_so_that_no_score_can_pass_16_bits() -> None:
    weights = torch.tensor([1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1])
    impacts, scale, cut = query_impacts(weights, torch.full((10,), 255))
    # (32 + 29 + 26 + 22 + 19 + 16 + 13 + 10 + 6 + 3) · 255 = 176 · 255 = 44,880 ≤ 65,535: kept at 32 levels
    assert impacts.tolist() == [32, 29, 26, 22, 19, 16, 13, 10, 6, 3] and scale == 32.0 and cut == 0
    impacts, scale, cut = query_impacts(torch.ones(10), torch.full((10,), 255))
    # 10 · 32 · 255 = 81,600: the scale goes down by 65,535 / 81,600 to 25.7 (10 · 26 · 255 = 66,300, still over),
    # then by 65,535 / 66,300 to 25.4: 10 · 25 · 255 = 63,750
    assert impacts.tolist() == [25] * 10 and 25 <= scale < 25.5 and cut == 0
    impacts, scale, cut = query_impacts(torch.ones(40), torch.full((40,), 255))
    # even at 8 levels 40 · 8 · 255 = 81,600: the terms past 32 (32 · 8 · 255 = 65,280) are cut
    assert impacts.tolist() == [8] * 32 + [0] * 8 and scale == 8.0 and cut == 8
    assert int((impacts * 255).sum()) <= SCORE_LIMIT


def test_bmp_scores_the_quantized_inner_product_worked_by_hand() -> None:
    rows = [[0.0] * VOCAB for _ in range(40)]  # 40 documents: 5 blocks of 8
    rows[3][1], rows[3][2] = 2.0, 1.0  # impacts (scale 255 / 2): 255, 128
    rows[17][1] = 1.0  # 128
    rows[30][2], rows[30][4] = 2.0, 0.5  # 255, 64
    rows[39][5] = 1.0  # matches no query term
    retriever = BmpRetriever.from_shards(query_encoder({"q": [0.0, 1.0, 0.5, 0.0, 0.0, 0.0]}), corpus(rows), lam=1.0,
                             discard=0, block_size=8, rescore=False)  # fmt: skip
    run = retriever.search({"q1": "q"}, 10)
    scale = 255 / 2.0 * 32  # the query's impacts: 32 and 16
    expected = {"d3": (32 * 255 + 16 * 128) / scale, "d30": 16 * 255 / scale, "d17": 32 * 128 / scale}
    assert list(run["q1"]) == ["d3", "d17", "d30"]  # only matching documents, best first (d30: the last block)
    assert run["q1"] == pytest.approx(expected, rel=1e-12)
    assert run["q1"]["d3"] == pytest.approx(2.0 * 1.0 + 1.0 * 0.5, rel=0.01)  # near the exact inner product
    assert retriever.lexical_nonzero == 6 / 40


def test_rescoring_ranks_bmps_documents_by_the_float_query_against_their_impacts() -> None:
    rows = [[0.0] * VOCAB for _ in range(16)]
    rows[4][2] = 2.0  # d4: impact 255 on term 2 (scale 255 / 2)
    rows[9][1] = 1.0  # d9: impact 128 on term 1
    encode = query_encoder({"q": [0.0, 1.0, 0.51, 0.0, 0.0, 0.0]})  # BMP's query impacts: 32 and round(16.32) = 16
    coarse = BmpRetriever.from_shards(encode, corpus(rows), lam=1.0, discard=0, block_size=4, rescore=False)
    # 32 levels: d9 = 32 · 128 = 4,096 beats d4 = 16 · 255 = 4,080, though 1.0 · 128 < 0.51 · 255 = 130.05
    assert list(coarse.search({"q1": "q"}, 10)["q1"]) == ["d9", "d4"]
    rescored = BmpRetriever.from_shards(encode, corpus(rows), lam=1.0, discard=0, block_size=4)
    run = rescored.search({"q1": "q"}, 10)["q1"]
    assert list(run) == ["d4", "d9"]
    assert run == pytest.approx({"d4": 0.51 * 255 / 127.5, "d9": 1.0 * 128 / 127.5}, rel=1e-7)  # float32 weights
    assert list(rescored.search({"q1": "q"}, 1)["q1"]) == ["d4"]  # k = 1: the top of the re-scored list
    assert rescored.nbytes > coarse.nbytes  # the forward index: 17 offsets, 2 postings


def test_a_query_past_16_bits_still_finds_its_top_documents() -> None:
    for terms, pruned, kept in ((12, 0, 12), (40, 1, 32)):  # 12 terms: searched at 21 levels; 40: 8 levels, 8 cut
        rows = [[0.0] * terms for _ in range(16)]
        rows[5], rows[9] = [1.0] * terms, [0.9] * terms  # 255 and 230 on every term: 12 · 32 · 255 would wrap around
        for rescore, score in ((False, kept), (True, terms)):  # BMP's score: the kept terms, at 21 or 8 levels;
            retriever = BmpRetriever.from_shards(query_encoder({"q": [1.0] * terms}), corpus(rows), lam=1.0, discard=0,
                                     block_size=4, rescore=rescore)  # fmt: skip
            run = retriever.search({"q1": "q"}, 2)["q1"]
            assert list(run) == ["d5", "d9"] and retriever.pruned_queries == pruned
            assert run["d5"] == pytest.approx(score * 1.0 * 1.0, rel=0.03)  # re-scored: every term, at float weight


def test_the_cls_part_reranks_the_engines_candidates_and_searches_alone() -> None:
    rows = [[0.0] * VOCAB for _ in range(16)]
    rows[2][1], rows[7][1] = 2.0, 1.0
    cls = [[0.0, 0.0] for _ in range(16)]
    cls[7], cls[11] = [3.0, 0.0], [5.0, 0.0]  # d11 matches no term: the engine never returns it
    encode = query_encoder({"q": [0.0, 1.0, 0.0, 0.0, 0.0, 0.0]}, {"q": [1.0, 0.0]})
    retriever = BmpRetriever.from_shards(encode, corpus(rows, cls), lam=1.0, discard=0, block_size=4)
    fused = retriever.search({"q1": "q"}, 10)
    assert list(fused["q1"]) == ["d7", "d2"] and fused["q1"]["d7"] == pytest.approx(1.0 * 128 / 127.5 + 3.0)
    lexical = retriever.search({"q1": "q"}, 10, part="lexical")["q1"]
    assert list(lexical) == ["d2", "d7"] and retriever.search({"q1": "q"}, 10, weight=0.0)["q1"] == lexical
    assert list(retriever.search({"q1": "q"}, 2, part="semantic")["q1"]) == ["d11", "d7"]


def test_a_missing_engine_fails_when_the_config_is_read_with_the_install_command(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "bmp", None)
    with pytest.raises(ImportError, match=r"pip install bmp==0\.2\.8"):
        Bmp()


def test_bad_settings_and_too_many_terms_are_clear_errors(monkeypatch) -> None:
    with pytest.raises(ValueError, match="alpha and index.beta must be in"):
        Bmp(alpha=1.5)
    with pytest.raises(ValueError, match="oversample must be at least 1"):
        Bmp(oversample=0)
    monkeypatch.setattr(bmp_index, "TERM_LIMIT", 2)
    rows = [[1.0, 1.0, 1.0, 0.0, 0.0, 0.0]] * 16
    with pytest.raises(ValueError, match="3 distinct terms; BMP .* indexes at most 2"):
        BmpRetriever.from_shards(query_encoder({}), corpus(rows), lam=1.0, discard=0)


def engine_runs(index, tmp_path) -> tuple[dict, dict, object]:
    """BM25's DLR vectors of the 10k-document collection, 1,200 dev queries at k = 1000 (the README's table):
    runs and MRR@10 of exact search, of ``index``'s engine and of exact search over the engine's impacts."""
    from benchmarks.common import composed
    from benchmarks.sparse_engines import quantized_reference
    from retrieval_zoo.data.collections import embedded
    from retrieval_zoo.evaluation.metrics import evaluate
    from retrieval_zoo.index.terms.sparse import Sparse
    from retrieval_zoo.lexical.lucene_bm25 import BM25

    collection, model = embedded("default"), composed("method", "dlr_bm25").eval()
    queries, qrels, bm25 = collection.judged_queries("dev"), collection.qrels["dev"], BM25(collection)
    shards = CorpusShards(list(collection.corpus), 4096, tmp_path / "shards")
    encode = Sparse().doc_encoder(model, collection, bm25)
    with torch.inference_mode():
        for shard in shards.missing():
            shards.write(shard, encode(shards.shard_docids(shard)))
        engine = index.build(model, collection, bm25, shards)
        runs = {name: retriever.search(queries, 1000, part="lexical") for name, retriever in (
            ("exact", Sparse().build(model, collection, bm25, shards)), ("engine", engine),
            ("impacts", quantized_reference(engine, shards, tmp_path / "quantized")))}  # fmt: skip
    return runs, {name: evaluate(run, qrels)["MRR@10"] for name, run in runs.items()}, engine


@pytest.mark.slow
def test_bmp_ranks_as_exact_search_over_its_impacts_on_the_embedded_collection(tmp_path) -> None:
    from retrieval_zoo.data.collections import embedded
    from retrieval_zoo.evaluation.metrics import evaluate, top_k_overlap

    runs, mrr, engine = engine_runs(Bmp(), tmp_path)  # re-scored (the default)
    assert abs(mrr["engine"] - mrr["exact"]) <= 0.002  # issue 21's bounds
    assert top_k_overlap(runs["engine"], runs["exact"], 10) >= 0.99
    engine.forward = None  # index.rescore=false: BMP's own ranking
    collection = embedded("default")
    coarse = engine.search(collection.judged_queries("dev"), 1000, part="lexical")
    assert abs(evaluate(coarse, collection.qrels["dev"])["MRR@10"] - mrr["exact"]) <= 0.002
    assert top_k_overlap(coarse, runs["impacts"], 10) >= 0.995  # the engine searches its impacts exactly ...
    assert top_k_overlap(coarse, runs["exact"], 10) >= 0.975  # ... and its 32 query levels cost 2% (0.982 measured)
    assert engine.pruned_queries == 0
