"""Seismic as an index (retrieval_zoo/index/terms/seismic.py): float weights in, exact when nothing is pruned."""

import sys

import pytest
import torch

from retrieval_zoo.index.terms import seismic as seismic_index
from retrieval_zoo.index.terms.seismic import Seismic, SeismicRetriever
from tests.test_impact import VOCAB, corpus, query_encoder

EXHAUSTIVE = {"n_postings": 10_000, "query_cut": 1_000, "heap_factor": 1.0, "threads": 1}  # nothing pruned


def test_with_nothing_pruned_seismic_returns_the_exact_inner_products() -> None:
    rows = [[0.0] * VOCAB for _ in range(6)]
    rows[0][1], rows[0][2] = 2.0, 1.0
    rows[3][1] = 1.0
    rows[4][2], rows[4][4] = 2.0, 0.5
    rows[5][5] = 1.0  # matches no query term
    queries = {"q": [0.0, 1.0, 0.4, 0.0, 0.0, 0.0], "r": [0.0, 0.0, 0.0, 0.0, 2.0, 0.0], "none": [0.0] * VOCAB}
    retriever = SeismicRetriever.from_shards(query_encoder(queries), corpus(rows), lam=1.0, discard=0, **EXHAUSTIVE)
    run = retriever.search({"q1": "q", "q2": "r", "q3": "none"}, 10)
    assert list(run["q1"]) == ["d0", "d3", "d4"]  # only matching documents, best first, each query its own
    expected = {"d0": 2.0 + 0.4, "d3": 1.0, "d4": 0.8}
    assert run["q1"] == pytest.approx(expected, rel=1e-3)  # float16 document weights
    assert run["q2"] == pytest.approx({"d4": 1.0}, rel=1e-3) and run["q3"] == {}
    assert retriever.postings == 6 and retriever.scale == 1.0


def test_discarded_ids_are_left_out_and_the_cls_part_reranks() -> None:
    rows = [[0.0] * VOCAB for _ in range(12)]
    rows[2][1], rows[7][1] = 2.0, 1.0
    rows[11][0] = 9.0  # a discarded id: never indexed, never matched
    cls = [[0.0, 0.0] for _ in range(12)]
    cls[7], cls[11] = [3.0, 0.0], [5.0, 0.0]
    encode = query_encoder({"q": [9.0, 1.0, 0.0, 0.0, 0.0, 0.0]}, {"q": [1.0, 0.0]})
    retriever = SeismicRetriever.from_shards(encode, corpus(rows, cls), lam=1.0, discard=1, **EXHAUSTIVE)
    fused = retriever.search({"q1": "q"}, 10)["q1"]
    assert list(fused) == ["d7", "d2"] and fused["d7"] == pytest.approx(1.0 + 3.0, rel=1e-3)
    assert list(retriever.search({"q1": "q"}, 10, part="lexical")["q1"]) == ["d2", "d7"]


def test_pruning_settings_reach_the_engine() -> None:
    rows = [[0.0] * VOCAB for _ in range(40)]
    for number in range(40):
        rows[number][1] = 1.0 + number / 40  # one term, 40 postings
    encode = query_encoder({"q": [0.0, 1.0, 0.0, 0.0, 0.0, 0.0]})
    pruned = SeismicRetriever.from_shards(encode, corpus(rows), lam=1.0, discard=0, n_postings=5, threads=1)
    kept = pruned.search({"q1": "q"}, 40)["q1"]
    assert 0 < len(kept) < 40 and list(kept)[0] == "d39"  # the list kept its highest-weighted documents


def test_a_missing_engine_and_bad_settings_are_clear_errors(monkeypatch) -> None:
    with pytest.raises(ValueError, match="heap_factor must be in"):
        Seismic(heap_factor=1.5)
    with pytest.raises(ValueError, match="query_cut and index.max_doc_terms must be at least 1"):
        Seismic(query_cut=0)
    monkeypatch.setitem(sys.modules, "seismic", None)
    with pytest.raises(ImportError, match=r"pip install pyseismic-lsr==0\.5\.4"):
        Seismic()
    assert seismic_index.SMALL_VOCABULARY == 65_535


def test_csr_arrays_of_a_matrix() -> None:
    offsets, columns, values = seismic_index.csr_arrays(torch.tensor([[0.0, 2.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0, 3]]))
    assert offsets.tolist() == [0, 1, 1, 3] and columns.tolist() == [1, 0, 2] and values.tolist() == [2.0, 1.0, 3.0]


def test_a_near_dense_document_is_refused_before_the_engine_builds() -> None:
    rows = [[0.0] * VOCAB for _ in range(20)]
    rows[3][1] = 1.0
    rows[17] = [1.0] * VOCAB  # every term: the 18th document, in the second shard of 16
    with pytest.raises(ValueError, match=r"document row 17 has 6 non-zero term weights, over index.max_doc_terms=5"):
        SeismicRetriever.from_shards(query_encoder({}), corpus(rows), lam=1.0, discard=0, max_doc_terms=5, threads=1)
    SeismicRetriever.from_shards(
        query_encoder({}), corpus(rows), lam=1.0, discard=0, max_doc_terms=6, threads=1
    )  # at the limit
