"""BM25 through pyserini's Lucene: index, batch runs, pair scores, term-weight vectors and query IDF.

Artifacts are cached under :func:`retrieval_zoo.cache.cache_root`, keyed by the corpus content (index) and by
the queries, depth and (k1, b) (runs), and written atomically. Every Java call happens in the calling process;
call these before DataLoader workers start (forking after the JVM starts breaks Lucene in the child).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import shutil
import tempfile
import time
from functools import cached_property
from pathlib import Path

import numpy as np
from tqdm import tqdm

from retrieval_zoo.cache import atomic_path, cache_root, fingerprint
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.formats import Run, read_run, write_id_text_tsv
from retrieval_zoo.lexical.java import pyserini_lucene

INDEX_FORMAT = "lucene-json-docvectors-v1"


class BM25:
    """BM25 over one collection's corpus, with Lucene's analyzer (Porter stemming, English stopwords).

    Args:
        collection: The collection whose corpus is indexed.
        k1: BM25 term-frequency saturation.
        b: BM25 length normalisation.
        threads: Threads for indexing and batch search (default: all cores).
        cache_dir: Artifact cache; default :func:`cache_root`.
    """

    def __init__(
        self,
        collection: Collection,
        k1: float = 0.9,
        b: float = 0.4,
        threads: int | None = None,
        cache_dir: str | None = None,
    ) -> None:
        self.collection, self.k1, self.b = collection, float(k1), float(b)
        self.threads = threads or os.cpu_count() or 1
        self.cache = Path(cache_dir) if cache_dir else cache_root()

    @cached_property
    def index_dir(self) -> Path:
        """The Lucene index of the corpus, built on first use and cached by the corpus content."""
        path = self.cache / "bm25" / f"index-{fingerprint(self.collection.corpus_fingerprint, INDEX_FORMAT)}"
        if not (path / "ready.json").exists():
            self._build_index(path)
        return path

    def _build_index(self, path: Path) -> None:
        _, _, autoclass = pyserini_lucene()
        started = time.perf_counter()
        with atomic_path(path.with_name(path.name + ".jsonl")) as docs_dir, atomic_path(path) as tmp_index:
            docs_dir.mkdir()
            with open(docs_dir / "docs.jsonl", "w", encoding="utf-8") as f:
                for docid, text in self.collection.corpus.items():
                    f.write(json.dumps({"id": docid, "contents": text}) + "\n")
            args = ["-collection", "JsonCollection", "-input", str(docs_dir), "-index", str(tmp_index)]
            args += ["-generator", "DefaultLuceneDocumentGenerator", "-threads", str(self.threads)]
            args += ["-storeDocvectors", "-quiet"]
            print(f"[bm25] indexing {len(self.collection.corpus):,} documents of {self.collection.name}")
            autoclass("io.anserini.index.IndexCollection").main(args)
            seconds = time.perf_counter() - started
            stats = {"documents": len(self.collection.corpus), "seconds": seconds, "format": INDEX_FORMAT}
            (tmp_index / "ready.json").write_text(json.dumps(stats))
        self.index_seconds = seconds

    @cached_property
    def searcher(self):  # noqa: ANN201 - pyserini's LuceneSearcher
        """A pyserini LuceneSearcher with BM25(k1, b)."""
        search_lucene, _, _ = pyserini_lucene()
        searcher = search_lucene.LuceneSearcher(str(self.index_dir))
        searcher.set_bm25(self.k1, self.b)
        return searcher

    @cached_property
    def reader(self):  # noqa: ANN201 - pyserini's LuceneIndexReader
        """A pyserini LuceneIndexReader over the same index."""
        _, index_lucene, _ = pyserini_lucene()
        return index_lucene.LuceneIndexReader(str(self.index_dir))

    def search(self, queries: dict[str, str], k: int) -> Run:
        """Retrieve the top ``k`` documents of each query, cached on disk.

        Runs through Anserini's multi-threaded ``SearchCollection``, which writes the run in Java: converting
        hits into Python objects is 5x slower at k=1000 on 2 cores.

        Args:
            queries: qid → text.
            k: Depth of the run.

        Returns:
            qid → {docid: BM25 score} (4 decimals, as Anserini writes runs); a query with no matching term gets
            an empty ranking.
        """
        key = fingerprint(self.collection.corpus_fingerprint, sorted(queries.items()), k, self.k1, self.b)
        path = self.cache / "bm25" / "runs" / f"run-k{k}-{key}.trec.gz"
        if not path.exists():
            _, _, autoclass = pyserini_lucene()
            print(f"[bm25] top-{k} for {len(queries):,} queries of {self.collection.name}")
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
                topics, out = Path(scratch) / "topics.tsv", Path(scratch) / "run.trec"
                write_id_text_tsv(topics, queries)
                args = ["-index", str(self.index_dir), "-topics", str(topics), "-topicReader", "TsvString"]
                args += ["-output", str(out), "-bm25", "-bm25.k1", str(self.k1), "-bm25.b", str(self.b)]
                args += ["-hits", str(k), "-threads", str(self.threads), "-parallelism", str(self.threads)]
                args += ["-runtag", f"bm25_k1={self.k1}_b={self.b}"]
                autoclass("io.anserini.search.SearchCollection").main(args)
                with atomic_path(path) as gz_path, open(out, "rb") as src, gzip.open(gz_path, "wb") as dst:
                    shutil.copyfileobj(src, dst)
        run = read_run(path)
        unknown = set(run) - set(queries)
        if unknown:
            raise ValueError(f"{path}: run holds queries that were not asked for: {sorted(unknown)[:5]}")
        return {qid: run.get(qid, {}) for qid in queries}

    def pair_scores(self, queries: dict[str, str], pairs: list[tuple[str, str]]) -> np.ndarray:
        """BM25(q, d) for arbitrary pairs, including documents outside any run's top N.

        Args:
            queries: qid → text, covering every qid in ``pairs``.
            pairs: (qid, docid) pairs.

        Returns:
            float32 array of shape (len(pairs),), equal to the scores the searcher gives the same pairs.
        """
        search_lucene, _, _ = pyserini_lucene()
        similarity = search_lucene.LuceneSimilarities.bm25(self.k1, self.b)
        scores = np.empty(len(pairs), dtype=np.float32)
        compute = self.reader.compute_query_document_score
        for i, (qid, docid) in enumerate(tqdm(pairs, desc="bm25 pair scores", leave=False, mininterval=5)):
            if docid not in self.collection.corpus:
                raise KeyError(f"unknown document id {docid!r} for query {qid!r}")
            scores[i] = compute(docid, queries[qid], similarity)
        return scores

    def document_term_weights(self, docid: str) -> dict[str, float]:
        """BM25 weight (IDF × TF saturation) of each analysed term in a document."""
        vector = self.reader.get_document_vector(docid)
        if vector is None:
            raise KeyError(f"unknown document id {docid!r}")
        weight = self.reader.compute_bm25_term_weight
        return {t: float(weight(docid, t, analyzer=None, k1=self.k1, b=self.b)) for t in vector}

    def query_idf(self, text: str) -> dict[str, float]:
        """Lucene's BM25 IDF, log(1 + (N − df + 0.5)/(df + 0.5)), of each analysed query term (df > 0)."""
        n_docs = self.reader.stats()["documents"]
        idf = {}
        for term in self.reader.analyze(text):
            df, _ = self.reader.get_term_counts(term, analyzer=None)
            if df > 0:
                idf[term] = math.log(1 + (n_docs - df + 0.5) / (df + 0.5))
        return idf
