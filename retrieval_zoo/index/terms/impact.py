"""Learned sparse term weights searched by existing engines, as integer impacts: what BMP and Lucene share.

A ``term_weights`` method's lexical vectors (SPLADE-tiny's, DeLADE's Eq. 23 bag of words, the DLR fusions' BM25 or
SPLADE vectors) become the integer impacts the engines index: every document weight linearly to 0..``levels`` by
one scale for the whole corpus (``levels`` at its largest weight), rounded, zeros dropped; each query's weights by
its own scale (which changes no ranking; each engine's :meth:`ImpactRetriever.query_impacts`). BERT's unused leading
ids are discarded as the DLR drops them. Scores are mapped back by both scales, so they read as the inner product of
the quantized weights. Engines name documents by their row in the corpus, so no table of ids is built beside them.

With a [CLS] part (DeLADE+[CLS], ``dhr_bm25_dense``), the engine's top ``candidates`` by the lexical part are
re-ranked by the fused score, lexical as the engine scored it + λ·<q_cls, d_cls> (delade-dhr.md Eq. 13); the
semantic part alone is searched exactly over the [CLS] vectors. The shards are read twice (the scale, then the
impacts): corpora encoded on demand (the untrained fusions) are encoded twice.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from retrieval_zoo.data.formats import Run
from retrieval_zoo.encoding.batching import QueryPrep
from retrieval_zoo.host_work import host_only
from retrieval_zoo.id_index import IdIndex
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.index.terms.dhr import PartSearch
from retrieval_zoo.index.terms.dhr_vectors import PartEncoder
from retrieval_zoo.retriever import ranked_run
from retrieval_zoo.term_matrix import column_max, columns_from, entry_rows, offsets_of, parts, to_csr

Hits = tuple[np.ndarray, np.ndarray]  # one query's rows and scores, best first


def quantize(weights: torch.Tensor, scale: float) -> torch.Tensor:
    """Weights → integer impacts ``round(w · scale)`` (int64); 0 where a weight rounds to nothing."""
    return torch.round(weights.double() * scale).to(torch.int64)


def scan(shards: CorpusShards, discard: int, levels: int) -> tuple[float, torch.Tensor, torch.Tensor | None]:
    """The first of the two passes over the shards: the document scale, each term's largest impact, the [CLS] part.

    The scale is ``levels`` over the corpus's largest lexical weight (ids below ``discard`` left out); the
    largest impacts are (|V| - discard,) int64; the [CLS] vectors (n, c), or None.
    """
    term_max, cls_parts = None, []
    for _, payload in tqdm(shards, desc="scan term weights", unit="shard", leave=False):
        shard_max = column_max(columns_from(payload["lexical"], discard))
        term_max = shard_max if term_max is None else torch.maximum(term_max, shard_max)
        if payload.get("cls") is not None:
            cls_parts.append(payload["cls"])
    if term_max is None:
        raise ValueError("the corpus has no shards: nothing to index")
    largest = float(term_max.max())
    if largest <= 0:
        raise ValueError("the corpus has no positive term weight: nothing to index")
    scale = levels / largest
    return scale, quantize(term_max, scale), torch.cat(cls_parts) if cls_parts else None


def shard_impacts(shards: CorpusShards, discard: int, scale: float) -> Iterator[tuple[np.ndarray, ...]]:
    """Each shard's integer impacts as arrays, weights that round to nothing dropped.

    Yields:
        (n + 1,) int64 row offsets, (nnz,) int64 term ids and (nnz,) int64 impacts, row by row, by term in a row.
    """
    for _, payload in tqdm(shards, desc="impacts", unit="shard", leave=False):
        weights = to_csr(columns_from(payload["lexical"], discard))
        offsets, columns, values = parts(weights)
        impacts = quantize(values, scale)
        kept = impacts != 0
        offsets = offsets_of(entry_rows(offsets, len(columns))[kept], weights.shape[0])
        yield offsets.numpy(), (columns[kept] + discard).numpy(), impacts[kept].numpy()


def document_impacts(shards: CorpusShards, discard: int, scale: float) -> Iterator[tuple[list[str], list[dict]]]:
    """Each shard's documents as (row names, {term id as text: impact}), the integer vectors the engines index."""
    row = 0
    for offsets, terms, impacts in shard_impacts(shards, discard, scale):
        offsets, terms, impacts = offsets.tolist(), terms.tolist(), impacts.tolist()
        vectors = [dict(zip(map(str, terms[start:stop]), impacts[start:stop], strict=True))
                   for start, stop in zip(offsets[:-1], offsets[1:], strict=True)]  # fmt: skip
        yield [str(r) for r in range(row, row + len(vectors))], vectors
        row += len(vectors)


@dataclass
class ImpactCorpus:
    """What every engine keeps of the corpus beside its own files: :func:`scan`'s results, the ids and postings.

    Args:
        docids: The documents, in row order (the engines name them by row).
        scale: The documents' weights → impacts.
        term_max: (|V| - discard,) each term's largest document impact.
        cls: (n, c) [CLS] vectors, or None.
        postings: Impacts indexed (filled in by the engine's build).
    """

    docids: Sequence[str] | IdIndex
    scale: float
    term_max: torch.Tensor
    cls: torch.Tensor | None
    postings: int = 0

    FILE = "impact_corpus.pt"

    @property
    def cls_nbytes(self) -> int:
        """Stored size of the [CLS] part (float32), kept beside an engine's index; 0 without one."""
        return self.cls.numel() * 4 if self.cls is not None else 0

    @classmethod
    def scan(cls, shards: CorpusShards, discard: int, levels: int) -> ImpactCorpus:
        """The corpus's scale, largest impacts and [CLS] part (:func:`scan`), nothing indexed yet."""
        return cls(shards.docids, *scan(shards, discard, levels))

    def save(self, folder: Path) -> None:
        """Everything but the ids (the saved index's corpus gives them) into ``folder``."""
        torch.save({"scale": self.scale, "term_max": self.term_max, "cls": self.cls, "postings": self.postings},
                   folder / self.FILE)  # fmt: skip

    @classmethod
    def load(cls, folder: Path, docids: Sequence[str] | IdIndex) -> ImpactCorpus:
        """What :meth:`save` wrote into ``folder``, over ``docids``."""
        saved = torch.load(folder / cls.FILE, map_location="cpu", weights_only=True)
        return cls(docids, saved["scale"], saved["term_max"], saved["cls"], saved["postings"])


class ImpactRetriever(PartSearch):
    """A corpus's term weights in an engine, as integer impacts; subclasses index and search (module docstring).

    Args:
        encode_query: Query texts → ((n, |V|) lexical, (n, c) [CLS] or None) vectors.
        corpus: What the engine keeps of the corpus beside its own index.
        lam: λ of the [CLS] part.
        discard: Leading vocabulary ids that are never used (BERT's), left out of the index.
        candidates: Documents the engine returns by the lexical part for the fused re-ranking.
        batch_size: Queries encoded together.
        queries: How query texts are batched (``method.query_prep()``).
    """

    name = "engine"

    def __init__(
        self, encode_query: PartEncoder, corpus: ImpactCorpus, lam: float, discard: int, candidates: int = 1000,
        batch_size: int = 128, queries: QueryPrep | None = None,
    ) -> None:  # fmt: skip
        self.encode_query, self.weight, self.discard, self.candidates = encode_query, lam, discard, candidates
        self.batch_size, self.queries, self.corpus = batch_size, queries or QueryPrep(), corpus
        self.docids, self.scale, self.term_max, self.cls = corpus.docids, corpus.scale, corpus.term_max, corpus.cls
        self.postings = corpus.postings
        self.weight_name = "semantic_weight" if self.cls is not None else None

    def query_impacts(self, weights: torch.Tensor) -> tuple[torch.Tensor, float]:
        """One query's (|V| - discard,) weights → its integer impacts and their scale, as this engine takes them."""
        raise NotImplementedError

    def lexical_hits(self, lexical: torch.Tensor, depth: int) -> list[Hits]:
        """The engine's top ``depth`` for each of (n, |V| - discard) query weights, scores on the float scale."""
        raise NotImplementedError

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
        encoded = self.encoded_once(
            texts, lambda: self.queries.encoded(encode, texts, self.batch_size, f"encode queries ({self.name})")
        )
        with host_only("a host engine's search of the queries' host copy"):  # engines and [CLS] vectors: host
            lexical, cls = columns_from(encoded["lexical"], self.discard), encoded.get("cls")
            doc_cls = self.cls if part != "lexical" else None  # the [CLS] parts, when this search fuses them
            query_cls = cls if doc_cls is not None else None
            if part == "semantic":
                if doc_cls is None or query_cls is None:
                    raise ValueError(f"{self.name}: the queries were encoded without a [CLS] part")
                return self._semantic(qids, query_cls, doc_cls, k)
            run: Run = {}
            hits = self.lexical_hits(lexical, max(k, self.candidates) if query_cls is not None else k)
            for row, (qid, (rows, scores)) in enumerate(zip(qids, hits, strict=True)):
                if doc_cls is not None and query_cls is not None and len(rows):
                    scores = scores + weight * (doc_cls[rows] @ query_cls[row]).double().numpy()
                    keep = np.argsort(-scores, kind="stable")[:k]
                    rows, scores = rows[keep], scores[keep]
                run.update(ranked_run([qid], [rows.tolist()], [scores.tolist()], self.docids))
        return run

    def _semantic(self, qids: list[str], cls: torch.Tensor, doc_cls: torch.Tensor, k: int) -> Run:
        """The exact top ``k`` by <q_cls, d_cls>."""
        top_scores, rows = (cls @ doc_cls.T).topk(min(k, len(self.docids)), dim=1)
        return ranked_run(qids, rows, top_scores, self.docids)


def as_query(impacts: torch.Tensor, discard: int) -> dict[str, int]:
    """A query's (|V| - discard,) integer impacts as {term id as text: impact}, the zeros left out."""
    terms = torch.nonzero(impacts > 0).flatten()
    return dict(zip(map(str, (terms + discard).tolist()), impacts[terms].tolist(), strict=True))
