"""Lookup tables behind the optional batch fields, computed once before training.

BM25 scores of pool documents come from the run itself; every other pair a group can contain (positives outside
the top N, random negatives) is enumerated over all epochs and scored through pyserini up front, so the training
step never waits on Java.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from retrieval_zoo.data.formats import Run
from retrieval_zoo.lexical.bm25 import BM25
from retrieval_zoo.training.negatives import GroupSampling


class PairTable:
    """(qid, docid) → score, turned into (B, G) tensors for a batch.

    Args:
        name: What the scores are (named in errors).
        scores: qid → {docid: score}.
    """

    def __init__(self, name: str, scores: Mapping[str, Mapping[str, float]]) -> None:
        self.name, self.scores = name, scores

    def matrix(self, qids: list[str], docids: list[list[str]]) -> torch.Tensor:
        """Scores of each query's group as a float tensor of shape (B, G)."""
        rows = []
        for qid, group in zip(qids, docids, strict=True):
            known = self.scores.get(qid, {})
            missing = [d for d in group if d not in known]
            if missing:
                raise KeyError(f"{self.name}: no score for query {qid!r} and documents {missing[:3]}")
            rows.append([known[d] for d in group])
        return torch.tensor(rows, dtype=torch.float32)


def sampled_pairs(sampling: GroupSampling, qids: list[str], epochs: int) -> dict[str, set[str]]:
    """Every (qid, docid) any group can hold over ``epochs`` epochs, plus all positives."""
    pairs: dict[str, set[str]] = {q: set(sampling.positives[q]) for q in qids}
    for epoch in range(epochs):
        for qid in qids:
            pairs[qid].update(sampling.group(qid, epoch))
    return pairs


def bm25_pair_table(bm25: BM25, queries: dict[str, str], pairs: dict[str, set[str]], run: Run) -> PairTable:
    """BM25 scores of ``pairs``: from the BM25 run when it holds the pair, else computed by pyserini."""
    scores = {q: {d: run[q][d] for d in docs if d in run.get(q, {})} for q, docs in pairs.items()}
    todo = [(q, d) for q, docs in pairs.items() for d in sorted(docs) if d not in scores[q]]
    for (qid, docid), value in zip(todo, bm25.pair_scores(queries, todo), strict=True):
        scores[qid][docid] = float(value)
    return PairTable("bm25_scores", scores)


def precompute_fields(
    needs: frozenset[str],
    bm25: BM25,
    queries: dict[str, str],
    sampling: GroupSampling,
    qids: list[str],
    epochs: int,
    bm25_run: Run | None,
    teacher_run: Run | None,
) -> dict:
    """The tables :meth:`TriplesDataModule.collate` reads for each needed field.

    ``bm25_run`` is the BM25 run the pool came from (its scores are reused), or None when the pool is another
    model's run, in which case every pair is scored by pyserini.
    """
    tables: dict = {}
    if not needs - {"texts"}:  # texts come from the collection, nothing to precompute
        return tables
    pairs = sampled_pairs(sampling, qids, epochs)
    if "bm25_scores" in needs:
        tables["bm25_scores"] = bm25_pair_table(bm25, queries, pairs, bm25_run or {})
    if "teacher_scores" in needs:
        tables["teacher_scores"] = PairTable("teacher_scores", teacher_run or {})
    if "bm25_vectors" in needs:
        docids = sorted({d for docs in pairs.values() for d in docs})
        saturation = bm25.document_term_weights(docids, saturation_only=True)
        tables["doc_weights"] = dict(zip(docids, saturation, strict=True))
        tables["query_idf"] = dict(zip(qids, bm25.query_idf([queries[q] for q in qids]), strict=True))
    return tables


def restrict_to_teacher(
    path: str, teacher: Run, positives: dict[str, list[str]], pool: dict[str, list[str]]
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Keep only the pairs a teacher run scores, so that every sampled group has teacher scores.

    A cross-encoder's run, or another model's, scores only the candidates it was given: positives outside them
    and pool documents it never saw have no teacher score. Such pairs are not sampled, and a query left without
    a scored positive or a scored negative is not trained on. Both counts are printed, naming the run.

    Args:
        path: The teacher run's file (named in the messages).
        teacher: qid → {docid: teacher score}.
        positives: qid → judged relevant docids of the training queries.
        pool: qid → negative candidates.

    Returns:
        The positives and pool of the queries that keep at least one scored positive and one scored negative.
    """
    kept_positives, kept_pool, dropped_pairs, no_positive, no_negative = {}, {}, 0, 0, 0
    for qid, docs in positives.items():
        scored = teacher.get(qid, {})
        scored_positives = [d for d in docs if d in scored]
        scored_pool = [d for d in pool.get(qid, []) if d in scored]
        dropped_pairs += len(pool.get(qid, [])) - len(scored_pool)
        if not scored_positives:
            no_positive += 1
        elif not scored_pool:
            no_negative += 1
        else:
            kept_positives[qid], kept_pool[qid] = scored_positives, scored_pool
    if dropped_pairs:
        print(f"[data] teacher run {path} does not score {dropped_pairs:,} pool negatives; they are not sampled")
    if no_positive or no_negative:
        print(
            f"[data] teacher run {path} scores no positive of {no_positive:,} and no negative of {no_negative:,} "
            f"training queries (of {len(positives):,}); they are not trained on"
        )
    if not kept_positives:
        raise ValueError(f"teacher run {path} scores no (positive, negative) pair of any training query")
    return kept_positives, kept_pool
