"""Collectives that keep in-batch losses exact under data parallelism (DDP, any backend: gloo, NCCL).

With D ranks, each rank holds B/D of a global batch of B queries. A loss whose value on each rank is its share of
the global loss, such that the global loss is the mean of the ranks' values, gets the single-process gradient from
DDP's gradient averaging, provided every tensor gathered from other ranks carries its gradient back to the rank that
computed it. :func:`gather_rows` does this: the backward pass sums, over ranks, the gradient each rank's loss sends to
the gathered rows, and returns to each rank the rows it contributed (a reduce-scatter). Then:

- in-batch negatives: each rank scores its queries against every document of the global batch;
- FLOPS: every rank computes the regulariser on the mean over the global batch (:func:`global_mean`), the same
  value on all ranks, whose gradient DDP's averaging makes exact;
- per-query losses (a hinge over the query's own group, KD over its group): each rank's mean over its queries,
  averaged over ranks, is the global mean, since every rank holds the same number of queries.

Without an initialised process group every function is the identity, so one code path serves one CPU and many GPUs.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def world() -> tuple[int, int]:
    """(rank, world size) of this process; (0, 1) without an initialised process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def collective_device() -> torch.device:
    """Where tensors for the default process group's collectives live: the current GPU under NCCL, else the CPU."""
    if dist.is_available() and dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class _GatherRows(torch.autograd.Function):
    """All-gather of tensors whose first dimension may differ between ranks, with the gradient sent back."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, tensor: torch.Tensor, sizes: list[int]) -> torch.Tensor:
        padded = tensor.new_zeros((max(sizes), *tensor.shape[1:]))
        padded[: len(tensor)] = tensor
        parts = [torch.empty_like(padded) for _ in sizes]
        dist.all_gather(parts, padded.contiguous())
        ctx.sizes, ctx.rank = sizes, dist.get_rank()
        return torch.cat([part[:size] for part, size in zip(parts, sizes, strict=True)])

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)  # Σ over ranks of the gradient each rank's loss sends to every gathered row
        start = sum(ctx.sizes[: ctx.rank])
        return grad[start : start + ctx.sizes[ctx.rank]], None


def row_counts(rows: int) -> list[int]:
    """Every rank's ``rows``, in rank order (one small all-gather)."""
    _, size = world()
    if size == 1:
        return [rows]
    device = collective_device()  # NCCL gathers CUDA tensors only
    counts = [torch.zeros(1, dtype=torch.long, device=device) for _ in range(size)]
    dist.all_gather(counts, torch.tensor([rows], dtype=torch.long, device=device))
    return [int(c) for c in counts]


def gather_rows(tensor: torch.Tensor, sizes: list[int] | None = None) -> tuple[torch.Tensor, int]:
    """Concatenate every rank's ``tensor`` along dimension 0, in rank order, keeping the gradient.

    Args:
        tensor: (n_r, ...) this rank's rows; n_r may differ between ranks. Booleans are gathered as uint8.
        sizes: Every rank's n_r, when the caller knows them (several tensors of equal length gathered together);
            default: one small all-gather finds them.

    Returns:
        The (Σ n_r, ...) rows of all ranks, and the index of this rank's first row among them.
    """
    rank, size = world()
    if size == 1:
        return tensor, 0
    sizes = sizes if sizes is not None else row_counts(len(tensor))
    boolean = tensor.dtype == torch.bool
    rows = _GatherRows.apply(tensor.to(torch.uint8) if boolean else tensor, sizes)
    return (rows.bool() if boolean else rows), sum(sizes[:rank])


def global_mean(rows: torch.Tensor) -> torch.Tensor:
    """Mean over dimension 0 of every rank's rows: (n_r, ...) → (...), the same value on every rank, with gradient."""
    _, size = world()
    if size == 1:
        return rows.mean(dim=0)
    sums, _ = gather_rows(rows.sum(dim=0, keepdim=True))
    return sums.sum(dim=0) / sum(row_counts(len(rows)))
