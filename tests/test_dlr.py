import numpy as np
import pytest
import torch

from retrieval_zoo.index.terms.dlr import Slicing, densify, gip, hybrid


def test_stride_slicing_map_by_hand() -> None:
    # |V| = 12, 2 discarded, M = 4 slices of N = ceil(10 / 4) = 3: j = id − 2; slice j mod 4, position j // 4.
    slicing = Slicing(vocab_size=12, slices=4, discard=2, strategy="stride")
    assert slicing.width == 3 and slicing.index_dtype == np.uint8
    slices, positions = slicing.slot(np.array([2, 3, 6, 7, 11]))
    assert slices.tolist() == [0, 1, 0, 1, 1] and positions.tolist() == [0, 0, 1, 1, 2]
    # cells row-major (slice, position): slice 0 holds j = 0, 4, 8 → ids 2, 6, 10; slice 2 holds j = 2, 6, (10: pad)
    assert slicing.order.tolist() == [2, 6, 10, 3, 7, 11, 4, 8, -1, 5, 9, -1]
    with pytest.raises(ValueError, match=r"ids must lie in \[2, 12\)"):
        slicing.slot(np.array([1]))


def test_contiguous_and_random_slicing_are_bijections() -> None:
    contiguous = Slicing(vocab_size=12, slices=4, discard=2, strategy="contiguous")
    assert contiguous.slot(np.array([2, 4, 5, 11]))[0].tolist() == [0, 0, 1, 3]  # j // 3
    for strategy in ("contiguous", "stride", "random"):
        slicing = Slicing(vocab_size=1000, slices=64, discard=30, strategy=strategy, seed=3)
        ids = np.arange(30, 1000)
        slices, positions = slicing.slot(ids)
        assert len(set(zip(slices.tolist(), positions.tolist(), strict=True))) == len(ids)  # no two ids share a cell
        assert (slicing.term_id(slices, positions) == ids).all()
    assert Slicing(1000, 64, 30, "random", seed=3).order.tolist() == Slicing(1000, 64, 30, "random", 3).order.tolist()
    assert Slicing(1000, 64, 30, "random", seed=4).order.tolist() != Slicing(1000, 64, 30, "random", 3).order.tolist()
    assert Slicing(vocab_size=100_000, slices=64, discard=0).index_dtype == np.uint16
    with pytest.raises(ValueError, match="slicing strategy"):
        Slicing(vocab_size=12, slices=4, strategy="hash")


def test_densify_keeps_each_slice_maximum_and_its_position() -> None:
    slicing = Slicing(vocab_size=12, slices=4, discard=2, strategy="stride")
    bow = torch.zeros(1, 12)
    bow[0, 0] = 9.0  # discarded
    bow[0, 6], bow[0, 10] = 0.5, 0.75  # both in slice 0 (positions 1, 2): 0.75 wins
    bow[0, 9] = 2.0  # slice 3, position 1
    values, indices = densify(bow, slicing)
    assert values.dtype == np.float16 and indices.dtype == np.uint8
    assert values.tolist() == [[0.75, 0.0, 0.0, 2.0]] and indices[0, [0, 3]].tolist() == [2, 1]


@pytest.mark.parametrize("strategy", ["stride", "contiguous", "random"])
def test_densify_of_csr_entries_equals_the_dense_path_ties_and_empty_slices_included(strategy: str) -> None:
    from retrieval_zoo.term_matrix import to_csr

    slicing = Slicing(vocab_size=1000, slices=64, discard=30, strategy=strategy, seed=1)
    rng = np.random.default_rng(0)
    bow = torch.zeros(12, 1000)
    for row in range(12):  # sparse rows, a few values repeated (ties within a slice), one row empty
        ids = rng.choice(1000, size=row * 6, replace=False)
        bow[row, ids] = torch.from_numpy(rng.choice([0.5, 1.0, 1.5, 2.25], size=len(ids))).float()
    bow[3, :30] = 5.0  # discarded ids never win
    csr_values, csr_indices = densify(to_csr(bow), slicing)
    dense_values, dense_indices = densify(bow, slicing)
    assert csr_values.tolist() == dense_values.tolist() and csr_indices.tolist() == dense_indices.tolist()
    with_negative = bow.clone()
    with_negative[5, 40] = -1.0  # the dense path, whose zeros beat a negative entry, decides
    assert densify(to_csr(with_negative), slicing)[1].tolist() == densify(with_negative, slicing)[1].tolist()


def test_gip_equals_the_exact_inner_product_when_slices_do_not_collide() -> None:
    slicing = Slicing(vocab_size=30522, slices=768, discard=570)
    rng = np.random.default_rng(0)
    slices = rng.permutation(768)[:40]  # one term per slice at most: no collisions

    def vector(active: np.ndarray) -> torch.Tensor:
        bow = torch.zeros(30522)
        for s in active:
            position = rng.integers(0, 2)  # query and document terms in a slice agree about half the time
            bow[int(slicing.term_id(np.array([s]), np.array([position]))[0])] = float(rng.uniform(0.1, 2))
        return bow

    q, d = vector(slices[:25]), vector(slices[10:])
    (qv, qi), (dv, di) = densify(q[None], slicing), densify(d[None], slicing)
    exact = float(q.half().float() @ d.half().float())  # DLR values are float16
    approx = gip(torch.from_numpy(qv), torch.from_numpy(qi), torch.from_numpy(dv), torch.from_numpy(di))
    assert exact > 0 and approx.item() == pytest.approx(exact, rel=1e-5)


def test_gip_and_dhr_by_hand() -> None:
    q_values, q_indices = torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[0, 5, 7]], dtype=torch.uint8)
    d_values, d_indices = torch.tensor([[4.0, 5.0, 6.0]]), torch.tensor([[0, 5, 1]], dtype=torch.uint8)
    assert gip(q_values, q_indices, d_values, d_indices).item() == 1 * 4 + 2 * 5  # slot 2: gate closed
    # DHR with λ = 4: the [CLS] part adds λ·<q_cls, d_cls> = 4·(1·2 + 3·1) = 20 through an always-open gate.
    qv, qi = hybrid(q_values.numpy(), q_indices.numpy(), np.array([[1.0, 3.0]]), lam=4.0)
    dv, di = hybrid(d_values.numpy(), d_indices.numpy(), np.array([[2.0, 1.0]]), lam=4.0)
    assert qi.tolist() == [[0, 5, 7, 1, 1]] and qv.dtype == np.float16
    score = gip(*(torch.from_numpy(a) for a in (qv, qi, dv, di)))
    assert score.item() == pytest.approx(14 + 20)


def test_explain_reverts_open_gates_to_vocabulary_ids() -> None:
    from retrieval_zoo.index.terms.dlr import explain

    slicing = Slicing(vocab_size=12, slices=4, discard=2, strategy="stride")
    q, d = torch.zeros(12), torch.zeros(12)
    q[6], q[9], q[3] = 2.0, 1.0, 5.0  # ids 6 (slice 0, pos 1), 9 (slice 3, pos 1), 3 (slice 1, pos 0)
    d[6], d[9], d[7] = 0.5, 4.0, 1.0  # 7 is slice 1, pos 1: same slice as the query's 3, another term: gate closed
    (qv, qi), (dv, di) = densify(q[None], slicing), densify(d[None], slicing)
    assert explain(qv[0], qi[0], dv[0], di[0], slicing) == [(9, 1.0, 4.0), (6, 2.0, 0.5)]
