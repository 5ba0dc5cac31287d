"""Exact search over full-vocabulary sparse vectors: the reference that DLR/DHR densification approximates.

delade-dhr.md compares each DLR/DHR with the sparse retrieval it replaces (Tables 4, 7, 9). Here the corpus's
|V|-dimensional lexical vectors are kept as one matrix (sparse CSR, or dense where that is smaller) and scored
exactly, <q_BoW, d_BoW>, beside an optional [CLS] part added as λ·<q_cls, d_cls>: the exact fused score the model
trains on (Eq. 13). The same ``search(part=) / side / nbytes`` interface as
:class:`retrieval_zoo.index.terms.dhr.DhrRetriever`; ``index=sparse`` selects it (:class:`Sparse`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import torch

from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.corpus_store import corpus_ids
from retrieval_zoo.data.formats import Run
from retrieval_zoo.encoding.batching import PLAIN_QUERIES, QueryPrep
from retrieval_zoo.host_memory import release_freed_memory
from retrieval_zoo.host_work import host_only
from retrieval_zoo.id_index import IdIndex
from retrieval_zoo.index.representations import OffersTermWeights
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.index.terms.dhr import PartSearch
from retrieval_zoo.index.terms.dhr_vectors import PartEncoder
from retrieval_zoo.index.terms.gip_search import default_device
from retrieval_zoo.index.terms.term_index import TermIndex
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.retriever import Retriever, ranked_run
from retrieval_zoo.term_matrix import cat_rows, columns_from, dense_rows, is_csr, nbytes, nonzeros, row_range, to_csr

SCORING_FLOATS = 1 << 25  # a batch of queries densified for scoring holds at most this many floats (128 MB)


def lexical_matrix(shards: CorpusShards, discard: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The corpus's lexical vectors as one matrix, in corpus order, ids below ``discard`` dropped; and its [CLS].

    The matrix is sparse CSR (float32 values, int32 term ids and row offsets), or dense float32 when the first rows
    are more than half non-zero, where CSR would be larger: SPLADE and BM25 vectors are sparse, DeLADE's softmax
    vectors (Eq. 23) are not. Shards come dense or CSR (:mod:`retrieval_zoo.term_matrix`); a CSR one is kept whole
    until the concatenation, a dense one is turned to CSR ``batch_size`` rows at a time.
    """
    blocks, cls_parts, dense, row = [], [], None, 0
    for _, payload in shards:
        if payload.get("cls") is not None:
            cls_parts.append(payload["cls"])
        lexical = columns_from(payload["lexical"], discard)
        if is_csr(lexical) and dense is None:
            blocks.append(lexical)
            row += lexical.shape[0]
            continue
        for start in range(0, lexical.shape[0], batch_size):
            block = row_range(lexical, start, start + batch_size)
            if row == 0 and not is_csr(block) and 2 * nonzeros(block) > block.numel():  # the first rows decide
                dense = torch.empty(len(shards.docids), block.shape[1])
            if dense is not None:
                dense[row : row + block.shape[0]] = dense_rows(block)
            else:
                blocks.append(to_csr(block))
            row += block.shape[0]
    return dense if dense is not None else cat_rows(blocks), torch.cat(cls_parts) if cls_parts else None


class SparseRetriever(PartSearch):
    """Exact lexical (+ λ·[CLS]) inner products over the whole corpus, documents held as one matrix.

    Args:
        encode_query: Query texts → ((n, |V|) lexical, (n, c) [CLS] or None) vectors.
        docs: The corpus's lexical matrix, as :func:`lexical_matrix` makes it (CSR or dense), rows in corpus order.
        cls: Its (n, c) [CLS] vectors, or None.
        docids: The documents of the rows.
        lam: λ of the [CLS] part (Eq. 13).
        discard: Leading vocabulary ids zeroed, as the DLR drops them.
        batch_size: Texts per forward pass, and queries scored together.
        device: Where scoring runs (default: the GPU when present).
        queries: How query texts are batched: by their length in tokens, tokens prepared ahead.
    """

    def __init__(
        self,
        encode_query: PartEncoder,
        docs: torch.Tensor,
        cls: torch.Tensor | None,
        docids: Sequence[str] | IdIndex,
        lam: float = 1.0,
        discard: int = 0,
        batch_size: int = 128,
        device: torch.device | str | None = None,
        queries: QueryPrep = PLAIN_QUERIES,
    ) -> None:
        self.encode_query, self.weight, self.discard, self.batch_size = encode_query, lam, discard, batch_size
        self.queries = queries
        self.device = torch.device(device) if device is not None else default_device()
        self.docids = docids
        self.docs, self.cls = docs.to(self.device), cls.to(self.device) if cls is not None else None
        self.weight_name = "semantic_weight" if cls is not None else None  # tuning sets the [CLS] part's weight

    @classmethod
    def from_shards(
        cls, encode_query: PartEncoder, shards: CorpusShards, lam: float = 1.0, discard: int = 0, batch_size: int = 128,
        device: torch.device | str | None = None, queries: QueryPrep = PLAIN_QUERIES,
    ) -> SparseRetriever:  # fmt: skip
        """A retriever over the corpus's ``lexical`` (n, |V|) and optional ``cls`` (n, c) vectors, by shard."""
        docs, cls_vectors = lexical_matrix(shards, discard, batch_size)
        release_freed_memory()  # the shards' arrays, freed after their concatenation
        return cls(encode_query, docs, cls_vectors, shards.docids, lam, discard, batch_size, device, queries)

    @property
    def nbytes(self) -> int:
        """Stored size: the lexical matrix (CSR: float32 values, int32 ids and offsets; or dense float32) and [CLS]."""
        return nbytes(self.docs) + (nbytes(self.cls) if self.cls is not None else 0)

    @property
    def lexical_nonzero(self) -> float:
        """Mean non-zero vocabulary terms per document."""
        return nonzeros(self.docs) / len(self.docids)

    def search(self, queries: dict[str, str], k: int, part: str | None = None, weight: float | None = None) -> Run:
        """Top ``k`` by the exact fused score, or by one ``part`` alone (``lexical`` or ``semantic``).

        The [CLS] part weighs ``weight`` (default :attr:`weight`: λ until tuning sets it).
        """
        self.check_part(part, self.cls is not None)
        return self.ranked(queries, {part: k}, weight)[part]

    def search_with_parts(self, queries: dict[str, str], k: int, depth: int) -> tuple[Run, dict[str, Run]]:
        """The fused top ``k`` and each part's own top ``depth``, from one product of each part's matrix."""
        ranked = self.ranked(queries, {None: k} | dict.fromkeys(self.fused_parts, depth))
        return ranked[None], {part: ranked[part] for part in self.fused_parts}

    @torch.inference_mode()
    def ranked(self, queries: dict[str, str], depths: dict[str | None, int], weight: float | None = None
               ) -> dict[str | None, Run]:  # fmt: skip
        """Each wanted score's top ``depth``: the fused one (key None) and any ``lexical`` or ``semantic`` part alone.

        Each part's products are computed once and summed as the fused score sums them, so a part's scores are those
        of its own search.
        """
        weight = self.weight if weight is None else weight
        qids = list(queries)
        if not qids:
            return {part: {} for part in depths}
        encode = lambda batch: dict(zip(("lexical", "cls"), self.encode_query(batch), strict=True))  # noqa: E731
        texts = list(queries.values())
        encoded = self.encoded_once(
            texts, lambda: self.queries.encoded(encode, texts, self.batch_size, "encode queries (exact)")
        )
        with host_only("the queries' vocabulary columns, of their host copy"):
            lexical = columns_from(encoded["lexical"], self.discard)
        cls = encoded.get("cls") if self.cls is not None else None
        step = max(1, min(self.batch_size, SCORING_FLOATS // lexical.shape[1]))  # a vocabulary of millions: fewer
        # each batch's top k stays where it was scored; the host reads them once a call, not twice a batch
        tops: dict[str | None, list[tuple[torch.Tensor, torch.Tensor]]] = {part: [] for part in depths}
        for start in range(0, len(qids), step):
            lexical_scores = semantic_scores = scores = None  # the last batch's freed before this one's products
            if depths.keys() - {"semantic"}:
                with host_only("a batch of the queries' rows, from their host copy"):
                    batch = dense_rows(lexical, start, start + step)
                lexical_scores = self.docs @ batch.T.to(self.device)
            if depths.keys() - {"lexical"} and self.cls is not None and cls is not None:
                semantic_scores = weight * (self.cls @ cls[start : start + step].T.to(self.device))
            # the fused sum last, made in place of the lexical scores: no third (documents, queries) matrix
            for part in sorted(depths, key=lambda part: part is None):
                if part == "semantic":
                    scores = semantic_scores if semantic_scores is not None else torch.zeros(
                        len(self.docids), len(qids[start : start + step]), device=self.device)  # fmt: skip
                else:
                    assert lexical_scores is not None  # made whenever a part other than semantic is asked for
                    scores = lexical_scores
                    if part is None and semantic_scores is not None:
                        scores = lexical_scores.add_(semantic_scores)
                tops[part].append(scores.T.topk(min(depths[part], len(self.docids)), dim=1))
        return {part: ranked_run(qids, torch.cat([rows for _, rows in top]), torch.cat([values for values, _ in top]),
                                 self.docids) for part, top in tops.items()}  # fmt: skip


class Sparse(TermIndex):
    """The exact |V|-wide term vectors (+ λ·[CLS]) in one matrix: the reference of GIP (``conf/index/sparse.yaml``).

    Args as in :class:`TermIndex`.
    """

    saves: ClassVar[bool] = True

    def build(
        self, method: OffersTermWeights, collection: Collection, bm25: BM25, shards: CorpusShards | None = None
    ) -> SparseRetriever:
        """The corpus's term vectors as one sparse (or dense, when denser) matrix."""
        encoder, shards = self.encoder_and_shards(method, collection, bm25, shards)
        return SparseRetriever.from_shards(encoder.encode_queries, shards, self.fusion_weight(encoder), encoder.discard,
                                           encoder.batch_size, queries=encoder.queries)  # fmt: skip

    def save(self, retriever: Retriever, folder: Path) -> None:
        """The corpus's lexical matrix (CSR or dense) and [CLS] vectors, as one torch file."""
        built = self.built_here(retriever, SparseRetriever)
        cls = built.cls.cpu() if built.cls is not None else None
        torch.save({"docs": built.docs.cpu(), "cls": cls}, folder / "sparse.pt")

    def load(self, method: OffersTermWeights, collection: Collection, bm25: BM25, folder: Path) -> SparseRetriever:
        """The saved matrices over the collection's documents (the saved index's corpus), queried by ``method``."""
        saved = torch.load(folder / "sparse.pt", map_location="cpu", weights_only=True, mmap=True)  # pages as read
        encoder = method.term_encoder(collection, bm25)
        return SparseRetriever(encoder.encode_queries, saved["docs"], saved["cls"], corpus_ids(collection.corpus),
                               self.fusion_weight(encoder), encoder.discard, encoder.batch_size,
                               queries=encoder.queries)  # fmt: skip
