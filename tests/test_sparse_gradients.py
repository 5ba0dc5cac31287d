"""Sparse gradients of the tied vocabulary projection (rows.sparse_row_sums): the dense path's bits, every parameter."""

import pytest
import torch

from retrieval_zoo.lexical import splade
from retrieval_zoo.methods import csurf
from retrieval_zoo.methods.csurf import CSurF
from retrieval_zoo.rows import add_rows, sparse_row_sums, take_rows
from tests.conftest import tiny_encoder
from tests.conftest import two_query_batch as batch


def test_sparse_row_sums_are_add_rows_into_zeros_bit_for_bit() -> None:
    # rows 3 and 1 repeat: each is summed in index order from 0, as index_add_ into zeros does; −0 becomes +0 there too
    index = torch.tensor([3, 1, 3, 0, 3])
    rows = torch.tensor([[0.1, -0.0], [1e8, 2.0], [0.2, -0.0], [-0.0, 0.0], [0.3, 1e-8]])
    sparse = sparse_row_sums(torch.Size([5, 2]), index, rows)
    dense = add_rows(torch.zeros(5, 2), index, rows)
    assert sparse.is_coalesced() and sparse.indices().tolist() == [[0, 1, 3]]
    assert torch.equal(sparse.to_dense(), dense)
    assert torch.equal(sparse.to_dense().signbit(), dense.signbit())  # no −0 where add_rows gives +0


@pytest.mark.parametrize("sparse_first", [True, False])
def test_a_sparse_read_summed_with_a_dense_one_gives_the_dense_gradients_bits(sparse_first: bool) -> None:
    # autograd sums a table's gradients in the order they arrive: sparse or dense first, one addition per element
    generator = torch.Generator().manual_seed(0)
    table = torch.randn(50, 8, generator=generator, requires_grad=True)
    index = torch.randint(0, 50, (40,), generator=generator)
    upstream = torch.randn(40, 8, generator=generator)
    other = torch.randn(8, 6, generator=generator)

    def gradient(sparse: bool) -> torch.Tensor:
        gathered = (take_rows(table, index, sparse_gradient=sparse) * upstream).sum()
        dense = (table @ other).square().sum()  # a dense gradient for every row
        total = gathered + dense if sparse_first else dense + gathered
        (grad,) = torch.autograd.grad(total, table)
        return grad

    got, want = gradient(True), gradient(False)
    assert got.layout == torch.strided and torch.equal(got, want)


@pytest.mark.parametrize("vector_dim", [4, 0])
def test_csurf_step_with_sparse_projection_gradients_gives_every_parameter_the_dense_bits(
    monkeypatch, vector_dim: int
) -> None:
    # The MLM projection is tied to the input embeddings: its own reads (the pooled projection's backward, the
    # original tokens' rows) give sparse gradients, which the embeddings' dense one makes dense again.
    def gradients() -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = CSurF(tiny_encoder(mlm_head=True), vector_dim=vector_dim, lambda_q=0.5, lambda_d=0.25).eval()
        losses, _ = model.losses(batch())
        sum(losses.values()).backward()
        return [p.grad for p in model.parameters()]

    assert splade.tied_projection(CSurF(tiny_encoder(mlm_head=True)).encoder.model)
    sparse = gradients()
    monkeypatch.setattr(splade, "tied_projection", lambda _: False)
    monkeypatch.setattr(csurf, "tied_projection", lambda _: False)
    dense = gradients()
    assert all(g.layout == torch.strided for g in sparse)
    assert all(torch.equal(a, b) and torch.equal(a.signbit(), b.signbit()) for a, b in zip(sparse, dense, strict=True))
