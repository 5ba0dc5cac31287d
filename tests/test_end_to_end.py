"""train.py then evaluate.py, as a user runs them, on the tiny slice and a tiny random backbone."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from retrieval_zoo.data.formats import read_qrels, read_run
from retrieval_zoo.evaluation.metrics import evaluate, judged
from tests.conftest import beir_layout

REPO = Path(__file__).resolve().parents[1]


def run_app(script: str, *overrides: str, ok: bool = True) -> str:
    """Run an app as a user does; its stdout, or with ``ok=False`` (it must fail) its stdout and stderr."""
    env = {**os.environ, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, script, *overrides], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    if not ok:
        assert done.returncode != 0, done.stdout[-3000:]
        return done.stdout + done.stderr
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def tiny_dataset(tiny_dir: Path) -> list[str]:
    return [
        "dataset=msmarco_passage", f"dataset.root={tiny_dir}", "dataset.name=tiny",
        "dataset.queries.dev=queries.dev.tsv", "dataset.qrels.dev=qrels.dev.tsv",
    ]  # fmt: skip


@pytest.mark.slow
def test_train_then_evaluate(tiny_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "train"
    stdout = run_app(
        "train.py", *tiny_dataset(tiny_dir), "backbone=tiny_random", "logger=wandb", "logger.log_artifacts=true",
        "trainer=cpu", "trainer.max_epochs=2", "data.batch_size=8", "data.val_queries=10", "eval.k=100",
        f"hydra.run.dir={out}",
    )  # fmt: skip
    assert "| BM25 |" in stdout and "| dense |" in stdout
    log = (out / "train.log").read_text()  # what the run printed, in its folder
    assert "| dense |" in log and "[train] epoch 2/2: batch" in log and "\r" not in log
    assert "wandb: Tracking run" in log and "anonymous setting" not in log and "LeafSpec" not in log
    results = json.loads((out / "results.json").read_text())
    assert set(results["metrics"]) == {"BM25", "dense"} and results["queries"] == 30
    assert 0.0 <= results["metrics"]["dense"]["MRR@10"] <= 1.0
    assert (out / "run.dev.trec").exists() and (out / "run.dev.bm25.trec").exists()
    assert list((out / "checkpoints").glob("epoch*.ckpt"))
    offline_runs = list((out / "wandb").glob("offline-run-*"))
    assert offline_runs, "wandb should have written an offline run"
    records = next(offline_runs[0].glob("run-*.wandb")).read_bytes()  # the records `wandb sync` uploads
    for key in (
        b"eval/dense/MRR@10",
        b"eval/BM25/MRR@10",
        b"train/loss/nll",
        b"backbone:tiny_random",
        b"index:faiss",
        b"run-files",
    ):
        assert key in records, key  # summary metrics, loss components, tags, the artifact of run files
    (table,) = (offline_runs[0] / "files" / "media" / "table" / "eval").glob("moved_queries_*.table.json")
    moved = json.loads(table.read_text())
    assert moved["columns"][:3] == ["direction", "qid", "query"] and moved["data"] == [
        [r["direction"], r["qid"], r["query"], r["baseline_rank"], r["system_rank"], r["shift"]]
        for r in results["moved_queries"]
    ]
    config = (out / "run_config.yaml").read_text().splitlines()
    identity = [
        "method_name: dense",
        "index_name: faiss",
        "backbone_name: tiny_random",
        "dataset_name: msmarco_passage",
    ]
    assert config[:4] == identity

    evaluated = tmp_path / "evaluate"
    stdout = run_app("evaluate.py", f"run_dir={out}", "eval.k=100", f"hydra.run.dir={evaluated}")
    again = json.loads((evaluated / "results.json").read_text())
    assert again["metrics"]["dense"] == pytest.approx(results["metrics"]["dense"], abs=1e-6)

    # search.py: on the judged split, evaluate.py's runs byte for byte; the same texts under ids nobody judged (a
    # TSV), the same rankings
    searched, saved = tmp_path / "search", tmp_path / "saved-index"
    common = [f"run_dir={out}", "queries=dev", "eval.k=100", f"index_dir={saved}"]
    run_app("search.py", *common, f"hydra.run.dir={searched}")
    for name in ("run.dev.trec", "run.dev.bm25.trec"):
        assert (searched / name).read_bytes() == (evaluated / name).read_bytes(), name
    # again from the saved index: nothing encoded or built, the same run
    stdout = run_app("search.py", *common, f"hydra.run.dir={tmp_path / 'search_saved'}")
    assert "[index] loading the saved index" in stdout and "[encode]" not in stdout
    assert (tmp_path / "search_saved" / "run.dev.trec").read_bytes() == (evaluated / "run.dev.trec").read_bytes()
    dev = [line.split("\t", 1) for line in (tiny_dir / "queries.dev.tsv").read_text().splitlines()]
    topics = tmp_path / "topics.tsv"
    topics.write_text("".join(f"new-{qid}\t{text}\n" for qid, text in dev), encoding="utf-8")
    run_app("search.py", f"run_dir={out}", f"queries={topics}", "eval.k=100", f"hydra.run.dir={searched}")
    unjudged, judged = read_run(searched / "run.topics.trec"), read_run(evaluated / "run.dev.trec")
    assert unjudged == {f"new-{qid}": judged[qid] for qid, _ in dev}
    found = json.loads((searched / "search.json").read_text())
    assert found["queries"]["count"] == 30 and found["runs"]["dense"] == "run.topics.trec"
    assert f"30 queries from {topics}, depth 100" in (searched / "search.log").read_text()

    # The same checkpoint on another collection format: the tiny dev split as a BEIR directory (test split).
    beir_dir = beir_layout(tiny_dir, tmp_path / "beir")
    on_beir = tmp_path / "evaluate_beir"
    run_app("evaluate.py", f"run_dir={out}", "dataset=beir", f"dataset.root={beir_dir}", f"hydra.run.dir={on_beir}")
    beir_results = json.loads((on_beir / "results.json").read_text())
    assert beir_results["split"] == "test" and beir_results["queries"] == 30
    assert beir_results["metrics"]["BM25"]["MRR@10"] == pytest.approx(results["metrics"]["BM25"]["MRR@10"], abs=1e-3)


@pytest.mark.slow
def test_bm25_method_needs_no_training(tiny_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "bm25"
    stdout = run_app("train.py", *tiny_dataset(tiny_dir), "method=bm25", "logger=none", "eval.k=100",
                     f"hydra.run.dir={out}")  # fmt: skip
    results = json.loads((out / "results.json").read_text())
    assert list(results["metrics"]) == ["BM25"] and results["system"] == "BM25"  # searched once, one row
    assert stdout.count("| BM25 |") == 1 and "| bm25 |" not in stdout
    assert results["metrics"]["BM25"]["R@100"] > 0.5
    assert (out / "run.dev.trec").read_text().split("\n")[0].split()[:5] == (
        (out / "run.dev.bm25.trec").read_text().split("\n")[0].split()[:5]
    )  # both run files, the same ranking
    assert "LeafSpec" not in (out / "train.log").read_text()


@pytest.mark.slow
def test_multirun_gives_each_job_its_own_directory(tiny_dir: Path, tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    run_app(
        "train.py", "-m", *tiny_dataset(tiny_dir), "method=bm25", "logger=none", "eval.k=100", "bm25.k1=0.6,1.2",
        f"hydra.sweep.dir={sweep}",
    )  # fmt: skip
    results = sorted(sweep.glob("*/results.json"))
    assert len(results) == 2
    metrics = [json.loads(p.read_text())["metrics"]["BM25"] for p in results]
    assert metrics[0] != metrics[1]  # different k1, different scores


@pytest.mark.slow
def test_ddp_on_two_cpu_processes(tiny_dir: Path, tmp_path: Path) -> None:
    out, cache = tmp_path / "ddp", tmp_path / "cache"
    ddp = ["trainer=cpu", "trainer.devices=2", "trainer.strategy=ddp"]
    stdout = run_app(
        "train.py", *tiny_dataset(tiny_dir), "backbone=tiny_random", *ddp, "data.batch_size=8", "data.val_queries=10",
        "eval.k=100", "logger=csv", "encode.shard_size=100", f"encode.cache_dir={cache}", f"hydra.run.dir={out}",
    )  # fmt: skip
    assert stdout.count("| BM25 |") == 1  # rank 0 alone evaluates
    steps = [line.split(",")[1] for line in (out / "csv" / "metrics.csv").read_text().splitlines()[1:]]
    assert max(map(int, steps)) == 2 * 120 // 8 - 1  # 2 epochs of global batches of 8 over 120 queries
    # The corpus was encoded by Lightning predict on both ranks: 400 documents in 4 shards, 2 written by each.
    assert shard_writers(cache) == [[0, 1, 0, 1]]
    # Validation split its queries (5 a rank) and its encoding over the ranks, and removed its shards; the logged
    # metrics gather both ranks' queries: the best epoch's equal trec_eval's on the evaluation run of its checkpoint.
    assert not list((out / "validation-shards").iterdir())
    logged = best_validation(out / "csv" / "metrics.csv")
    dev = judged(read_qrels(tiny_dir / "qrels.dev.tsv"))
    val_qrels = {q: dev[q] for q in sorted(dev)[:10]}  # data.val_queries=10
    run = read_run(out / "run.dev.trec")
    measures = {"MRR@10": "recip_rank@10", "R@100": "recall_100"}
    assert logged == pytest.approx(evaluate(run, val_qrels, measures), abs=1e-6)
    one_rank = evaluate(run, {q: val_qrels[q] for q in sorted(val_qrels)[::2]}, measures)  # what rank 0 alone saw
    assert logged != pytest.approx(one_rank, abs=1e-6)
    # evaluate.py encodes on 2 processes too, in shards of 50 (a new cache entry): 8 faiss shards whose merged top k
    # is the ranking of the training run's 4, so the metrics are the same.
    run_app("evaluate.py", f"run_dir={out}", *ddp, "encode.shard_size=50", f"encode.cache_dir={cache}",
            f"hydra.run.dir={tmp_path / 'eval'}")  # fmt: skip
    assert sorted(shard_writers(cache), key=len) == [[0, 1] * 2, [0, 1] * 4]
    trained, evaluated = (json.loads((d / "results.json").read_text())["metrics"] for d in (out, tmp_path / "eval"))
    assert evaluated.keys() == trained.keys()
    for system, measures in trained.items():
        assert evaluated[system] == pytest.approx(measures, abs=1e-6), system


@pytest.mark.slow
def test_csurf_lists_split_over_two_processes_give_the_one_process_run(tiny_dir: Path, tmp_path: Path) -> None:
    # evaluate.py under DDP: each rank holds the inverted lists of its own shards (pruned at α = 0.3 of the whole
    # corpus, fp16 vectors), rank 0 searches, the other serves, and their top k merge to one process's run. (Original
    # CSFs only: a random MLM head expands every text to most of the vocabulary.)
    common = [*tiny_dataset(tiny_dir), "method=csurf", "method.bags=original", "index=csf", "backbone=tiny_random",
              "eval.k=50", "index.prune_fraction=0.3", "index.vector_dtype=float16", "encode.shard_size=60",
              f"encode.cache_dir={tmp_path / 'cache'}"]  # fmt: skip
    run_app("evaluate.py", *common, "trainer=cpu", f"hydra.run.dir={tmp_path / 'one'}")
    stdout = run_app("evaluate.py", *common, "trainer=cpu", "trainer.devices=2", "trainer.strategy=ddp",
                     f"hydra.run.dir={tmp_path / 'two'}")  # fmt: skip
    assert stdout.count("| BM25 |") == 1
    one, two = ((tmp_path / d / "run.dev.trec").read_text() for d in ("one", "two"))
    assert one == two and len(one.splitlines()) > 100
    results = [json.loads((tmp_path / d / "results.json").read_text()) for d in ("one", "two")]
    assert results[0]["index_bytes"] == results[1]["index_bytes"]  # the sum of both ranks' lists
    for name in ("csf_per_doc", "e_ops", "pairs_per_query", "postings_pruned_share"):
        assert results[1]["efficiency"][name] == pytest.approx(results[0]["efficiency"][name]), name


@pytest.mark.slow
def test_validation_over_a_candidate_pool(tiny_dir: Path, tmp_path: Path) -> None:
    base = [
        "train.py", *tiny_dataset(tiny_dir), "backbone=tiny_random", "trainer=cpu", "trainer.max_epochs=1",
        "data.batch_size=8", "data.val_queries=10", "eval.k=100", "logger=csv",
    ]  # fmt: skip
    run_app(*base, f"hydra.run.dir={tmp_path / 'full'}")
    stdout = run_app(*base, "validation.corpus=pool", "validation.pool_depth=20", f"hydra.run.dir={tmp_path / 'pool'}")
    pooled = int(stdout.split("[validation] pool of ")[1].split()[0])
    assert 20 <= pooled < 400  # BM25's top 20 of 10 queries and their judged documents, of the 400
    # The same seeded weights: each pooled document scores as in the whole corpus, with fewer documents above it.
    full, pool = (best_validation(tmp_path / run / "csv" / "metrics.csv") for run in ("full", "pool"))
    assert all(pool[name] >= full[name] for name in full) and pool != full
    # A fusing index's BM25 run must stay inside the pool: refused when the callback is built, before training.
    failed = run_app(*base, "method=clear", "validation.corpus=pool", "validation.pool_depth=20",
                     f"hydra.run.dir={tmp_path / 'clear'}", ok=False)  # fmt: skip
    assert "validation.pool_depth=20 is below the index's BM25 depth" in failed


def best_validation(metrics_csv: Path) -> dict[str, float]:
    """val/MRR@10 and val/R@100 of the first epoch with the highest val/MRR@10 (the checkpoint kept)."""
    rows = [row for row in csv.DictReader(metrics_csv.open()) if row.get("val/MRR@10")]
    best = max(rows, key=lambda row: float(row["val/MRR@10"]))  # the first of equals, as ModelCheckpoint keeps it
    return {"MRR@10": float(best["val/MRR@10"]), "R@100": float(best["val/R@100"])}


def shard_writers(cache: Path) -> list[list[int]]:
    """For each encoded corpus under ``cache``, the rank that wrote each shard, in shard order."""
    from retrieval_zoo.index.shards import CorpusShards

    writers = []
    for folder in sorted((cache / "encoded").iterdir()):
        manifest = json.loads((folder / "manifest.json").read_text())
        shards = CorpusShards([str(i) for i in range(manifest["documents"])], manifest["shard_size"])
        shards.folder = folder
        writers.append([shards.writer_rank(s) for s in range(len(shards))])
    return writers


@pytest.mark.slow
def test_fast_dev_run_still_encodes_every_shard(tiny_dir: Path, tmp_path: Path) -> None:
    """debug=fast_dev_run trains two batches, but the index needs the whole corpus: 4 shards, not 2."""
    out = tmp_path / "smoke"
    stdout = run_app(
        "train.py", "debug=fast_dev_run", *tiny_dataset(tiny_dir), "backbone=tiny_random", "encode.shard_size=100",
        "eval.k=100", f"hydra.run.dir={out}",
    )  # fmt: skip
    assert "| dense |" in stdout and json.loads((out / "results.json").read_text())["queries"] == 30
