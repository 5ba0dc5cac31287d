"""Term weights fused from two models for DLR/DHR indexes (delade-dhr.md §3.1–3.2, Eq. 4–16; Tables 4 and 7).

A lexical part, BM25's vectors (query IDF and document TF saturation, whose inner product is BM25, RoC Eq. 3) over
the collection's analysed vocabulary or a backbone's SPLADE vectors (Eq. 20), and an optional dense part, a vector
model's [CLS] vectors, become one :class:`~retrieval_zoo.index.representations.TermEncoder`, which the ``gip`` and
``sparse`` indexes densify into DLRs/DHRs or score exactly. The corpus is encoded from document ids: each encoder
reads the corpus's cached tokens, gathered ahead of the forward pass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import torch

from retrieval_zoo.data.corpus_store import corpus_ids
from retrieval_zoo.encoding.batching import Item, QueryPrep, Texts, encode_payload, read, text_lengths
from retrieval_zoo.encoding.encoder import BERT_DISCARD, Encoder
from retrieval_zoo.encoding.tokens import TokenizedBatch, Tokens
from retrieval_zoo.index.representations import OffersVectors, TermEncoder
from retrieval_zoo.index.shards import Payload
from retrieval_zoo.lexical.bm25_rows import document_rows
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.lexical.sparse_rows import SparseRows
from retrieval_zoo.lexical.splade import splade_vectors


@dataclass
class LexicalPart:
    """The lexical vectors of a fusion: (n, |V|) rows of queries and of documents, and their vocabulary.

    Rows come as CSR (BM25's, read on the host) or dense (SPLADE's, on the encoder's device): queries and the
    corpus alike list dense ones as CSR a group of batches at a time
    (:func:`~retrieval_zoo.encoding.batching.encode_payload`'s ``as_csr``; GIP densifies its queries as they are).
    """

    queries: Callable[[Item], torch.Tensor]
    docs: Callable[[Item], torch.Tensor]
    vocab_size: int
    discard: int
    terms: Callable[[list[int]], list[str]]


@dataclass
class CachedSide:
    """An encoder of the fusion and the corpus's cached texts it reads (document ids → its tokens of them)."""

    encoder: Encoder
    texts: Callable[[list[str]], Texts]


def bag_rows(bags: list[dict[str, float]], vocabulary: dict[str, int]) -> torch.Tensor:
    """(n,) term → weight bags as an (n, |vocabulary|) CSR matrix; terms outside the vocabulary match nothing."""
    return SparseRows(bags, vocabulary).csr(torch.arange(len(bags)), len(vocabulary))


def bm25_part(bm25: BM25) -> LexicalPart:
    """BM25's query IDF and document TF-saturation vectors over the collection's analysed vocabulary."""
    docids = corpus_ids(bm25.collection.corpus)  # the rows of doc_rows (the collection's may be a subset)
    doc_rows, words = document_rows(bm25, saturation_only=True)
    vocabulary = {term: i for i, term in enumerate(words)}

    def queries(texts: Item) -> torch.Tensor:
        if isinstance(texts, Tokens):
            raise TypeError("BM25's query vectors are read from the query texts, not from tokens")
        return bag_rows(bm25.query_idf(list(texts)), vocabulary)

    def docs(ids: Item) -> torch.Tensor:
        if isinstance(ids, Tokens):
            raise TypeError("BM25's document rows are read by document id, not from tokens")
        return doc_rows.csr(torch.from_numpy(docids.known_rows(list(ids), "the corpus")), len(words))

    def terms(ids: list[int]) -> list[str]:
        return [words[i] for i in ids]

    return LexicalPart(queries, docs, len(vocabulary), 0, terms)


def splade_part(encoder: Encoder) -> LexicalPart:
    """The SPLADE vectors of a backbone with its MLM head (Eq. 20), over BERT's vocabulary."""

    def queries(texts: Item) -> torch.Tensor:  # dense, as the documents': listed a group of batches at a time
        return splade_vectors(encoder.model, *encoder.tokenize(texts, "query"))

    def docs(ids: Item) -> torch.Tensor:  # dense: listed as CSR a group of batches at a time, not a wait a batch
        return splade_vectors(encoder.model, *encoder.tokenize(ids, "doc"))

    return LexicalPart(queries, docs, encoder.vocab_size, BERT_DISCARD, encoder.id_strings)


def cached_tokens(texts: Texts) -> Tokens:
    """The padded tokens of cached texts (an encoder's token cache), which these encoders read."""
    tokens = read(texts)
    if not isinstance(tokens, Tokens):
        raise TypeError("expected the corpus's cached tokens, got texts")
    return tokens


def fused_term_encoder(
    lexical: LexicalPart, dense: OffersVectors | None, sides: list[CachedSide], corpus: Mapping[str, str],
    batch_size: int, queries: QueryPrep,
) -> TermEncoder:  # fmt: skip
    """The :class:`TermEncoder` of ``lexical`` with ``dense``'s vectors as the [CLS] part (None: the DLR alone).

    Args:
        lexical: The lexical vectors.
        dense: The vector model, or None.
        sides: Each encoder of the fusion (SPLADE's, the dense model's) with the corpus's cached texts it reads.
        corpus: The collection's documents (their lengths order the batches when no encoder reads tokens).
        batch_size: Texts per forward pass.
        queries: How query texts are batched.
    """

    def semantic(texts: Item, query: bool) -> torch.Tensor | None:
        if dense is None:
            return None
        return (dense.encode_query if query else dense.encode_doc)(texts)

    def prepare_docs(ids: list[str]) -> TokenizedBatch:  # each encoder's cached tokens, gathered ahead
        return TokenizedBatch(ids, {side.encoder.token_key: cached_tokens(side.texts(ids)) for side in sides})

    def encode_docs(ids: Item) -> dict[str, torch.Tensor | None]:  # ids: the encoders read the tokens
        if not isinstance(ids, TokenizedBatch) or len(ids.tokens) != len(sides):
            raise ValueError("document ids reached the encoders without their tokens (prepare_docs)")
        return {"lexical": lexical.docs(ids), "cls": semantic(ids, query=False)}

    def encode_shard(ids: list[str]) -> Payload:  # batches by the texts' length in tokens, not the ids'
        lengths = text_lengths(sides[0].texts(ids)) if sides else [len(corpus[d]) for d in ids]
        return encode_payload(encode_docs, ids, batch_size, "docs", lengths, prepare_docs, workers=0,  # a gather
                              as_csr=frozenset({"lexical"}))  # fmt: skip

    def encode_queries(texts: Item) -> tuple[torch.Tensor, torch.Tensor | None]:
        return lexical.queries(texts), semantic(texts, query=True)

    listed = replace(queries, as_csr=frozenset({"lexical"}))  # SPLADE's dense rows; BM25's are CSR already
    return TermEncoder(encode_queries, encode_shard, lexical.vocab_size, lexical.discard, lexical.terms, 1.0,
                       batch_size, listed)  # fmt: skip
