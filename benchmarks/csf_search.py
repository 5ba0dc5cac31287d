"""CSurF search (csurf.md §4, §5.2): inverted lists vs. brute-force CSF scoring over the whole corpus.

On the embedded collection's dev queries, with a trained CSurF run (``--run-dir``) or, by default, CSurF on
SPLADE-tiny before training (its expansion weights, random 32-d vectors), side by side in one run on the same
encoded queries and corpus CSFs:
- inverted lists: each query CSF reads the list of its surface form only (the index's search), 32k CSF pairs at a
  time (``PAIR_CHUNK``) into a cell per (query token, document) of the lists (``dense_columns``); the same with cells
  for the documents the pairs reach only (a first pass finds them: the index's way on a shard too large for every
  cell), with each block scored by a torch.compile'd kernel (``index.compile=true``), and in one pass over all pairs
  (how training scores a batch);
- brute force: each query CSF is compared with every CSF of the corpus, and the same-form pairs scored.
Both max-reduce into (query token, document) and sum, so their top 10s must agree. It prints the latency per query
and its ratio, the operations per query (CSF pairs scored, or surface comparisons for brute force) beside E_OPS and
the all-to-all count a ColBERT-style soft match would need, and the index size.

    python -m benchmarks.csf_search [--run-dir outputs/<date>/<time>_csurf] [--prune-fraction 0.5]
        [--collection python_docstrings]

It also times the whole ``search`` call (query encoding, batching and the run's dicts included) and prints the cost
per CSF pair scored, the figure that must not grow with document length.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import get_args

import torch

from benchmarks.common import composed, header, side_by_side
from retrieval_zoo.data.collections import EmbeddedName, embedded
from retrieval_zoo.index.csurf.csf import InvertedLists
from retrieval_zoo.lexical.csf_bags import PAIR_CHUNK, CsfBags, Postings, dense_columns, max_sum_scores


def brute_force(query: CsfBags, postings: Postings, num_docs: int, chunk: int = 1 << 16) -> torch.Tensor:
    """(B, num_docs) §3.3 scores comparing every query CSF with every corpus CSF, ignoring the lists' offsets."""
    cells = torch.zeros(query.num_texts * query.length * num_docs)
    slot = query.text * query.length + query.source
    surface = torch.repeat_interleave(torch.arange(len(postings.ptr) - 1), postings.list_lengths())
    for first in range(0, len(postings.weight), chunk):
        same = query.surface.unsqueeze(1) == surface[first : first + chunk].unsqueeze(0)  # (Kq, chunk)
        a, b = same.nonzero(as_tuple=True)
        b = b + first
        value = query.weight[a] * postings.weight[b]
        if query.vector is not None:
            value = value * (query.vector[a] * postings.vector[b]).sum(-1)
        cells.scatter_reduce_(0, slot[a] * num_docs + postings.doc[b].long(), value, reduce="amax")
    return cells.view(query.num_texts, query.length, num_docs).sum(1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-dir", type=Path, default=None, help="a trained csurf run instead of the untrained model")
    parser.add_argument("--prune-fraction", type=float, default=0.0, help="α of post-hoc pruning")
    parser.add_argument("--timed-queries", type=int, default=100, help="queries in each timed search")
    parser.add_argument("--collection", choices=get_args(EmbeddedName), default="debian_descriptions")
    args = parser.parse_args()
    collection = embedded(name=args.collection)
    if args.run_dir is not None:
        from retrieval_zoo.trained import load_trained, trained_config

        model, name = load_trained(args.run_dir, trained_config(args.run_dir)), f"{args.run_dir.name} (trained)"
    else:
        model, name = composed("method", "csurf"), "CSurF on SPLADE-tiny, untrained vectors"
    model.eval()
    with torch.inference_mode():
        index = InvertedLists(prune_fraction=args.prune_fraction)
        shards = index.corpus_shards(model, collection, None, None)  # the whole corpus as one shard
        retriever = index.build(model, collection, None, shards)
    queries = dict(list(collection.judged_queries("dev").items())[: args.timed_queries])
    retriever.search(queries, 10)  # efficiency counts over these queries
    texts = list(queries.values())
    with torch.inference_mode():
        batches = [model.encode_query(texts[i : i + 8]) for i in range(0, len(texts), 8)]
    postings, num_docs = retriever.shards[0][0].to(torch.device("cpu")), len(retriever.docids)  # both on the CPU

    def inverted() -> list[torch.Tensor]:
        return [max_sum_scores(bags, postings, dense_columns(bags, postings), PAIR_CHUNK)[0] for bags in batches]

    def compacted() -> list[torch.Tensor]:
        return [max_sum_scores(bags, postings, pair_chunk=PAIR_CHUNK)[0] for bags in batches]

    def compiled() -> list[torch.Tensor]:
        return [max_sum_scores(bags, postings, dense_columns(bags, postings), PAIR_CHUNK, True)[0] for bags in batches]

    def one_pass() -> list[torch.Tensor]:
        return [max_sum_scores(bags, postings)[0] for bags in batches]

    def whole_search() -> None:
        retriever.search(queries, 1000)

    def scan() -> list[torch.Tensor]:
        return [brute_force(bags, postings, num_docs) for bags in batches]

    header(f"CSurF search over {num_docs:,} documents of {collection.name}, {len(texts)} dev queries: {name}")
    with torch.inference_mode():
        for bags in batches[:4]:  # the two agree on every document they score
            scores, columns, _ = max_sum_scores(bags, postings, pair_chunk=PAIR_CHUNK)
            assert torch.equal(scores, max_sum_scores(bags, postings)[0])  # blocks of pairs: the very same floats
            every = max_sum_scores(bags, postings, dense_columns(bags, postings), PAIR_CHUNK)[0]
            assert torch.equal(every[:, columns] if every.shape != scores.shape else every, scores)  # the same too
            fused = max_sum_scores(bags, postings, pair_chunk=PAIR_CHUNK, compiled=True)[0]  # compiled once here
            assert torch.allclose(fused, scores, rtol=1e-5, atol=1e-6)  # another summation order
            assert torch.allclose(brute_force(bags, postings, num_docs)[:, columns], scores, rtol=1e-5, atol=1e-6)
        searches = {
            "inverted lists": inverted,
            "compacted": compacted,
            "compiled": compiled,
            "one pass": one_pass,
            "brute force": scan,
            "search call": whole_search,
        }
        timings = side_by_side(searches, repeat=3)
    stats = retriever.efficiency()
    comparisons = stats["csf_per_query"] * len(postings.weight)
    print("| search | ms/query | ratio to inverted | operations/query |")
    print("|---|---|---|---|")
    per_query = {key: 1000 * value / len(texts) for key, value in timings.items()}
    print(f"| inverted lists | {per_query['inverted lists']:.2f} | 1.00 | {stats['pairs_per_query']:,.0f} CSF pairs |")
    ratio = per_query["compacted"] / per_query["inverted lists"]
    print(f"| inverted lists, cells of reached documents | {per_query['compacted']:.2f} | {ratio:.2f} | the same |")
    ratio = per_query["compiled"] / per_query["inverted lists"]
    print(f"| inverted lists, compiled | {per_query['compiled']:.2f} | {ratio:.2f} | the same pairs |")
    ratio = per_query["one pass"] / per_query["inverted lists"]
    print(f"| inverted lists, one pass | {per_query['one pass']:.2f} | {ratio:.2f} | the same pairs |")
    ratio = per_query["brute force"] / per_query["inverted lists"]
    print(f"| brute force | {per_query['brute force']:.2f} | {ratio:.2f} | {comparisons:,.0f} comparisons |")
    ns_per_pair = 1e6 * per_query["inverted lists"] / stats["pairs_per_query"]
    print(
        f"| search call, k = 1,000 (query encoding included) | {per_query['search call']:.2f} | "
        f"{per_query['search call'] / per_query['inverted lists']:.2f} | the same pairs |"
    )
    print(f"\n{ns_per_pair:.1f} ns per CSF pair scored (inverted lists).")
    print(f"|C^q| {stats['csf_per_query']:.1f}, |C^d| {stats['csf_per_doc']:.1f}; E_OPS {stats['e_ops']:.3f} "
          f"pairs per (q, d) vs. all-to-all {stats['all_to_all_ops']:.0f} ({stats['tokens_per_query']:.1f} x "
          f"{stats['tokens_per_doc']:.1f} tokens); index {retriever.nbytes / 2**20:.1f} MiB, "
          f"pruned share {stats['postings_pruned_share']:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
