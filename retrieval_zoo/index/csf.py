"""Inverted lists of contextualized surface forms, searched as CSurF trains (csurf.md §4 Implementation, §5.2).

Each document CSF becomes one posting (document, source position, weight, vector) in the list of its surface form;
the lists are contiguous arrays sorted by form (:class:`retrieval_zoo.lexical.csf.Postings`). Postings with weight
below ``prune_threshold`` (1e-8) are dropped at indexing time, and post-hoc pruning drops the lowest-weight
fraction α of all postings (Figure 2). A query is scored by :func:`retrieval_zoo.lexical.csf.max_sum_scores`: each
query CSF against its form's list, vectorised; max-reduced into (query token, document); summed; top k. With
nothing pruned this is the training-time score of every document (a test holds it to brute force).

The retriever reports §5.2's efficiency numbers: |C^q| and |C^d|, E_OPS = Σ_t n̂_t^q·n̂_t^d (average CSFs of form t
per query and per document), the all-to-all operation count a ColBERT-style soft match needs on the same texts
(|q|·|d| tokens), the CSF pairs actually scored per query, the index size and the latency.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ClassVar

import torch

from retrieval_zoo.batching import PLAIN_QUERIES, QueryPrep, Texts, prepared_batches
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.formats import Run
from retrieval_zoo.index.base import Index
from retrieval_zoo.index.gip import default_device
from retrieval_zoo.index.shards import CorpusShards, Payload, merge_topk
from retrieval_zoo.lexical.bm25 import BM25
from retrieval_zoo.lexical.csf import CsfBags, Postings, max_sum_scores

BagEncoder = Callable[[list[str]], CsfBags]
PAYLOAD_FIELDS = ("text", "surface", "source", "weight", "vector", "original")


def prune_lowest(weight: torch.Tensor, fraction: float) -> torch.Tensor:
    """Boolean mask keeping all but the ⌊fraction·n⌋ lowest of ``weight`` (n,): post-hoc pruning with α = fraction."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"prune_fraction (α) must be in [0, 1), not {fraction}")
    keep = torch.ones_like(weight, dtype=torch.bool)
    keep[torch.argsort(weight, stable=True)[: int(fraction * len(weight))]] = False
    return keep


def encode_bags_payload(encode: BagEncoder, texts: Texts, batch_size: int) -> Payload:
    """A shard's bags of CSFs as named tensors: each CSF's ``text`` is its row in ``texts``; ``tokens`` per text."""
    parts: list[CsfBags] = []
    tokens = torch.zeros(len(texts))
    with torch.inference_mode():
        for batch, items in prepared_batches(texts, batch_size, desc="encode CSFs"):
            bags = encode(items)
            rows = torch.tensor(batch)
            tokens[rows] = bags.tokens.float().cpu()
            parts.append(_to(bags, torch.device("cpu"), doc_index=rows))
    bags = _concatenate(parts, len(texts))
    payload = {name: getattr(bags, name) for name in PAYLOAD_FIELDS if getattr(bags, name) is not None}
    return payload | {"tokens": tokens, "length": torch.tensor(bags.length)}


def payload_bags(payload: Payload) -> CsfBags:
    """The bags of CSFs of a shard written by :func:`encode_bags_payload`."""
    fields = {name: payload.get(name) for name in PAYLOAD_FIELDS}
    return CsfBags(**fields, num_texts=len(payload["tokens"]), length=int(payload["length"]), tokens=payload["tokens"])


class CsfRetriever:
    """CSurF's inverted index over a corpus: inverted lists per shard, whose top k are merged.

    Args:
        encode_query: Query texts → their bags of CSFs.
        shards: The corpus's bags of CSFs by shard (:func:`encode_bags_payload`).
        vocab_size: |V|, the number of surface forms.
        prune_threshold: Postings with a weight below it are not indexed (1e-8 in the paper; 0 keeps every CSF).
        prune_fraction: α, the lowest-weight share of the remaining postings (of the whole corpus) removed.
        query_batch_size: Queries scored at a time.
        device: Where the lists live and are scored (default: the GPU when present), with the same tensor ops on
            either, in float32.
        queries: How query texts are batched: by their length in tokens, tokens prepared ahead.
    """

    def __init__(
        self,
        encode_query: BagEncoder,
        shards: CorpusShards,
        vocab_size: int,
        prune_threshold: float = 1e-8,
        prune_fraction: float = 0.0,
        query_batch_size: int = 8,
        device: torch.device | str | None = None,
        queries: QueryPrep = PLAIN_QUERIES,
    ) -> None:
        self.encode_query, self.docids, self.query_batch_size = encode_query, shards.docids, query_batch_size
        self.queries = queries
        self.device = torch.device(device) if device is not None else default_device()
        started = time.perf_counter()
        bags, tokens = [], []
        for _, payload in shards:
            shard_bags = payload_bags(payload)
            bags.append(shard_bags.select(shard_bags.weight >= prune_threshold))
            tokens.append(shard_bags.tokens)
        self.unpruned = sum(len(b.weight) for b in bags)
        keep = prune_lowest(torch.cat([b.weight for b in bags]), prune_fraction).split([len(b.weight) for b in bags])
        self.shards: list[tuple[Postings, list[str]]] = []
        for shard_bags, shard_keep, docids in zip(bags, keep, (ids for ids, _ in shards), strict=True):
            postings = Postings.build(shard_bags.select(shard_keep), vocab_size)
            postings.doc, postings.source = postings.doc.int(), postings.source.short()
            self.shards.append((postings.to(self.device), docids))
        self.index_seconds = time.perf_counter() - started
        self.doc_tokens = torch.cat(tokens).mean().item()
        self._query_forms = torch.zeros(vocab_size)
        self._queries, self._query_csfs, self._query_tokens, self._pairs, self._search_seconds = 0, 0, 0.0, 0, 0.0

    @property
    def postings_count(self) -> int:
        """Postings in all shards' lists."""
        return sum(len(postings.weight) for postings, _ in self.shards)

    @property
    def nbytes(self) -> int:
        """Bytes of the inverted lists: offsets, documents, positions, weights and vectors."""
        tensors = [t for p, _ in self.shards for t in (p.ptr, p.doc, p.source, p.weight, p.vector) if t is not None]
        return sum(t.numel() * t.element_size() for t in tensors)

    @property
    def lexical_nonzero(self) -> float:
        """|C^d|: postings per document."""
        return self.postings_count / len(self.docids)

    def search(self, queries: dict[str, str], k: int) -> Run:
        """The top ``k`` documents of each query by the §3.3 score; documents scoring 0 are not returned."""
        qids, texts, run = list(queries), list(queries.values()), {}
        started = time.perf_counter()
        with torch.inference_mode():
            lengths, prepare = self.queries.lengths(texts), self.queries.prepare
            for rows, items in prepared_batches(texts, self.query_batch_size, lengths, prepare, "search CSFs"):
                batch = [qids[i] for i in rows]
                bags = _to(self.encode_query(items), self.device)
                found = [self._search_shard(bags, batch, postings, docids, k) for postings, docids in self.shards]
                run |= merge_topk((shard_run for shard_run, _ in found), k)
                self._count(bags, sum(pairs for _, pairs in found))
        self._search_seconds += time.perf_counter() - started
        return {qid: run[qid] for qid in qids}  # in the order of ``queries``, as batched by length

    @staticmethod
    def _search_shard(bags: CsfBags, qids: list[str], postings: Postings, docids: list[str], k: int) -> tuple[Run, int]:
        """The top ``k`` of one shard for a batch of query bags (documents scoring 0 left out), and the pairs scored."""
        scores, columns, pairs = max_sum_scores(bags, postings)
        if not scores.shape[1]:
            return {qid: {} for qid in qids}, pairs
        top = scores.topk(min(k, scores.shape[1]), dim=1)
        values, found = top.values.cpu().tolist(), columns[top.indices].cpu().tolist()  # one transfer a batch
        run = {qid: {docids[c]: s for s, c in zip(values[row], found[row], strict=True) if s > 0}
               for row, qid in enumerate(qids)}  # fmt: skip
        return run, pairs

    def _count(self, bags: CsfBags, pairs: int) -> None:
        self._queries += bags.num_texts
        self._query_csfs += len(bags.weight)
        self._query_tokens += bags.tokens.sum().item()
        self._query_forms += torch.bincount(bags.surface.cpu(), minlength=len(self._query_forms)).float()
        self._pairs += pairs

    def efficiency(self) -> dict[str, float]:
        """§5.2's numbers over the queries searched so far and the indexed corpus."""
        if not self._queries:
            raise ValueError("efficiency is measured over searched queries: search first")
        n_q = self._query_forms / self._queries  # n̂_t^q
        n_d = sum(p.list_lengths().float() for p, _ in self.shards) / len(self.docids)  # n̂_t^d
        tokens_per_query = self._query_tokens / self._queries
        return {
            "csf_per_query": self._query_csfs / self._queries,
            "csf_per_doc": self.lexical_nonzero,
            "tokens_per_query": tokens_per_query,
            "tokens_per_doc": self.doc_tokens,
            "e_ops": float((n_q * n_d).sum()),
            "all_to_all_ops": tokens_per_query * self.doc_tokens,
            "pairs_per_query": self._pairs / self._queries,
            "postings_pruned_share": 1 - self.postings_count / max(1, self.unpruned),
            "index_seconds": self.index_seconds,
            "ms_per_query": 1000 * self._search_seconds / self._queries,
        }


class InvertedLists(Index):
    """CSurF's inverted lists of CSFs (csurf.md §4; ``conf/index/csf.yaml``), scored exactly as CSurF trains.

    Args:
        prune_threshold: Postings with a lower weight are not indexed (1e-8 in the paper).
        prune_fraction: α, the lowest-weight share of postings removed after indexing (Figure 2).
        query_batch_size: Queries scored at a time.
    """

    accepts: ClassVar[tuple[str, ...]] = ("csf_bags",)

    def __init__(self, prune_threshold: float = 1e-8, prune_fraction: float = 0.0, query_batch_size: int = 8) -> None:
        super().__init__()
        prune_lowest(torch.zeros(0), prune_fraction)  # fail at construction on a bad α
        self.prune_threshold, self.prune_fraction, self.query_batch_size = (
            prune_threshold,
            prune_fraction,
            query_batch_size,
        )

    def corpus_payload(self, method: Any, texts: list[str]) -> Payload:
        """The documents' bags of CSFs."""
        return encode_bags_payload(method.encode_doc, texts, method.encode_batch_size)

    def build(
        self, method: Any, collection: Collection, bm25: BM25, shards: CorpusShards | None = None
    ) -> CsfRetriever:
        """Inverted lists of the corpus's CSFs, one set per shard."""
        shards = self.corpus_shards(method, collection, bm25, shards)
        return CsfRetriever(method.encode_query, shards, method.vocab_size, self.prune_threshold, self.prune_fraction,
                            self.query_batch_size, queries=method.query_prep())  # fmt: skip


def _to(bags: CsfBags, device: torch.device, doc_index: torch.Tensor | None = None) -> CsfBags:
    """``bags`` on ``device`` in float32; with ``doc_index`` (on the CPU), its texts renumbered to those corpus rows."""
    text = bags.text.to(device) if doc_index is None else doc_index[bags.text.cpu()].to(device)
    vector = None if bags.vector is None else bags.vector.to(device, torch.float32)
    return CsfBags(text, bags.surface.to(device), bags.source.to(device), bags.weight.to(device, torch.float32),
                   vector, bags.original.to(device), bags.num_texts, bags.length, bags.tokens.cpu())  # fmt: skip


def _concatenate(parts: list[CsfBags], num_texts: int) -> CsfBags:
    """One bag set over the whole corpus from per-batch sets whose texts are already corpus rows."""
    vectors = [p.vector for p in parts]
    return CsfBags(
        *(torch.cat([getattr(p, name) for p in parts]) for name in ("text", "surface", "source", "weight")),
        vector=None if vectors[0] is None else torch.cat(vectors),
        original=torch.cat([p.original for p in parts]),
        num_texts=num_texts,
        length=max(p.length for p in parts),
    )
