"""End-to-end retrieval with dense lexical (DLR) or dense hybrid (DHR) representations (delade-dhr.md §3.1–3.4).

The corpus's lexical vectors are read shard by shard (:mod:`retrieval_zoo.index.shards`) and densified in batches,
so the |V|-dimensional vectors never exist for more than one shard; a [CLS] part, when there is one, is appended as
√λ·[CLS] (Eq. 15–16). Each shard becomes its own GIP index. Exact GIP (Eq. 11) searches every shard and merges
their top k; two-stage search (Eq. 18) keeps the K′ best of the whole corpus by its first stage, then re-ranks them
by exact GIP (:mod:`retrieval_zoo.index.terms.gip_shards`). Either part can be searched alone by zeroing the other
part of the query values, which is how evaluation reports the lexical and [CLS] components.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import torch
from tqdm import tqdm

from retrieval_zoo.data.formats import Run
from retrieval_zoo.encoding.batching import PLAIN_QUERIES, QueryPrep
from retrieval_zoo.index.shards import CorpusShards, merge_topk
from retrieval_zoo.index.terms.dhr_vectors import PartEncoder, represent, represent_shard
from retrieval_zoo.index.terms.dlr import Slicing, explain
from retrieval_zoo.index.terms.gip_search import GipIndex
from retrieval_zoo.index.terms.gip_shards import search_shards
from retrieval_zoo.lexical.lucene_bm25 import FEW_QUERIES
from retrieval_zoo.retriever import Retriever

T = TypeVar("T")


class PartSearch(Retriever):
    """A lexical part and an optional [CLS] part, each searchable alone: shared by the DLR/DHR and exact retrievers.

    Subclasses implement :meth:`search`, with a ``part`` and a ``weight``.
    """

    parts = ("lexical", "semantic")
    _encoded: tuple[tuple[str, ...], Any] | None = None  # the last query texts and their encoding

    @abstractmethod
    def search(self, queries: dict[str, str], k: int, part: str | None = None, weight: float | None = None) -> Run:
        """The top ``k`` of the fused score, or of one ``part`` alone; ``weight``: the [CLS] part's, for this call."""

    def check_part(self, part: str | None, has_semantic: bool) -> None:
        """Raise on a ``part`` this retriever does not have (``semantic`` needs a [CLS] part)."""
        available = self.parts if has_semantic else ("lexical",)
        if part is not None and part not in available:
            raise ValueError(f"unknown part {part!r}; parts: {available}")

    def side(self, name: str, queries: dict[str, str], k: int) -> Run:
        """One part's own top ``k`` (evaluation's component runs)."""
        return self.search(queries, k, part=name)

    def encoded_once(self, texts: list[str], encode: Callable[[], T]) -> T:
        """``encode()`` of these query texts, kept for the next call with the same few texts.

        The Python retriever searches a query fused and then each part alone: the second and third search take the
        first's encoding. Only sets of up to :data:`~retrieval_zoo.lexical.lucene_bm25.FEW_QUERIES` texts are kept
        (a dev set's |V|-wide DeLADE vectors would hold gigabytes).
        """
        if len(texts) > FEW_QUERIES:
            return encode()
        key = tuple(texts)
        if self._encoded is None or self._encoded[0] != key:
            self._encoded = (key, encode())
        return self._encoded[1]


class DhrRetriever(PartSearch):
    """A corpus densified into one :class:`GipIndex` per shard, searched with queries densified the same way.

    :meth:`from_shards` densifies a corpus into one.

    Args:
        encode_query: Query texts → (lexical, [CLS] or None) vectors.
        indexes: The corpus's GIP indexes, one per shard, in corpus order; their open (always-gated) dimensions
            are the [CLS] part's.
        slicing: DLR slicing.
        lam: λ of the [CLS] part, as indexed (√λ on both sides, Eq. 14–16).
        first_stage: None (exact GIP), ``approximate_gip`` or ``inner_product`` (see :meth:`GipIndex.search`).
        theta: θ of approximate GIP.
        candidates: K′ of the first stage.
        batch_size: Texts per forward pass.
        terms: Vocabulary ids → their strings, for :meth:`explain` (default: the ids as text).
        queries: How query texts are batched: by their length in tokens, tokens prepared ahead.
    """

    def __init__(
        self,
        encode_query: PartEncoder,
        indexes: list[GipIndex],
        slicing: Slicing,
        lam: float = 1.0,
        first_stage: str | None = "approximate_gip",
        theta: float = 0.3,
        candidates: int = 10_000,
        batch_size: int = 128,
        terms: Callable[[list[int]], list[str]] | None = None,
        queries: QueryPrep = PLAIN_QUERIES,
    ) -> None:
        if not indexes:
            raise ValueError("a DHR retriever needs at least one shard's index")
        self.encode_query, self.slicing, self.queries = encode_query, slicing, queries
        self.lam, self.batch_size, self.weight = lam, batch_size, lam
        self.terms = terms or (lambda ids: [str(i) for i in ids])
        self.first_stage, self.theta, self.candidates = first_stage, theta, candidates
        self.indexes, self.cls_dims = indexes, indexes[0].open_dims
        self.weight_name = "semantic_weight" if self.cls_dims else None  # tuning sets the [CLS] part's weight

    @classmethod
    def from_shards(
        cls, encode_query: PartEncoder, shards: CorpusShards, slicing: Slicing, lam: float = 1.0,
        first_stage: str | None = "approximate_gip", theta: float = 0.3, candidates: int = 10_000,
        batch_size: int = 128, device: torch.device | str | None = None,
        terms: Callable[[list[int]], list[str]] | None = None, queries: QueryPrep = PLAIN_QUERIES,
    ) -> DhrRetriever:  # fmt: skip
        """The corpus's ``lexical`` (n, |V|) and optional ``cls`` (n, c) vectors densified, shard by shard.

        ``device``: where GIP runs (default: the GPU when present); the other arguments as the class's.
        """
        indexes = []
        for docids, payload in tqdm(shards, desc="densify corpus shards", unit="shard", leave=False):
            values, indices, cls_dims = represent_shard(payload, slicing, lam, batch_size)
            indexes.append(GipIndex(values, indices, docids, device=device, open_dims=cls_dims))
        return cls(encode_query, indexes, slicing, lam, first_stage, theta, candidates, batch_size, terms, queries)

    @property
    def index(self) -> GipIndex:
        """The GIP index of a corpus held in one shard."""
        if len(self.indexes) != 1:
            raise ValueError(f"the corpus is in {len(self.indexes)} shards: use .indexes")
        return self.indexes[0]

    def represent_queries(self, queries: dict[str, str]) -> tuple[np.ndarray, np.ndarray]:
        """(Q, M [+ c]) values and indices of the queries, in the order of the dict."""
        texts = list(queries.values())
        lengths, prepare = self.queries.lengths(texts), self.queries.prepare
        values, indices, _ = self.encoded_once(texts, lambda: represent(
            self.encode_query, texts, self.slicing, self.lam, self.batch_size, "densify queries", lengths, prepare
        ))  # fmt: skip
        return values, indices

    def search(self, queries: dict[str, str], k: int, part: str | None = None, weight: float | None = None) -> Run:
        """Top ``k`` by GIP over the whole DHR, or over one ``part`` (the other part of the queries zeroed).

        The [CLS] part weighs ``weight`` (default :attr:`weight`, the indexed λ until tuning sets it): the queries'
        [CLS] values are rescaled by weight / λ, so λ is tuned without re-indexing the corpus.
        """
        values, indices = self.weighted_queries(queries, weight)
        self.check_part(part, bool(self.cls_dims))
        if part is not None:
            split = values.shape[1] - self.cls_dims
            values = values.copy()
            if part == "lexical":
                values[:, split:] = 0
            else:
                values[:, :split] = 0
        qids, settings = list(queries), (self.first_stage, self.theta, self.candidates)
        if self.first_stage is not None and not self.searched_exactly and len(self.indexes) > 1:
            return search_shards(self.indexes, values, indices, qids, k, self.first_stage, self.theta, self.candidates)
        return merge_topk((index.search(values, indices, qids, k, *settings) for index in self.indexes), k)

    @property
    def searched_exactly(self) -> bool:
        """Whether search is exact GIP: no first stage, or one whose K′ holds the whole corpus."""
        return self.first_stage is None or self.candidates >= sum(len(index.docids) for index in self.indexes)

    def weighted_queries(self, queries: dict[str, str], weight: float | None) -> tuple[np.ndarray, np.ndarray]:
        """The queries' values and indices, the [CLS] part rescaled by ``weight`` / λ (default: :attr:`weight`)."""
        values, indices = self.represent_queries(queries)
        weight = self.weight if weight is None else weight
        if self.cls_dims and weight != self.lam:
            if self.lam <= 0:
                raise ValueError("the [CLS] part was indexed with λ = 0: re-index with λ > 0 to weigh it")
            values = values.copy()
            values[:, values.shape[1] - self.cls_dims :] *= weight / self.lam
        return values, indices

    def search_with_parts(self, queries: dict[str, str], k: int, depth: int) -> tuple[Run, dict[str, Run]]:
        """The fused top ``k`` and each part's own top ``depth``: from one GIP product where search is exact."""
        if not (self.cls_dims and self.searched_exactly):
            return super().search_with_parts(queries, k, depth)
        values, indices = self.weighted_queries(queries, None)
        depths = {None: k, "lexical": depth, "semantic": depth}
        split = values.shape[1] - self.cls_dims
        shards = [index.search_parts(values, indices, list(queries), depths, split) for index in self.indexes]
        merged = {part: merge_topk((runs[part] for runs in shards), d) for part, d in depths.items()}
        return merged[None], {part: merged[part] for part in self.fused_parts}

    @property
    def nbytes(self) -> int:
        """Stored index size: float16 values, and uint8/uint16 positions for the DLR part only."""
        return sum(index.nbytes for index in self.indexes)

    @property
    def lexical_nonzero(self) -> float:
        """Mean non-zero DLR slices per document (Table 6's "# tokens/doc"; at most M)."""
        split = self.indexes[0].values.shape[1] - self.cls_dims
        opened = sum((index.values[:, :split] != 0).sum().item() for index in self.indexes)
        return opened / sum(len(index.docids) for index in self.indexes)

    def explain(self, queries: dict[str, str], run: Run, depth: int = 3) -> list[dict]:
        """What each query matched in its top ``depth`` documents: the DLR's open gates as weighted terms (Table 13).

        Returns:
            One record per (query, document): ids, score, the lexical part's GIP, and the matched terms with their
            query and document values, best first.
        """
        values, indices = self.represent_queries(queries)
        wanted = {docid for qid in queries for docid in list(run.get(qid, {}))[:depth]}  # a dict of those alone
        rows = {str(index.docids[row]): (index, int(row)) for index in self.indexes
                for row in np.flatnonzero(np.isin(index.docids, list(wanted)))}  # fmt: skip
        records = []
        for q, qid in enumerate(queries):
            for docid in list(run.get(qid, {}))[:depth]:
                index, r = rows[docid]
                doc_values, doc_indices = index.values[r].float().cpu().numpy(), index.stored_positions(r)
                matched = explain(values[q].astype(np.float32), indices[q], doc_values, doc_indices, self.slicing)
                words = self.terms([term for term, _, _ in matched])
                records.append({
                    "qid": qid, "docid": docid, "score": run[qid][docid],
                    "lexical": sum(a * b for _, a, b in matched),
                    "matches": [{"term": w, "query": a, "doc": b} for w, (_, a, b) in zip(words, matched, strict=True)],
                })  # fmt: skip
        return records
