"""CSurF's E×E cell maxima (``lexical.csf_fixed``): torch's float ``scatter_reduce(amax)`` against
:func:`~retrieval_zoo.lexical.csf_fixed.scatter_amax` (integer maxima on the floats' bits), side by side.

The shapes are a training step's E×E on a bert-base-size vocabulary: B queries' |V| forms, each the value of one
query token's cell, against n documents. Each contender runs its forward, then forward and backward; a third takes the
backward's tie counts by a one-hot product instead of ``scatter_add`` (``--onehot``), to see whether the backward's
atomics matter too. The ratio is contender ÷ torch: below 1 where it pays. All give the same bits (checked here).

    python -m benchmarks.scatter_amax [--device cuda] [--batch 32] [--query-length 32] [--docs 64]
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.common import header, side_by_side, synced
from retrieval_zoo.lexical.csf_fixed import BITS, scatter_amax


class _OnehotCounts(torch.autograd.Function):
    """``scatter_amax`` with the backward's tie counts as (B, Lq, |V|) one-hot × (B, |V|, n) equalities."""

    @staticmethod
    def forward(ctx, cells: torch.Tensor, sources: torch.Tensor, value: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
        index = sources.unsqueeze(2).expand(-1, -1, cells.shape[2])
        bits = BITS[cells.dtype]
        out = cells.view(bits).scatter_reduce(1, index, value.view(bits), "amax", include_self=True).view(cells.dtype)
        ctx.save_for_backward(cells, sources, value, out)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, torch.Tensor]:  # noqa: ANN001
        cells, sources, value, out = ctx.saved_tensors
        index = sources.unsqueeze(2).expand(-1, -1, cells.shape[2])
        start_is_max, value_is_max = cells == out, value == out.gather(1, index)
        onehot = torch.zeros(cells.shape[0], cells.shape[1], sources.shape[1], device=cells.device)
        onehot.scatter_(1, sources.unsqueeze(1), 1.0)
        counts = start_is_max.to(grad.dtype) + torch.bmm(onehot, value_is_max.to(onehot.dtype))
        share = grad / counts
        return start_is_max * share, None, value_is_max * share.gather(1, index)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--query-length", type=int, default=32)
    parser.add_argument("--docs", type=int, default=64, help="candidates a query: 32 queries × (1 + 1) in-batch")
    parser.add_argument("--vocab", type=int, default=30522)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    device, generator = torch.device(args.device), torch.Generator().manual_seed(0)
    batch, length, count = args.batch, args.query_length, args.docs
    # about half the products are 0 (a form the query or the document does not expand): ties for the backward
    value = torch.relu(torch.randn(batch, args.vocab, count, generator=generator)).to(device).requires_grad_()
    sources = torch.randint(0, length, (batch, args.vocab), generator=generator).to(device)
    index = sources.unsqueeze(2).expand(-1, -1, count)
    cells = torch.zeros(batch, length, count, device=device, requires_grad=True)
    upstream = torch.randn(batch, length, count, generator=generator).to(device)
    contenders = {
        "torch": lambda: cells.scatter_reduce(1, index, value, "amax", include_self=True),
        "bits": lambda: scatter_amax(cells, index, value),
        "bits, one-hot counts": lambda: _OnehotCounts.apply(cells, sources, value),
    }
    results = {name: fn() for name, fn in contenders.items()}
    grads = {name: torch.autograd.grad((out * upstream).sum(), [cells, value]) for name, out in results.items()}
    for name in contenders:
        same = torch.equal(results[name], results["torch"]) and all(
            torch.equal(a, b) for a, b in zip(grads[name], grads["torch"], strict=True)
        )
        assert same, f"{name} does not give torch's bits"

    def both(fn: object) -> None:
        torch.autograd.grad((fn() * upstream).sum(), [cells, value])

    header(f"E×E cell maxima on {device}: ({batch}, {args.vocab}, {count}) values into ({batch}, {length}, {count})")
    forward = side_by_side({k: synced(fn) for k, fn in contenders.items()}, repeat=args.repeat)
    backward = side_by_side({k: synced(lambda fn=fn: both(fn)) for k, fn in contenders.items()}, repeat=args.repeat)
    print("| contender | forward (ms) | ÷ torch | forward + backward (ms) | ÷ torch |\n|---|---|---|---|---|")
    for name in contenders:
        f, fb = forward[name], backward[name]
        ratios = f"{f / forward['torch']:.2f} | {1000 * fb:.2f} | {fb / backward['torch']:.2f}"
        print(f"| {name} | {1000 * f:.2f} | {ratios} |")


if __name__ == "__main__":
    main()
