"""Lookup tables behind the optional batch fields, computed once before training.

Every (query, document) pair a group can hold over the run's epochs (positives, pool draws, random negatives) is
enumerated up front as int64 keys (query row × corpus size + corpus row). BM25 scores of pairs in the BM25 run come
from the run itself, every other pair's from pyserini, so the training step never waits on Java; teacher scores
come from the teacher run. Tables are sorted keys beside float32 values, never dicts of dicts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial

import numpy as np
import torch

from retrieval_zoo.data.doc_rows import DocRows, RankedRows, entry_rows, row_blocks
from retrieval_zoo.id_index import IdIndex, find_sorted
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.lexical.sparse_rows import SparseRows
from retrieval_zoo.training.negatives import GroupSampling


class PairTable:
    """(qid, docid) → score for the pairs training can sample, turned into (B, G) tensors for a batch.

    Args:
        name: What the scores are (named in errors).
        row_of: qid → its row in the keys.
        docs: The corpus's ids.
        keys: (P,) sorted int64 pair keys, ``query row * len(docs) + corpus row``.
        values: (P,) float32 the pairs' scores.
    """

    def __init__(
        self, name: str, row_of: Mapping[str, int], docs: IdIndex, keys: np.ndarray, values: np.ndarray
    ) -> None:
        self.name, self.row_of, self.docs, self.keys, self.values = name, row_of, docs, keys, values

    def matrix(self, qids: list[str], docids: list[list[str]]) -> torch.Tensor:
        """Scores of each query's group as a float tensor of shape (B, G)."""
        flat = [d for group in docids for d in group]
        doc_rows = self.docs.rows(flat)
        rows = np.repeat([self.row_of.get(q, -1) for q in qids], [len(group) for group in docids])
        wanted = rows * len(self.docs) + doc_rows
        at, known = find_sorted(self.keys, wanted)
        found = (rows >= 0) & (doc_rows >= 0) & known
        if not found.all():
            owner = np.repeat(np.arange(len(qids)), [len(group) for group in docids])
            query = owner[int(np.argmax(~found))]
            missing = [flat[i] for i in np.flatnonzero(~found & (owner == query))]
            raise KeyError(f"{self.name}: no score for query {qids[query]!r} and documents {missing[:3]}")
        return torch.from_numpy(np.asarray(self.values[at], dtype=np.float32).reshape(len(qids), -1))


def sampled_pairs(sampling: GroupSampling, qids: list[str], epochs: int) -> np.ndarray:
    """Sorted unique keys of every (query, document) pair any group can hold over ``epochs`` epochs, plus positives."""
    n_docs, keys = len(sampling.docs), []
    for qid in qids:
        row = sampling.row_of[qid]
        groups = [sampling.positives.row(row)] + [sampling.group_rows(qid, e) for e in range(epochs)]
        keys.append(row * n_docs + np.concatenate(groups).astype(np.int64))
    return np.unique(np.concatenate(keys)) if keys else np.zeros(0, dtype=np.int64)


def run_scores(run: RankedRows, keys: np.ndarray, n_docs: int) -> tuple[np.ndarray, np.ndarray]:
    """The run's scores of sorted pair keys: (P,) float32 values and (P,) whether the run holds the pair."""
    values, found = np.zeros(len(keys), dtype=np.float32), np.zeros(len(keys), dtype=bool)
    for start, end in row_blocks(run.offsets):
        lo, hi = np.searchsorted(keys, [start * n_docs, end * n_docs])
        first, last = int(run.offsets[start]), int(run.offsets[end])
        if lo == hi or first == last:
            continue
        entries = entry_rows(run.offsets, start, end) * n_docs + np.asarray(run.docs[first:last])
        order = np.argsort(entries)
        entries, scores = entries[order], np.asarray(run.scores[first:last])[order]
        at, hit = find_sorted(entries, keys[lo:hi])
        values[lo:hi] = np.where(hit, scores[at], 0)
        found[lo:hi] = hit
    return values, found


def bm25_pair_scores(
    bm25: BM25,
    queries: dict[str, str],
    row_qids: Sequence[str],
    keys: np.ndarray,
    docs: IdIndex,
    run: RankedRows | None,
) -> np.ndarray:
    """(P,) float32 BM25 scores of ``keys``' pairs: from the BM25 run when it holds the pair, else from pyserini."""
    n_docs = len(docs)
    values, found = run_scores(run, keys, n_docs) if run is not None else (np.zeros(len(keys), np.float32), None)
    todo = np.flatnonzero(~found) if found is not None else np.arange(len(keys))
    pairs = list(zip([row_qids[r] for r in keys[todo] // n_docs], docs.names(keys[todo] % n_docs), strict=True))
    if pairs:
        values[todo] = bm25.pair_scores(queries, pairs)
    return values


def precompute_fields(
    needs: frozenset[str],
    bm25: BM25,
    queries: dict[str, str],
    sampling: GroupSampling,
    qids: list[str],
    epochs: int,
    bm25_run: RankedRows | None,
    teacher_run: RankedRows | None,
    row_qids: Sequence[str],
    term_keys: Callable[[list[str]], np.ndarray] | None = None,
) -> dict:
    """The tables :meth:`TriplesDataModule.collate` reads for each needed field.

    ``bm25_run`` is the BM25 run the pool came from (its scores are reused), or None when the pool is another
    model's run, in which case every pair is scored by pyserini. ``row_qids`` names the query of each row of the
    runs and of ``sampling``. With ``term_keys`` (RoC's projection hashes terms), the BM25 vectors are CSR rows under
    the terms' keys (``term_rows``: side → (ids, rows)); without, dicts (``query_idf``, ``doc_weights``).
    """
    tables: dict = {}
    if not needs - {"texts", "exact_match_counts"}:  # made by the collate from texts and tokens: nothing to precompute
        return tables
    keys, docs = sampled_pairs(sampling, qids, epochs), sampling.docs
    if "bm25_scores" in needs:
        values = bm25_pair_scores(bm25, queries, row_qids, keys, docs, bm25_run)
        tables["bm25_scores"] = PairTable("bm25_scores", sampling.row_of, docs, keys, values)
    if "teacher_scores" in needs:
        values, found = run_scores(teacher_run, keys, len(docs))
        tables["teacher_scores"] = PairTable("teacher_scores", sampling.row_of, docs, keys[found], values[found])
    if "bm25_vectors" in needs:
        docids = sorted(docs.names(np.unique(keys % len(docs))))
        if term_keys is None:  # bags as dicts, for a method that projects them itself
            saturation = bm25.document_term_weights(docids, saturation_only=True)
            tables["doc_weights"] = dict(zip(docids, saturation, strict=True))
            tables["query_idf"] = dict(zip(qids, bm25.query_idf([queries[q] for q in qids]), strict=True))
        else:  # CSR rows under the terms' keys, built a chunk of bags at a time
            idf = SparseRows.keyed(qids, lambda chunk: bm25.query_idf([queries[q] for q in chunk]), term_keys)
            saturation = SparseRows.keyed(docids, partial(bm25.document_term_weights, saturation_only=True), term_keys)
            tables["term_rows"] = {"query": (IdIndex(qids), idf), "doc": (IdIndex(docids), saturation)}
    return tables


def restrict_to_teacher(
    path: str, teacher: RankedRows, positives: DocRows, pool: DocRows
) -> tuple[DocRows, DocRows, list[int]]:
    """Keep only the pairs a teacher run scores, so that every sampled group has teacher scores.

    A cross-encoder's run, or another model's, scores only the candidates it was given: positives outside them
    and pool documents it never saw have no teacher score. Such pairs are not sampled, and a query left without
    a scored positive or a scored negative is not trained on. Both counts are printed, naming the run.

    Args:
        path: The teacher run's file (named in the messages).
        teacher: Per training query (a row), the documents the teacher scores.
        positives: Judged relevant corpus rows per query row.
        pool: Negative candidates per query row.

    Returns:
        The positives and pool restricted to scored pairs (same rows), and the rows that keep at least one scored
        positive and one scored negative.
    """
    scored_positives, scored_pool, kept = [], [], []
    dropped_pairs, no_positive, no_negative = 0, 0, 0
    for row in range(len(positives)):
        scored, candidates = teacher.row(row), pool.row(row)
        row_positives = positives.row(row)[np.isin(positives.row(row), scored)]
        row_pool = candidates[np.isin(candidates, scored)]
        scored_positives.append(row_positives), scored_pool.append(row_pool)
        dropped_pairs += len(candidates) - len(row_pool)
        if not len(row_positives):
            no_positive += 1
        elif not len(row_pool):
            no_negative += 1
        else:
            kept.append(row)
    if dropped_pairs:
        print(f"[data] teacher run {path} does not score {dropped_pairs:,} pool negatives; they are not sampled")
    if no_positive or no_negative:
        print(
            f"[data] teacher run {path} scores no positive of {no_positive:,} and no negative of {no_negative:,} "
            f"training queries (of {len(positives):,}); they are not trained on"
        )
    if not kept:
        raise ValueError(f"teacher run {path} scores no (positive, negative) pair of any training query")
    return DocRows.from_lists(scored_positives), DocRows.from_lists(scored_pool), kept
