"""take_rows / add_rows: plain indexing's values, and the same bits on every run with two CPU threads."""

import torch

from retrieval_zoo.rows import add_rows, take_rows
from tests.conftest import float32_rounding


def test_take_and_add_rows_equal_plain_indexing() -> None:
    table = torch.arange(12.0).view(4, 3)
    index = torch.tensor([2, 0, 2])
    assert torch.equal(take_rows(table, index), table[index])
    assert add_rows(torch.zeros(4, 3), index, torch.ones(3, 3))[:, 0].tolist() == [1.0, 0.0, 2.0, 0.0]


def test_take_rows_backward_is_bitwise_repeatable_on_two_threads(two_threads) -> None:
    # 5,000 gathers of 16 floats from 8 rows: far above the 32,768 elements at which advanced indexing's backward
    # (index_put_ with accumulate) goes parallel and sums the repeated rows in a varying order.
    generator = torch.Generator().manual_seed(0)
    table = torch.randn(8, 16, generator=generator, requires_grad=True)
    index = torch.randint(0, 8, (5000,), generator=generator)
    upstream = torch.randn(5000, 16, generator=generator)
    first = torch.autograd.grad((take_rows(table, index) * upstream).sum(), table)[0]
    reference = torch.autograd.grad((table[index] * upstream).sum(), table)[0]  # its rows summed in another order
    atol = float32_rounding(len(index)) * float(upstream.abs().max())
    assert torch.allclose(first, reference, rtol=0, atol=atol)
    for _ in range(4):
        assert torch.equal(first, torch.autograd.grad((take_rows(table, index) * upstream).sum(), table)[0])
