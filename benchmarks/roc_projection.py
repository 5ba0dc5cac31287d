"""How well RoC's random projection of BM25 (Eq. 3–4) keeps BM25's ranking, per projected width k.

On the dev queries of the embedded collection: MRR@10 and R@100 of exact BM25 (Lucene), of the unprojected
IDF · TF-saturation inner product (the vectors RoC projects), and of q_lex·d_lex searched over the whole corpus for
each k; plus the mean Kendall τ, per query, between projected and exact BM25 scores over BM25's top 100.

    python -m benchmarks.roc_projection [--dims 128 768] [--seed 0]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from scipy.stats import kendalltau

from benchmarks.common import header
from retrieval_zoo.data.collections import embedded
from retrieval_zoo.evaluation.metrics import evaluate
from retrieval_zoo.index.vectors.faiss import FaissIndex
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.lexical.projection import RademacherProjection


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dims", type=int, nargs="+", default=[128, 768])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    collection = embedded("default")
    bm25 = BM25(collection)
    queries, qrels = collection.judged_queries("dev"), collection.qrels["dev"]
    qids, docids = list(queries), list(collection.corpus)
    exact = bm25.search(queries, 1000)
    saturation = bm25.document_term_weights(docids, saturation_only=True)
    idf = bm25.query_idf(list(queries.values()))
    rows = [("BM25 (Lucene)", evaluate(exact, qrels), 1.0, 0.0)]
    postings: dict[str, list[tuple[str, float]]] = {}
    for docid, vector in zip(docids, saturation, strict=True):
        for term, value in vector.items():
            postings.setdefault(term, []).append((docid, value))
    unprojected: dict[str, dict[str, float]] = {}
    for qid, query in zip(qids, idf, strict=True):
        scores = unprojected.setdefault(qid, {})
        for term, weight in query.items():
            for docid, value in postings.get(term, []):
                scores[docid] = scores.get(docid, 0.0) + weight * value
    rows.append(("IDF · saturation, unprojected", evaluate(unprojected, qrels), tau(unprojected, exact), 0.0))
    for dim in args.dims:
        started = time.perf_counter()
        projection = RademacherProjection(dim, args.seed)
        doc_lex = torch.cat([projection.project(saturation[i : i + 2048]) for i in range(0, len(docids), 2048)])
        query_lex = projection.project(idf)
        run = FaissIndex("Flat").build(doc_lex.numpy(), docids).search(query_lex.numpy(), qids, 1000)
        row = {docid: i for i, docid in enumerate(docids)}
        scores = {
            qid: dict(zip(exact[qid], (doc_lex[[row[d] for d in exact[qid]]] @ query_lex[r]).tolist(), strict=True))
            for r, qid in enumerate(qids)
        }
        rows.append((f"projected, k = {dim}", evaluate(run, qrels), tau(scores, exact), time.perf_counter() - started))
    header("RoC's random projection of BM25 on debian_descriptions-default")
    print(f"{len(qids):,} dev queries, {len(docids):,} documents, seed {args.seed}\n")
    print("| vectors | MRR@10 | R@100 | Kendall τ vs BM25 (top 100) | seconds |\n|---|---|---|---|---|")
    for name, metrics, value, seconds in rows:
        print(f"| {name} | {metrics['MRR@10']:.4f} | {metrics['R@100']:.4f} | {value:.3f} | {seconds:.1f} |")


def tau(scores: dict[str, dict[str, float]], exact: dict[str, dict[str, float]], depth: int = 100) -> float:
    """Mean over queries of Kendall τ between ``scores`` and BM25's on BM25's top ``depth`` documents."""
    values = []
    for qid, docs in exact.items():
        top = sorted(docs, key=docs.get, reverse=True)[:depth]
        if len(top) > 1:
            value = kendalltau([docs[d] for d in top], [scores[qid].get(d, 0.0) for d in top]).statistic
            values.append(0.0 if np.isnan(value) else value)
    return float(np.mean(values))


if __name__ == "__main__":
    main()
