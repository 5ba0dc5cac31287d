"""BM25 through pyserini's Lucene: index, batch runs, pair scores, term-weight vectors and query IDF.

Artifacts are cached under :func:`retrieval_zoo.cache.cache_root`, keyed by the corpus content (index) and by
the queries, depth and (k1, b) (runs), and written atomically. Every Java call runs in the JVM worker process
(:class:`retrieval_zoo.lexical.java.LuceneWorker`), never in the calling one.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tempfile
import time
import zlib
from functools import cached_property
from pathlib import Path

import numpy as np

from retrieval_zoo.cache import atomic_path, cache_root, entry_lock, fingerprint
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.corpus_store import corpus_ids
from retrieval_zoo.data.doc_rows import RankedRows
from retrieval_zoo.data.formats import FormatError, Run, write_id_text_tsv
from retrieval_zoo.data.ranked_rows import read_ranked_rows
from retrieval_zoo.data.run_columns import columns_path, read_run_with_columns
from retrieval_zoo.id_index import IdIndex
from retrieval_zoo.lexical import lucene_ops
from retrieval_zoo.lexical.java import LuceneWorker, indexing_options
from retrieval_zoo.retriever import Retriever

INDEX_FORMAT = "lucene-json-docvectors-v1"
SEARCH_HITS = 2_000_000
"""Hits of one SearchCollection call: it holds them all in the JVM's heap until it writes the run."""
FEW_QUERIES = 32  # query sets up to this size are searched by a searcher kept open, not by SearchCollection


class BM25(Retriever):
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
        with entry_lock(path):  # concurrent runs build it once; the others wait, then read it
            stats = read_ready(path)
            if stats is None:
                self._build_index(path)
                stats = read_ready(path)
        corpus = self.collection.corpus
        if stats.get("corpus") != self.collection.corpus_fingerprint or stats["documents"] != len(corpus):
            raise ValueError(
                f"{path}: cached index holds {stats['documents']:,} documents of corpus {stats.get('corpus')}, but "
                f"{self.collection.name} has {len(self.collection.corpus):,} documents (corpus "
                f"{self.collection.corpus_fingerprint}); delete the directory to rebuild it"
            )
        return path

    def _build_index(self, path: Path) -> None:
        started = time.perf_counter()
        # The documents as Anserini reads them: a scratch copy of the corpus (3 GB for MS MARCO), deleted after.
        with tempfile.TemporaryDirectory(dir=path.parent) as scratch, atomic_path(path) as tmp_index:
            docs_dir = Path(scratch)
            with open(docs_dir / "docs.jsonl", "w", encoding="utf-8") as f:
                for docid, text in self.collection.corpus.items():
                    f.write(json.dumps({"id": docid, "contents": text}) + "\n")
            args = ["-collection", "JsonCollection", "-input", str(docs_dir), "-index", str(tmp_index)]
            args += ["-generator", "DefaultLuceneDocumentGenerator", "-threads", str(self.threads)]
            args += ["-storeDocvectors", "-quiet", *indexing_options()]
            print(f"[bm25] indexing {len(self.collection.corpus):,} documents of {self.collection.name}")
            LuceneWorker.call(lucene_ops.run_main, "io.anserini.index.IndexCollection", args)
            seconds = time.perf_counter() - started
            stats = {"documents": len(self.collection.corpus), "corpus": self.collection.corpus_fingerprint}
            stats |= {"seconds": seconds, "format": INDEX_FORMAT, "files": file_sizes(tmp_index)}
            (tmp_index / "ready.json").write_text(json.dumps(stats))
        self.index_seconds = seconds

    def search(self, queries: dict[str, str], k: int) -> Run:
        """Retrieve the top ``k`` documents of each query, cached on disk.

        Runs through Anserini's multi-threaded ``SearchCollection``, which writes the run file in Java, so memory
        stays flat for any number of queries (pyserini's ``batch_search`` holds every hit as a Python object). On
        1,200 queries it is as fast at k ≥ 100 and slower at k = 10 (see ``benchmarks/bm25_throughput.py``). Up to
        :data:`FEW_QUERIES` queries (one typed into the Python retriever) are searched by a searcher kept open in the
        worker instead, and not cached: the same hits and scores (:func:`~retrieval_zoo.lexical.lucene_ops.top_k`;
        tested), without the class's start-up of tens of milliseconds.

        Args:
            queries: qid → text.
            k: Depth of the run.

        Returns:
            qid → {docid: BM25 score} (4 decimals, as Anserini writes runs); a query with no matching term gets
            an empty ranking.
        """
        if len(queries) <= FEW_QUERIES:  # a searcher kept open: the same run, without SearchCollection's start-up
            found = LuceneWorker.call(lucene_ops.top_k, str(self.index_dir), self.k1, self.b, list(queries.values()), k)
            return {qid: dict(zip(ids, scores, strict=True)) for qid, (ids, scores) in zip(queries, found, strict=True)}
        path, index_dir = self._run_path(queries, k), self.index_dir
        with entry_lock(path):  # concurrent runs search once; the others wait, then read the file
            run = read_cached_run(path)
            if run is None:
                self._search_into(path, index_dir, queries, k)
                run = read_run_with_columns(path)
        unknown = set(run) - set(queries)
        if unknown:
            raise ValueError(f"{path}: run holds queries that were not asked for: {sorted(unknown)[:5]}")
        stray = first_unknown_document(run, corpus_ids(self.collection.corpus))
        if stray:
            raise ValueError(
                f"{path}: cached run retrieves document {stray[1]!r} (query {stray[0]!r}) unknown to "
                f"{self.collection.name}; the cache does not match the collection, delete it"
            )
        return {qid: run.get(qid, {}) for qid in queries}

    def search_rows(self, queries: dict[str, str], k: int, docs: IdIndex) -> RankedRows:
        """The top ``k`` of each query as columnar :class:`RankedRows` (row ``i``: the ``i``-th query), cached.

        For training-scale query sets (500k MS MARCO queries at k = 1,000 is 500M hits). Searched in parts of
        :data:`SEARCH_HITS` hits: one SearchCollection call over 97k queries at k = 1,000 ran a 2 GiB heap into
        garbage collection for most of an hour (``benchmarks/scale.py``). Each part is cached as its own run file
        (shared with :meth:`search`; a killed search resumes at the next part), and the parts are read into arrays
        (:func:`read_ranked_rows`), never into a dict of the run.

        Args:
            queries: qid → text, in row order.
            k: Depth of the run.
            docs: The collection's document ids (rows are corpus order).
        """
        qids = list(queries)
        key = fingerprint(self.collection.corpus_fingerprint, docs.digest, list(queries.items()), k, self.k1, self.b)
        folder = self.cache / "bm25" / "rows" / f"rows-k{k}-{key}"
        with entry_lock(folder):
            if not (folder / "offsets.npy").exists():  # written last: the folder is complete
                parts = self._search_parts(queries, k)
                for attempt in (1, 2):
                    try:
                        with atomic_path(folder) as tmp:
                            tmp.mkdir()
                            read_ranked_rows(parts, queries, qids, docs, k, tmp)
                        break
                    except FormatError as error:  # a damaged or stale part: searched again, once
                        if attempt == 2 or Path(error.path) not in parts:
                            raise
                        print(f"[bm25] cached run {error.path} is unusable ({error.problem}): searching again")
                        Path(error.path).unlink()
                        parts = self._search_parts(queries, k)
        rows = RankedRows.load(folder)
        if len(rows) != len(qids):
            raise ValueError(f"{folder}: holds {len(rows):,} queries, not {len(qids):,}; delete it to search again")
        return rows

    def _search_parts(self, queries: dict[str, str], k: int) -> list[Path]:
        """Run files of the top ``k`` of ``queries``, :data:`SEARCH_HITS` hits a file, searched unless cached."""
        items, size = list(queries.items()), max(1, SEARCH_HITS // k)
        index_dir, paths = self.index_dir, []
        for start in range(0, len(items), size):
            part = dict(items[start : start + size])
            path = self._run_path(part, k)
            with entry_lock(path):
                if not path.exists():
                    print(f"[bm25] queries {start + 1:,}–{start + len(part):,} of {len(items):,}", flush=True)
                    self._search_into(path, index_dir, part, k)
            paths.append(path)
        return paths

    def _run_path(self, queries: dict[str, str], k: int) -> Path:
        """The cached run file of the top ``k`` of ``queries`` (keyed by the corpus, the queries, k, k1 and b)."""
        key = fingerprint(self.collection.corpus_fingerprint, sorted(queries.items()), k, self.k1, self.b)
        return self.cache / "bm25" / "runs" / f"run-k{k}-{key}.trec.gz"

    def _search_into(self, path: Path, index_dir: Path, queries: dict[str, str], k: int) -> None:
        """Run Anserini's SearchCollection over ``queries`` and store the run, gzip-compressed, at ``path``."""
        print(f"[bm25] top-{k} for {len(queries):,} queries of {self.collection.name}")
        with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
            topics, out = Path(scratch) / "topics.tsv", Path(scratch) / "run.trec"
            write_id_text_tsv(topics, queries)
            args = ["-index", str(index_dir), "-topics", str(topics), "-topicReader", "TsvString"]
            args += ["-output", str(out), "-bm25", "-bm25.k1", str(self.k1), "-bm25.b", str(self.b)]
            args += ["-hits", str(k), "-threads", str(self.threads), "-parallelism", str(self.threads)]
            args += ["-runtag", f"bm25_k1={self.k1}_b={self.b}"]
            LuceneWorker.call(lucene_ops.run_main, "io.anserini.search.SearchCollection", args)
            # gzip's fastest level: 7x the speed of its default 9 on a run file, for 14% more bytes
            with atomic_path(path) as gz_path, open(out, "rb") as src, gzip.open(gz_path, "wb", 1) as dst:
                shutil.copyfileobj(src, dst)

    def pair_scores(self, queries: dict[str, str], pairs: list[tuple[str, str]]) -> np.ndarray:
        """BM25(q, d) for arbitrary pairs, including documents outside any run's top N.

        Args:
            queries: qid → text, covering every qid in ``pairs``.
            pairs: (qid, docid) pairs.

        Returns:
            float32 array of shape (len(pairs),), equal to the scores the searcher gives the same pairs.
        """
        unknown = next(((q, d) for q, d in pairs if d not in self.collection.corpus), None)
        if unknown:
            raise KeyError(f"unknown document id {unknown[1]!r} for query {unknown[0]!r}")
        texts = [(queries[qid], docid) for qid, docid in pairs]
        return LuceneWorker.call(lucene_ops.pair_scores, str(self.index_dir), self.k1, self.b, texts)

    def candidate_scores(self, queries: dict[str, str], candidates: dict[str, list[str]]) -> Run:
        """BM25(q, d) of given documents per query, at any rank: a run's scores completed beyond its depth.

        One Lucene search per query, filtered to its candidates (:func:`lucene_ops.candidate_scores`); rounded to
        4 decimals, as :meth:`search` gives a document the same score in its run.

        Args:
            queries: qid → text, covering every qid of ``candidates``.
            candidates: qid → document ids to score.

        Returns:
            qid → {docid: BM25 score}, 0 for a document that shares no term with the query.
        """
        unknown = first_unknown_document(candidates, corpus_ids(self.collection.corpus))  # one lookup, vectorised
        if unknown:
            raise KeyError(f"unknown document id {unknown[1]!r} for query {unknown[0]!r}")
        qids = [q for q, docs in candidates.items() if docs]
        groups = [(queries[q], list(candidates[q])) for q in qids]
        scores = LuceneWorker.call(lucene_ops.candidate_scores, str(self.index_dir), self.k1, self.b, groups)
        run: Run = {q: {} for q in candidates}
        for qid, (_, docids), values in zip(qids, groups, scores, strict=True):
            run[qid] = {d: round(float(v), 4) for d, v in zip(docids, values, strict=True)}
        return run

    def document_term_weights(self, docids: list[str], saturation_only: bool = False) -> list[dict[str, float]]:
        """Per document: analysed term → BM25 weight (IDF × TF saturation), as in Lucene's BM25 sum.

        With ``saturation_only``, the TF saturation alone (RoC's d_bm25, Eq. 3): its inner product with
        :meth:`query_idf` is BM25(q, d) over the query's distinct terms.
        """
        vectors = LuceneWorker.call(
            lucene_ops.document_term_weights, str(self.index_dir), self.k1, self.b, docids, saturation_only
        )
        missing = next((d for d, v in zip(docids, vectors, strict=True) if v is None), None)
        if missing is not None:
            raise KeyError(f"unknown document id {missing!r}")
        return vectors

    def query_idf(self, texts: list[str]) -> list[dict[str, float]]:
        """Per query text: analysed term → Lucene's BM25 IDF, log(1 + (N − df + 0.5)/(df + 0.5)), df > 0."""
        return LuceneWorker.call(lucene_ops.query_idf, str(self.index_dir), texts)

    def analyze(self, text: str) -> list[str]:
        """Lucene's analysis of ``text``: the terms BM25 matches on."""
        return LuceneWorker.call(lucene_ops.analyze, str(self.index_dir), text)

    def document_frequencies(self, terms: list[str]) -> list[int]:
        """Document frequency of each analysed term."""
        return LuceneWorker.call(lucene_ops.document_frequencies, str(self.index_dir), terms)


def read_ready(index: Path) -> dict | None:
    """The ``ready.json`` a complete index ends with; None (and the index removed) when it is missing or damaged.

    Damaged: ``ready.json`` unreadable, or a Lucene file missing or of another size than the build recorded.
    """
    ready = index / "ready.json"
    if not ready.exists():
        return None
    try:
        stats = json.loads(ready.read_text())
        problem = None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        stats, problem = None, f"{ready} is damaged ({error})"
    if stats is not None and "files" in stats:  # indexes built before sizes were recorded: trusted
        differing = set(file_sizes(index).items()) ^ set(stats["files"].items())
        if differing:
            changed = sorted(differing)[0][0]
            stats, problem = None, f"{index}: {changed} is missing or not the size the build wrote"
    if problem:
        print(f"[bm25] {problem}: building the index again")
        shutil.rmtree(index)
    return stats


def file_sizes(index: Path) -> dict[str, int]:
    """Name → size of the Lucene files of an index (``ready.json`` aside): what a complete build wrote."""
    return {f.name: f.stat().st_size for f in sorted(index.iterdir()) if f.is_file() and f.name != "ready.json"}


def first_unknown_document(run: Run, docs: IdIndex, chunk: int = 1 << 20) -> tuple[str, str] | None:
    """(query, document) of the first hit of ``run`` whose document ``docs`` does not hold; None when all are known.

    Each distinct document is looked up once, ``chunk`` at a time, by one vectorised search each: a dev run at depth
    1,000 holds millions of hits but no more distinct documents than the corpus (10,000 of 1.1M hits on the
    embedded collection's dev run).
    """
    distinct = list(set().union(*run.values()))
    unknown = set()
    for start in range(0, len(distinct), chunk):
        block = distinct[start : start + chunk]
        unknown.update(block[i] for i in np.flatnonzero(docs.rows(block) < 0))
    if not unknown:
        return None
    return next((qid, docid) for qid, ranking in run.items() for docid in ranking if docid in unknown)


def read_cached_run(path: Path) -> Run | None:
    """A cached run; None (and the file removed) when it is missing or damaged (truncated, not gzip, malformed).

    Read from the columns kept beside it once it has been parsed (:mod:`~retrieval_zoo.data.run_columns`).
    """
    if not path.exists():
        return None
    try:
        return read_run_with_columns(path)
    except (EOFError, OSError, zlib.error, FormatError) as error:
        print(f"[bm25] cached run {path} is damaged ({error}): searching again")
        path.unlink()
        columns_path(path).unlink(missing_ok=True)
        return None
