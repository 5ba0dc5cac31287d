"""The max with first positions over a tensor's middle axis: torch's own against the float passes of
``retrieval_zoo.lexical.maxima``, side by side, on the shapes DeLADE's and CSurF's training steps reduce.

(B, L, |V|) tensors of DeLADE's candidates (a tiny step's, a CPU chunk's) and (B, L, 1,024) chunks of CSurF's pooled
projection, around the size limit (``CPU_BYTES``) below which ``max_with_positions_`` takes the float passes. Each
call gets a fresh copy of the tensor (the float passes overwrite it), made outside the timing. The ratio is float
passes ÷ torch: below 1 where they pay; the limit should sit where the ratio crosses 1 on the machines measured.

    python -m benchmarks.maxima
"""

from __future__ import annotations

import time

import torch

from benchmarks.common import header
from retrieval_zoo.lexical import maxima

SHAPES = [(2, 8, 30522), (4, 8, 30522), (1, 32, 30522), (1, 128, 30522), (8, 32, 30522), (1, 256, 30522),
          (16, 32, 1024), (64, 32, 1024), (16, 256, 1024), (64, 128, 1024)]  # fmt: skip


def best_of(fn: object, x: torch.Tensor, calls: int, repeat: int = 5) -> float:
    """Best mean seconds of ``calls`` calls of ``fn`` on fresh copies of ``x`` (the copies not timed)."""
    best = float("inf")
    for _ in range(repeat):
        copies = [x.clone() for _ in range(calls)]
        started = time.perf_counter()
        for copy in copies:
            fn(copy)
        best = min(best, (time.perf_counter() - started) / calls)
    return best


def main() -> None:
    torch.manual_seed(0)
    header("Max with first positions over axis 1: torch's max against the float passes")
    print(f"float passes taken up to {maxima.CPU_BYTES / 2**20:.0f} MiB\n")
    print("| shape | MiB | torch max (ms) | float passes (ms) | ratio |\n|---|---|---|---|---|")
    maxima.CPU_BYTES = 2**62  # the float passes at every size, to see where they stop paying (this process only)
    for shape in SHAPES:
        x = torch.softmax(torch.randn(shape), dim=-1) * torch.randn(shape[0], shape[1], 1)
        calls = max(2, min(20, int(2e7 / x.numel())))
        torch_max = best_of(lambda t: t.max(dim=1), x, calls)
        passes = best_of(lambda t: maxima.max_with_positions_(t, dim=1), x, calls)
        times = f"{1000 * torch_max:.2f} | {1000 * passes:.2f} | {passes / torch_max:.2f}"
        print(f"| {tuple(shape)} | {x.numel() * 4 / 2**20:.1f} | {times} |")


if __name__ == "__main__":
    main()
