"""The max over one axis with the first position of each maximum: ``x.max(dim)``, faster on a CPU for small tensors.

On a CPU, torch's max that keeps positions walks the reduced axis element by element, about 1 ns an element on
2 cores: 30 times a max without positions on a (2, 8, 30,522) tensor, and the largest single op of a DeLADE or
CSurF training step at small sizes. :func:`max_with_positions_` finds the positions with vectorised float
arithmetic instead, in place on a tensor the caller is done with: x − max is 0 exactly at a maximum and negative
elsewhere, so sign(x − max)·(n + 1) + (n − i) is n − i at a maximum and negative below it, and its max over the axis
gives the first maximum's position i. Six passes over the tensor are cheaper than torch's one while the tensor
stays in cache; beyond :data:`CPU_BYTES` (and on other devices, where the max with positions is one fast kernel)
torch's own max runs. Both give the same maxima and positions; a test holds them equal, ties included.
"""

from __future__ import annotations

import torch

# Below 8 MiB the float passes took 0.4–0.7 of torch's time on the 2-core AMD EPYC measured (family 25, model 17);
# above it, 0.6–1.25 by shape (python -m benchmarks.maxima).
CPU_BYTES = 8 * 2**20


def max_with_positions_(x: torch.Tensor, dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """``x.max(dim)``: the maxima over ``dim`` and the first position of each, overwriting ``x``.

    Args:
        x: A float tensor the caller no longer needs: its values are overwritten on a CPU.
        dim: The axis reduced.

    Returns:
        (maxima, positions), ``x``'s shape without ``dim``; a column of −inf has position 0, as torch's max gives.
        A column holding NaN or +inf is left to torch's own max only beyond the size limit: below it, its position
        is 0 (in training, the gradients of such a step are not finite either way).
    """
    n = x.shape[dim]
    if x.device.type != "cpu" or x.dtype != torch.float32 or x.numel() * x.element_size() > CPU_BYTES or n >= 2**23:
        return x.max(dim=dim)
    maxima = x.amax(dim=dim, keepdim=True)
    shape = [1] * x.dim()
    shape[dim] = n
    rank = torch.arange(n, 0, -1, dtype=x.dtype, device=x.device).view(shape)  # n for position 0, 1 for the last
    score = x.sub_(maxima).sign_().mul_(n + 1).add_(rank)  # n − i at a maximum, below 0 elsewhere (NaN: −inf − −inf)
    first = score.amax(dim=dim).nan_to_num_(nan=n)
    return maxima.squeeze(dim), (n - first).long()
