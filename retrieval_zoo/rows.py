"""Row gathers and row sums that give the same bits on every run, on the CPU and on CUDA.

Gathering rows by advanced indexing (``table[index]``) backpropagates through ``index_put_(accumulate=True)``. On the
CPU that kernel adds rows with parallel atomic adds once the index covers 32,768 elements or more and torch has more
than one thread, so rows whose index repeats are summed in an order that changes from run to run (CSurF's training
gave a different model each time; PyTorch lists the op among the CPU's non-deterministic ones). ``index_add_`` on the
CPU walks the index in order. On CUDA it is the other way round: ``index_add_`` adds with atomics, while
``index_put_(accumulate=True)`` sorts the index first. Each helper takes the deterministic one of the two for the
tensor's device; the values are those of plain indexing.
"""

from __future__ import annotations

import torch


def take_rows(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``table[index]`` along dim 0, with a backward that sums repeated rows in a fixed order.

    Args:
        table: (N, ...) rows.
        index: (M,) row numbers, repeats allowed.

    Returns:
        (M, ...) the indexed rows.
    """
    return table[index] if table.is_cuda else table.index_select(0, index)


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
