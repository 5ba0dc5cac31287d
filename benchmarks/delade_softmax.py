"""DeLADE's Eq. 23, forward and backward: the CPU's exact path against the accelerator's fused softmax, side by side.

``lexical/delade_vectors`` takes exp(z − logsumexp(z)) on a CPU (the bits the registry holds) and torch's fused
softmax elsewhere (:func:`~retrieval_zoo.lexical.delade_vectors.fused_candidates`). On a GPU both are memory-bound
over (B, L, |V|) tensors, so what each path moves through them is the measure that holds on any machine: on the meta
device (shapes, no data) a :class:`TorchDispatchMode` adds up the bytes of every (B, L, |V|)-sized operand each op
reads and writes, views apart (a lower bound: a kernel that reads its input twice, as softmax does, counts it once;
a gather or scatter, the elements it touches), for the tiny
step's texts and the ``delade_cls_msmarco`` recipe's (24 queries of 32 tokens, 24 × 8 passages of 150). With
``--device cuda`` (or ``cpu``) it also times both paths in alternation on those shapes, logits in ``--dtype``.

    python -m benchmarks.delade_softmax [--device cuda --dtype bfloat16]
"""

from __future__ import annotations

import argparse
from functools import partial

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from benchmarks.common import header, seconds, synced
from benchmarks.step_ops import VIEWS
from retrieval_zoo.lexical.delade_vectors import _WeightedSoftmaxMax

VOCABULARY = 30522
SHAPES = {"tiny queries": (2, 8), "tiny documents": (4, 8), "recipe queries": (24, 32), "recipe passages": (192, 150)}
NO_DATA = frozenset(("empty", "empty_like", "empty_strided", "new_empty"))  # allocations: no bytes moved
INDEXED = frozenset(("gather", "scatter_", "scatter_add_"))  # (self, dim, index, ...): they touch the index's elements


class LargeOperandBytes(TorchDispatchMode):
    """Adds up the bytes of the operands with at least ``numel`` elements that each op reads or writes."""

    def __init__(self, numel: int) -> None:
        super().__init__()
        self.numel, self.bytes = numel, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if name in NO_DATA or name in VIEWS:
            return out
        if name in INDEXED:  # a (B, L, |V|) tensor read or written at one position a column: the index's size
            if args[0].numel() >= self.numel:
                self.bytes += 2 * args[2].numel() * args[0].element_size()
            return out
        read = tree_flatten((args, {k: v for k, v in kwargs.items() if k != "out"}))[0]
        for tensor in read + tree_flatten(out)[0]:  # inputs read, outputs written (in place: both)
            if isinstance(tensor, torch.Tensor) and tensor.numel() >= self.numel:
                self.bytes += tensor.numel() * tensor.element_size()
        return out


def step(z: torch.Tensor, weights: torch.Tensor, real: torch.Tensor, fused: bool) -> None:
    """Eq. 23's forward and backward as ``delade_vectors`` runs them: the CPU path on float32 copies of the logits."""
    logits = z.detach().requires_grad_(True)
    out = _WeightedSoftmaxMax.apply(logits if fused else logits.float(), weights, real, fused)
    out.backward(torch.ones_like(out))


def inputs(shape: tuple[int, int], device: str, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """(B, L, |V|) logits, (B, L) weights needing gradients, (B, L) real positions ([CLS] and the last out)."""
    texts, length = shape
    make = torch.empty if device == "meta" else torch.randn
    z = make(texts, length, VOCABULARY, device=device, dtype=dtype)
    weights = make(texts, length, device=device).requires_grad_(True)
    real = torch.ones(texts, length, dtype=torch.bool, device=device)
    real[:, 0] = real[:, -1] = False
    return z, weights, real


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default=None, help="also time both paths on this device (cuda, cpu)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--timed", default=",".join(SHAPES), help="the shapes to time, by name, comma-separated")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    header(f"Eq. 23's forward and backward, exact (the CPU's) against fused (an accelerator's), {args.dtype} logits")
    print("| texts × tokens | exact GiB | fused GiB | fused ÷ exact | exact ms | fused ms | fused ÷ exact |")
    print("|---|---|---|---|---|---|---|")
    for name, shape in SHAPES.items():
        moved = []
        for fused in (False, True):
            z, weights, real = inputs(shape, "meta", dtype)
            with LargeOperandBytes(z.numel() // 4) as count:  # (B, L, |V|) tensors and chunks of them
                step(z, weights, real, fused)
            moved.append(count.bytes / 2**30)
        times = ["", "", ""]
        if args.device and name in args.timed.split(","):
            tensors = inputs(shape, args.device, dtype)
            exact, fused = (synced(partial(step, *tensors, fused=f)) for f in (False, True))
            exact(), fused()  # warm
            best = [float("inf"), float("inf")]
            for _ in range(args.repeat):  # in alternation, so both see the same machine
                best = [min(best[0], seconds(exact, 1, 0)), min(best[1], seconds(fused, 1, 0))]
            times = [f"{1000 * best[0]:.2f}", f"{1000 * best[1]:.2f}", f"{best[1] / best[0]:.2f}"]
        row = f"{name}: {shape[0]} × {shape[1]} | {moved[0]:.3f} | {moved[1]:.3f} | {moved[1] / moved[0]:.2f}"
        print(f"| {row} | {' | '.join(times)} |")


if __name__ == "__main__":
    main()
