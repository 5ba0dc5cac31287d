"""Inverted lists of contextualized surface forms, searched as CSurF trains (csurf.md §4 Implementation, §5.2).

Each document CSF becomes one posting (document, source position, weight, vector) in the list of its surface form;
the lists are contiguous arrays sorted by form (:class:`retrieval_zoo.lexical.csf_bags.Postings`), the vectors stored in
float32 or, with ``vector_dtype``, in 16 bits. Postings with weight below ``prune_threshold`` (1e-8) are dropped at
indexing time, and post-hoc pruning drops the lowest-weight fraction α of all postings (Figure 2). A query is scored
by :func:`retrieval_zoo.lexical.csf_bags.max_sum_scores`: each query CSF against its form's list, vectorised, a block of
pairs at a time; max-reduced into (query token, document); summed; top k. With nothing pruned this is the
training-time score of every document (a test holds it to brute force). The lists are built per shard of the corpus
and may be split over processes (:mod:`retrieval_zoo.index.process_shards`): each shard's top k are merged exactly.

The retriever reports §5.2's efficiency numbers: |C^q| and |C^d|, E_OPS = Σ_t n̂_t^q·n̂_t^d (average CSFs of form t
per query and per document), the all-to-all operation count a ColBERT-style soft match needs on the same texts
(|q|·|d| tokens), the CSF pairs actually scored per query, the index size and the latency.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import torch

from retrieval_zoo.data.formats import Run
from retrieval_zoo.encoding.batching import PLAIN_QUERIES, QueryPrep, prepared_batches
from retrieval_zoo.encoding.precision import encoding
from retrieval_zoo.id_index import IdIndex
from retrieval_zoo.index.csurf.explain import CsfWords, best_pairs, document_csfs, explanation
from retrieval_zoo.index.csurf.lists import ListTotals, build_lists, load_lists, save_lists
from retrieval_zoo.index.csurf.payload import (
    BagEncoder,
    VectorDtype,
    bags_to,
    token_counts,
)
from retrieval_zoo.index.process_shards import (
    ShardedSearch,
    all_sum,
    gather_topk,
    merge_rows,
    rank_zeros,
    whole_on_this_process,
)
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.index.terms.gip_search import default_device
from retrieval_zoo.lexical.csf_bags import CsfBags, Postings, dense_columns, max_sum_scores, search_pair_chunk
from retrieval_zoo.retriever import Retriever, ranked_run


class CsfRetriever(Retriever):
    """CSurF's inverted index over a corpus: inverted lists per shard, whose top k are merged.

    Under a process group of D ranks (evaluation under ``trainer=ddp``) each rank holds the lists of its own shards
    (:mod:`retrieval_zoo.index.process_shards`), rank 0 searches, the others :meth:`serve`, and the ranks' top k are
    merged by one all-gather a batch: the same ranking as one process holding every list. :meth:`from_shards` builds
    the lists.

    Args:
        encode_query: Query texts → their bags of CSFs.
        lists: This rank's shards' lists, each with its first corpus row.
        docids: The corpus's documents, in row order.
        totals: The whole corpus's counts (:class:`ListTotals`).
        query_batch_size: Queries scored at a time.
        device: Where the lists live and are scored (default: the GPU when present), with the same tensor ops on
            either, in float32.
        queries: How query texts are batched: by their length in tokens, tokens prepared ahead.
        compiled: Score pairs with one torch.compile'd kernel a block (see
            :func:`~retrieval_zoo.lexical.csf_bags.max_sum_scores`): the same scores to float32 rounding, not the
            same bits.
        words: The texts' tokens and the forms' strings, for :meth:`explain` (None: no explanations).
    """

    def __init__(
        self,
        encode_query: BagEncoder,
        lists: list[tuple[Postings, int]],
        docids: Sequence[str] | IdIndex,
        totals: ListTotals,
        query_batch_size: int = 8,
        device: torch.device | str | None = None,
        queries: QueryPrep = PLAIN_QUERIES,
        compiled: bool = False,
        words: CsfWords | None = None,
    ) -> None:
        self.encode_query, self.docids, self.query_batch_size = encode_query, docids, query_batch_size
        self.compiled, self.queries, self.totals, self.words = compiled, queries, totals, words
        self.device = torch.device(device) if device is not None else default_device()
        self.shards = [(postings.to(self.device), first_row) for postings, first_row in lists]
        self.rank_nbytes = sum(p.nbytes for p, _ in self.shards)  # this rank's lists
        self.postings_count, self.list_lengths = totals.postings_count, totals.list_lengths
        self.measured_nbytes, self.index_seconds = totals.measured_nbytes, totals.index_seconds
        self._sharded = ShardedSearch(self._search)
        # the queries' tallies stay on the device until efficiency() reads them: no wait a batch for diagnostics
        self._query_forms = torch.zeros(len(totals.list_lengths), device=self.device)
        self._query_tokens = torch.zeros((), dtype=torch.int64, device=self.device)
        self._queries, self._query_csfs, self._pairs, self._search_seconds = 0, 0, 0, 0.0

    @classmethod
    def from_shards(
        cls,
        encode_query: BagEncoder,
        shards: CorpusShards,
        vocab_size: int,
        prune_threshold: float = 1e-8,
        prune_fraction: float = 0.0,
        query_batch_size: int = 8,
        device: torch.device | str | None = None,
        queries: QueryPrep = PLAIN_QUERIES,
        vector_dtype: VectorDtype = "float32",
        compiled: bool = False,
        words: CsfWords | None = None,
    ) -> CsfRetriever:
        """The lists of the corpus's bags of CSFs by shard (:func:`encode_bags_payload`), |V| = ``vocab_size``.

        :func:`~retrieval_zoo.index.csurf.lists.build_lists` says what ``prune_threshold``, ``prune_fraction`` and
        ``vector_dtype`` do; the other arguments as the class's.
        """
        device = torch.device(device) if device is not None else default_device()
        lists, totals = build_lists(shards, vocab_size, prune_threshold, prune_fraction, device, vector_dtype)
        return cls(encode_query, lists, shards.docids, totals, query_batch_size, device, queries, compiled, words)

    def save(self, folder: Path) -> None:
        """Each shard's lists and the corpus's totals into ``folder`` (:func:`.lists.save_lists`).

        Only a retriever that holds every list (one process) can be saved: under DDP each rank holds its share.
        """
        if self.split:
            raise ValueError("the CSF lists are split over the processes: save them from one process")
        save_lists(self.shards, self.totals, folder)

    @classmethod
    def load(cls, encode_query: BagEncoder, folder: Path, docids: Sequence[str] | IdIndex, query_batch_size: int = 8,
             queries: QueryPrep = PLAIN_QUERIES, compiled: bool = False,
             words: CsfWords | None = None) -> CsfRetriever:  # fmt: skip
        """The lists :meth:`save` wrote into ``folder``, held whole by this process (under DDP too)."""
        lists, totals = load_lists(folder)
        with whole_on_this_process():
            return cls(
                encode_query, lists, docids, totals, query_batch_size, queries=queries, compiled=compiled, words=words
            )

    @property
    def split(self) -> bool:
        """Whether this process holds only its share of the lists (DDP evaluation)."""
        return self._sharded.split

    @property
    def lexical_nonzero(self) -> float:
        """|C^d|: postings per document."""
        return self.postings_count / len(self.docids)

    def search(self, queries: dict[str, str], k: int) -> Run:
        """The top ``k`` documents of each query by the §3.3 score; documents scoring 0 are not returned."""
        return self._sharded.search(queries, k)

    def serve(self) -> None:
        """On ranks other than 0: search rank 0's queries over this rank's lists until it calls :meth:`release`."""
        self._sharded.serve()

    def release(self) -> None:
        """On rank 0, when done searching: let the serving ranks go."""
        self._sharded.stop()

    def _search(self, queries: dict[str, str], k: int) -> Run:
        """This rank's search: its lists' top ``k``, merged with the other ranks' (every rank ends with the run)."""
        qids, texts = list(queries), list(queries.values())
        run: Run = {}
        started = time.perf_counter()
        with torch.inference_mode():
            lengths, prepare = rank_zeros(self.queries.lengths(texts)), self.queries.prepare  # the same batches
            for rows, items in prepared_batches(texts, self.query_batch_size, lengths, prepare, "search CSFs"):
                with encoding():
                    bags = self.encode_query(items)
                bags = bags_to(bags, self.device)
                scores, found, pairs = self._search_lists(bags, k)
                scores, found = gather_topk(scores, found, k)
                batch_qids = [qids[query] for query in rows]
                run.update(ranked_run(batch_qids, found, scores, self.docids, positive_only=True))  # read once each
                self._count(bags, int(all_sum(torch.tensor([pairs]))[0]))
        self._search_seconds += time.perf_counter() - started
        return {qid: run[qid] for qid in qids}  # in the order of ``queries``, as batched by length

    def _search_lists(self, bags: CsfBags, k: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        """(B, ≤ k) scores and corpus rows of the top ``k`` over this rank's lists, and the CSF pairs scored."""
        scores, found, pairs = [], [], 0
        for postings, first_row in self.shards:
            shard_scores, columns, shard_pairs = max_sum_scores(
                bags, postings, dense_columns(bags, postings), search_pair_chunk(self.device), self.compiled
            )
            top = shard_scores.topk(min(k, shard_scores.shape[1]), dim=1)
            scores.append(top.values)
            found.append(columns[top.indices] + first_row)
            pairs += shard_pairs
        return *merge_rows(torch.cat(scores, dim=1), torch.cat(found, dim=1), k), pairs

    def _count(self, bags: CsfBags, pairs: int) -> None:
        self._queries += bags.num_texts
        self._query_csfs += len(bags.weight)
        self._query_tokens += token_counts(bags).sum()
        self._query_forms.index_add_(0, bags.surface.long(), torch.ones_like(bags.surface, dtype=torch.float32))
        self._pairs += pairs

    def explain(self, queries: dict[str, str], run: Run, depth: int = 3) -> list[dict] | None:
        """Each query token's best CSF pair with each of its top ``depth`` documents (:mod:`.explain`).

        None without ``words``, or for lists split over processes (this one holds only its share of the documents).
        """
        if self.words is None or self.split:
            return None
        qids, texts = list(queries), list(queries.values())
        tops = {qid: list(run.get(qid, {}))[:depth] for qid in qids}
        wanted = sorted({docid for top in tops.values() for docid in top})
        docs = self.docids if isinstance(self.docids, IdIndex) else IdIndex(self.docids)  # a lookup, not a corpus loop
        rows = dict(zip(wanted, docs.known_rows(wanted, "the CSF lists' documents").tolist(), strict=True))
        with torch.inference_mode():
            with encoding():
                bags = self.encode_query(texts)
            bags = bags_to(bags, self.device)
        query_tokens, records = self.words.tokens(texts, "query"), []
        for number, qid in enumerate(qids):
            query, top = bags.select(bags.text == number), tops[qid]
            for docid, doc_tokens in zip(top, self.words.tokens(self.words.doc_texts(top), "doc"), strict=True):
                pairs = best_pairs(query, document_csfs(self.shards, rows[docid]))
                matches = explanation(pairs, query_tokens[number], doc_tokens, self.words.forms([p[1] for p in pairs]))
                records.append({"qid": qid, "docid": docid, "score": run[qid][docid], "matches": matches})
        return records

    def efficiency(self) -> dict[str, float]:
        """§5.2's numbers over the queries searched so far and the indexed corpus."""
        if not self._queries:
            raise ValueError("efficiency is measured over searched queries: search first")
        n_q = self._query_forms.cpu() / self._queries  # n̂_t^q
        n_d = self.list_lengths.float() / len(self.docids)  # n̂_t^d
        tokens_per_query = int(self._query_tokens) / self._queries
        return {
            "csf_per_query": self._query_csfs / self._queries,
            "csf_per_doc": self.lexical_nonzero,
            "tokens_per_query": tokens_per_query,
            "tokens_per_doc": self.totals.doc_tokens,
            "e_ops": float((n_q * n_d).sum()),
            "all_to_all_ops": tokens_per_query * self.totals.doc_tokens,
            "pairs_per_query": self._pairs / self._queries,
            "postings_pruned_share": 1 - self.postings_count / max(1, self.totals.unpruned),
            "index_seconds": self.index_seconds,
            "ms_per_query": 1000 * self._search_seconds / self._queries,
        }
