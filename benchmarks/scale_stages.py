"""The scale harness's stages (:mod:`benchmarks.scale`), each run in its own process; it prints one JSON line.

python -m benchmarks.scale_stages <stage> <collection folder> <work folder>
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import composed
from benchmarks.scale import MSMARCO
from benchmarks.scale_csf import STAGES as CSF_STAGES
from benchmarks.scale_csf import agreement
from benchmarks.scale_gpu import STAGES as GPU_STAGES
from benchmarks.scale_gpu import splade_shards
from benchmarks.sparse_engines import memoized
from retrieval_zoo.data.collections import Collection, msmarco_tsv
from retrieval_zoo.lexical.lucene_bm25 import BM25

SHARD_SIZE = 4096
DENSE_DIM = 768  # bert-base's width
K = 1000
MSMARCO_TRAIN_QUERIES = 502_939  # judged queries of MS MARCO passage's qrels.train.tsv


def load(folder: Path) -> Collection:
    """A synthetic collection (:mod:`benchmarks.synthetic`) through the project's MS MARCO TSV reader."""
    splits = ("train", "dev")
    return msmarco_tsv(f"synthetic-{folder.parent.name}", str(folder), "collection.tsv",
                       {s: f"queries.{s}.tsv" for s in splits}, {s: f"qrels.{s}.tsv" for s in splits})  # fmt: skip


def folder_bytes(folder: Path) -> int:
    """Bytes of the files under ``folder``."""
    return sum(path.stat().st_size for path in Path(folder).rglob("*") if path.is_file())


def timed(fn) -> tuple[object, float]:
    """``fn()`` and its wall seconds."""
    started = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - started


def stage_collection(collection: Collection, work: Path) -> dict:
    """Reading the corpus and queries into the project's collection type (what every stage below starts with)."""
    return {"seconds": collection.load_seconds, "disk": folder_bytes(work / "collection")}


def stage_bm25(collection: Collection, work: Path) -> dict:
    """The Lucene BM25 index, then the dev queries at k = 1000."""
    bm25 = BM25(collection)
    index, seconds = timed(lambda: bm25.index_dir)
    queries = collection.judged_queries("dev")
    _, searching = timed(lambda: bm25.search(queries, K))
    return {"seconds": seconds, "disk": folder_bytes(index), "ms_per_query": 1000 * searching / len(queries)}


def msmarco_share(collection: Collection, seed: int = 0) -> Collection:
    """``collection`` with MS MARCO's training queries a document: a seeded sample of its judged training queries.

    The synthetic collections keep 0.97 training queries a document; MS MARCO has 502,939 judged ones for 8,841,823
    passages (0.057), so a setup measured on all of them would project to 8.6M queries instead of MS MARCO's.
    """
    split = collection.train_split
    judged = list(collection.judged_queries(split))
    wanted = min(len(judged), max(1, round(len(collection.corpus) * MSMARCO_TRAIN_QUERIES / MSMARCO)))
    chosen = np.sort(np.random.default_rng(seed).choice(len(judged), wanted, replace=False))
    qids = [judged[i] for i in chosen]
    queries = {qid: collection.queries[split][qid] for qid in qids}
    qrels = {qid: collection.qrels[split][qid] for qid in qids}
    return replace(collection, queries=collection.queries | {split: queries}, qrels=collection.qrels | {split: qrels})


def stage_datamodule(collection: Collection, work: Path) -> dict:
    """The DataModule's setup for CLEAR's recipe: BM25's top 1,000 of each training query (MS MARCO's share of them,
    :func:`msmarco_share`), BM25 pair scores; ``disk`` is what the setup adds to the artifact cache."""
    from retrieval_zoo.training.datamodule import TriplesDataModule

    collection = msmarco_share(collection)
    model, bm25 = composed("method", "clear"), BM25(collection)
    bm25.index_dir  # noqa: B018  built by the bm25 stage; reading it is not this stage's time
    datamodule = TriplesDataModule(collection, bm25, negative_depth=K, n_negatives=1, needs=model.needs, epochs=1,
                                   tokenizer=model.text_tokenizer(), term_keys=model.term_keys())  # fmt: skip
    before = folder_bytes(work / "cache")
    _, seconds = timed(datamodule.setup)
    queries = len(collection.judged_queries(collection.train_split))
    return {"seconds": seconds, "disk": folder_bytes(work / "cache") - before, "train_queries": queries}


def term_model():
    """BM25's document and query vectors as a ``term_weights`` method (``method=dlr_bm25``)."""
    return composed("method", "dlr_bm25").eval()


def corpus_shards(collection: Collection, work: Path):
    from retrieval_zoo.index.shards import CorpusShards

    return CorpusShards(list(collection.corpus), SHARD_SIZE, work / "shards")


def stage_shards(collection: Collection, work: Path) -> dict:
    """BM25's document vectors, encoded into shards on disk."""
    from retrieval_zoo.index.terms.sparse import Sparse

    model, bm25, shards = term_model(), BM25(collection), corpus_shards(collection, work)

    # dlr_bm25's encoder reads every document's BM25 vector when it is made: timed with the encoding
    _, seconds = timed(lambda: shards.encode_into(Sparse().doc_encoder(model, collection, bm25), shards.missing()))
    return {"seconds": seconds, "disk": folder_bytes(work / "shards")}


def term_family(name: str, splade: bool = False):
    """The stage of one index over the shards of BM25's vectors, or with ``splade`` over ``encode_splade``'s.

    ``sparse`` (exact) keeps its run; the others report their agreement with its documents of positive score (the
    exact product pads a query that matches fewer than 1,000 documents with non-matching ones, which no engine lists).
    SPLADE-tiny's 30,522-term vocabulary is what learned sparse engines are made for (BMP numbers terms in 16 bits,
    and BM25's vocabulary passes 65,536 terms before 100,000 documents).
    """

    def stage(collection: Collection, work: Path) -> dict:
        if splade:
            model, index = composed("method", "dlr_splade", f"index={name}", also=("index",))
            model.eval()  # as term_model's
            shards = splade_shards(collection, work)  # also points the queries' token cache beside the corpus's
        else:
            model, index, shards = term_model(), composed("index", name), corpus_shards(collection, work)
        with torch.inference_mode():
            retriever, seconds = timed(lambda: index.build(model, collection, BM25(collection), shards))
            retriever.encode_query = memoized(retriever.encode_query)
            queries = collection.judged_queries("dev")
            run = retriever.search(queries, K)  # the queries encoded, the engine warm
            searching = min(timed(lambda: retriever.search(queries, K))[1] for _ in range(2))
        figures = {"seconds": seconds, "disk": retriever.nbytes, "ms_per_query": 1000 * searching / len(queries)}
        reference = work / ("sparse-splade-run.pt" if splade else "sparse-run.pt")
        if name == "sparse":
            torch.save(run, reference)
        elif reference.exists():
            exact = {q: {d: s for d, s in docs.items() if s > 0} for q, docs in torch.load(reference).items()}
            figures |= agreement(run, exact)
        return figures

    return stage


def stage_faiss(collection: Collection, work: Path) -> dict:
    """A Flat inner-product index of random 768-d vectors, one per document, built shard by shard."""
    from retrieval_zoo.index.vectors.faiss import FaissIndex

    rng, docids = np.random.default_rng(0), list(collection.corpus)

    def vectors(rows: int) -> np.ndarray:
        values = rng.standard_normal((rows, DENSE_DIM), dtype=np.float32)
        return values / np.linalg.norm(values, axis=1, keepdims=True)

    shards = [(docids[s : s + 65536], vectors(len(docids[s : s + 65536]))) for s in range(0, len(docids), 65536)]
    index, seconds = timed(lambda: FaissIndex("Flat", use_gpu=False).build_sharded(shards))
    queries = vectors(1200)
    searching = min(timed(lambda: index.search_rows(queries, K))[1] for _ in range(2))
    return {"seconds": seconds, "disk": len(docids) * DENSE_DIM * 4, "ms_per_query": 1000 * searching / len(queries)}


STAGES = {"collection": stage_collection, "bm25": stage_bm25, "datamodule": stage_datamodule, "shards": stage_shards,
          "faiss": stage_faiss}  # fmt: skip
STAGES |= {name: term_family(name) for name in ("sparse", "gip", "bmp", "lucene_impact", "seismic")} | CSF_STAGES
STAGES |= {f"{name}_splade": term_family(name, splade=True) for name in ("sparse", "bmp", "lucene_impact", "seismic")}
STAGES |= GPU_STAGES


def main() -> None:
    stage, folder, work = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    collection, seconds = timed(lambda: load(folder))
    collection.load_seconds = seconds
    result = STAGES[stage](collection, work)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
