"""CSurF's bags of CSFs as a shard's payload, and how the inverted lists store their vectors.

A shard of the corpus is encoded once into named tensors (:func:`encode_bags_payload`), written by
:class:`~retrieval_zoo.index.shards.CorpusShards`, and read back as bags (:func:`payload_bags`) to build the lists of
:mod:`retrieval_zoo.index.csurf.csf_retriever`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Literal

import torch

from retrieval_zoo.bounds import require_choice
from retrieval_zoo.encoding.batching import Item, Texts, held_bytes, held_groups, prepared_batches
from retrieval_zoo.encoding.precision import encoding
from retrieval_zoo.index.shards import Payload
from retrieval_zoo.lexical.csf_bags import CsfBags, cat_fields
from retrieval_zoo.lexical.csf_texts import TextCsfs

BagEncoder = Callable[[Item], CsfBags]
CsfEncoder = Callable[[Item], TextCsfs]  # a batch → its CSFs, unlisted (a method's ``doc_csfs``)
PAYLOAD_FIELDS = ("text", "surface", "source", "weight", "vector", "original")
VectorDtype = Literal["float32", "float16", "bfloat16"]
VECTOR_DTYPES: dict[VectorDtype, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


def storage_dtype(name: VectorDtype) -> torch.dtype:
    """The torch dtype of a ``vector_dtype`` setting; an unknown name is an error that lists the known ones."""
    require_choice("vector_dtype", name, VectorDtype)
    return VECTOR_DTYPES[name]


def encode_bags_payload(encode: CsfEncoder, texts: Texts, batch_size: int) -> Payload:
    """A shard's bags of CSFs as named tensors: each CSF's ``text`` is its row in ``texts``; ``tokens`` per text.

    The batches' CSFs stay in the encoder's shapes on its device and are listed a group at a time
    (:func:`~retrieval_zoo.encoding.batching.held_groups`), then copied to the host: a wait a group, not a batch.
    """
    parts: list[CsfBags] = []
    rows: list[int] = []
    cpu = torch.device("cpu")
    with torch.inference_mode():
        for group in held_groups(_encoded(encode, texts, batch_size), _unlisted_bytes):
            group_rows = [row for batch, _ in group for row in batch]
            parts.append(bags_to(_listed(group), cpu, torch.tensor(group_rows)))
            rows += group_rows
    bags = _concatenate(parts, len(texts))
    tokens = torch.zeros(len(texts))
    tokens[torch.tensor(rows)] = token_counts(bags).float()
    payload = {name: getattr(bags, name) for name in PAYLOAD_FIELDS if getattr(bags, name) is not None}
    return payload | {"tokens": tokens, "length": torch.tensor(bags.length)}


def _encoded(encode: CsfEncoder, texts: Texts, batch_size: int) -> Iterator[tuple[list[int], TextCsfs]]:
    for batch, items in prepared_batches(texts, batch_size, desc="encode CSFs"):
        with encoding():
            csfs = encode(items)
        yield batch, csfs


def _listed(group: list[tuple[list[int], TextCsfs]]) -> CsfBags:
    """A group of batches' CSFs listed at once, in the order each batch's own listing gives, batch after batch."""
    bags = TextCsfs.cat([csfs for _, csfs in group]).listed()  # expansion CSFs of every text, then original ones
    batch_of_text = torch.tensor([number for number, (rows, _) in enumerate(group) for _ in rows])
    batch_of_text = batch_of_text.to(bags.text.device)
    return bags.select(torch.sort(batch_of_text[bags.text] * 2 + bags.original, stable=True).indices)


def _unlisted_bytes(csfs: TextCsfs) -> int:
    """What a batch's CSFs hold on the device until they are listed: its (T, |V|) forms and sources, the most."""
    return sum(held_bytes(part) for part in (csfs.expansion, csfs.sources, csfs.own, csfs.ids))


def payload_bags(payload: Payload) -> CsfBags:
    """The bags of CSFs of a shard written by :func:`encode_bags_payload`."""
    return CsfBags(payload["text"], payload["surface"], payload["source"], payload["weight"], payload.get("vector"),
                   payload["original"], num_texts=len(payload["tokens"]), length=int(payload["length"]),
                   tokens=payload["tokens"])  # fmt: skip


def token_counts(bags: CsfBags) -> torch.Tensor:
    """(T,) source tokens of each text: what a document's bags always carry (queries may leave them out)."""
    if bags.tokens is None:
        raise ValueError("bags without their texts' token counts: encode documents with the method's encode_doc")
    return bags.tokens


def bags_to(bags: CsfBags, device: torch.device, doc_index: torch.Tensor | None = None) -> CsfBags:
    """``bags`` on ``device`` in float32; with ``doc_index``, its texts renumbered to those corpus rows."""
    text = bags.text if doc_index is None else doc_index.to(bags.text.device)[bags.text]
    vector = None if bags.vector is None else bags.vector.to(device, torch.float32)
    tokens = None if bags.tokens is None else bags.tokens.to(device)
    return CsfBags(text.to(device), bags.surface.to(device), bags.source.to(device),
                   bags.weight.to(device, torch.float32), vector, bags.original.to(device), bags.num_texts,
                   bags.length, tokens)  # fmt: skip


def _concatenate(parts: list[CsfBags], num_texts: int) -> CsfBags:
    """One bag set over the whole corpus from per-batch sets whose texts are already corpus rows."""
    tokens = torch.cat([token_counts(p) for p in parts])  # in batch order, as the rows the caller kept
    return cat_fields(parts, num_texts=num_texts, length=max(p.length for p in parts), tokens=tokens)
