"""What a method offers an index, as types: one :class:`typing.Protocol` per representation.

A method declares the representations it produces by name (``representations``, its own first); an index declares
the names it accepts (``accepts``) and is generic in the Protocol of what it reads (``Faiss(Index[OffersVectors])``),
so a type checker holds every index's reads of a method to that Protocol, and every method to the Protocols of the
names it declares (:data:`PROTOCOLS`; the methods state theirs for mypy, and ``tests/test_method_index_matrix.py``
checks that names and types agree). The names:

- ``bm25``: no encoder of its own; the pipeline's Lucene BM25 (:class:`Represented` alone).
- ``vectors``: one vector per text, scored by inner product (:class:`OffersVectors`).
- ``term_weights``: a |V|-wide lexical vector per text, optionally with a [CLS] part (:class:`OffersTermWeights`).
- ``csf_bags``: CSurF's bags of contextualized surface forms (:class:`OffersCsfBags`).
- ``lexical_semantic``: RoC's pair, random-projected BM25 beside vectors (:class:`OffersLexicalSemantic`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch

from retrieval_zoo.data.collections import Collection
from retrieval_zoo.encoding.batching import PLAIN_QUERIES, Item, QueryPrep, Texts
from retrieval_zoo.encoding.encoder import Encoder
from retrieval_zoo.encoding.tokens import Tokens
from retrieval_zoo.index.shards import Payload
from retrieval_zoo.lexical.csf_bags import CsfBags
from retrieval_zoo.lexical.csf_texts import TextCsfs
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.lexical.projection import RademacherProjection
from retrieval_zoo.retriever import Represented


@runtime_checkable
class Encodes(Represented, Protocol):
    """A method with an encoder: what every index that encodes texts reads of it."""

    @property
    def encode_batch_size(self) -> int:
        """Texts per forward pass."""
        ...

    def query_prep(self) -> QueryPrep:
        """How its queries are batched: by their length in tokens, tokens prepared ahead."""
        ...

    def corpus_texts(self, collection: Collection) -> Callable[[list[str]], Texts]:
        """Document ids → what its encoder reads of them (cached tokens)."""
        ...


@runtime_checkable
class OffersVectors(Encodes, Protocol):
    """``vectors``: (n, d) float vectors of queries and documents, scored by inner product."""

    def encode_query(self, texts: list[str] | Tokens) -> torch.Tensor:
        """(n,) texts or their tokens → (n, d)."""
        ...

    def encode_doc(self, texts: list[str] | Tokens) -> torch.Tensor:
        """(n,) texts or their tokens → (n, d)."""
        ...


@dataclass
class TermEncoder:
    """What a ``term_weights`` method hands to these indexes (``method.term_encoder(collection, bm25)``).

    Args:
        encode_queries: (n,) query texts or their tokens → (n, |V|) lexical vectors (dense or CSR) and (n, c) [CLS]
            vectors or None.
        encode_docs: (n,) document ids → ``lexical`` (n, |V|), dense or CSR, and, with a [CLS] part, ``cls`` (n, c)
            float32 tensors.
        vocab_size: |V|.
        discard: Leading vocabulary ids that are never used, dropped before slicing (BERT: 570).
        terms: Vocabulary ids → their strings (for explanations).
        weight: λ of the [CLS] part as trained (Eq. 13); 1.0 without one.
        batch_size: Texts per forward pass.
        queries: How query texts are batched (``method.query_prep()``): by their length in tokens, tokens ahead.
    """

    encode_queries: Callable[[Item], tuple[torch.Tensor, torch.Tensor | None]]
    encode_docs: Callable[[list[str]], Payload]
    vocab_size: int
    discard: int
    terms: Callable[[list[int]], list[str]]
    weight: float = 1.0
    batch_size: int = 64
    queries: QueryPrep = PLAIN_QUERIES


@runtime_checkable
class OffersTermWeights(Represented, Protocol):
    """``term_weights``: |V|-wide lexical vectors (and an optional [CLS] part) through a :class:`TermEncoder`."""

    def term_encoder(self, collection: Collection, bm25: BM25) -> TermEncoder:
        """Its queries' and ``collection``'s documents' term weights."""
        ...


@runtime_checkable
class EncodesTermParts(Encodes, Protocol):
    """A method whose encoder gives each text's term weights over its vocabulary (DeLADE, CSurF).

    What :class:`retrieval_zoo.index.terms.term_index.TermWeightsFromParts` reads to make its :class:`TermEncoder`.
    """

    @property
    def encoder(self) -> Encoder | None:
        """Its encoder (with the tokenizer that names the vocabulary's ids)."""
        ...

    @property
    def vocab_size(self) -> int:
        """|V|."""
        ...

    @property
    def term_discard(self) -> int:
        """Leading vocabulary ids that are never a term (BERT: 570), dropped before densification."""
        ...

    @property
    def cls_weight(self) -> float:
        """λ of the [CLS] part as trained (Eq. 13); 1.0 without one."""
        ...

    @property
    def sparse_terms(self) -> bool:
        """Whether its term weights are mostly zero and listed as CSR a group of batches at a time (CSurF's).

        False: dense, and kept so (DeLADE's softmax vectors).
        """
        ...

    def term_parts(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(T, L) ids and mask → (T, |V|) lexical vectors and (T, c) [CLS] vectors or None."""
        ...


@runtime_checkable
class OffersCsfBags(Encodes, Protocol):
    """``csf_bags``: bags of contextualized surface forms (CSurF) of queries and documents."""

    @property
    def vocab_size(self) -> int:
        """|V|, the surface forms' id space."""
        ...

    def encode_query(self, texts: list[str] | Tokens) -> CsfBags:
        """(n,) texts or their tokens → their bags."""
        ...

    def encode_doc(self, texts: list[str] | Tokens) -> CsfBags:
        """(n,) texts or their tokens → their bags."""
        ...

    def doc_csfs(self, texts: list[str] | Tokens) -> TextCsfs:
        """(n,) texts or their tokens → their CSFs in the encoder's shapes, which an index lists a group at a time."""
        ...

    def token_strings(self, texts: list[str], side: str) -> list[list[str]]:
        """Each text's tokens as strings by position (a bag's ``source``), as ``side`` (query or doc) reads them."""
        ...

    def form_strings(self, ids: list[int]) -> list[str]:
        """Surface forms (vocabulary ids) → their strings."""
        ...


@runtime_checkable
class OffersLexicalSemantic(OffersVectors, Protocol):
    """``lexical_semantic``: vectors beside BM25 random-projected by the method's own projection (RoC)."""

    @property
    def projection(self) -> RademacherProjection:
        """The random projection A of BM25's vectors (Eq. 3–4)."""
        ...

    def saturation_scale(self, k1: float) -> float:
        """The factor of Lucene's TF saturation in d_lex (Eq. 3)."""
        ...


PROTOCOLS: dict[str, Any] = {  # name → Protocol (Any: a type checker takes no Protocol class as a value)
    "bm25": Represented,
    "vectors": OffersVectors,
    "term_weights": OffersTermWeights,
    "csf_bags": OffersCsfBags,
    "lexical_semantic": OffersLexicalSemantic,
}
