"""Row gathers and row sums that give the same bits on every run, on the CPU and on CUDA.

Gathering rows by advanced indexing (``table[index]``) backpropagates through ``index_put_(accumulate=True)``. On the
CPU that kernel adds rows with parallel atomic adds once the index covers 32,768 elements or more and torch has more
than one thread, so rows whose index repeats are summed in an order that changes from run to run (CSurF's training
gave a different model each time; PyTorch lists the op among the CPU's non-deterministic ones). ``index_add_`` on the
CPU walks the index in order. On CUDA it is the other way round: ``index_add_`` adds with atomics, while
``index_put_(accumulate=True)`` sorts the index first. Each helper takes the deterministic one of the two for the
tensor's device; the values are those of plain indexing.

A vocabulary-sized table (the MLM head's (|V|, H) projection) that a step reads a few hundred rows of gets a dense
gradient per read: a (|V|, H) fill and a (|V|, H) sum each, most of a small CPU step. :func:`sparse_row_sums` gives the
same rows as a coalesced sparse tensor instead, each row summed in the same order as :func:`add_rows` into zeros:
autograd adds it into the other reads' dense gradient row by row, every element by the same single addition as the
dense sum's (only operands that x + 0 leaves alone are skipped), so the summed gradient has the same bits.
"""

from __future__ import annotations

import torch


def take_rows(table: torch.Tensor, index: torch.Tensor, sparse_gradient: bool = False) -> torch.Tensor:
    """``table[index]`` along dim 0, with a backward that sums repeated rows in a fixed order.

    Args:
        table: (N, ...) rows.
        index: (M,) row numbers, repeats allowed.
        sparse_gradient: On a CPU, give ``table`` its gradient as :func:`sparse_row_sums` (the same rows, no (N, ...)
            fill); only where another use of ``table`` in the same backward gives a dense one, which makes the
            summed gradient dense (an optimiser takes no sparse one).

    Returns:
        (M, ...) the indexed rows.
    """
    if table.is_cuda:
        return table[index]
    if sparse_gradient and table.device.type == "cpu" and table.requires_grad and torch.is_grad_enabled():
        return _SparseGradientRows.apply(table, index)
    return table.index_select(0, index)


def add_rows(target: torch.Tensor, index: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``target[index] += rows`` in place, rows whose index repeats all added, in a fixed order.

    Args:
        target: (N, ...) the tensor added into.
        index: (M,) row numbers, repeats allowed.
        rows: (M, ...) what is added.

    Returns:
        ``target``.
    """
    if target.is_cuda:
        return target.index_put_((index,), rows, accumulate=True)
    return target.index_add_(0, index, rows)


def sparse_row_sums(shape: torch.Size, index: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``add_rows(zeros(shape), index, rows)`` on a CPU as a coalesced sparse COO tensor: only the rows indexed.

    Args:
        shape: (N, ...) the dense tensor's shape.
        index: (M,) row numbers, repeats allowed.
        rows: (M, ...) what is added.

    Returns:
        A coalesced sparse tensor of ``shape`` (its indices sorted), each row the sum of its ``rows`` in index order.
    """
    unique, inverse = torch.unique(index, return_inverse=True)
    return coalesced(unique, rows.new_zeros((len(unique), *rows.shape[1:])).index_add_(0, inverse, rows), shape)


def coalesced(index: torch.Tensor, rows: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """The sparse COO tensor of ``shape`` whose rows ``index`` (sorted, each once) are ``rows``, marked coalesced."""
    return torch.sparse_coo_tensor(index.unsqueeze(0), rows, shape, is_coalesced=True, check_invariants=False)


class _SparseGradientRows(torch.autograd.Function):
    """``table.index_select(0, index)`` whose backward gives ``table`` :func:`sparse_row_sums`' gradient."""

    @staticmethod
    def forward(ctx, table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
        ctx.save_for_backward(index)
        ctx.shape = table.shape
        return table.index_select(0, index)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # noqa: ANN001
        (index,) = ctx.saved_tensors
        return sparse_row_sums(ctx.shape, index, grad), None
