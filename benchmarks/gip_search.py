"""Gated-inner-product search over DLRs (delade-dhr.md §3.4): two-stage vs. exact GIP, and GIP vs. faiss Flat.

On the embedded collection's dev queries, with BM25's (or the backbone's SPLADE) term vectors densified into
M-dimensional DLRs, or a trained DeLADE / DeLADE+[CLS] run's DLRs / DHRs (``--run-dir``), side by side in one run:
- exact GIP over the whole corpus (the reference);
- two-stage search: approximate GIP over the query dimensions with value > θ (Eq. 18), top K′, exact re-rank;
- two-stage search with faiss Flat inner product over the values as the first stage;
- faiss Flat inner product over the same value vectors alone (gates ignored: what GIP adds over a plain index).
It prints latency per query and its ratio to exact GIP, MRR@10 and R@100 and their difference from exact GIP, and
the index sizes beside the full sparse vectors'.

    python -m benchmarks.gip_search [--lexical bm25|splade] [--slices 768] [--theta 0.3] [--candidates 1000]
    python -m benchmarks.gip_search --run-dir outputs/<date>/<time>_delade_cls
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import composed, header, side_by_side
from retrieval_zoo.data.collections import embedded
from retrieval_zoo.evaluation.metrics import evaluate
from retrieval_zoo.index.shards import CorpusShards, ShardEncoder
from retrieval_zoo.index.terms.gip import Gip
from retrieval_zoo.index.vectors.faiss import FaissIndex
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.methods.method import RetrievalMethod


def trained_model(run_dir: Path) -> RetrievalMethod:
    """A train.py run's best checkpoint."""
    from retrieval_zoo.trained import load_trained, trained_config

    return load_trained(run_dir, trained_config(run_dir)).eval()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lexical", choices=["bm25", "splade"], default="bm25")
    parser.add_argument("--slices", type=int, default=768)
    parser.add_argument("--theta", type=float, default=0.3)
    parser.add_argument("--candidates", type=int, default=1000)
    parser.add_argument("--timed-queries", type=int, default=200, help="queries in each timed search")
    parser.add_argument("--run-dir", type=Path, default=None, help="a trained delade / delade_cls run instead")
    args = parser.parse_args()
    collection = embedded("default")
    queries, qrels = collection.judged_queries("dev"), collection.qrels["dev"]
    if args.run_dir is not None:
        model, name = trained_model(args.run_dir), f"{args.run_dir.name} (trained)"
    else:
        model, name = composed("method", f"dlr_{args.lexical}").eval(), args.lexical
    gip, bm25, docids = Gip(slices=args.slices, first_stage=None), BM25(collection), list(collection.corpus)
    encode = gip.doc_encoder(model, collection, bm25)
    one_shard = CorpusShards.on_demand(docids, encode, len(docids))
    with torch.inference_mode():  # densified into M slices in one shard: the index whose searches are timed
        retriever = gip.build(model, collection, bm25, one_shard)
    index, qids = retriever.index, list(queries)
    values, indices = retriever.represent_queries(queries)
    flat = FaissIndex("Flat").build(index.values.float().cpu().numpy(), index.docids.tolist())
    searches = {
        "exact GIP": lambda n: index.search(values[:n], indices[:n], qids[:n], 100),
        f"two-stage: approximate GIP (θ = {args.theta})": lambda n: index.search(
            values[:n], indices[:n], qids[:n], 100, "approximate_gip", args.theta, args.candidates
        ),
        "two-stage: faiss Flat IP first": lambda n: index.search(
            values[:n], indices[:n], qids[:n], 100, "inner_product", candidates=args.candidates
        ),
        "faiss Flat IP on the values alone": lambda n: flat.search(values[:n].astype(np.float32), qids[:n], 100),
    }
    n = min(args.timed_queries, len(qids))
    timings = side_by_side({name: (lambda fn=fn: fn(n)) for name, fn in searches.items()}, repeat=3)
    metrics = {name: evaluate(fn(len(qids)), qrels) for name, fn in searches.items()}
    reference, exact_seconds = metrics["exact GIP"], timings["exact GIP"]
    header(f"GIP search over {name} DLRs/DHRs, M = {args.slices}, K′ = {args.candidates}, {len(index.docids):,} docs")
    print("| search | ms / query | × exact GIP | MRR@10 | Δ MRR@10 | R@100 | Δ R@100 |")
    print("|---|---|---|---|---|---|---|")
    for name, seconds in timings.items():
        m = metrics[name]
        print(
            f"| {name} | {1000 * seconds / n:.2f} | {seconds / exact_seconds:.2f} | {m['MRR@10']:.4f} | "
            f"{m['MRR@10'] - reference['MRR@10']:+.4f} | {m['R@100']:.4f} | {m['R@100'] - reference['R@100']:+.4f} |"
        )
    full, dense = sparse_bytes(encode, docids), len(index.docids) * retriever.slicing.vocab_size * 4
    print(f"\nindex: {index.nbytes / 2**20:.2f} MiB as DLRs (float16 values + {retriever.slicing.index_dtype} "
          f"positions), {full / 2**20:.2f} MiB as sparse vectors (int32 id + float32 weight per non-zero), "
          f"{dense / 2**20:.0f} MiB as dense |V| float32 vectors")  # fmt: skip
    print(f"threads: {torch.get_num_threads()}; timed on the first {n} queries, best of 3, in alternation")


def sparse_bytes(encode: ShardEncoder, docids: list[str], sample: int = 500) -> float:
    """Estimated size of the corpus's full sparse vectors, from the non-zeros of a sample of its documents."""
    with torch.inference_mode():
        lexical = encode(docids[:sample])["lexical"]
    return float((lexical != 0).sum()) / min(sample, len(docids)) * len(docids) * 8


if __name__ == "__main__":
    main()
