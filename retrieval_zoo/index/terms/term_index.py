"""What the indexes over term weights share: the method's :class:`TermEncoder` and the [CLS] part's fusion weight.

The families: DLR/DHR searched by gated inner product (:mod:`retrieval_zoo.index.terms.gip`), the exact sparse reference
(:mod:`retrieval_zoo.index.terms.sparse`), and the learned-sparse engines (BMP, Seismic, Lucene impact).

A method that produces ``term_weights`` hands over a :class:`TermEncoder`: |V|-wide lexical vectors per text, dense
or sparse CSR (:mod:`retrieval_zoo.term_matrix`: BM25's and SPLADE's are CSR, DeLADE's softmax vectors dense), with
an optional [CLS] part, the vocabulary's size, the leading ids that are never used (``discard``: BERT's 570
[PAD]/[unused*] ids) and the λ its [CLS] part was trained with. :class:`Gip` densifies them into DLRs/DHRs
(delade-dhr.md Eq. 4–16) searched in two stages (Eq. 18); :class:`Sparse` keeps them whole and scores exactly, the
reference the densification approximates. Both fuse the [CLS] part with a weight that tuning can set.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

import torch

from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.corpus_store import corpus_ids
from retrieval_zoo.encoding.batching import Item, encode_payload
from retrieval_zoo.evaluation.metrics import Measure
from retrieval_zoo.index.index import Index
from retrieval_zoo.index.representations import EncodesTermParts, OffersTermWeights, TermEncoder
from retrieval_zoo.index.shards import CorpusShards, Payload, ShardEncoder
from retrieval_zoo.lexical.lucene_bm25 import BM25

ON_DEMAND_SHARD = 1024  # documents whose |V|-wide vectors exist at once when a corpus is densified on demand
DHR_GRID = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0)


def encoder_term_weights(method: EncodesTermParts, collection: Collection) -> TermEncoder:
    """The :class:`TermEncoder` of a method whose encoder gives each text's term weights (DeLADE, CSurF).

    Args:
        method: The method: its encoder, vocabulary and :meth:`~EncodesTermParts.term_parts`.
        collection: Its documents are read from their cached tokens.
    """
    encoder = method.encoder
    if encoder is None:
        raise TypeError(f"{type(method).__name__} has no encoder to give term weights")

    def encode_queries(texts: Item) -> tuple[torch.Tensor, torch.Tensor | None]:
        return method.term_parts(*encoder.tokenize(texts, "query"))

    def doc_parts(batch: Any) -> dict[str, torch.Tensor | None]:
        lexical, cls = method.term_parts(*encoder.tokenize(batch, "doc"))
        return {"lexical": lexical, "cls": cls}

    texts = method.corpus_texts(collection)  # the corpus's cached tokens
    as_csr = frozenset({"lexical"}) if method.sparse_terms else frozenset()  # listed a group of batches at a time

    def encode_docs(docids: list[str]) -> Payload:
        return encode_payload(doc_parts, texts(docids), method.encode_batch_size, "docs", as_csr=as_csr)

    queries = replace(method.query_prep(), as_csr=as_csr)
    return TermEncoder(encode_queries, encode_docs, method.vocab_size, method.term_discard, encoder.id_strings,
                       method.cls_weight, method.encode_batch_size, queries)  # fmt: skip


class TermWeightsFromParts:
    """``term_weights`` for a method that declares its :meth:`~EncodesTermParts.term_parts` (DeLADE, CSurF).

    Mixed into those methods: their files name their parts, and this module assembles what the indexes read.
    """

    def term_encoder(self: EncodesTermParts, collection: Collection, bm25: BM25) -> TermEncoder:
        """Its queries' and ``collection``'s documents' term weights (BM25 is not read)."""
        return encoder_term_weights(self, collection)


class TermIndex(Index[OffersTermWeights]):
    """Shared by :class:`Gip` and :class:`Sparse`.

    Args:
        weight: λ of the [CLS] part at indexing; null takes the λ the method trained with.
        weight_grid: λ values tried when evaluation tunes (``eval.tune_queries`` > 0).
        tune_measure: What tuning maximises (§5.2: MRR@10).
        extend_grid: Go past the grid's edge where the best value lies (False: the grid only).
    """

    accepts: ClassVar[tuple[str, ...]] = ("term_weights",)
    on_demand_shard: ClassVar[int | None] = ON_DEMAND_SHARD

    def __init__(
        self,
        weight: float | None = None,
        weight_grid: tuple[float, ...] = DHR_GRID,
        tune_measure: Measure = "MRR@10",
        extend_grid: bool = True,
    ) -> None:
        super().__init__(weight_grid, tune_measure, extend_grid)
        self.weight = weight

    def doc_encoder(self, method: OffersTermWeights, collection: Collection, bm25: BM25) -> ShardEncoder:
        """Document ids → their lexical (and [CLS]) vectors."""
        return method.term_encoder(collection, bm25).encode_docs

    def encoder_and_shards(
        self, method: OffersTermWeights, collection: Collection, bm25: BM25, shards: CorpusShards | None
    ) -> tuple[TermEncoder, CorpusShards]:
        """The method's term encoder, and the corpus's shards (encoded on demand by it when not given)."""
        encoder = method.term_encoder(collection, bm25)
        if shards is None:
            shards = CorpusShards.on_demand(corpus_ids(collection.corpus), encoder.encode_docs, ON_DEMAND_SHARD)
        return encoder, shards

    def fusion_weight(self, encoder: TermEncoder) -> float:
        """λ of the [CLS] part as indexed."""
        return encoder.weight if self.weight is None else self.weight
