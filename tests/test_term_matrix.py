"""Term weights as dense or CSR matrices: every operation equals its dense counterpart, and CSR stays CSR end to end."""

import pytest
import torch

from retrieval_zoo.encoding.batching import encode_payload
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.term_matrix import (
    cat_rows,
    column_max,
    columns_from,
    dense_rows,
    each_row,
    is_csr,
    nonzeros,
    row_range,
    take_rows,
    to_csr,
)


def weights(rows: int = 7, width: int = 11, seed: int = 0) -> torch.Tensor:
    """A mostly-zero non-negative (rows, width) matrix whose rows 0 and ``rows // 2`` are empty."""
    generator = torch.Generator().manual_seed(seed)
    matrix = torch.rand(rows, width, generator=generator)
    matrix[torch.rand(rows, width, generator=generator) < 0.7] = 0
    matrix[0], matrix[rows // 2] = 0, 0
    return matrix


def test_to_csr_keeps_the_non_zero_entries_row_by_row() -> None:
    matrix = torch.tensor([[0.0, 2.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0], [3.0, 0.0, 0.0, 0.0]])
    sparse = to_csr(matrix)
    assert is_csr(sparse) and sparse.crow_indices().tolist() == [0, 2, 2, 3]
    assert sparse.col_indices().tolist() == [1, 3, 0] and sparse.values().tolist() == [2.0, 1.0, 3.0]
    assert sparse.col_indices().dtype == torch.int32 and nonzeros(sparse) == nonzeros(matrix) == 3
    assert torch.equal(dense_rows(sparse), matrix) and to_csr(sparse) is sparse


@pytest.mark.parametrize("layout", ["dense", "csr"])
def test_row_operations_equal_the_dense_ones_in_either_layout(layout: str) -> None:
    matrix = weights()
    given = to_csr(matrix) if layout == "csr" else matrix
    for start, stop in [(0, 3), (2, 7), (4, 5), (6, 99), (3, 3)]:
        block = row_range(given, start, stop)
        assert is_csr(block) == (layout == "csr") and torch.equal(dense_rows(block), matrix[start:stop])
        assert torch.equal(dense_rows(given, start, stop), matrix[start:stop])
    rows = torch.tensor([6, 0, 3, 3, 4, 1])  # any order, repeats, the empty rows 0 and 3
    assert torch.equal(dense_rows(take_rows(given, rows)), matrix[rows])
    stacked = cat_rows([given, row_range(given, 2, 5), given])
    assert torch.equal(dense_rows(stacked), torch.cat([matrix, matrix[2:5], matrix]))
    for first in (0, 1, 5, 11):
        assert torch.equal(dense_rows(columns_from(given, first)), matrix[:, first:])
    assert torch.equal(column_max(given), matrix.amax(dim=0))
    assert torch.equal(torch.stack(list(each_row(given, block=3))), matrix)


def test_a_csr_row_range_views_its_matrix_arrays_instead_of_copying_them() -> None:
    given = to_csr(weights(rows=9))
    block = row_range(given, 3, 7)  # the exact index cuts every shard this way: no whole-shard int64 copy a block
    for array in ("col_indices", "values"):
        whole, part = getattr(given, array)(), getattr(block, array)()
        assert part.untyped_storage().data_ptr() == whole.untyped_storage().data_ptr()
    assert block.col_indices().dtype == block.crow_indices().dtype == torch.int32


def test_a_batched_csr_encoding_comes_back_in_input_order_and_stays_csr() -> None:
    matrix = weights(rows=9, width=5)
    texts = ["x" * n for n in (3, 9, 1, 7, 2, 8, 5, 4, 6)]  # batched by length, not in this order

    def encode(batch: list[str]) -> dict[str, torch.Tensor]:
        rows = torch.tensor([texts.index(text) for text in batch])
        return {"lexical": to_csr(matrix[rows]), "cls": matrix[rows, :2]}

    encoded = encode_payload(encode, texts, 2, "test")
    assert is_csr(encoded["lexical"]) and torch.equal(dense_rows(encoded["lexical"]), matrix)
    assert torch.equal(encoded["cls"], matrix[:, :2])


def test_shards_read_csr_back_as_csr_and_dense_as_dense(tmp_path) -> None:
    matrix = weights(rows=3, width=50)
    shards = CorpusShards(["a", "b", "c"], 3, tmp_path)
    shards.write(0, {"lexical": to_csr(matrix), "dense_lexical": matrix})
    read = shards.read(0)
    assert is_csr(read["lexical"]) and torch.equal(dense_rows(read["lexical"]), matrix)
    assert not is_csr(read["dense_lexical"]) and torch.equal(read["dense_lexical"], matrix)
