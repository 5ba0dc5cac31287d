"""The max with first positions computed by float arithmetic on a CPU (retrieval_zoo/lexical/maxima.py)."""

import pytest
import torch

from retrieval_zoo.lexical import maxima
from retrieval_zoo.lexical.maxima import max_with_positions_


def test_max_with_positions_by_hand() -> None:
    x = torch.tensor([[[1.0, 5.0, -2.0], [3.0, 5.0, -2.0], [3.0, 0.0, -1.0]]])  # (1, 3 positions, 3 columns)
    values, positions = max_with_positions_(x.clone(), dim=1)
    assert values.tolist() == [[3.0, 5.0, -1.0]]
    assert positions.tolist() == [[1, 0, 2]]  # column 0: 3 at 1 and 2, the first; column 1: 5 at 0 and 1


@pytest.mark.parametrize("dim", [0, 1, 2])
@pytest.mark.parametrize("limit", [maxima.CPU_BYTES, 0])  # the float passes, then torch's own max
def test_max_with_positions_is_torch_max_ties_and_infinities_included(dim: int, limit: int, monkeypatch) -> None:
    monkeypatch.setattr(maxima, "CPU_BYTES", limit)
    torch.manual_seed(0)
    x = torch.randn(6, 9, 40).round(decimals=1)  # one decimal: many equal values, so many ties
    x[2, :, 5] = x[2, 4, 5]  # a whole column tied
    x[:, 3] = float("-inf")  # masked positions
    x[4, :, :] = float("-inf")  # a column of −inf along every axis for some slices: position 0, as torch gives
    x[1, 0, 0] = -0.0  # a negative zero beside zeros
    x[1, 1, 0] = 0.0
    expected = x.max(dim=dim)
    values, positions = max_with_positions_(x.clone(), dim=dim)
    assert torch.equal(values, expected.values) and torch.equal(positions, expected.indices)


def test_other_dtypes_take_torch_max_and_keep_their_input() -> None:
    x = torch.randn(3, 300, 4).to(torch.bfloat16)  # 300 positions: more than bf16 counts exactly
    before = x.clone()
    values, positions = max_with_positions_(x, dim=1)
    assert torch.equal(x, before)
    assert torch.equal(values, before.max(dim=1).values) and torch.equal(positions, before.max(dim=1).indices)
