"""The one text encoder every method is given: backbone, tokenizer, max lengths, markers, pooling, MLM head on or off.

A method receives an :class:`Encoder` from its config (``method.encoder``) and keeps only its paper's particulars
and losses. The encoder tokenizes a side's texts (queries or documents: each has its maximum length and an optional
marker prefixed, e.g. CLEAR's <QRY> / <DOC>, added to the vocabulary as special tokens), runs the backbone, and pools
its last hidden states (mean over real tokens, CLEAR Eq. 2–3; or [CLS], DPR and RoC Eq. 6).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Literal

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from retrieval_zoo.bounds import require_choice
from retrieval_zoo.encoding.backbones import Backbone
from retrieval_zoo.encoding.tokens import TextLookup, TextTokenizer, TokenCache, TokenizedBatch, Tokens

SIDES = ("query", "doc")
BERT_DISCARD = 570  # BERT's leading [PAD], [unused*], [UNK], [CLS], ... ids: never a term (delade-dhr.md §4.2)


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Average of the token vectors over real tokens only (CLEAR Eq. 2–3). (B, L, H), (B, L) → (B, H)."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)


def cls_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The first ([CLS]) token's vector (DPR; RoC Eq. 6). (B, L, H) → (B, H)."""
    return hidden[:, 0]


Pooling = Literal["mean", "cls"]
POOLING: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {"mean": mean_pool, "cls": cls_pool}


class Encoder(torch.nn.Module):
    """A backbone with its tokenizer, as every method uses it.

    Args:
        backbone: Where the weights and the tokenizer come from.
        pooling: ``mean`` (over real tokens) or ``cls``.
        query_max_length: Query truncation, in tokens.
        doc_max_length: Document truncation, in tokens.
        markers: Side → a token prefixed to that side's texts (CLEAR: ``{query: <QRY>, doc: <DOC>}``), added to the
            vocabulary as special tokens; None for none.
        mlm_head: Load the masked-LM model (encoder + vocabulary projection), for methods that read its logits.
        batch_size: Texts per forward pass when encoding many (a corpus, a query set).
        compile: Compile the backbone with ``torch.compile`` (:meth:`compile_model`).
    """

    def __init__(
        self,
        backbone: Backbone,
        pooling: Pooling = "mean",
        query_max_length: int = 32,
        doc_max_length: int = 128,
        markers: dict[str, str] | None = None,
        mlm_head: bool = False,
        batch_size: int = 128,
        compile: bool = False,
    ) -> None:
        super().__init__()
        require_choice("encoder.pooling", pooling, Pooling)
        if markers and set(markers) - set(SIDES):
            raise ValueError(f"encoder.markers: sides are {SIDES}, not {sorted(set(markers) - set(SIDES))}")
        self.backbone_name, self.pooling, self.mlm_head = backbone.name, pooling, mlm_head
        self.max_length = {"query": query_max_length, "doc": doc_max_length}
        self.markers, self.batch_size = dict(markers or {}), batch_size
        self.tokenizer: PreTrainedTokenizerBase = backbone.load_tokenizer()
        self.model: PreTrainedModel = backbone.load_model(mlm_head=mlm_head).train()
        if self.markers:
            self.tokenizer.add_tokens(list(self.markers.values()), special_tokens=True)
            self.model.resize_token_embeddings(len(self.tokenizer))
        if compile:
            self.compile_model()
        self._cached: dict[str, TextLookup] = {}  # side → texts whose tokens are read from a token cache
        self.token_key = uuid.uuid4().hex  # names this encoder's tokens in a TokenizedBatch

    def compile_model(self) -> None:
        """``torch.compile`` the backbone in place, its weights keeping their names.

        The model's forward, and with an MLM head the encoder's below it too: the methods that read the logits
        themselves (CSurF, SPLADE's chunked max, :meth:`hidden_states`) call that encoder, not the model.
        """
        self.model.compile()
        if self.mlm_head:
            self.model.base_model.compile()

    @property
    def hidden_size(self) -> int:
        """H, the width of the hidden states (DistilBERT's config maps ``hidden_size`` to its ``dim``)."""
        return self.model.config.hidden_size

    @property
    def vocab_size(self) -> int:
        """|V| of the MLM head's output (``mlm_head=True``)."""
        return self.model.get_output_embeddings().out_features

    def id_strings(self, ids: list[int]) -> list[str]:
        """Vocabulary ids → their strings (word pieces), for explanations."""
        return list(self.tokenizer.convert_ids_to_tokens(ids))

    @property
    def device(self) -> torch.device:
        """Where the weights are."""
        return next(self.model.parameters()).device

    def text_tokenizer(self) -> TextTokenizer:
        """The tokenizer with this encoder's markers and maximum lengths, for the DataLoader's workers."""
        return TextTokenizer(self.tokenizer, self.max_length, self.markers)

    def cache_texts(self, texts: Mapping[str, str], side: str, content: str) -> None:
        """Tokenize ``texts`` (id → text) of ``side`` once into a token cache, read from then on when handed them.

        Args:
            texts: E.g. the query set an evaluation searches.
            side: ``query`` or ``doc``.
            content: A hash of the texts (:func:`retrieval_zoo.cache.fingerprint` of their items).
        """
        self._cached[side] = TextLookup(TokenCache.build(texts, self.text_tokenizer(), side, content), texts)

    def token_lengths(self, texts: list[str], side: str) -> list[int] | None:
        """Each text's length in tokens when all of ``texts`` were given to :meth:`cache_texts`, else None."""
        lookup = self._cached.get(side)
        return lookup.lengths(texts) if lookup is not None and lookup.holds(texts) else None

    def texts_tokens(self, texts: list[str], side: str) -> Tokens:
        """(N,) texts of ``side`` → their (N, L) tokens on the CPU.

        Read from the cache of :meth:`cache_texts` when every text is there, else tokenized (typed at search time).
        """
        if side in self._cached and self._cached[side].holds(texts):
            return self._cached[side].tokens(texts)
        return self.text_tokenizer()(texts, side)

    def tokenize(self, texts: list[str] | Tokens, side: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(N,) texts of ``side`` (``query`` or ``doc``), or their :class:`Tokens` → (N, L) ids and mask on the device.

        Tokens (a training batch's, made in the DataLoader; a corpus's, from its token cache) are used as they are, and
        so are this encoder's tokens in a :class:`TokenizedBatch` (prepared ahead, in DataLoader workers beside an
        accelerator); other texts go through :meth:`texts_tokens`.
        """
        if isinstance(texts, Tokens):
            tokens = texts
        elif isinstance(texts, TokenizedBatch) and self.token_key in texts.tokens:
            tokens = texts.tokens[self.token_key]
        else:
            tokens = self.texts_tokens(texts, side)
        tokens = tokens.to(self.device)
        return tokens.ids, tokens.mask

    def hidden_states(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(N, L) ids and mask → (N, L, H) last hidden states of the encoder (below any MLM head)."""
        encoder = self.model.base_model if self.mlm_head else self.model
        return encoder(input_ids=ids, attention_mask=mask).last_hidden_state  # DistilBERT has no segments

    def pool(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(N, L, H) hidden states → (N, H) pooled vectors."""
        return POOLING[self.pooling](hidden, mask)

    def embed(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(N, L) ids and mask → (N, H) pooled vectors."""
        return self.pool(self.hidden_states(ids, mask), mask)

    def encode(self, texts: list[str] | Tokens, side: str) -> torch.Tensor:
        """(N,) texts of ``side``, or their :class:`Tokens` → (N, H) pooled vectors."""
        return self.embed(*self.tokenize(texts, side))
