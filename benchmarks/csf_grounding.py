"""CSurF's grounding of each form on its source vector, forward and backward: a gather of rows or a one-hot product.

``lexical/csf_fixed.py`` reads v_{s_t} for every form t of every text, (|V|, T, dv) from (T, L, dv) vectors. A gather
of rows (``gathered_source_rows``: on a GPU, indexing, whose backward is torch's deterministic, sorting scatter)
against the product of the sources' one-hot matrix and the vectors (``source_rows``, whose backward is another
product), side by side at a training step's sizes: the queries (32 texts of 32 positions) and the documents of one
block (64 of 128).
The ratio is product ÷ gather: below 1 where the product pays (``grounds_by_product`` takes it off a CPU).

    python -m benchmarks.csf_grounding --device cuda
"""

from __future__ import annotations

import argparse
from functools import partial

import torch

from benchmarks.common import header, side_by_side, synced
from retrieval_zoo.lexical.csf_fixed import gathered_source_rows, source_rows


def by_product(vectors: torch.Tensor, sources: torch.Tensor) -> torch.Tensor:
    """(|V|, T, dv) by the one-hot product, in the layout ``csf_fixed`` reads."""
    return source_rows(vectors, sources).transpose(0, 1)


def step(ground: object, vectors: torch.Tensor, sources: torch.Tensor, upstream: torch.Tensor) -> tuple:
    """The grounded rows and the vectors' gradient under ``upstream``."""
    rows = ground(vectors, sources)
    (gradient,) = torch.autograd.grad(rows, vectors, upstream)
    return rows, gradient


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    parser.add_argument("--vocab", type=int, default=30522)
    parser.add_argument("--dim", type=int, default=32, help="|v|, the vectors' width")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    device, dtype = torch.device(args.device), torch.bfloat16 if args.dtype == "bf16" else torch.float32
    header(f"CSurF's grounding on {device} ({args.dtype}, |V| = {args.vocab:,}, |v| = {args.dim}): gather, product")
    print("| texts × positions | gather (ms) | product (ms) | product ÷ gather | largest |Δ| forward, backward |")
    print("|---|---|---|---|---|")
    generator = torch.Generator(device=device).manual_seed(0)
    for texts, length in ((32, 32), (64, 128)):
        vectors = torch.rand(texts, length, args.dim, device=device, dtype=dtype, generator=generator)
        sources = torch.randint(0, length, (texts, args.vocab), device=device, generator=generator)
        upstream = torch.rand(args.vocab, texts, args.dim, device=device, dtype=dtype, generator=generator)
        inputs = (vectors.requires_grad_(True), sources, upstream)
        grounds = {
            "gather": partial(step, gathered_source_rows, *inputs),
            "product": partial(step, by_product, *inputs),
        }
        timings = side_by_side({name: synced(fn) for name, fn in grounds.items()}, repeat=args.repeat)
        (rows_g, grad_g), (rows_p, grad_p) = grounds["gather"](), grounds["product"]()
        rows_g, rows_p = rows_g.detach(), rows_p.detach()
        forward = float((rows_g.float() - rows_p.float()).abs().max())
        backward = float((grad_g.float() - grad_p.float()).abs().max() / grad_g.float().abs().max())
        gather, product = 1000 * timings["gather"], 1000 * timings["product"]
        print(f"| {texts} × {length} | {gather:.2f} | {product:.2f} | {product / gather:.2f} | "
              f"{forward:.1e}, {backward:.1e} of the largest |")  # fmt: skip


if __name__ == "__main__":
    main()
