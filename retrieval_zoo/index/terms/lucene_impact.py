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
import tempfile
from pathlib import Path

import numpy as np
import torch

from retrieval_zoo.data.collections import Collection
from retrieval_zoo.encoding.batching import QueryPrep
from retrieval_zoo.evaluation.metrics import Measure
from retrieval_zoo.index.representations import OffersTermWeights
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.index.terms.dhr import PartEncoder
from retrieval_zoo.index.terms.impact import Hits, ImpactRetriever, as_query, document_impacts, quantize
from retrieval_zoo.index.terms.term_index import DHR_GRID, TermIndex
from retrieval_zoo.lexical import lucene_ops
from retrieval_zoo.lexical.java import LuceneWorker, indexing_options
from retrieval_zoo.lexical.lucene_bm25 import BM25, file_sizes
from retrieval_zoo.term_matrix import each_row


def jsonl_line(name: str, vector: dict[str, int]) -> str:
    """A document of ``JsonVectorCollection`` (a row number, term ids: nothing to escape), twice as fast as json."""
    terms = ", ".join([f'"{term}": {impact}' for term, impact in vector.items()])
    return '{"id": "' + name + '", "contents": "", "vector": {' + terms + "}}\n"


class LuceneImpactRetriever(ImpactRetriever):
    """A corpus's term weights in a Lucene impact index (module docstring).

    Args:
        encode_query: Query texts → ((n, |V|) lexical, (n, c) [CLS] or None) vectors.
        shards: The corpus's ``lexical`` (n, |V|) and optional ``cls`` (n, c) vectors, by shard.
        lam: λ of the [CLS] part, as indexed.
        discard: Leading vocabulary ids that are never used (BERT's), left out of the index.
        doc_levels: The largest document impact.
        query_levels: The largest query impact.
        candidates: Documents the engine returns by the lexical part for the fused re-ranking.
        threads: Indexing threads (default: every core).
        batch_size: Queries encoded together.
        queries: How query texts are batched (``method.query_prep()``).
        folder: Where the index is written (default: a temporary folder that lives with the retriever).
    """

    name = "lucene impact"

    def __init__(
        self, encode_query: PartEncoder, shards: CorpusShards, lam: float, discard: int, doc_levels: int = 255,
        query_levels: int = 1000, candidates: int = 1000, threads: int | None = None, batch_size: int = 128,
        queries: QueryPrep | None = None, folder: str | Path | None = None,
    ) -> None:  # fmt: skip
        super().__init__(encode_query, shards, lam, discard, doc_levels, candidates, batch_size, queries)
        self.query_levels, self.threads = query_levels, threads or os.cpu_count() or 1
        self._folder: tempfile.TemporaryDirectory[str] | None = None  # removed with the retriever
        if folder is None:
            self._folder = tempfile.TemporaryDirectory(prefix="retrieval_zoo-impact-")
            folder = self._folder.name
        root = Path(folder)
        documents, self.index_dir = root / "documents", root / "index"
        documents.mkdir(parents=True, exist_ok=True)
        with open(documents / "impacts.jsonl", "w", encoding="utf-8") as out:
            for names, vectors in document_impacts(shards, discard, self.scale):
                out.writelines(map(jsonl_line, names, vectors))
                self.postings += sum(map(len, vectors))
        args = ["-collection", "JsonVectorCollection", "-input", str(documents), "-index", str(self.index_dir),
                "-generator", "DefaultLuceneDocumentGenerator", "-impact", "-pretokenized", "-threads",
                str(self.threads), "-quiet", *indexing_options()]  # fmt: skip
        LuceneWorker.call(lucene_ops.run_main, "io.anserini.index.IndexCollection", args)
        (documents / "impacts.jsonl").unlink()
        self.measured_nbytes = sum(file_sizes(self.index_dir).values()) + (
            self.cls.numel() * 4 if self.cls is not None else 0
        )

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
        return LuceneImpactRetriever(encoder.encode_queries, shards, self.fusion_weight(encoder), encoder.discard,
                                     self.doc_levels, self.query_levels, self.candidates, self.threads,
                                     encoder.batch_size, encoder.queries)  # fmt: skip
