import numpy as np
import pytest
import torch

from retrieval_zoo.index.terms.gip_search import GipIndex
from tests.conftest import float32_rounding


def random_dlr(rng: np.random.Generator, rows: int, dims: int = 16, width: int = 3):
    values = rng.uniform(0, 1, (rows, dims)).astype(np.float16)
    values[rng.uniform(size=(rows, dims)) < 0.5] = 0  # sparse-ish, non-negative like BM25 or SPLADE DLRs
    return values, rng.integers(0, width, (rows, dims)).astype(np.uint8)


def test_exact_search_by_hand() -> None:
    values = np.array([[1.0, 1.0], [3.0, 0.5], [2.0, 2.0]], dtype=np.float16)
    indices = np.array([[0, 1], [1, 1], [0, 0]], dtype=np.uint8)
    index = GipIndex(values, indices, ["a", "b", "c"], device="cpu")
    run = index.search(np.array([[1.0, 2.0]], dtype=np.float16), np.array([[0, 1]], dtype=np.uint8), ["q"], k=3)
    # a: 1·1 + 2·1 = 3; b: gate [0, 1] → 2·0.5 = 1; c: gate [1, 0] → 1·2 = 2
    assert run["q"] == {"a": 3.0, "c": 2.0, "b": 1.0} and list(run["q"]) == ["a", "c", "b"]
    assert index.nbytes == 3 * 2 * (2 + 1)  # float16 values + uint8 indices


@pytest.mark.parametrize("first_stage", ["approximate_gip", "inner_product"])
def test_two_stage_with_theta_zero_equals_exact_search(first_stage: str) -> None:
    rng = np.random.default_rng(0)
    values, indices = random_dlr(rng, 500)
    q_values, q_indices = random_dlr(rng, 20)
    index = GipIndex(values, indices, [f"d{i}" for i in range(500)], device="cpu", chunk_elements=4096)
    qids = [f"q{i}" for i in range(20)]
    exact = index.search(q_values, q_indices, qids, k=10)
    # θ = 0 keeps every dimension that can score, so approximate GIP is exact and K′ = 50 holds the exact top 10;
    # the inner-product first stage ignores gates (IP ≥ GIP here), so it needs a deeper K′ to hold them.
    candidates = 50 if first_stage == "approximate_gip" else 300
    two_stage = index.search(q_values, q_indices, qids, k=10, first_stage=first_stage, theta=0.0, candidates=candidates)
    for qid in qids:
        assert list(two_stage[qid]) == list(exact[qid])
        scores = np.asarray(list(exact[qid].values()))  # the gated sums over M dimensions, chunked differently
        atol = float32_rounding(values.shape[1]) * float(np.abs(scores).max())
        assert np.allclose(list(two_stage[qid].values()), scores, rtol=0, atol=atol)


def test_a_high_theta_approximates_and_bad_arguments_fail() -> None:
    rng = np.random.default_rng(1)
    values, indices = random_dlr(rng, 300)
    q_values, q_indices = random_dlr(rng, 5)
    index = GipIndex(values, indices, [f"d{i}" for i in range(300)], device="cpu")
    run = index.search(q_values, q_indices, list("abcde"), k=5, first_stage="approximate_gip", theta=2.0, candidates=20)
    exact = index.search(q_values, q_indices, list("abcde"), k=300)
    for qid, docs in run.items():  # scores are exact GIP even when the shortlist missed better documents
        assert len(docs) == 5 and all(score == pytest.approx(exact[qid][d], abs=1e-5) for d, score in docs.items())
    with pytest.raises(ValueError, match="first_stage"):
        index.search(q_values, q_indices, list("abcde"), k=5, first_stage="hnsw")
    with pytest.raises(ValueError, match="disagree"):
        GipIndex(values, indices[:5], ["x"] * 300)


@pytest.mark.parametrize("theta", [0.3, 2.0])
def test_the_batched_first_stage_ranks_as_the_per_query_loop(theta: float) -> None:
    """What a GPU runs (Eq. 18 as one chunked GIP a batch), run on the CPU: the same runs as the per-query loop."""
    rng = np.random.default_rng(2)
    values, indices = random_dlr(rng, 400)
    q_values, q_indices = random_dlr(rng, 12)
    qids, docids = [f"q{i}" for i in range(12)], [f"d{i}" for i in range(400)]
    settings = {"k": 10, "first_stage": "approximate_gip", "theta": theta, "candidates": 40, "batch_size": 5}
    runs = [GipIndex(values, indices, docids, device="cpu", chunk_elements=4096, batched_first_stage=batched)
            .search(q_values, q_indices, qids, **settings) for batched in (False, True)]  # fmt: skip
    assert runs[0] == runs[1]


@pytest.mark.parametrize("first_stage", [None, "approximate_gip"])
def test_positions_are_held_at_their_stored_width_and_gate_as_int32_would(first_stage: str | None) -> None:
    """uint16 positions (BM25's vocabulary in 768 slices) are held as int16 bits, uint8 ones as they are: a gate only
    compares positions for equality, so the runs equal those of the same positions held as int32, bit for bit."""
    rng = np.random.default_rng(3)
    values, _ = random_dlr(rng, 300)
    q_values, _ = random_dlr(rng, 8)
    wide = rng.choice([0, 1, 32767, 32768, 40000, 65535], size=(300, 16)).astype(np.uint16)  # either side of 2^15
    q_wide = rng.choice([0, 1, 32767, 32768, 40000, 65535], size=(8, 16)).astype(np.uint16)
    qids, docids = [f"q{i}" for i in range(8)], [f"d{i}" for i in range(300)]
    settings = {"k": 10, "first_stage": first_stage, "theta": 0.3, "candidates": 40}
    held = GipIndex(values, wide, docids, device="cpu")
    as_int32 = GipIndex(values, wide.astype(np.int64), docids, device="cpu")
    assert (held.indices.dtype, as_int32.indices.dtype) == (torch.int16, torch.int32)
    assert held.search(q_values, q_wide, qids, **settings) == as_int32.search(q_values, q_wide, qids, **settings)
    assert held.stored_positions(slice(None)).dtype == np.uint16
    assert np.array_equal(held.stored_positions(slice(5, 9)), wide[5:9])  # what save and explain read back
    narrow = rng.integers(0, 3, (300, 16)).astype(np.uint8)
    assert GipIndex(values, narrow, docids, device="cpu").indices.element_size() == 1
