import numpy as np
import pytest
import torch

from retrieval_zoo.lexical.projection import RademacherProjection
from tests.conftest import float32_rounding


def test_columns_are_rademacher_and_reproducible() -> None:
    a = RademacherProjection(dim=64, seed=7).columns(["python", "debian", "library"])
    assert a.shape == (3, 64) and set(np.unique(np.abs(a))) == {np.float32(1 / 8)}
    assert np.array_equal(a, RademacherProjection(dim=64, seed=7).columns(["python", "debian", "library"]))
    assert np.array_equal(a[1], RademacherProjection(dim=64, seed=7).columns(["debian"])[0])  # per term, not per call
    assert not np.array_equal(a, RademacherProjection(dim=64, seed=8).columns(["python", "debian", "library"]))
    assert (a > 0).sum(axis=1).min() > 20 and (a > 0).sum(axis=1).max() < 44  # balanced signs


def test_project_is_a_times_v() -> None:
    projection = RademacherProjection(dim=16, seed=1)
    vectors = [{"a": 2.0, "b": 0.5}, {}, {"b": 1.0, "c": 3.0}]
    a, b, c = projection.columns(["a", "b", "c"])
    expected = torch.tensor(np.stack([2 * a + 0.5 * b, np.zeros(16, dtype=np.float32), b + 3 * c]))
    assert torch.allclose(
        projection.project(vectors), expected, rtol=0, atol=float32_rounding(2) * float(expected.abs().max())
    )
    assert projection.project([{}, {}]).shape == (2, 16)


def test_inner_products_are_preserved_in_expectation() -> None:
    q = {"a": 1.5, "b": 2.0, "x": 0.7}
    d = {"a": 0.8, "b": 0.3, "c": 1.1, "e": 0.4}
    exact = 1.5 * 0.8 + 2.0 * 0.3  # = 1.8
    estimates = []
    for seed in range(400):
        pq, pd = RademacherProjection(dim=32, seed=seed).project([q, d])
        estimates.append(float(pq @ pd))
    assert np.mean(estimates) == pytest.approx(exact, abs=0.1)  # standard error ≈ 0.03
    # Each column has unit norm, so a vector's squared norm is kept exactly in expectation and closely per draw.
    norms = [float(RademacherProjection(dim=512, seed=s).project([q])[0].norm() ** 2) for s in range(20)]
    assert np.mean(norms) == pytest.approx(1.5**2 + 2.0**2 + 0.7**2, rel=0.05)


def test_keys_on_any_device_project_exactly_as_the_bags_of_words() -> None:
    from retrieval_zoo.lexical.sparse_rows import SparseRows

    projection = RademacherProjection(dim=96, seed=5)
    terms = [f"t{i}" for i in range(500)] + ["python", "ü", ""]
    keys = projection.term_keys(terms)
    assert np.array_equal(projection.columns_torch(torch.from_numpy(keys)).numpy(), projection.columns(terms))
    rng = np.random.default_rng(0)
    bags = [{t: float(rng.uniform(0.1, 3)) for t in rng.choice(terms, rng.integers(0, 30), replace=False)}
            for _ in range(40)]  # fmt: skip
    rows = SparseRows(bags, dict(zip(terms, keys.tolist(), strict=True)))
    picked = [7, 0, 39, 7]
    expected = projection.project([bags[i] for i in picked])
    assert torch.equal(projection.project_keys(rows.gather(torch.tensor(picked))), expected)  # the very same floats
    ids = [f"doc{i}" for i in range(40)]
    chunked = SparseRows.keyed(ids, lambda some: [bags[ids.index(i)] for i in some], projection.term_keys, chunk=6)
    for name in ("offsets", "columns", "weights"):  # built 6 bags at a time, the same arrays as all at once
        assert torch.equal(getattr(chunked, name), getattr(rows, name))
