"""Independent model fusion through dense representations (delade-dhr.md §3.1–3.2, Eq. 4–16; Tables 4 and 7).

Off-the-shelf lexical vectors are densified into DLRs and, when a dense model is given, joined with its vectors into
DHRs (DLR ⊕ √λ·dense, all-ones gate for the dense part), so BM25 + dense runs as one GIP search instead of Lucene
plus faiss. The lexical vectors are either BM25's, as query IDF and document TF saturation, whose inner product is
BM25 (RoC Eq. 3), over the collection's analysed vocabulary; or the backbone's own SPLADE vectors (Eq. 20), e.g. the
embedded SPLADE-tiny's. Nothing is trained. The method produces ``term_weights`` for ``index=gip`` (the default) or
``index=sparse`` (exact), whose weight grid tunes λ of the dense part.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch

from retrieval_zoo.batching import Item, Texts, encode_payload, read
from retrieval_zoo.bounds import require_choice
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.corpus_store import corpus_ids
from retrieval_zoo.encoder import Encoder
from retrieval_zoo.index.representations import TermEncoder
from retrieval_zoo.index.shards import Payload
from retrieval_zoo.index.terms import BERT_DISCARD
from retrieval_zoo.lexical.bm25 import BM25
from retrieval_zoo.lexical.bm25_rows import document_rows
from retrieval_zoo.lexical.sparse_rows import SparseRows
from retrieval_zoo.lexical.splade import splade_vectors
from retrieval_zoo.methods.base import RetrievalMethod
from retrieval_zoo.methods.dense import DenseBiEncoder
from retrieval_zoo.term_matrix import to_csr
from retrieval_zoo.tokens import CachedTexts, TokenizedBatch, Tokens

LexicalSide = Literal["bm25", "splade"]


def cached_tokens(texts: Texts) -> Tokens:
    """The padded tokens of cached texts (an encoder's token cache), which these encoders read."""
    tokens = read(texts)
    if not isinstance(tokens, Tokens):
        raise TypeError("expected the corpus's cached tokens, got texts")
    return tokens


def text_lengths(texts: Texts) -> list[int]:
    """Each text's length: in tokens for cached texts, else in characters."""
    return texts.lengths if isinstance(texts, CachedTexts) else [len(text) for text in texts]


def bag_rows(bags: list[dict[str, float]], vocabulary: dict[str, int]) -> torch.Tensor:
    """(n,) term → weight bags as an (n, |vocabulary|) CSR matrix; terms outside the vocabulary match nothing."""
    return SparseRows(bags, vocabulary).csr(torch.arange(len(bags)), len(vocabulary))


class DhrFusion(RetrievalMethod):
    """(lexical + dense)_DHR, or a lexical model's DLR alone.

    Args:
        lexical: ``bm25`` or ``splade`` (the encoder's MLM head, Eq. 20).
        encoder: The SPLADE encoder, with its MLM head (None for ``bm25``).
        dense: A dense method (``encode_query`` / ``encode_doc``) for the semantic part, or None for the DLR alone.
        dense_checkpoint: A ``train.py`` checkpoint whose weights ``dense`` loads (e.g. the default dense run's).
        encode_batch_size: Texts per forward pass.
    """

    trainable: ClassVar[bool] = False
    representations: ClassVar[tuple[str, ...]] = ("term_weights",)

    def __init__(
        self,
        lexical: LexicalSide = "bm25",
        encoder: Encoder | None = None,
        dense: DenseBiEncoder | None = None,
        dense_checkpoint: str | None = None,
        encode_batch_size: int = 256,
    ) -> None:
        require_choice("lexical", lexical, LexicalSide)
        if lexical == "splade" and (encoder is None or not encoder.mlm_head):
            raise ValueError("lexical=splade needs an encoder with its MLM head (method.encoder.mlm_head=true)")
        super().__init__(encoder.eval() if encoder is not None else None)
        self.lexical, self.dense, self._batch_size = lexical, dense, encode_batch_size
        if dense is not None and dense_checkpoint:
            state = torch.load(dense_checkpoint, map_location="cpu", weights_only=False)["state_dict"]
            dense.load_state_dict(state)

    @property
    def encode_batch_size(self) -> int:
        """Texts per forward pass."""
        return self._batch_size

    def _semantic(self, texts: Item, query: bool) -> torch.Tensor | None:
        if self.dense is None:
            return None
        return (self.dense.encode_query if query else self.dense.encode_doc)(texts)

    def term_encoder(self, collection: Collection, bm25: BM25) -> TermEncoder:
        """The lexical vectors (BM25's over the collection's analysed vocabulary, or SPLADE's) and the dense ones.

        Nothing is trained, so the indexes encode the corpus on demand, one shard at a time, from document ids.
        """
        corpus = collection.corpus  # the encoders read the corpus's cached tokens (corpus_texts)
        splade_texts = self.corpus_texts(collection) if self.encoder is not None else None
        dense_texts = self.dense.corpus_texts(collection) if self.dense is not None else None
        if self.lexical == "bm25":
            docids = corpus_ids(bm25.collection.corpus)  # the rows of doc_rows (the collection's may be a subset)
            doc_rows, words = document_rows(bm25, saturation_only=True)
            vocabulary = {term: i for i, term in enumerate(words)}

            def lexical_queries(texts: Item) -> torch.Tensor:
                if isinstance(texts, Tokens):
                    raise TypeError("BM25's query vectors are read from the query texts, not from tokens")
                return bag_rows(bm25.query_idf(list(texts)), vocabulary)

            def lexical_docs(ids: Item) -> torch.Tensor:
                if isinstance(ids, Tokens):
                    raise TypeError("BM25's document rows are read by document id, not from tokens")
                rows = torch.from_numpy(docids.known_rows(list(ids), "the corpus"))
                return doc_rows.csr(rows, len(words))

            vocab_size, discard = len(vocabulary), 0

            def terms(ids: list[int]) -> list[str]:
                return [words[i] for i in ids]
        else:
            splade = self.encoder
            if splade is None:
                raise ValueError("lexical=splade needs an encoder with its MLM head")

            def lexical_queries(texts: Item) -> torch.Tensor:
                return to_csr(splade_vectors(splade.model, *splade.tokenize(texts, "query")))

            def lexical_docs(ids: Item) -> torch.Tensor:
                return to_csr(splade_vectors(splade.model, *splade.tokenize(ids, "doc")))

            vocab_size, discard = splade.vocab_size, BERT_DISCARD

            def terms(ids: list[int]) -> list[str]:
                return list(splade.tokenizer.convert_ids_to_tokens(ids))

        dense_encoder = self.dense.encoder if self.dense is not None else None
        encoders = [(e, texts) for e, texts in ((self.encoder, splade_texts), (dense_encoder, dense_texts))
                    if e is not None and texts is not None]  # fmt: skip

        def prepare_docs(ids: list[str]) -> TokenizedBatch:  # each encoder's cached tokens, gathered ahead
            return TokenizedBatch(ids, {encoder.token_key: cached_tokens(texts(ids)) for encoder, texts in encoders})

        def encode_docs(ids: Item) -> dict[str, torch.Tensor | None]:  # ids: the encoders read the tokens
            if not isinstance(ids, TokenizedBatch) or len(ids.tokens) != len(encoders):
                raise ValueError("document ids reached the encoders without their tokens (prepare_docs)")
            return {"lexical": lexical_docs(ids), "cls": self._semantic(ids, query=False) if dense_texts else None}

        def encode_shard(ids: list[str]) -> Payload:  # batches by the texts' length in tokens, not the ids'
            tokenized = splade_texts or dense_texts
            lengths = text_lengths(tokenized(ids)) if tokenized else [len(corpus[d]) for d in ids]
            return encode_payload(encode_docs, ids, self.encode_batch_size, "docs", lengths, prepare_docs)

        def encode_queries(texts: Item) -> tuple[torch.Tensor, torch.Tensor | None]:
            return lexical_queries(texts), self._semantic(texts, query=True)

        return TermEncoder(encode_queries, encode_shard, vocab_size, discard, terms, 1.0, self.encode_batch_size,
                           self.query_prep())  # fmt: skip
