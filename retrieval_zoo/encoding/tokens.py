"""Texts as the encoder reads them: :class:`Tokens`, the :class:`TextTokenizer` that makes them, and a token cache.

A :class:`TokenCache` tokenizes every text of a corpus (or a query set) once per (tokenizer, side's maximum length,
side's marker) into two flat arrays on disk, read by memory map: the ids of all texts end to end (uint16 when the
vocabulary fits, else int32) and each text's offset. Its folder is named by a hash of the tokenizer's settings and
vocabulary, the side and the content of the texts, so a changed tokenizer or corpus builds a new one. It is built in
chunks of :data:`CHUNK_TEXTS` texts, each written atomically under the range of texts it holds and kept until the
last, so a killed build resumes with the chunks it had not finished; the chunks are then copied one at a time into
the memory-mapped arrays, so a build holds one chunk's tokens whatever the corpus's size. ``ready.json``, written
last with the arrays' sizes, marks it complete, and a damaged one is rebuilt.
A batch gathered from it (:meth:`TokenCache.tokens`) equals the tokenizer's own padded output for those texts, so
training and encoding read tensors instead of tokenizing on the hot path.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm
from transformers import PreTrainedTokenizerBase

from retrieval_zoo.cache import atomic_path, cache_root, entry_lock, fingerprint, write_json
from retrieval_zoo.id_index import IdIndex

# Texts tokenized at a time. The tokenizer hands each chunk back as Python lists (some 40 bytes a token), and most
# of what the process frees of them stays resident: over 100,000 passages, a process of 0.54 GiB peaked at 2.09 GiB
# and stayed at 1.71 GiB with chunks of 65,536, at 0.89 and 0.82 GiB with 8,192, in the same time.
CHUNK_TEXTS = 8192


def exact_matches(doc_ids: torch.Tensor, query_ids: torch.Tensor, special_ids: list[int]) -> torch.Tensor:
    """(N, L) True where a document token occurs among its query's non-special tokens (RoC's X_EM, roc.md Eq. 10).

    Args:
        doc_ids: (N, L) document ids; document i belongs to query i // (N / B).
        query_ids: (B, Lq) query ids, on the documents' device.
        special_ids: Ids that never match ([CLS], [SEP], [PAD], ...).
    """
    owner = query_ids.repeat_interleave(doc_ids.shape[0] // query_ids.shape[0], dim=0)  # (N, Lq): each one's query
    matches = (doc_ids.unsqueeze(2) == owner.unsqueeze(1)).any(dim=2)
    return matches & ~torch.isin(doc_ids, torch.tensor(special_ids, device=doc_ids.device))


@dataclass
class Tokens:
    """A side's texts as the encoder reads them: (N, L) input ids and attention mask, padded to the longest."""

    ids: torch.Tensor
    mask: torch.Tensor

    def to(self, device: torch.device) -> Tokens:
        """The same tokens on ``device`` (without waiting, from page-locked memory)."""
        return Tokens(self.ids.to(device, non_blocking=True), self.mask.to(device, non_blocking=True))

    def pin_memory(self) -> Tokens:
        """The same tokens in page-locked memory."""
        return Tokens(self.ids.pin_memory(), self.mask.pin_memory())


class TokenizedBatch(list):
    """A batch of texts (or of document ids) with the tokens each of a method's encoders reads for them.

    Made where batches are prepared ahead (:func:`retrieval_zoo.encoding.batching.prepared_batches`: in DataLoader
    workers beside an accelerator), so an encoder handed it reads its tokens from :attr:`tokens`, under its
    :attr:`~retrieval_zoo.encoding.encoder.Encoder.token_key`, and tokenizes nothing; the strings stay for what reads
    them (BM25's query terms, document ids).

    Args:
        items: The texts or ids.
        tokens: Encoder key → the items' tokens for that encoder.
    """

    def __init__(self, items: list[str], tokens: dict[str, Tokens]) -> None:
        super().__init__(items)
        self.tokens = tokens

    def pin_memory(self) -> TokenizedBatch:
        """The same batch with its tokens in page-locked memory."""
        return TokenizedBatch(self, {key: tokens.pin_memory() for key, tokens in self.tokens.items()})


class TextTokenizer:
    """Texts of a side → :class:`Tokens` on the CPU, with the side's marker and maximum length.

    Small and picklable, so the DataLoader's workers tokenize training batches while the accelerator runs the
    previous step; the encoder tokenizes through the same object, so both give the same ids.

    Args:
        tokenizer: The backbone's tokenizer (with the markers already added).
        max_length: Side → truncation, in tokens.
        markers: Side → a token prefixed to that side's texts.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_length: dict[str, int], markers: dict[str, str]) -> None:
        self.tokenizer, self.max_length, self.markers = tokenizer, dict(max_length), dict(markers)

    def _marked(self, texts: list[str], side: str) -> list[str]:
        marker = self.markers.get(side)
        return [f"{marker} {t}" for t in texts] if marker else list(texts)

    def __call__(self, texts: list[str], side: str) -> Tokens:
        """(N,) texts of ``side`` (``query`` or ``doc``) → (N, L) ids and mask."""
        tokens = self.tokenizer(self._marked(texts, side), padding=True, truncation=True,
                                max_length=self.max_length[side], return_tensors="pt")  # fmt: skip
        return Tokens(tokens["input_ids"], tokens["attention_mask"])

    def unpadded(self, texts: list[str], side: str) -> list[list[int]]:
        """Each text's ids, truncated as :meth:`__call__` truncates them, without padding."""
        return self.tokenizer(self._marked(texts, side), truncation=True, max_length=self.max_length[side],
                              return_attention_mask=False, return_token_type_ids=False)["input_ids"]  # fmt: skip

    def digest(self, side: str) -> str:
        """A hash of everything that decides a side's ids: class, vocabulary, added tokens, length, marker, padding."""
        vocabulary = hashlib.sha256(json.dumps(sorted(self.tokenizer.get_vocab().items())).encode()).hexdigest()
        tok = self.tokenizer
        return fingerprint(type(tok).__name__, vocabulary, self.max_length[side], self.markers.get(side),
                           tok.padding_side, tok.truncation_side, tok.pad_token_id)  # fmt: skip


class TokenCache:
    """Every text of a mapping tokenized once, read by memory map (see the module docstring).

    Args:
        folder: A complete cache folder (:meth:`build` makes one).
        keys: The texts' ids, in the order they were tokenized.
        pad_id: The tokenizer's padding id.
        padding_side: ``right`` or ``left``, as the tokenizer pads.
    """

    def __init__(self, folder: Path, keys: IdIndex, pad_id: int, padding_side: str = "right") -> None:
        self.folder, self.pad_id, self.padding_side = folder, pad_id, padding_side
        self.ids = np.load(folder / "ids.npy", mmap_mode="r")
        self.offsets = np.load(folder / "offsets.npy", mmap_mode="r")
        if len(self.offsets) != len(keys) + 1:
            raise ValueError(f"{folder}: {len(self.offsets) - 1:,} texts cached, {len(keys):,} expected")
        self.index = keys

    @classmethod
    def build(
        cls,
        texts: Mapping[str, str],
        tokenizer: TextTokenizer,
        side: str,
        content: str,
        chunk_size: int = CHUNK_TEXTS,
    ) -> TokenCache:
        """The cache of ``texts`` (id → text) for ``side``, built unless a complete one exists.

        Args:
            texts: The texts by id (a corpus, a split's queries).
            tokenizer: The method's tokenizer.
            side: ``query`` or ``doc``.
            content: A hash of the texts' content (the collection's fingerprint for them).
            chunk_size: Texts tokenized and written at a time.
        """
        keys = texts.index if isinstance(getattr(texts, "index", None), IdIndex) else IdIndex(texts)  # a store's own
        key_digest = keys.joined_digest()[:16]
        folder = cache_root() / "tokens" / fingerprint(tokenizer.digest(side), side, content, key_digest)
        tok = tokenizer.tokenizer
        with entry_lock(folder):
            if not _complete(folder):
                _build(folder, texts, keys, tokenizer, side, chunk_size)
        return cls(folder, keys, tok.pad_token_id, tok.padding_side)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def _rows(self, keys: list[str]) -> np.ndarray:
        return self.index.known_rows(keys, f"token cache {self.folder}")

    def lengths(self, keys: list[str]) -> np.ndarray:
        """(N,) the number of tokens of each of these texts."""
        rows = self._rows(keys)
        return np.asarray(self.offsets[rows + 1]) - np.asarray(self.offsets[rows])

    def tokens(self, keys: list[str]) -> Tokens:
        """The padded (N, L) ids and mask of these texts: what the tokenizer itself gives for them."""
        rows = self._rows(keys)
        starts = np.asarray(self.offsets[rows])
        lengths = np.asarray(self.offsets[rows + 1]) - starts
        width = int(lengths.max()) if len(rows) else 0
        owner = np.repeat(np.arange(len(rows)), lengths)  # the output row of each token
        within = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)  # its position
        column = within if self.padding_side == "right" else within + np.repeat(width - lengths, lengths)
        ids = np.full((len(rows), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        ids[owner, column] = self.ids[np.repeat(starts, lengths) + within]
        mask[owner, column] = 1
        return Tokens(torch.from_numpy(ids), torch.from_numpy(mask))


def _complete(folder: Path) -> bool:
    """Whether ``folder`` holds a finished cache whose arrays have the sizes ``ready.json`` recorded."""
    ready = folder / "ready.json"
    if not ready.exists():
        return False
    try:
        sizes = json.loads(ready.read_text())
        wrong = [name for name, size in sizes.items() if (folder / name).stat().st_size != size]
        problem = f"{', '.join(wrong)} not of the size {ready.name} recorded" if wrong else None
    except (OSError, ValueError, AttributeError) as error:
        problem = str(error)
    if problem:
        print(f"[tokens] {folder} is damaged ({problem}); tokenizing again")
        ready.unlink(missing_ok=True)
    return not problem


def _build(
    folder: Path, texts: Mapping[str, str], keys: IdIndex, tokenizer: TextTokenizer, side: str, chunk_size: int
) -> None:
    """Tokenize ``texts`` chunk by chunk (each chunk file atomic, reused after a kill), then join the chunks.

    A chunk's file is named by the range of texts it holds, so a build resumed with another chunk size tokenizes
    its own ranges instead of trusting files cut otherwise (those are removed at the end).
    """
    folder.mkdir(parents=True, exist_ok=True)
    dtype = np.uint16 if len(tokenizer.tokenizer) <= np.iinfo(np.uint16).max + 1 else np.int32
    ranges = [(start, min(start + chunk_size, len(keys))) for start in range(0, len(keys), chunk_size)]
    parts = [folder / f"part-{start:012d}-{stop:012d}.npz" for start, stop in ranges]
    desc = f"tokenize {'queries' if side == 'query' else 'documents'}"
    for (start, stop), part in zip(tqdm(ranges, desc=desc, unit="chunk", leave=False), parts, strict=True):
        if part.exists():
            continue
        ids = tokenizer.unpadded([texts[k] for k in keys.ids[start:stop].tolist()], side)
        with atomic_path(part) as tmp, tmp.open("wb") as handle:
            np.savez(handle, ids=np.fromiter((i for row in ids for i in row), dtype=dtype),
                     lengths=np.array([len(row) for row in ids], dtype=np.int64))  # fmt: skip
        del ids  # before the next chunk's lists are made
    lengths = np.concatenate([np.load(part)["lengths"] for part in parts] or [np.zeros(0, dtype=np.int64)])
    with atomic_path(folder / "offsets.npy") as tmp:
        np.save(tmp, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
    with atomic_path(folder / "ids.npy") as tmp:
        joined = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=(int(lengths.sum()),))
        position = 0
        for part in parts:  # one chunk in memory at a time
            chunk = np.load(part)["ids"]
            joined[position : position + len(chunk)] = chunk
            position += len(chunk)
        joined.flush()
        del joined
    write_json(folder / "ready.json", {n: (folder / n).stat().st_size for n in ("ids.npy", "offsets.npy")})
    for part in folder.glob("part-*.npz"):
        part.unlink(missing_ok=True)


class CachedTexts:
    """Texts named by id that an encoder receives as :class:`Tokens` gathered from a token cache, never as strings.

    What :func:`retrieval_zoo.encoding.batching.encode_payload` batches in place of a list of texts; it orders them into
    batches by :attr:`lengths`, their length in tokens, so a batch pads the least.

    Args:
        cache: The token cache holding them.
        keys: Their ids.
    """

    def __init__(self, cache: TokenCache, keys: list[str]) -> None:
        self.cache, self.keys = cache, keys

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def lengths(self) -> list[int]:
        """Each text's length in tokens (after truncation, markers included)."""
        return self.cache.lengths(self.keys).tolist()

    def take(self, rows: list[int]) -> Tokens:
        """The padded tokens of the texts at ``rows``."""
        return self.cache.tokens([self.keys[i] for i in rows])


class TextLookup:
    """Texts → their cached :class:`Tokens`, for an encoder handed strings (a query set at evaluation).

    Args:
        cache: The token cache of ``texts``.
        texts: The cached texts by id, as :meth:`TokenCache.build` received them.
    """

    def __init__(self, cache: TokenCache, texts: Mapping[str, str]) -> None:
        self.cache, self.key_of = cache, {text: key for key, text in texts.items()}

    def holds(self, texts: list[str]) -> bool:
        """Whether every one of ``texts`` is cached (a text typed at search time is not)."""
        return all(text in self.key_of for text in texts)

    def tokens(self, texts: list[str]) -> Tokens:
        """The padded tokens of ``texts``: what the tokenizer gives for them."""
        return self.cache.tokens([self.key_of[text] for text in texts])

    def lengths(self, texts: list[str]) -> list[int]:
        """Each of ``texts``'s length in tokens (after truncation, markers included)."""
        return self.cache.lengths([self.key_of[text] for text in texts]).tolist()
