"""Learned sparse term weights searched by BMP, an existing engine (``conf/index/bmp.yaml``).

BMP (Block-Max Pruning, Mallia, Suel and Tonellotto, SIGIR 2024; ``bmp`` on PyPI, from the PISA authors) answers
learned sparse queries with block-max pruning over an 8-bit impact index; with α = β = 1 its top k is exact for the
impacts it holds. A ``term_weights`` method's lexical vectors become its
impacts as :mod:`retrieval_zoo.index.terms.impact` describes: documents at 8 bits (BMP's storage), queries at up to 32
levels (BMP rescales every query to that).

bmp 0.2.8 has limits of its own, which this module works around (tested in ``tests/test_impact.py``):
- It adds scores, and block upper bounds, in 16 bits: a sum above 65,535 wraps around (a top document would sink, a
  block be wrongly pruned). So where a query's impacts times each term's largest document impact could sum past
  65,535, its scale is lowered until they cannot, down to 8 levels for its largest weight, and past that its
  lowest-weighted terms are cut (:attr:`BmpRetriever.pruned_queries` counts the queries that lost any).
- Its search loop never scores the last block it queues, the one of lowest upper bound. So the index ends with a
  sentinel block (documents holding only :data:`SENTINEL`, impact 1; every query asks for it at weight 1), whose
  bound of 1 is the lowest there is: when the search queues every block that matches (a query that matches fewer
  documents than it asks for), the sentinel is the one left out. When a query matches more, the engine is asked for
  ``oversample`` × k documents (2 by default) and the top k kept, so the lowest bound queued is below the k-th
  score (measured, not guaranteed: ``benchmarks/sparse_engines.py``). Fillers after the last document complete its
  block; they score 1 at most and are never returned.
- It panics when no block's bound is above the largest k-th impact of a query term (ties at the top): the query is
  asked again, deeper.
- It rescales every query so that its largest weight is 32: a term that no document has (:data:`ANCHOR`) rides
  along at 32, which keeps the query's own scale.
- Its term ids are 16-bit: an index holds at most 65,536 distinct terms (BERT's vocabulary fits; a large BM25
  vocabulary does not, which is a clear error).

Its 32 query levels reorder near-ties (top-10 overlap with exact search 0.982-0.987 on the embedded collection,
README). With ``rescore`` (the default), the documents it returns are re-scored with the query's float weights
against their 8-bit impacts (:class:`~retrieval_zoo.index.terms.forward_impacts.ForwardImpacts`, a forward index on disk
beside BMP's) and the top k kept: the ranking then loses only the documents' quantization.
"""

from __future__ import annotations

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
from retrieval_zoo.index.terms.bmp_engine import (
    FORWARD,
    INDEX,
    LEVELS,
    QUERY_LEVELS,
    SENTINEL,
    SENTINEL_DOC,
    bmp_files,
    import_bmp,
    query_impacts,
)
from retrieval_zoo.index.terms.dhr_vectors import PartEncoder
from retrieval_zoo.index.terms.forward_impacts import ForwardImpacts
from retrieval_zoo.index.terms.impact import Hits, ImpactCorpus, ImpactRetriever, as_query
from retrieval_zoo.index.terms.term_index import DHR_GRID, TermIndex
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.retriever import Retriever
from retrieval_zoo.term_matrix import each_row

TERM_LIMIT = 65_536  # bmp 0.2.8 numbers terms in 16 bits
ANCHOR = "\x00"  # a term no document has: at QUERY_LEVELS it keeps BMP from rescaling the query


class BmpRetriever(ImpactRetriever):
    """A corpus's term weights in a BMP index, searched by its block-max pruning (module docstring).

    :meth:`from_shards` builds one.

    Args:
        encode_query: Query texts → ((n, |V|) lexical, (n, c) [CLS] or None) vectors.
        corpus: What is kept of the corpus beside the index (its scale, largest impacts, [CLS] part).
        path: The BMP index file.
        forward: The forward index that re-scores BMP's documents, or None (no re-scoring).
        lam: λ of the [CLS] part.
        discard: Leading vocabulary ids that are never used (BERT's), left out of the index.
        candidates: Documents the engine returns by the lexical part for the fused re-ranking.
        oversample: The engine is asked for ``oversample`` × k documents, of which the top k are kept (see above).
        alpha: BMP's α (1: exact); β (1: exact) is ``beta``.
        beta: BMP's β.
        batch_size: Queries encoded together.
        queries: How query texts are batched (``method.query_prep()``).
        keep: A temporary folder holding the files, removed with the retriever.
    """

    name = "bmp"

    def __init__(
        self, encode_query: PartEncoder, corpus: ImpactCorpus, path: Path, forward: ForwardImpacts | None, lam: float,
        discard: int, candidates: int = 1000, oversample: int = 2, alpha: float = 1.0, beta: float = 1.0,
        batch_size: int = 128, queries: QueryPrep | None = None, keep: tempfile.TemporaryDirectory[str] | None = None,
    ) -> None:  # fmt: skip
        bmp = import_bmp()
        super().__init__(encode_query, corpus, lam, discard, candidates, batch_size, queries)
        self.path, self.forward, self._folder = Path(path), forward, keep
        self.oversample, self.alpha, self.beta, self.pruned_queries = oversample, alpha, beta, 0
        self.measured_nbytes = self.path.stat().st_size + corpus.cls_nbytes
        self.measured_nbytes += forward.nbytes if forward is not None else 0
        self.searcher = bmp.Searcher(str(self.path))

    @classmethod
    def from_shards(
        cls, encode_query: PartEncoder, shards: CorpusShards, lam: float, discard: int, candidates: int = 1000,
        oversample: int = 2, block_size: int = 32, alpha: float = 1.0, beta: float = 1.0, rescore: bool = True,
        batch_size: int = 128, queries: QueryPrep | None = None, folder: str | Path | None = None,
    ) -> BmpRetriever:  # fmt: skip
        """Index the corpus's ``lexical`` (n, |V|) vectors by shard, in blocks of ``block_size`` documents.

        With ``rescore``, BMP's documents are re-scored with the query's float weights against their 8-bit impacts
        (module docstring). The files go into ``folder`` (default: a temporary folder that lives with the retriever).
        """
        import_bmp()
        corpus = ImpactCorpus.scan(shards, discard, LEVELS)
        terms = int((corpus.term_max > 0).sum())
        if terms > TERM_LIMIT:
            raise ValueError(f"the corpus has {terms:,} distinct terms; BMP (bmp 0.2.8, 16-bit term ids) indexes at "
                             f"most {TERM_LIMIT:,}: use index=sparse or index=gip")  # fmt: skip
        keep = None
        if folder is None:
            keep = tempfile.TemporaryDirectory(prefix="retrieval_zoo-bmp-")
            folder = keep.name
        path, forward = bmp_files(shards, corpus, discard, block_size, Path(folder), rescore)
        return cls(encode_query, corpus, path, forward, lam, discard, candidates, oversample, alpha, beta, batch_size,
                   queries, keep)  # fmt: skip

    def save(self, folder: Path) -> None:
        """The BMP index, the forward index (``forward/``) and what is kept beside them, into ``folder``."""
        shutil.copyfile(self.path, folder / INDEX)
        if self.forward is not None:
            shutil.copytree(self.forward.folder, folder / FORWARD)
        self.corpus.save(folder)

    def query_impacts(self, weights: torch.Tensor) -> tuple[torch.Tensor, float]:
        """:func:`query_impacts` with this corpus's largest impacts (the terms cut are counted)."""
        impacts, scale, cut = query_impacts(weights, self.term_max)
        self.pruned_queries += bool(cut)
        return impacts, scale

    def lexical_hits(self, lexical: torch.Tensor, depth: int) -> list[Hits]:
        """One BMP search a query (module docstring: the sentinel, the anchor, the deeper retry)."""
        return [self._search(weights, depth) for weights in each_row(lexical)]

    def _search(self, weights: torch.Tensor, depth: int) -> Hits:
        impacts, query_scale = self.query_impacts(weights)
        query = as_query(impacts, self.discard)
        if not query:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        query[ANCHOR], query[SENTINEL] = QUERY_LEVELS, 1
        asked = depth * self.oversample
        while True:  # bmp 0.2.8 panics when no block's bound passes the k-th largest impact of a query term (ties)
            try:
                names, scores = self.searcher.search(query, asked, self.alpha, self.beta)
                break
            except BaseException as error:  # pyo3's PanicException derives from BaseException
                if type(error).__name__ != "PanicException" or asked >= len(self.docids):
                    raise
                asked = min(2 * asked, len(self.docids))  # a deeper k lowers that bound
        real = [i for i, name in enumerate(names) if not name.startswith(SENTINEL_DOC)]
        rows, found = np.asarray([names[i] for i in real], dtype=np.int64), np.asarray([scores[i] for i in real])
        if self.forward is None:
            return rows[:depth], found[:depth] / (query_scale * self.scale)
        dense_query = np.zeros(self.discard + len(weights))
        dense_query[self.discard :] = weights.double().numpy()
        rescored = self.forward.scores(rows, dense_query) / self.scale
        best = np.argsort(-rescored, kind="stable")[:depth]
        return rows[best], rescored[best]


class Bmp(TermIndex):
    """A ``term_weights`` method's lexical vectors in BMP (``conf/index/bmp.yaml``; module docstring).

    Args:
        candidates: Documents the engine returns for the fused re-ranking with a [CLS] part.
        oversample: Asks the engine for this many times k and keeps the top k (bmp 0.2.8 skips one block a search).
        block_size: Documents per BMP block.
        alpha: BMP's α (1 with β = 1: exact for the quantized impacts).
        beta: BMP's β.
        rescore: Re-scores BMP's documents with the query's float weights against their 8-bit impacts.
        weight: λ of the [CLS] part at indexing; null takes the method's.
        weight_grid: λ values tried when evaluation tunes.
        tune_measure: What tuning maximises.
        extend_grid: Go past the grid's edge where the best value lies (False: the grid only).
    """

    saves: ClassVar[bool] = True

    def __init__(
        self, candidates: int = 1000, oversample: int = 2, block_size: int = 32, alpha: float = 1.0, beta: float = 1.0,
        rescore: bool = True, weight: float | None = None, weight_grid: tuple[float, ...] = DHR_GRID,
        tune_measure: Measure = "MRR@10",
        extend_grid: bool = True,
    ) -> None:  # fmt: skip
        super().__init__(weight, weight_grid, tune_measure, extend_grid)
        import_bmp()  # when the config is read: a missing engine fails at once, before anything is encoded
        if not (0 < alpha <= 1 and 0 < beta <= 1):
            raise ValueError(f"index.alpha and index.beta must be in (0, 1], not {alpha} and {beta}")
        if oversample < 1:
            raise ValueError(f"index.oversample must be at least 1, not {oversample}")
        self.candidates, self.oversample, self.block_size = candidates, oversample, block_size
        self.alpha, self.beta, self.rescore = alpha, beta, rescore

    def build(
        self, method: OffersTermWeights, collection: Collection, bm25: BM25, shards: CorpusShards | None = None
    ) -> BmpRetriever:
        """The corpus's term weights quantized into a BMP index (the [CLS] vectors beside it)."""
        encoder, shards = self.encoder_and_shards(method, collection, bm25, shards)
        return BmpRetriever.from_shards(encoder.encode_queries, shards, self.fusion_weight(encoder), encoder.discard,
                                        self.candidates, self.oversample, self.block_size, self.alpha, self.beta,
                                        self.rescore, encoder.batch_size, encoder.queries)  # fmt: skip

    def save(self, retriever: Retriever, folder: Path) -> None:
        """The BMP index this index built, its forward index, and the scale and [CLS] part kept beside them."""
        self.built_here(retriever, BmpRetriever).save(folder)

    def load(self, method: OffersTermWeights, collection: Collection, bm25: BM25, folder: Path) -> BmpRetriever:
        """The saved BMP index, searched in place, its queries encoded by ``method``."""
        encoder = method.term_encoder(collection, bm25)
        corpus = ImpactCorpus.load(folder, corpus_ids(collection.corpus))
        forward = ForwardImpacts(folder / FORWARD) if self.rescore else None
        return BmpRetriever(encoder.encode_queries, corpus, folder / INDEX, forward, self.fusion_weight(encoder),
                            encoder.discard, self.candidates, self.oversample, self.alpha, self.beta,
                            encoder.batch_size, encoder.queries)  # fmt: skip
