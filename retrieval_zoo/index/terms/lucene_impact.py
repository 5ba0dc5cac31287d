"""Learned sparse term weights in a Lucene impact index, searched by Anserini (``conf/index/lucene_impact.yaml``).

Anserini (through pyserini, already a dependency) indexes integer impacts as term frequencies
(``IndexCollection -collection JsonVectorCollection -impact -pretokenized``) and scores a query of integer
weights by Σ query impact × document impact (``SimpleImpactSearcher``): exact, with no limit on the sum. A
``term_weights`` method's lexical vectors become those impacts as :mod:`retrieval_zoo.index.terms.impact` describes:
documents at ``doc_levels`` (255 by default), queries at ``query_levels`` (1,000: Lucene has no 8-bit cap on them).
Indexing runs in the JVM worker (:class:`retrieval_zoo.lexical.java.LuceneWorker`) from a JSONL file written shard
by shard; a document's impacts are its terms' frequencies, so indexing time grows with their sum.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.corpus_store import corpus_ids
from retrieval_zoo.encoding.batching import QueryPrep
from retrieval_zoo.evaluation.metrics import Measure
from retrieval_zoo.index.representations import OffersTermWeights
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.index.terms.dhr_vectors import PartEncoder
from retrieval_zoo.index.terms.impact import (
    Hits,
    ImpactCorpus,
    ImpactRetriever,
    as_query,
    document_impacts,
    quantize,
)
from retrieval_zoo.index.terms.term_index import DHR_GRID, TermIndex
from retrieval_zoo.lexical import lucene_ops
from retrieval_zoo.lexical.java import LuceneWorker, indexing_options
from retrieval_zoo.lexical.lucene_bm25 import BM25, file_sizes
from retrieval_zoo.retriever import Retriever
from retrieval_zoo.term_matrix import each_row

LUCENE = "lucene"  # a saved index's Lucene folder


def jsonl_line(name: str, vector: dict[str, int]) -> str:
    """A document of ``JsonVectorCollection`` (a row number, term ids: nothing to escape), twice as fast as json."""
    terms = ", ".join([f'"{term}": {impact}' for term, impact in vector.items()])
    return '{"id": "' + name + '", "contents": "", "vector": {' + terms + "}}\n"


class LuceneImpactRetriever(ImpactRetriever):
    """A corpus's term weights in a Lucene impact index (module docstring); :meth:`from_shards` builds one.

    Args:
        encode_query: Query texts → ((n, |V|) lexical, (n, c) [CLS] or None) vectors.
        corpus: What is kept of the corpus beside the index (its scale, largest impacts, [CLS] part).
        index_dir: The Lucene index.
        lam: λ of the [CLS] part.
        discard: Leading vocabulary ids that are never used (BERT's), left out of the index.
        query_levels: The largest query impact.
        candidates: Documents the engine returns by the lexical part for the fused re-ranking.
        batch_size: Queries encoded together.
        queries: How query texts are batched (``method.query_prep()``).
        keep: A temporary folder holding ``index_dir``, removed with the retriever.
    """

    name = "lucene impact"

    def __init__(
        self, encode_query: PartEncoder, corpus: ImpactCorpus, index_dir: Path, lam: float, discard: int,
        query_levels: int = 1000, candidates: int = 1000, batch_size: int = 128, queries: QueryPrep | None = None,
        keep: tempfile.TemporaryDirectory[str] | None = None,
    ) -> None:  # fmt: skip
        super().__init__(encode_query, corpus, lam, discard, candidates, batch_size, queries)
        self.index_dir, self.query_levels, self._folder = Path(index_dir), query_levels, keep
        self.measured_nbytes = sum(file_sizes(self.index_dir).values()) + corpus.cls_nbytes

    @classmethod
    def from_shards(
        cls, encode_query: PartEncoder, shards: CorpusShards, lam: float, discard: int, doc_levels: int = 255,
        query_levels: int = 1000, candidates: int = 1000, threads: int | None = None, batch_size: int = 128,
        queries: QueryPrep | None = None, folder: str | Path | None = None,
    ) -> LuceneImpactRetriever:  # fmt: skip
        """Index the corpus's ``lexical`` (n, |V|) vectors by shard, with ``threads`` (default: every core).

        The index goes into ``folder`` (default: a temporary folder that lives with the retriever).
        """
        corpus, keep = ImpactCorpus.scan(shards, discard, doc_levels), None
        if folder is None:
            keep = tempfile.TemporaryDirectory(prefix="retrieval_zoo-impact-")
            folder = keep.name
        root = Path(folder)
        documents, index_dir = root / "documents", root / "index"
        documents.mkdir(parents=True, exist_ok=True)
        with open(documents / "impacts.jsonl", "w", encoding="utf-8") as out:
            for names, vectors in document_impacts(shards, discard, corpus.scale):
                out.writelines(map(jsonl_line, names, vectors))
                corpus.postings += sum(map(len, vectors))
        args = ["-collection", "JsonVectorCollection", "-input", str(documents), "-index", str(index_dir),
                "-generator", "DefaultLuceneDocumentGenerator", "-impact", "-pretokenized", "-threads",
                str(threads or os.cpu_count() or 1), "-quiet", *indexing_options()]  # fmt: skip
        LuceneWorker.call(lucene_ops.run_main, "io.anserini.index.IndexCollection", args)
        (documents / "impacts.jsonl").unlink()
        return cls(encode_query, corpus, index_dir, lam, discard, query_levels, candidates, batch_size, queries, keep)

    def save(self, folder: Path) -> None:
        """The Lucene index (``lucene/``) and what is kept beside it, into ``folder``."""
        shutil.copytree(self.index_dir, folder / LUCENE)
        self.corpus.save(folder)

    def query_impacts(self, weights: torch.Tensor) -> tuple[torch.Tensor, float]:
        """The largest weight at ``query_levels``, terms no document has left out."""
        scale = self.query_levels / float(weights.max()) if bool((weights > 0).any()) else 1.0
        return torch.where(self.term_max > 0, quantize(weights, scale), 0), scale

    def lexical_hits(self, lexical: torch.Tensor, depth: int) -> list[Hits]:
        """The queries searched in the JVM worker, one call for them all."""
        quantized = [self.query_impacts(weights) for weights in each_row(lexical)]
        queries = [as_query(impacts, self.discard) for impacts, _ in quantized]
        asked = [number for number, query in enumerate(queries) if query]
        found = LuceneWorker.call(lucene_ops.impact_search, str(self.index_dir), [queries[n] for n in asked],
                                  depth) if asked else []  # fmt: skip
        hits: list[Hits] = [(np.zeros(0, dtype=np.int64), np.zeros(0))] * len(queries)
        for number, (names, scores) in zip(asked, found, strict=True):
            hits[number] = np.asarray(names, dtype=np.int64), np.asarray(scores) / (quantized[number][1] * self.scale)
        return hits


class LuceneImpact(TermIndex):
    """A ``term_weights`` method's lexical vectors in a Lucene impact index (``conf/index/lucene_impact.yaml``).

    Args:
        doc_levels: The largest document impact (255: 8 bits).
        query_levels: The largest query impact.
        candidates: Documents the engine returns for the fused re-ranking with a [CLS] part.
        threads: Indexing threads (null: every core).
        weight: λ of the [CLS] part at indexing; null takes the method's.
        weight_grid: λ values tried when evaluation tunes.
        tune_measure: What tuning maximises.
        extend_grid: Go past the grid's edge where the best value lies (False: the grid only).
    """

    saves: ClassVar[bool] = True

    def __init__(
        self, doc_levels: int = 255, query_levels: int = 1000, candidates: int = 1000, threads: int | None = None,
        weight: float | None = None, weight_grid: tuple[float, ...] = DHR_GRID, tune_measure: Measure = "MRR@10",
        extend_grid: bool = True,
    ) -> None:  # fmt: skip
        super().__init__(weight, weight_grid, tune_measure, extend_grid)
        if doc_levels < 1 or query_levels < 1:
            raise ValueError(f"index.doc_levels and index.query_levels must be at least 1, not {doc_levels}, "
                             f"{query_levels}")  # fmt: skip
        self.doc_levels, self.query_levels, self.candidates, self.threads = (
            doc_levels,
            query_levels,
            candidates,
            threads,
        )

    def build(
        self, method: OffersTermWeights, collection: Collection, bm25: BM25, shards: CorpusShards | None = None
    ) -> LuceneImpactRetriever:
        """The corpus's term weights as impacts in a Lucene index (the [CLS] vectors beside it)."""
        encoder, shards = self.encoder_and_shards(method, collection, bm25, shards)
        return LuceneImpactRetriever.from_shards(encoder.encode_queries, shards, self.fusion_weight(encoder),
                                                 encoder.discard, self.doc_levels, self.query_levels, self.candidates,
                                                 self.threads, encoder.batch_size, encoder.queries)  # fmt: skip

    def save(self, retriever: Retriever, folder: Path) -> None:
        """The Lucene index this index built, and the scale and [CLS] part kept beside it."""
        self.built_here(retriever, LuceneImpactRetriever).save(folder)

    def load(
        self, method: OffersTermWeights, collection: Collection, bm25: BM25, folder: Path
    ) -> LuceneImpactRetriever:
        """The saved Lucene index, searched in place, its queries encoded by ``method``."""
        encoder = method.term_encoder(collection, bm25)
        corpus = ImpactCorpus.load(folder, corpus_ids(collection.corpus))
        return LuceneImpactRetriever(encoder.encode_queries, corpus, folder / LUCENE, self.fusion_weight(encoder),
                                     encoder.discard, self.query_levels, self.candidates, encoder.batch_size,
                                     encoder.queries)  # fmt: skip
