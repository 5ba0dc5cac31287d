"""Learned sparse term weights searched by BMP, an existing engine (``conf/index/bmp.yaml``).

BMP (Block-Max Pruning, Mallia, Suel and Tonellotto, SIGIR 2024; ``bmp`` on PyPI, from the PISA authors) answers
learned sparse queries with block-max pruning over an 8-bit impact index; with α = β = 1 its top k is exact for the
impacts it holds. A ``term_weights`` method's lexical vectors (SPLADE-tiny's, DeLADE's Eq. 23 bag of words, the DLR
fusions' BM25 or SPLADE vectors) are quantized to those impacts: every document weight linearly to 0..255 by one
scale for the whole corpus (255 at the corpus's largest weight), rounded, zeros dropped; each query's weights to
0..32 by its own scale (which changes no ranking), rounded, zeros dropped. BERT's unused leading ids are
discarded as the DLR drops them. Scores are mapped back by both scales, so they read as the inner product of the
quantized weights.

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

The shards are read twice (the scale, then the impacts): corpora encoded on demand (the untrained fusions) are
encoded twice.

With a [CLS] part (DeLADE+[CLS], ``dhr_bm25_dense``), the engine's top ``candidates`` by the lexical part are
re-ranked by the fused score, lexical as the engine scored it + λ·<q_cls, d_cls> (delade-dhr.md Eq. 13); the
semantic part alone is searched exactly over the [CLS] vectors. The engine names documents by their row in the
corpus, so no table of document ids is built beside it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from retrieval_zoo.batching import QueryPrep, encode_payload
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.formats import Run
from retrieval_zoo.index.dhr import PartEncoder, PartSearch
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.index.terms import DHR_GRID, TermIndex
from retrieval_zoo.lexical.bm25 import BM25

LEVELS = 255  # BMP stores 8-bit document impacts
QUERY_LEVELS = 32  # and rescales each query so that its largest weight is 32 (bmp 0.2.8's MAX_TERM_WEIGHT)
QUERY_MIN_LEVELS = 8  # a long query is searched at down to 8 levels before its lowest-weighted terms are cut
SCORE_LIMIT = 65_535  # bmp 0.2.8 adds scores in 16 bits
TERM_LIMIT = 65_536  # and numbers terms in 16 bits
ANCHOR = "\x00"  # a term no document has: at QUERY_LEVELS it keeps BMP from rescaling the query
SENTINEL = "\x01"  # the term of the sentinel block, queued last by every query (at weight 1)
SENTINEL_DOC = "s"  # the sentinel documents' names (real documents are named by their row number)
INSTALL = "pip install bmp==0.2.8 (or pip install -e '.[engines]')"


def import_bmp() -> Any:
    """The ``bmp`` module; a clear error with the install command when it is missing."""
    try:
        import bmp
    except ImportError:
        raise ImportError(f"index=bmp needs the BMP engine, which is not installed: {INSTALL}") from None
    return bmp


def quantize(weights: torch.Tensor, scale: float) -> torch.Tensor:
    """Document weights → integer impacts ``round(w · scale)`` (int64); 0 where a weight rounds to nothing."""
    return torch.round(weights.double() * scale).to(torch.int64)


def query_impacts(weights: torch.Tensor, term_max: torch.Tensor) -> tuple[torch.Tensor, float, int]:
    """A query's (|V|,) weights → its integer impacts (0 for terms left out), their scale, and the terms cut.

    The scale puts the largest weight at :data:`QUERY_LEVELS`. Where the impacts times ``term_max`` (|V|,), each
    term's largest document impact, could sum past :data:`SCORE_LIMIT`, the scale is lowered until they cannot, but
    not below :data:`QUERY_MIN_LEVELS` for the largest weight; past that, the lowest-weighted terms are cut. Terms no
    document has are left out. No document's score, nor a block's bound, can then pass the limit.
    """
    largest = float(weights.max())
    scale, floor = QUERY_LEVELS / largest, QUERY_MIN_LEVELS / largest
    while True:
        impacts = torch.where(term_max > 0, quantize(weights, scale), 0)
        bound = int((impacts * term_max).sum())
        if bound <= SCORE_LIMIT or scale <= floor:
            break
        scale = max(floor, scale * SCORE_LIMIT / bound * (1 - 1e-9))
    order = torch.argsort(weights, descending=True, stable=True)
    cut = order[torch.cumsum(impacts[order] * term_max[order], dim=0) > SCORE_LIMIT]
    cut = cut[impacts[cut] > 0]
    impacts[cut] = 0
    return impacts, scale, len(cut)


def scan(shards: CorpusShards, discard: int) -> tuple[float, torch.Tensor, torch.Tensor | None]:
    """The first of the two passes over the shards: the document scale, each term's largest impact, the [CLS] part.

    The scale is :data:`LEVELS` over the corpus's largest lexical weight (ids below ``discard`` left out); the
    largest impacts are (|V| - discard,) int64; the [CLS] vectors (n, c), or None.
    """
    term_max, cls_parts = None, []
    for _, payload in tqdm(shards, desc="scan term weights", unit="shard", leave=False):
        shard_max = payload["lexical"][:, discard:].amax(dim=0)
        term_max = shard_max if term_max is None else torch.maximum(term_max, shard_max)
        if payload.get("cls") is not None:
            cls_parts.append(payload["cls"])
    largest, terms = float(term_max.max()), int((term_max > 0).sum())
    if largest <= 0:
        raise ValueError("the corpus has no positive term weight: nothing to index")
    if terms > TERM_LIMIT:
        raise ValueError(f"the corpus has {terms:,} distinct terms; BMP (bmp 0.2.8, 16-bit term ids) indexes at "
                         f"most {TERM_LIMIT:,}: use index=sparse or index=gip")  # fmt: skip
    scale = LEVELS / largest
    return scale, quantize(term_max, scale), torch.cat(cls_parts) if cls_parts else None


class BmpRetriever(PartSearch):
    """A corpus's term weights in a BMP index, searched by its block-max pruning (module docstring).

    Args:
        encode_query: Query texts → ((n, |V|) lexical, (n, c) [CLS] or None) vectors.
        shards: The corpus's ``lexical`` (n, |V|) and optional ``cls`` (n, c) vectors, by shard.
        lam: λ of the [CLS] part, as indexed.
        discard: Leading vocabulary ids that are never used (BERT's), left out of the index.
        candidates: Documents the engine returns by the lexical part for the fused re-ranking.
        oversample: The engine is asked for ``oversample`` × k documents, of which the top k are kept (see above).
        block_size: Documents per block of the BMP index.
        alpha: BMP's α (1: exact); β (1: exact) is ``beta``.
        beta: BMP's β.
        batch_size: Queries encoded together.
        queries: How query texts are batched (``method.query_prep()``).
        folder: Where the index file is written (default: a temporary folder that lives with the retriever).
    """

    def __init__(
        self, encode_query: PartEncoder, shards: CorpusShards, lam: float, discard: int, candidates: int = 1000,
        oversample: int = 2, block_size: int = 32, alpha: float = 1.0, beta: float = 1.0, batch_size: int = 128,
        queries: QueryPrep | None = None, folder: str | Path | None = None,
    ) -> None:  # fmt: skip
        bmp = import_bmp()
        self.encode_query, self.weight, self.discard, self.candidates = encode_query, lam, discard, candidates
        self.oversample, self.pruned_queries = oversample, 0
        self.alpha, self.beta, self.batch_size, self.queries = alpha, beta, batch_size, queries or QueryPrep()
        self.docids = shards.docids
        self._folder = tempfile.TemporaryDirectory(prefix="retrieval_zoo-bmp-") if folder is None else None
        path = Path(folder or self._folder.name) / "index.bmp"
        self.scale, self.term_max, self.cls = scan(shards, discard)
        self.postings = self._write(bmp.Indexer(str(path), block_size, False), shards, block_size)
        self.nbytes = path.stat().st_size + (self.cls.numel() * 4 if self.cls is not None else 0)
        self.searcher = bmp.Searcher(str(path))
        self.weight_name = "semantic_weight" if self.cls is not None else None

    def _write(self, indexer: Any, shards: CorpusShards, block_size: int) -> int:
        """Add every document's impacts (named by its row) to ``indexer``, then the sentinel block; the postings."""
        postings, row = 0, 0
        for _, payload in tqdm(shards, desc="BMP index", unit="shard", leave=False):
            impacts = quantize(payload["lexical"][:, self.discard :], self.scale).to_sparse_csr()
            offsets, terms = impacts.crow_indices().tolist(), (impacts.col_indices() + self.discard).tolist()
            values = impacts.values().tolist()
            for start, stop in zip(offsets[:-1], offsets[1:], strict=True):
                indexer.add_document(str(row), dict(zip(map(str, terms[start:stop]), values[start:stop], strict=True)))
                row += 1
            postings += len(values)
        for filler in range(-row % block_size + block_size):  # the last real block filled, then a block of its own
            indexer.add_document(f"{SENTINEL_DOC}{filler}", {SENTINEL: 1})
        indexer.finish()
        return postings

    @property
    def lexical_nonzero(self) -> float:
        """Impacts (postings) per document."""
        return self.postings / len(self.docids)

    @torch.inference_mode()
    def search(self, queries: dict[str, str], k: int, part: str | None = None, weight: float | None = None) -> Run:
        """Top ``k`` by the engine (the lexical part), fused with λ·[CLS] over its candidates, or one ``part`` alone."""
        weight = self.weight if weight is None else weight
        self.check_part(part, self.cls is not None)
        qids, texts = list(queries), list(queries.values())
        encode = lambda batch: dict(zip(("lexical", "cls"), self.encode_query(batch), strict=True))  # noqa: E731
        encoded = encode_payload(encode, texts, self.batch_size, "encode queries (bmp)", self.queries.lengths(texts),
                                 self.queries.prepare)  # fmt: skip
        lexical, cls = encoded["lexical"][:, self.discard :], encoded.get("cls")
        if part == "semantic":
            return self._semantic(qids, cls, k)
        fused = self.cls is not None and part != "lexical"
        run: Run = {}
        for row, qid in enumerate(qids):
            rows, scores = self._lexical(lexical[row], max(k, self.candidates) if fused else k)
            if fused and len(rows):
                scores = scores + weight * (self.cls[rows] @ cls[row]).double().numpy()
                keep = np.argsort(-scores, kind="stable")[:k]
                rows, scores = rows[keep], scores[keep]
            run[qid] = {self.docids[r]: float(s) for r, s in zip(rows.tolist(), scores.tolist(), strict=True)}
        return run

    def _lexical(self, weights: torch.Tensor, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """The engine's top ``depth`` for one query's (|V| - discard,) weights: rows and scores on the float scale."""
        impacts, query_scale, cut = query_impacts(weights, self.term_max)
        self.pruned_queries += bool(cut)
        terms = torch.nonzero(impacts > 0).flatten()
        if not len(terms):
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        query = dict(zip(map(str, (terms + self.discard).tolist()), impacts[terms].tolist(), strict=True))
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
        real = [i for i, name in enumerate(names) if not name.startswith(SENTINEL_DOC)][:depth]
        names, scores = np.asarray([names[i] for i in real], dtype=np.int64), np.asarray([scores[i] for i in real])
        return names, scores / (query_scale * self.scale)

    def _semantic(self, qids: list[str], cls: torch.Tensor, k: int) -> Run:
        """The exact top ``k`` by <q_cls, d_cls>."""
        top_scores, rows = (cls @ self.cls.T).topk(min(k, len(self.docids)), dim=1)
        return {qid: {self.docids[r]: s for r, s in zip(row_ids, row_scores, strict=True)}
                for qid, row_scores, row_ids in zip(qids, top_scores.tolist(), rows.tolist(), strict=True)}  # fmt: skip


class Bmp(TermIndex):
    """A ``term_weights`` method's lexical vectors in BMP (``conf/index/bmp.yaml``; module docstring).

    Args:
        candidates: Documents the engine returns for the fused re-ranking with a [CLS] part.
        oversample: Asks the engine for this many times k and keeps the top k (bmp 0.2.8 skips one block a search).
        block_size: Documents per BMP block.
        alpha: BMP's α (1 with β = 1: exact for the quantized impacts).
        beta: BMP's β.
        weight: λ of the [CLS] part at indexing; null takes the method's.
        weight_grid: λ values tried when evaluation tunes.
        tune_measure: What tuning maximises.
    """

    def __init__(
        self, candidates: int = 1000, oversample: int = 2, block_size: int = 32, alpha: float = 1.0, beta: float = 1.0,
        weight: float | None = None, weight_grid: tuple[float, ...] = DHR_GRID, tune_measure: str = "MRR@10",
    ) -> None:  # fmt: skip
        super().__init__(weight, weight_grid, tune_measure)
        import_bmp()  # when the config is read: a missing engine fails at once, before anything is encoded
        if not (0 < alpha <= 1 and 0 < beta <= 1):
            raise ValueError(f"index.alpha and index.beta must be in (0, 1], not {alpha} and {beta}")
        if oversample < 1:
            raise ValueError(f"index.oversample must be at least 1, not {oversample}")
        self.candidates, self.oversample, self.block_size = candidates, oversample, block_size
        self.alpha, self.beta = alpha, beta

    def build(
        self, method: Any, collection: Collection, bm25: BM25, shards: CorpusShards | None = None
    ) -> BmpRetriever:
        """The corpus's term weights quantized into a BMP index (the [CLS] vectors beside it)."""
        encoder, shards = self.encoder_and_shards(method, collection, bm25, shards)
        return BmpRetriever(encoder.encode_queries, shards, self.fusion_weight(encoder), encoder.discard,
                            self.candidates, self.oversample, self.block_size, self.alpha, self.beta,
                            encoder.batch_size, encoder.queries)  # fmt: skip
