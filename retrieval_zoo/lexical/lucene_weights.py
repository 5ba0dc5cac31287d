"""Each term's BM25 weight in a document, the value Anserini's term-weight search gives, from one read of the document.

pyserini's ``compute_bm25_term_weight`` (Anserini's ``getBM25AnalyzedTermWeightWithParameters``) runs one Lucene
search a (document, term) pair: the document's id and the term, both required, which BM25Similarity scores 1 + s;
the weight is that score less 1. A search a pair grew slower with the index (930 documents a second at 100,000
documents, 517 at 1,000,000: docs/scale.md). Here the same numbers come from one read of the document's term vector:

- the term's weight w = idf, from Lucene's own BM25 scorer for the term's statistics (its log is Java's);
- the document's length norm, Lucene's one-byte encoding of its token count (``SmallFloat.intToByte4``), and the
  scorer's table c[norm] = 1 / (k1 · ((1 − b) + b · length(norm) / avgdl)), in float32 as BM25Similarity builds it;
- s = w − w / (1 + tf · c[norm]), BM25Scorer.score's float32 steps;
- the search's sum in double of the id clause's 1 and s, rounded to float32, less 1 in float32.

float32 arithmetic is IEEE's on both sides, so the weights are Lucene's bit for bit (a test holds them equal to the
search's on every document of the test collection).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from tqdm import tqdm

from retrieval_zoo.lexical.java import pyserini_lucene

FIELD = "contents"


def bm25_idf(n_docs: int, df: int) -> float:
    """Lucene's BM25 IDF in double: log(1 + (N − df + 0.5)/(df + 0.5)), for a term of document frequency df > 0."""
    return math.log(1 + (n_docs - df + 0.5) / (df + 0.5))


class TermWeights:
    """BM25 weights of analysed terms in documents of one index, for one (k1, b); term statistics read once each."""

    def __init__(self, reader: Any, k1: float, b: float) -> None:
        """``reader``: pyserini's ``LuceneIndexReader`` (its ``reader`` is Lucene's ``IndexReader``)."""
        _, autoclass = pyserini_lucene()
        from jnius import JavaException, cast

        self.java_exception, self.reader = JavaException, reader
        self.lucene = cast("org.apache.lucene.index.IndexReader", reader.reader)
        self.searcher = autoclass("org.apache.lucene.search.IndexSearcher")(self.lucene)
        self.similarity = autoclass("org.apache.lucene.search.similarities.BM25Similarity")(k1, b)
        self.collection = self.searcher.collectionStatistics(FIELD)
        self.make_term = autoclass("org.apache.lucene.index.Term")
        self.small_float = autoclass("org.apache.lucene.util.SmallFloat")
        self.n_docs = reader.stats()["documents"]
        avgdl = np.float32(float(self.collection.sumTotalTermFreq()) / float(self.collection.docCount()))
        lengths = np.array([self.small_float.byte4ToInt(i if i < 128 else i - 256) for i in range(256)], np.float32)
        one, k1_, b_ = np.float32(1), np.float32(k1), np.float32(b)
        self.norm_inverse = one / (k1_ * ((one - b_) + b_ * lengths / avgdl))  # BM25Similarity.scorer's cache
        self.norm_of_length: dict[int, int] = {}
        self.lucene_idf: dict[int, float] = {}

    def norm(self, length: int) -> int:
        """The index of a document of ``length`` tokens in the scorer's table: its norm byte, unsigned."""
        if length not in self.norm_of_length:
            self.norm_of_length[length] = self.small_float.intToByte4(length) & 0xFF
        return self.norm_of_length[length]

    def vector(self, docid: str) -> tuple[list[str], list[int]] | None:
        """The document's analysed terms and their frequencies, in pyserini's order; None for an unknown id.

        Anserini's term-vector map comes across as its text, ``{term=tf, term=tf}``: one call into the JVM instead of
        one a term. Analysed terms hold no whitespace, so ", " only separates entries; the last "=" in each is the tf's.
        """
        try:
            found = self.reader.object.getDocumentVector(self.reader.reader, docid)
        except self.java_exception:  # a document with no terms has no term vector (as pyserini reads it)
            return [], []
        if found is None:
            return None
        text, size = found.toString(), found.size()
        entries = [entry.rpartition("=") for entry in text[1:-1].split(", ")] if size else []
        if len(entries) != size or any(not term for term, _, _ in entries):
            raise ValueError(f"document {docid!r}: its term vector {text[:200]!r} does not read as {size} terms")
        return [term for term, _, _ in entries], [int(tf) for _, _, tf in entries]

    def idf(self, term: str) -> tuple[float, float]:
        """(Lucene's float32 BM25 IDF of ``term``, log(1 + (N − df + 0.5)/(df + 0.5)) in double); df must be > 0."""
        java_term = self.make_term(FIELD, term)
        df = self.lucene.docFreq(java_term)
        if df <= 0:
            raise ValueError(f"term {term!r} is in a document vector but has no document frequency")
        if df not in self.lucene_idf:  # the IDF depends on df alone: far fewer values than terms
            statistics = self.searcher.termStatistics(java_term, df, df)  # BM25 reads no total term frequency
            scorer = self.similarity.scorer(1.0, self.collection, statistics)
            self.lucene_idf[df] = scorer.score(math.inf, 1)  # w − w / (1 + ∞) = w: the scorer's own, Java's log
        return self.lucene_idf[df], bm25_idf(self.n_docs, df)

    def documents(self, docids: list[str], saturation_only: bool) -> list[dict[str, float] | None]:
        """Per document: analysed term → BM25 weight (or TF saturation, the weight / IDF); None for an unknown id."""
        vectors = [self.vector(d) for d in tqdm(docids, desc="bm25 doc vectors", leave=False, mininterval=5)]
        columns: dict[str, int] = {}
        for vector in vectors:
            for term in vector[0] if vector else ():
                columns.setdefault(term, len(columns))
        idfs = [self.idf(term) for term in columns]
        lucene_idf = np.array([i[0] for i in idfs], dtype=np.float32)
        sizes = [len(v[0]) if v else 0 for v in vectors]
        terms = np.fromiter((columns[t] for v in vectors if v for t in v[0]), dtype=np.int64, count=sum(sizes))
        tf = np.fromiter((f for v in vectors if v for f in v[1]), dtype=np.float32, count=sum(sizes))
        norms = np.repeat([self.norm(sum(v[1])) if v else 0 for v in vectors], sizes)
        w = lucene_idf[terms]
        s = w - w / (np.float32(1) + tf * self.norm_inverse[norms])
        weights = ((1.0 + s.astype(np.float64)).astype(np.float32) - np.float32(1)).tolist()
        out: list[dict[str, float] | None] = []
        start = 0
        for vector, size in zip(vectors, sizes, strict=True):
            if vector is None:
                out.append(None)
                continue
            pairs = zip(vector[0], weights[start : start + size], strict=True)
            start += size
            kept = {t: w for t, w in pairs if w > 0}  # terms Lucene gives no weight add nothing to BM25
            out.append({t: w / idfs[columns[t]][1] for t, w in kept.items()} if saturation_only else kept)
        return out
