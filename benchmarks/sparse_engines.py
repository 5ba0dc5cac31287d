"""Learned sparse search in existing engines (BMP, Lucene impact, Seismic) against the project's exact search.

On the embedded collection's dev queries, a ``term_weights`` method's lexical vectors (the untrained SPLADE-tiny of
``dlr_splade`` by default; ``--method dlr_bm25``; or a trained DeLADE run with ``--run-dir``, its lexical part) are
encoded once into shards on disk; the exact sparse index (``index=sparse``), BMP (``index=bmp``), Anserini's impact
search (``index=lucene_impact``) and Seismic (``index=seismic``, approximate) are built from them, with exact search
over each quantizing engine's impacts; BMP both re-scored (its default) and by its own ranking.
Printed: ms a query (k = 1000, the same queries, encoded before, best of 3 in alternation), MRR@10, R@1000 and
their difference from exact, the overlap of each query's top 10 and top 1,000 with the exact ones (the latter:
recall of the exact top 1,000), and the index sizes. With ``--plot FOLDER``, also each search's latency against
its agreement with exact search (the top-1000 overlap), drawn from the same measurements into
``FOLDER/sparse_engines-<vectors>.png`` (the docs' figures: ``--plot docs/figures``).

    python -m benchmarks.sparse_engines [--method dlr_splade] [--run-dir outputs/<run>] [--timed-queries 200]
                                        [--plot docs/figures]
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
from pathlib import Path

import torch

from benchmarks.common import composed, header, side_by_side
from retrieval_zoo.data.collections import embedded
from retrieval_zoo.evaluation.metrics import evaluate, top_k_overlap
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.index.terms.bmp import Bmp
from retrieval_zoo.index.terms.impact import ImpactRetriever, quantize
from retrieval_zoo.index.terms.lucene_impact import LuceneImpact
from retrieval_zoo.index.terms.seismic import Seismic
from retrieval_zoo.index.terms.sparse import Sparse, SparseRetriever
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.reproduce.figures import scatter
from retrieval_zoo.term_matrix import csr, dense_rows, parts, to_csr


def memoized(encode):
    """``encode`` remembering each batch's output: the timed searches then measure search, not query encoding."""
    memory = {}

    def encode_once(batch):
        key = tuple(batch)
        if key not in memory:
            memory[key] = encode(batch)
        return memory[key]

    return encode_once


def quantized_reference(engine: ImpactRetriever, shards: CorpusShards, folder: Path) -> SparseRetriever:
    """Exact search over an engine's quantized impacts (mapped back by their scales): what it should return."""
    discard, quantized = engine.discard, CorpusShards(shards.docids, shards.shard_size, folder)
    for shard, (_, payload) in enumerate(shards):
        offsets, columns, values = parts(to_csr(payload["lexical"]))
        values = torch.where(columns >= discard, quantize(values, engine.scale) / engine.scale, 0).float()
        quantized.write(shard, {"lexical": csr(offsets, columns, values, payload["lexical"].shape[1])})

    def encode_query(batch: list[str]) -> tuple[torch.Tensor, None]:
        lexical = dense_rows(engine.encode_query(batch)[0]).clone()
        lexical[:, :discard] = 0
        for row in lexical:
            impacts, scale = engine.query_impacts(row[discard:])
            row[discard:] = impacts / scale
        return lexical, None

    return SparseRetriever.from_shards(encode_query, quantized, discard=discard, batch_size=engine.batch_size)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--method", default="dlr_splade", help="a term_weights method's config (untrained)")
    parser.add_argument("--run-dir", type=Path, default=None, help="a trained delade / delade_cls run instead")
    parser.add_argument("--timed-queries", type=int, default=200)
    parser.add_argument("--shard-size", type=int, default=4096)
    parser.add_argument("--shards-dir", type=Path, default=None, help="keep the encoded shards there, for another run")
    parser.add_argument("--plot", type=Path, default=None, help="a folder: also draw latency against agreement there")
    args = parser.parse_args()
    collection = embedded("default")
    queries, qrels = collection.judged_queries("dev"), collection.qrels["dev"]
    if args.run_dir is not None:
        from retrieval_zoo.trained import load_trained, trained_config

        model, name = load_trained(args.run_dir, trained_config(args.run_dir)).eval(), args.run_dir.name
    else:
        model, name = composed("method", args.method).eval(), args.method
    bm25, docids = BM25(collection), list(collection.corpus)
    sparse, bmp = Sparse(), Bmp()
    with tempfile.TemporaryDirectory() as folder, torch.inference_mode():
        shards = CorpusShards(docids, args.shard_size, args.shards_dir or Path(folder) / "shards")
        encode = sparse.doc_encoder(model, collection, bm25)
        for shard in shards.missing():
            shards.write(shard, encode(shards.shard_docids(shard)))
        engine, lucene = (index.build(model, collection, bm25, shards) for index in (bmp, LuceneImpact()))
        coarse = copy.copy(engine)  # the same BMP index, without the forward index that re-scores
        coarse.forward, coarse.measured_nbytes = None, engine.measured_nbytes - engine.forward.nbytes
        retrievers = {"exact sparse (index=sparse)": sparse.build(model, collection, bm25, shards),
                      "exact search over BMP's impacts (the quantization alone)":
                          quantized_reference(engine, shards, Path(folder) / "quantized"),
                      "BMP, α = β = 1, its own ranking (index.rescore=false)": coarse,
                      "BMP, re-scored with the float query (index=bmp)": engine,
                      "exact search over Lucene's impacts":
                          quantized_reference(lucene, shards, Path(folder) / "quantized_lucene"),
                      "Lucene impact search (index=lucene_impact)": lucene,
                      "Seismic, MS MARCO settings (index=seismic)":
                          Seismic().build(model, collection, bm25, shards)}  # fmt: skip
        for retriever in retrievers.values():
            retriever.encode_query = memoized(retriever.encode_query)
        timed = dict(list(queries.items())[: args.timed_queries])
        search = lambda r, qs: r.search(qs, 1000, part="lexical")  # noqa: E731  the lexical part: what BMP holds
        timings = side_by_side({n: (lambda r=r: search(r, timed)) for n, r in retrievers.items()}, repeat=3)
        engine.pruned_queries = coarse.pruned_queries = 0  # counted over the evaluated queries, not the timed repeats
        runs = {n: search(r, queries) for n, r in retrievers.items()}
    reference_name = next(iter(runs))
    reference = evaluate(runs[reference_name], qrels)
    header(f"Learned sparse search: {name}'s lexical vectors, {len(docids):,} documents, {len(queries):,} queries")
    print("| search | ms / query | MRR@10 | Δ MRR@10 | R@1000 | Δ R@1000 | top-10 overlap | top-1000 overlap | index |")
    print("|---|---|---|---|---|---|---|---|---|")
    shown = []  # (search, ms a query, top-1000 overlap): the figure's points
    for n, run in runs.items():
        m, overlap = evaluate(run, qrels), top_k_overlap(run, runs[reference_name], 10)
        ms, deep = 1000 * timings[n] / len(timed), top_k_overlap(run, runs[reference_name], 1000)
        shown.append((n, ms, deep))
        cells = [
            f"{ms:.2f}",
            f"{m['MRR@10']:.4f}",
            f"{m['MRR@10'] - reference['MRR@10']:+.4f}",
            f"{m['R@1000']:.4f}",
            f"{m['R@1000'] - reference['R@1000']:+.4f}",
            f"{overlap:.4f}",
            f"{deep:.4f}",
            f"{retrievers[n].nbytes / 2**20:.1f} MiB",
        ]
        print(f"| {n} | {' | '.join(cells)} |")  # fmt: skip
    print(
        f"\ntimed on the first {len(timed)} queries (their encoding done before), best of 3, in alternation; "
        f"BMP left out the lowest-weighted terms of {coarse.pruned_queries} of the {len(queries):,} queries "
        "(bmp 0.2.8's 16-bit scores)"
    )
    if args.plot is not None:
        args.plot.mkdir(parents=True, exist_ok=True)
        path = args.plot / f"sparse_engines-{args.method if args.run_dir is None else 'run'}.png"
        title = f"Learned sparse search of {name}'s vectors ({len(docids):,} documents): latency and agreement"
        labels = ("ms a query, k = 1000 (log)", "recall of exact search's top 1,000")
        scatter(path, shown, title, labels, True, json.dumps(shown))
        print(f"figure: {path}")


if __name__ == "__main__":
    main()
