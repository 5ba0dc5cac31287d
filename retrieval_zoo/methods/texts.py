"""What the data and index sides read of a method's encoders: token caches, query batching, encoding settings.

:class:`EncoderTexts` is mixed into :class:`~retrieval_zoo.methods.method.RetrievalMethod`, whose own body is the
training contract. Nothing here is a method's choice but ``term_keys`` (RoC's projection keys) and the encode batch
size of a fusion; the index Protocols (:class:`~retrieval_zoo.index.representations.Encodes`) read these members.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import cast

import numpy as np
import torch

from retrieval_zoo.cache import fingerprint
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.encoding.batching import QueryPrep, Texts
from retrieval_zoo.encoding.encoder import Encoder
from retrieval_zoo.encoding.tokens import CachedTexts, TextTokenizer, TokenCache, TokenizedBatch


class EncoderTexts:
    """A method's encoders as the DataModule, the token caches and the indexes read them.

    ``self.encoder`` is the method's own encoder, None for a method without one.
    """

    encoder: Encoder | None

    @property
    def encode_batch_size(self) -> int:
        """Texts per forward pass when an index encodes many."""
        if self.encoder is None:
            raise TypeError(f"{type(self).__name__} has no encoder: it encodes nothing")
        return self.encoder.batch_size

    def text_tokenizer(self) -> TextTokenizer | None:
        """What the DataLoader tokenizes training batches with (the encoder's), or None for a method without one."""
        return self.encoder.text_tokenizer() if self.encoder is not None else None

    def term_keys(self) -> Callable[[list[str]], np.ndarray] | None:
        """Terms → keys under which the DataModule stores BM25 vectors as tensors (RoC's projection), or None."""
        return None

    def corpus_texts(self, collection: Collection) -> Callable[[list[str]], Texts]:
        """Document ids → what encoding reads of them: their cached tokens, or texts for a method without a tokenizer.

        The corpus is tokenized once (:class:`~retrieval_zoo.encoding.tokens.TokenCache`, shared with training's
        batches).
        """
        corpus, tokenizer = collection.corpus, self.text_tokenizer()
        if tokenizer is None:
            return lambda ids: [corpus[d] for d in ids]
        cache = TokenCache.build(corpus, tokenizer, "doc", collection.corpus_fingerprint)
        return lambda ids: CachedTexts(cache, ids)

    def encoders(self) -> list[Encoder]:
        """The method's text encoders (a fusion's SPLADE and dense ones), in module order."""
        return [module for module in cast(torch.nn.Module, self).modules() if isinstance(module, Encoder)]

    def cache_queries(self, queries: Mapping[str, str]) -> None:
        """Tokenize a query set (id → text) once for every encoder of the method, which then reads their tokens.

        Evaluation and validation call it before they search, so query encoding reads a token cache as training does.
        """
        content = fingerprint(sorted(queries.items()))
        for encoder in self.encoders():
            encoder.cache_texts(queries, "query", content)

    def query_lengths(self, texts: list[str]) -> list[int] | None:
        """Each query's length in tokens, from the token cache of :meth:`cache_queries`.

        Query batches are ordered by it, as corpus batches are; None for texts not cached (or a method without an
        encoder): they go by characters.
        """
        encoders = self.encoders()
        return encoders[0].token_lengths(texts, "query") if encoders else None

    def prepare_queries(self, texts: list[str]) -> TokenizedBatch:
        """A batch of query texts with each encoder's tokens for them: from :meth:`cache_queries`'s cache, or tokenized.

        Retrievers run it where batches are prepared ahead (:func:`retrieval_zoo.encoding.batching.prepared_batches`: in
        DataLoader workers beside an accelerator), so a query typed at search time is tokenized there, not in the step.
        """
        return TokenizedBatch(texts, {encoder.token_key: encoder.texts_tokens(texts, "query")
                                      for encoder in self.encoders()})  # fmt: skip

    def query_prep(self) -> QueryPrep:
        """How retrievers batch this method's queries: ordered by their length in tokens, tokens prepared ahead."""
        return QueryPrep(self.query_lengths, self.prepare_queries)

    def encoding_settings(self) -> dict:
        """What besides the weights changes the method's encoding of a corpus (hashed into its cache key)."""
        doc_max_length = self.encoder.max_length["doc"] if self.encoder is not None else None
        return {"method": type(self).__name__, "doc_max_length": doc_max_length}
