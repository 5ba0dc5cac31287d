"""Validation metrics through torchmetrics equal trec_eval's (pytrec_eval), in one process and on 2 gloo ranks."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from retrieval_zoo.evaluation.metrics import evaluate
from retrieval_zoo.training.validation_metrics import RankingMetrics, ranking_items
from tests.test_ddp_losses import free_port


def random_runs(seed: int = 0, queries: int = 40) -> tuple[dict, dict]:
    """Runs of 0 to 120 documents with many tied scores, and graded qrels with relevant documents in and out."""
    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(300)]
    run, qrels = {}, {}
    for q in range(queries):
        qid = f"q{q:02d}"
        run[qid] = {d: float(rng.randint(0, 6)) for d in rng.sample(docs, rng.choice([0, 3, 50, 120]))}
        qrels[qid] = {d: rng.choice([0, 1, 2]) for d in rng.sample(docs, 8)}
        qrels[qid][rng.choice(list(run[qid]) or docs)] = 1
    return run, qrels


def trec_eval(run: dict, qrels: dict, depth: int) -> dict[str, float]:
    """What retrieval_zoo.evaluation.metrics reports for a run searched to ``depth``."""
    return evaluate(run, qrels, {"MRR@10": "recip_rank@10", f"R@{depth}": f"recall_{depth}"})


def test_ranking_items_by_hand() -> None:
    # retrieved b, a, c (a and b tie: docid descending puts b first); relevant a (rank 2) and z (not retrieved)
    preds, target = ranking_items({"a": 1.0, "b": 1.0, "c": 0.5}, {"a", "z"}, depth=2)
    assert preds.tolist() == [11.0, 10.0, 9.0] + [1.0] * 7 + [0.0]  # 3 ranked, 7 fillers to 10, z not retrieved
    assert target.tolist() == [False, True, False] + [False] * 7 + [True]
    metrics = RankingMetrics(depth=2)
    metrics.update({"q": {"a": 1.0, "b": 1.0, "c": 0.5}}, {"q": {"a": 1, "z": 2, "c": 0}}, {"q": 0})
    assert metrics.compute() == pytest.approx({"MRR@10": 1 / 2, "R@2": 1 / 2})  # a at rank 2; 1 of 2 relevant


def test_empty_run_scores_zero_and_unjudged_query_is_an_error() -> None:
    metrics = RankingMetrics(depth=5)
    metrics.update({}, {"q": {"a": 1}}, {"q": 0})
    assert metrics.compute() == {"MRR@10": 0.0, "R@5": 0.0}
    with pytest.raises(ValueError, match="'q' has no relevant document"):
        metrics.update({}, {"q": {"a": 0}}, {"q": 0})


@pytest.mark.parametrize("depth", [3, 10, 100])
def test_equal_to_trec_eval_with_ties_and_short_runs(depth: int) -> None:
    run, qrels = random_runs()
    searched = {qid: dict(sorted(docs.items())[: depth + 5]) for qid, docs in run.items()}
    metrics = RankingMetrics(depth)
    for start in range(0, 40, 16):  # in batches, as validation feeds it
        batch = dict(list(qrels.items())[start : start + 16])
        metrics.update(searched, batch, {q: i for i, q in enumerate(qrels)})
    assert metrics.compute() == pytest.approx(trec_eval(searched, qrels, depth), abs=1e-7)


def rank_main(rank: int, port: int, out: str) -> None:
    """One of 2 ranks: every second query, then the synced means."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    run, qrels = random_runs(queries=41)  # an odd number: the ranks hold different counts
    share = {q: qrels[q] for q in list(qrels)[rank::2]}
    metrics = RankingMetrics(depth=20)
    metrics.update(run, share, {q: i for i, q in enumerate(qrels)})
    values = metrics.compute()
    torch.save(values, f"{out}.{rank}")
    dist.destroy_process_group()


@pytest.mark.slow
def test_two_gloo_ranks_equal_one_process_and_trec_eval(tmp_path: Path) -> None:
    out = str(tmp_path / "metrics")
    mp.spawn(rank_main, args=(free_port(), out), nprocs=2, join=True)
    run, qrels = random_runs(queries=41)
    single = RankingMetrics(depth=20)
    single.update(run, qrels, {q: i for i, q in enumerate(qrels)})
    one_process = single.compute()
    for rank in (0, 1):
        assert torch.load(f"{out}.{rank}") == pytest.approx(one_process, abs=1e-7)
    assert one_process == pytest.approx(trec_eval(run, qrels, 20), abs=1e-7)
