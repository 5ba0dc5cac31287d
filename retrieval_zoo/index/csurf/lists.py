"""CSurF's inverted lists built from a corpus's encoded shards, and kept on disk for a saved index.

:func:`build_lists` makes each shard's lists (:class:`~retrieval_zoo.lexical.csf_bags.Postings`) on this process's
shards (:func:`~retrieval_zoo.index.process_shards.own_shards`), with the whole corpus's totals that §5.2's efficiency
figures read; :func:`save_lists` and :func:`load_lists` write and read them (``index_dir``).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from retrieval_zoo.index.csurf.payload import VectorDtype, payload_bags, storage_dtype, token_counts
from retrieval_zoo.index.process_shards import all_sum, lowest_share_masks, own_shards
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.lexical.csf_bags import CsfBags, Postings

POSTINGS = ("ptr", "doc", "source", "weight", "vector", "doc_end")  # Postings' fields, in order
TOTALS = "csf-totals.pt"
Lists = list[tuple[Postings, int]]  # each shard's lists and its first corpus row


@dataclass
class ListTotals:
    """What §5.2's efficiency figures read of the whole corpus's lists (every rank's, under DDP).

    Args:
        postings_count: Postings indexed.
        unpruned: Postings before α's pruning.
        measured_nbytes: Bytes of the lists.
        list_lengths: (|V|,) postings of each surface form, n_t.
        doc_tokens: Mean tokens a document.
        index_seconds: Seconds the lists took to build.
    """

    postings_count: int
    unpruned: int
    measured_nbytes: int
    list_lengths: torch.Tensor
    doc_tokens: float
    index_seconds: float


def build_lists(shards: CorpusShards, vocab_size: int, prune_threshold: float, prune_fraction: float,
                device: torch.device, vector_dtype: VectorDtype) -> tuple[Lists, ListTotals]:  # fmt: skip
    """This process's shards' lists on ``device``, and the whole corpus's totals (one all-reduce each, under DDP).

    Args:
        shards: The corpus's bags of CSFs by shard.
        vocab_size: |V|, the number of surface forms.
        prune_threshold: Postings with a weight below it are not indexed (1e-8 in the paper; 0 keeps every CSF).
        prune_fraction: α, the lowest-weight share of the remaining postings (of the whole corpus) removed.
        device: Where the lists go.
        vector_dtype: How the postings' vectors are stored: ``float32``, or ``float16`` / ``bfloat16`` (half the
            bytes; each pair is still scored in float32).
    """
    started = time.perf_counter()
    own, tokens, unpruned = own_shards(len(shards)), torch.zeros(1), 0

    def indexed(shard: int) -> CsfBags:  # the shard's CSFs of weight ≥ prune_threshold
        bags = payload_bags(shards.read(shard))
        return bags.select(bags.weight >= prune_threshold)

    # α needs every weight before any list is cut. Shards in files are read twice, so that one shard at a time is
    # in memory beside the lists; shards encoded on demand (validation) are kept, not encoded twice.
    held = {} if shards.folder is not None or not prune_fraction else {s: indexed(s) for s in own}
    keep = dict.fromkeys(own)
    if prune_fraction:
        weights = [(held[s] if s in held else indexed(s)).weight for s in own]
        keep = dict(zip(own, lowest_share_masks(weights, own, len(shards), prune_fraction), strict=True))
    lists: Lists = []  # each shard's lists and its first corpus row
    for shard in own:
        shard_bags = held.pop(shard) if shard in held else indexed(shard)
        tokens, unpruned = tokens + token_counts(shard_bags).sum(), unpruned + len(shard_bags.weight)
        mask = keep[shard]
        if mask is not None:
            shard_bags = shard_bags.select(mask)
        postings = Postings.build(shard_bags, vocab_size)
        postings.doc, postings.source = postings.doc.int(), postings.source.short()
        lists.append((postings.to(device, storage_dtype(vector_dtype)), shards.ranges[shard][0]))
    local = [sum(len(p.weight) for p, _ in lists), sum(p.nbytes for p, _ in lists), unpruned]
    counted = all_sum(torch.tensor(local))  # of all ranks' lists
    lengths = [p.list_lengths().cpu() for p, _ in lists]  # n_t: postings of form t
    no_lists = torch.zeros(vocab_size, dtype=torch.long)  # a rank that holds no shard
    totals = ListTotals(int(counted[0]), int(counted[2]), int(counted[1]),
                        all_sum(torch.stack(lengths).sum(0) if lengths else no_lists),
                        float(all_sum(tokens)[0]) / len(shards.docids), time.perf_counter() - started)  # fmt: skip
    return lists, totals


def save_lists(lists: Lists, totals: ListTotals, folder: Path) -> None:
    """Each shard's lists (``csf-<shard>.pt``, from the CPU) and the totals (``csf-totals.pt``) into ``folder``."""
    for number, (postings, first_row) in enumerate(lists):
        fields = {name: getattr(postings, name) for name in POSTINGS}
        fields = {name: value.cpu() if isinstance(value, torch.Tensor) else value for name, value in fields.items()}
        torch.save({"first_row": first_row, **fields}, folder / f"csf-{number:05d}.pt")
    torch.save(dataclasses.asdict(totals), folder / TOTALS)


def load_lists(folder: Path) -> tuple[Lists, ListTotals]:
    """What :func:`save_lists` wrote into ``folder``, on the CPU."""
    lists = []
    for path in sorted(folder.glob("csf-0*.pt")):
        saved = torch.load(path, map_location="cpu", weights_only=True, mmap=True)  # pages as searched
        lists.append((Postings(*(saved[name] for name in POSTINGS)), saved["first_row"]))
    return lists, ListTotals(**torch.load(folder / TOTALS, map_location="cpu", weights_only=True))
