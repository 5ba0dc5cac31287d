"""CSurF's fixed-shape scoring, eager against compiled (``method.compile_scoring``): kernels a call and time.

``lexical/csf_fixed.py`` scores every pair of CSFs the shapes allow in about a hundred small ops, forward and
backward, each a kernel launch on a GPU, where the tiny step's fixed cost waits on the host. ``torch.compile`` fuses
them: this counts the ops the eager scoring dispatches (a ``TorchDispatchMode``, views apart) against what the
compiled one runs (the kernels Inductor generated, each launched once a call, plus the ops its graphs call out to,
``bmm`` and ``scatter_reduce``, from the profiler), and times both, forward and backward, side by side. Sizes: the
fixed-cost step's (2 queries of 8 tokens, 4 documents of 8) and a training step's (32 queries of 32, 64 documents of
128), |V| = 30,522, |v| = 32, bags about as large as trained ones. Compiling needs a C++ compiler on a CPU.

    python -m benchmarks.compiled_scoring [--device cuda] [--sizes tiny,train] [--repeat 5]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial

import torch
import torch._inductor.metrics as inductor_metrics
import torch.nn.functional as F

from benchmarks.common import header, side_by_side, synced
from benchmarks.step_ops import counted
from retrieval_zoo.lexical.csf_fixed import compiled_block_scores, fixed_max_sum_scores
from retrieval_zoo.lexical.csf_texts import TextCsfs

SIZES = {"tiny": (2, 8, 4, 8), "train": (32, 32, 64, 128)}  # queries, their length, documents, their length
VOCAB, DIM = 30522, 32


def texts(count: int, length: int, expanded: int, generator: torch.Generator, device: torch.device) -> TextCsfs:
    """``count`` random texts' CSFs (``both``, cosine vectors), about ``expanded`` expansion CSFs a text, as leaves."""
    expansion = torch.rand(count, VOCAB, generator=generator) * (torch.rand(count, VOCAB, generator=generator) <
                                                                 expanded / VOCAB)  # fmt: skip
    sources = torch.randint(0, length, (count, VOCAB), generator=generator)
    own = torch.rand(count, length, generator=generator) * (torch.rand(count, length, generator=generator) < 0.5)
    ids = torch.randint(1000, 1000 + 4 * length, (count, length), generator=generator)  # forms repeat across texts
    vectors = F.normalize(torch.rand(count, length, DIM, generator=generator), dim=-1)
    leaves = [part.to(device).requires_grad_() for part in (expansion, own, vectors)]
    return TextCsfs(leaves[0], sources.to(device), leaves[1], ids.to(device), leaves[2],
                    torch.full((count,), length, device=device), "both")  # fmt: skip


def scoring(query: TextCsfs, docs: TextCsfs, compiled: bool) -> Callable[[], None]:
    """The scores' forward and backward to the texts' weights and vectors."""
    leaves = [query.expansion, query.own, query.vectors, docs.expansion, docs.own, docs.vectors]

    def run() -> None:
        scores = fixed_max_sum_scores(query, docs, compiled=compiled)
        torch.autograd.grad(scores.sum(), leaves)

    return run


def compiled_kernels(run: Callable[[], None]) -> tuple[int, int]:
    """(kernels Inductor generated for ``run``'s graphs, ops those graphs call out to in one call)."""
    torch._dynamo.reset()
    compiled_block_scores.cache_clear()
    inductor_metrics.reset()
    run()  # compiles forward and backward
    generated = inductor_metrics.generated_kernel_count
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        run()
    graphs = [event for event in profile.events() if event.name.startswith("## Call CompiledFxGraph")]
    return generated, sum(len(graph.cpu_children) for graph in graphs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--sizes", default="tiny,train")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    device = torch.device(args.device)
    header(f"CSurF's fixed-shape scoring, eager and compiled, forward and backward, on {device}")
    print("| sizes (queries × length, documents × length) | eager ops | compiled: generated kernels + calls out | "
          "eager ms | compiled ms | compiled ÷ eager |\n|---|---|---|---|---|---|")  # fmt: skip
    for name in args.sizes.split(","):
        queries, query_length, docs, doc_length = SIZES[name]
        generator = torch.Generator().manual_seed(0)
        query = texts(queries, query_length, 90, generator, device)  # trained bags: ~90 a query, ~230 a document
        documents = texts(docs, doc_length, 230, generator, device)
        eager, compiled = (partial(scoring, query, documents)(compiled=flag) for flag in (False, True))
        ops = sum(counted(eager).kernels.values())
        generated, calls = compiled_kernels(compiled)
        best = side_by_side({"eager": synced(eager), "compiled": synced(compiled)}, repeat=args.repeat)
        print(
            f"| {name}: {queries} × {query_length}, {docs} × {doc_length} | {ops} | {generated} + {calls} | "
            f"{1000 * best['eager']:.2f} | {1000 * best['compiled']:.2f} | {best['compiled'] / best['eager']:.2f} |"
        )


if __name__ == "__main__":
    main()
