"""Lucene operations that run inside the JVM worker process (:class:`retrieval_zoo.lexical.java.LuceneWorker`).

Every function takes and returns plain picklable values; index readers are opened once per index directory.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import numpy as np
from tqdm import tqdm

from retrieval_zoo.lexical.java import pyserini_lucene
from retrieval_zoo.lexical.lucene_weights import TermWeights, bm25_idf

BOOLEAN_OCCUR = "org.apache.lucene.search.BooleanClause$Occur"
MAX_QUERY_TERMS = 1 << 20  # Lucene's default of 1,024 clauses is fewer than a DeLADE query's terms


def run_main(java_class: str, args: list[str]) -> None:
    """Run an Anserini command-line class (``IndexCollection``, ``SearchCollection``) in the JVM."""
    _, autoclass = pyserini_lucene()
    autoclass(java_class).main(args)


@cache
def _reader(index_dir: str) -> Any:
    index_lucene, _ = pyserini_lucene()
    return index_lucene.LuceneIndexReader(index_dir)


@cache
def _similarity(k1: float, b: float) -> Any:
    _, autoclass = pyserini_lucene()
    return autoclass("org.apache.lucene.search.similarities.BM25Similarity")(k1, b)  # pyserini's LuceneSimilarities


def pair_scores(index_dir: str, k1: float, b: float, pairs: list[tuple[str, str]]) -> np.ndarray:
    """BM25(query text, docid) for each (text, docid) pair, as Lucene's searcher scores it."""
    compute, similarity = _reader(index_dir).compute_query_document_score, _similarity(k1, b)
    scores = np.empty(len(pairs), dtype=np.float32)
    for i, (text, docid) in enumerate(tqdm(pairs, desc="bm25 pair scores", leave=False, mininterval=5)):
        scores[i] = compute(docid, text, similarity)
    return scores


@cache
def _searcher(index_dir: str, k1: float, b: float) -> tuple[Any, Any, Any]:
    """A BM25 ``IndexSearcher`` over the index, Anserini's bag-of-words query generator and its analyzer."""
    _, autoclass = pyserini_lucene()  # first: importing jnius starts the JVM, with pyserini's classpath only after
    from jnius import cast

    reader = autoclass("org.apache.lucene.index.DirectoryReader").open(
        autoclass("org.apache.lucene.store.FSDirectory").open(autoclass("java.nio.file.Paths").get(index_dir))
    )
    searcher = autoclass("org.apache.lucene.search.IndexSearcher")(cast("org.apache.lucene.index.IndexReader", reader))
    searcher.setSimilarity(autoclass("org.apache.lucene.search.similarities.BM25Similarity")(k1, b))
    generator = autoclass("io.anserini.search.query.BagOfWordsQueryGenerator")()
    return searcher, generator, autoclass("io.anserini.analysis.DefaultEnglishAnalyzer").newDefaultInstance()


@cache
def _ranking() -> tuple[Any, Any, Any]:
    """The pieces of Anserini's BM25 ranking: its sort (score, ties by document id), ``ScoredDocs`` and the adjuster."""
    _, autoclass = pyserini_lucene()
    sort = autoclass("io.anserini.search.SearchCollection").BREAK_SCORE_TIES_BY_DOCID
    adjuster = autoclass("io.anserini.rerank.lib.ScoreTiesAdjusterReranker")()
    return sort, autoclass("io.anserini.search.ScoredDocs"), adjuster


def top_k(index_dir: str, k1: float, b: float, texts: list[str], k: int) -> list[tuple[list[str], list[float]]]:
    """Each text's top ``k`` (document ids, scores) from a searcher kept open: a few queries without a run file.

    The steps of Anserini's ``SimpleSearcher.search`` and ``SearchCollection``: the bag-of-words query, Lucene's top
    ``k`` with ties at the cut-off broken by document id, and the score-ties adjustment (scores to 4 decimals, each
    tie lowered by 1e-6); each score as ``SearchCollection`` writes it (``%f``) and a run file reads it back. The hits
    come back as two arrays: reading ``SimpleSearcher``'s hit objects one by one took half a query at k = 1,000.
    """
    searcher, generator, analyzer = _searcher(index_dir, k1, b)
    sort, scored_docs, adjuster = _ranking()
    found = []
    for text in texts:
        query = generator.buildQuery("contents", analyzer, text)
        hits = adjuster.rerank(scored_docs.fromTopDocs(searcher.search(query, k, sort, True), searcher), None)
        found.append((list(hits.docids), [float(f"{score:f}") for score in hits.scores]))
    return found


def candidate_scores(index_dir: str, k1: float, b: float, candidates: list[tuple[str, list[str]]]) -> list[np.ndarray]:
    """BM25(query, d) of each query text's candidate documents, one Lucene search per query.

    The query is Anserini's bag-of-words query (``SearchCollection``'s), restricted by a filter clause to the
    candidates' ids, so each score is the one the searcher gives the document, for documents at any rank. A
    candidate that shares no term with the query scores 0.

    Args:
        index_dir: The Lucene index.
        k1: BM25 term-frequency saturation.
        b: BM25 length normalisation.
        candidates: (query text, document ids) per query.

    Returns:
        Per query, float32 scores aligned with its document ids.
    """
    _, autoclass = pyserini_lucene()
    searcher, generator, analyzer = _searcher(index_dir, k1, b)
    bytes_ref, array_list = autoclass("org.apache.lucene.util.BytesRef"), autoclass("java.util.ArrayList")
    builder, occur = autoclass("org.apache.lucene.search.BooleanQuery$Builder"), autoclass(BOOLEAN_OCCUR)
    term_in_set = autoclass("org.apache.lucene.search.TermInSetQuery")
    _, scored_docs, _ = _ranking()
    out = []
    for text, docids in tqdm(candidates, desc="bm25 candidate scores", leave=False, mininterval=5):
        ids = array_list(len(docids))
        for docid in docids:
            ids.add(bytes_ref(docid.encode("utf-8")))
        query = builder()
        query.add(generator.buildQuery("contents", analyzer, text), occur.MUST)
        query.add(term_in_set("id", ids), occur.FILTER)  # restricts, adds nothing to the score
        hits = scored_docs.fromTopDocs(searcher.search(query.build(), max(len(docids), 1)), searcher)  # ids in Java
        found = dict(zip(hits.docids, hits.scores, strict=True))
        out.append(np.array([found.get(docid, 0.0) for docid in docids], dtype=np.float32))
    return out


def document_term_weights(
    index_dir: str, k1: float, b: float, docids: list[str], saturation_only: bool = False
) -> list[dict[str, float] | None]:
    """Per document: analysed term → BM25 weight (IDF × TF saturation); None for an unknown docid.

    With ``saturation_only``, the TF saturation alone: the weight divided by the term's IDF, which keeps Lucene's
    quantised length norm exactly. From each document's term vector (:class:`TermWeights`), the same numbers as
    :func:`document_term_weights_by_search`.
    """
    return TermWeights(_reader(index_dir), k1, b).documents(docids, saturation_only)


def document_term_weights_by_search(
    index_dir: str, k1: float, b: float, docids: list[str], saturation_only: bool = False
) -> list[dict[str, float] | None]:
    """:func:`document_term_weights` as pyserini gives it, one Lucene search a (document, term): the reference."""
    reader = _reader(index_dir)
    n_docs = reader.stats()["documents"]
    weight = reader.compute_bm25_term_weight
    out: list[dict[str, float] | None] = []
    for docid in docids:
        vector = reader.get_document_vector(docid)
        if vector is None:
            out.append(None)
            continue
        weights = {t: float(weight(docid, t, analyzer=None, k1=k1, b=b)) for t in vector}
        weights = {t: w for t, w in weights.items() if w > 0}
        out.append({t: w / _idf(reader, t, n_docs) for t, w in weights.items()} if saturation_only else weights)
    return out


@cache
def _term_class() -> Any:
    _, autoclass = pyserini_lucene()
    return autoclass("org.apache.lucene.index.Term")


def _document_frequency(reader: Any, term: str) -> int:
    """Document frequency of an already analysed term, read straight from Lucene.

    pyserini's ``get_term_counts`` re-analyses the term even with ``analyzer=None``, which splits terms such as
    ``m.a.r.`` and returns another term's frequency.
    """
    return int(reader.reader.docFreq(_term_class()("contents", term)))


def _idf(reader: Any, term: str, n_docs: int) -> float:
    """Lucene's BM25 IDF of an analysed term: log(1 + (N − df + 0.5)/(df + 0.5)); 0 when df = 0."""
    df = _document_frequency(reader, term)
    return bm25_idf(n_docs, df) if df > 0 else 0.0


def query_idf(index_dir: str, texts: list[str]) -> list[dict[str, float]]:
    """Per text: analysed term → Lucene's BM25 IDF, log(1 + (N − df + 0.5)/(df + 0.5)), for terms with df > 0."""
    reader = _reader(index_dir)
    n_docs = reader.stats()["documents"]
    out = []
    for text in texts:
        idf = {term: _idf(reader, term, n_docs) for term in reader.analyze(text)}
        out.append({term: value for term, value in idf.items() if value > 0})
    return out


def analyze(index_dir: str, text: str) -> list[str]:
    """Lucene's analysis of ``text`` (tokenise, lower-case, stop words, Porter stemming)."""
    return list(_reader(index_dir).analyze(text))


def document_frequencies(index_dir: str, terms: list[str]) -> list[int]:
    """Document frequency of each analysed term."""
    reader = _reader(index_dir)
    return [_document_frequency(reader, t) for t in terms]


@cache
def _impact_searcher(index_dir: str) -> Any:
    _, autoclass = pyserini_lucene()
    autoclass("org.apache.lucene.search.IndexSearcher").setMaxClauseCount(MAX_QUERY_TERMS)  # dense queries
    return autoclass("io.anserini.search.SimpleImpactSearcher")(index_dir)


def impact_search(index_dir: str, queries: list[dict[str, int]], k: int) -> list[tuple[list, list]]:
    """Each query's top ``k`` (document names, scores) by Σ query impact × document impact (Anserini's impact search).

    One search a query: ``SimpleImpactSearcher.batch_search`` completes none of its tasks for queries given as term
    maps in Anserini 1.7.1 (pyserini 1.6.0).

    Args:
        index_dir: An impact index (``IndexCollection -impact -pretokenized`` over ``JsonVectorCollection``).
        queries: Per query, term → integer impact.
        k: Depth.
    """
    searcher, found = _impact_searcher(index_dir), []
    for query in queries:
        hits = searcher.search(term_map(query), k)
        found.append(([hit.docid for hit in hits], [hit.score for hit in hits]))
    return found


def term_map(query: dict[str, int]) -> Any:
    """``query`` as a Java ``HashMap<String, Integer>``, read from its JSON text by Jackson (in Anserini's jar).

    One call into the JVM a query: a ``put`` a term crossed the JNI at about 11 µs each, a third of a second for a
    DeLADE query's 30,000 terms. Jackson fills a ``HashMap`` in the JSON's order, as the puts did, so the map and its
    iteration order (the order of the query's clauses) are the same.
    """
    mapper, hash_map = _json_reader()
    return mapper.readValue(json.dumps(query), hash_map)


@cache
def _json_reader() -> tuple[Any, Any]:
    _, autoclass = pyserini_lucene()
    return autoclass("com.fasterxml.jackson.databind.ObjectMapper")(), autoclass("java.lang.Class").forName(
        "java.util.HashMap"
    )
