"""Independent model fusion through dense representations (delade-dhr.md §3.1–3.2, Eq. 4–16; Tables 4 and 7).

Off-the-shelf lexical vectors are densified into DLRs and, when a dense model is given, joined with its vectors into
DHRs (DLR ⊕ √λ·dense, all-ones gate for the dense part), so BM25 + dense runs as one GIP search instead of Lucene
plus faiss. The lexical vectors are either BM25's (RoC Eq. 3) or the backbone's own SPLADE vectors (Eq. 20), e.g. the
embedded SPLADE-tiny's. Nothing is trained. The method is the choice of parts;
:mod:`retrieval_zoo.index.terms.fused_terms` assembles them into the ``term_weights`` that ``index=gip`` (the default)
or ``index=sparse`` (exact) search, whose weight grid tunes λ of the dense part.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch

from retrieval_zoo.bounds import require_choice
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.encoding.encoder import Encoder
from retrieval_zoo.index.representations import TermEncoder
from retrieval_zoo.index.terms.fused_terms import CachedSide, bm25_part, fused_term_encoder, splade_part
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.methods.dense import DenseBiEncoder
from retrieval_zoo.methods.method import RetrievalMethod

LexicalSide = Literal["bm25", "splade"]


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

    def term_encoder(self, collection: Collection, bm25: BM25) -> TermEncoder:
        """The lexical vectors (BM25's over the collection's analysed vocabulary, or SPLADE's) and the dense ones.

        Nothing is trained, so the indexes encode the corpus on demand, one shard at a time, from document ids.
        """
        sides = []  # the encoders read the corpus's cached tokens (corpus_texts)
        if self.encoder is not None:
            sides.append(CachedSide(self.encoder, self.corpus_texts(collection)))
        if self.dense is not None:
            sides.append(CachedSide(self.dense.encoder, self.dense.corpus_texts(collection)))
        if self.lexical == "bm25":
            lexical = bm25_part(bm25)
        elif self.encoder is not None:
            lexical = splade_part(self.encoder)
        else:
            raise ValueError("lexical=splade needs an encoder with its MLM head")
        return fused_term_encoder(lexical, self.dense, sides, collection.corpus, self.encode_batch_size,
                                  self.query_prep())  # fmt: skip
