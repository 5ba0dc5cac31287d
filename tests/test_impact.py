"""BMP as an index (retrieval_zoo/index/impact.py): quantization worked by hand, and bmp 0.2.8's limits kept."""

import sys

import pytest
import torch

from retrieval_zoo.index import impact
from retrieval_zoo.index.impact import SCORE_LIMIT, Bmp, BmpRetriever, quantize, query_impacts
from retrieval_zoo.index.shards import CorpusShards

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
    impacts, scale = query_impacts(torch.tensor([0.5, 1.0, 0.25, 0.0, 0.7]), torch.tensor([255, 255, 255, 255, 0]))
    assert scale == 32.0 and impacts.tolist() == [16, 32, 8, 0, 0]  # the last term: no document has it


def test_a_long_query_keeps_its_heaviest_terms_while_no_score_can_pass_16_bits() -> None:
    weights = torch.tensor([1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1])
    impacts, _ = query_impacts(weights, torch.full((10,), 255))
    # 32·255 + 29·255 + 26·255 + 22·255 + 19·255 + 16·255 + 13·255 = 157·255 = 40,035; + 10·255 = 42,585;
    # + 6·255 = 44,115; + 3·255 = 44,880: all fit
    assert impacts.tolist() == [32, 29, 26, 22, 19, 16, 13, 10, 6, 3]
    impacts, _ = query_impacts(torch.ones(10), torch.full((10,), 255))
    assert impacts.tolist() == [32] * 8 + [0, 0]  # 8 · 32 · 255 = 65,280 ≤ 65,535 < 9 · 32 · 255
    assert int((impacts * 255).sum()) <= SCORE_LIMIT


def test_bmp_scores_the_quantized_inner_product_worked_by_hand() -> None:
    rows = [[0.0] * VOCAB for _ in range(40)]  # 40 documents: 5 blocks of 8
    rows[3][1], rows[3][2] = 2.0, 1.0  # impacts (scale 255 / 2): 255, 128
    rows[17][1] = 1.0  # 128
    rows[30][2], rows[30][4] = 2.0, 0.5  # 255, 64
    rows[39][5] = 1.0  # matches no query term
    retriever = BmpRetriever(query_encoder({"q": [0.0, 1.0, 0.5, 0.0, 0.0, 0.0]}), corpus(rows), lam=1.0,
                             discard=0, block_size=8)  # fmt: skip
    run = retriever.search({"q1": "q"}, 10)
    scale = 255 / 2.0 * 32  # the query's impacts: 32 and 16
    expected = {"d3": (32 * 255 + 16 * 128) / scale, "d30": 16 * 255 / scale, "d17": 32 * 128 / scale}
    assert list(run["q1"]) == ["d3", "d17", "d30"]  # only matching documents, best first (d30: the last block)
    assert run["q1"] == pytest.approx(expected, rel=1e-12)
    assert run["q1"]["d3"] == pytest.approx(2.0 * 1.0 + 1.0 * 0.5, rel=0.01)  # near the exact inner product
    assert retriever.lexical_nonzero == 6 / 40


def test_a_query_past_16_bits_still_finds_its_top_document() -> None:
    rows = [[0.0] * VOCAB for _ in range(16)]
    rows[5] = [1.0] * VOCAB  # 255 on every term: 6 · 32 · 255 would wrap around in bmp 0.2.8
    rows[9] = [0.9] * VOCAB
    retriever = BmpRetriever(query_encoder({"q": [1.0] * VOCAB}), corpus(rows), lam=1.0, discard=0, block_size=4)
    run = retriever.search({"q1": "q"}, 2)
    assert list(run["q1"]) == ["d5", "d9"] and retriever.pruned_queries == 0  # 6 · 32 · 255 = 48,960 fits
    rows = [[0.0] * 12 for _ in range(16)]
    rows[5], rows[9] = [1.0] * 12, [0.9] * 12
    retriever = BmpRetriever(query_encoder({"q": [1.0] * 12}), corpus(rows), lam=1.0, discard=0, block_size=4)
    assert list(retriever.search({"q1": "q"}, 2)["q1"]) == ["d5", "d9"] and retriever.pruned_queries == 1


def test_the_cls_part_reranks_the_engines_candidates_and_searches_alone() -> None:
    rows = [[0.0] * VOCAB for _ in range(16)]
    rows[2][1], rows[7][1] = 2.0, 1.0
    cls = [[0.0, 0.0] for _ in range(16)]
    cls[7], cls[11] = [3.0, 0.0], [5.0, 0.0]  # d11 matches no term: the engine never returns it
    encode = query_encoder({"q": [0.0, 1.0, 0.0, 0.0, 0.0, 0.0]}, {"q": [1.0, 0.0]})
    retriever = BmpRetriever(encode, corpus(rows, cls), lam=1.0, discard=0, block_size=4)
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
    monkeypatch.setattr(impact, "TERM_LIMIT", 2)
    rows = [[1.0, 1.0, 1.0, 0.0, 0.0, 0.0]] * 16
    with pytest.raises(ValueError, match="3 distinct terms; BMP .* indexes at most 2"):
        BmpRetriever(query_encoder({}), corpus(rows), lam=1.0, discard=0)
