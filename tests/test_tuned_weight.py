"""evaluate.py run_dir=... evaluates with the weight the run tuned, tunes again only when asked, and never zero-shot."""

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from retrieval_zoo.data.collections import Collection
from retrieval_zoo.evaluation.config import reuse_tuned_weight
from retrieval_zoo.evaluation.stages import evaluate_method


def trained_run(tmp_path: Path, tuning: dict | None) -> tuple[Path, object]:
    run_dir = tmp_path / "run"
    run_dir.mkdir(parents=True)
    if tuning is not None:
        (run_dir / "results.json").write_text(json.dumps({"tuning": tuning}))
    cfg = OmegaConf.create({"index_name": "union_clear", "index": {"weight": 0.5}, "eval": {"tune_queries": 500}})
    return run_dir, cfg


TUNED = {"parameter": "lexical_weight", "value": 1.1, "queries": 500, "curve": {}}


@pytest.mark.parametrize(
    ("overrides", "weight", "tune_queries"),
    [
        ([], 1.1, 0),  # the run's λ, not the config's 0.5, and no second tuning
        (["eval.k=100"], 1.1, 0),
        (["eval.tune_queries=0"], 1.1, 0),  # no tuning asked: the run's λ, not the config's default
        (["eval.tune_queries=200"], 0.5, 200),  # asked to tune again
        (["index.weight_grid=[0.5,1.0]"], 0.5, 500),
        (["index.weight=2.0"], 0.5, 500),  # the command line's weight (applied by apply_overrides)
        (["index.slices=256"], 0.5, 500),  # other index settings: tuned again, as the run's config says
        (["index.slices=256", "eval.tune_queries=0"], 1.1, 0),
        (["index.union_scores=floor"], 0.5, 500),
        (["method=roc", "method.lexical_scale=lucene"], 0.5, 500),  # a method setting can move the best weight too
        (["method=clear"], 1.1, 0),  # naming the run's method changes nothing
        (["dataset=beir", "dataset.root=/data/scifact"], 1.1, 0),  # zero-shot: the run's λ
    ],
)
def test_the_run_s_tuned_weight_is_reused_unless_asked(tmp_path, overrides, weight, tune_queries) -> None:
    run_dir, cfg = trained_run(tmp_path, TUNED)
    for override in overrides:  # what apply_overrides has done to the run's config
        if override.startswith("eval.tune_queries="):
            cfg.eval.tune_queries = int(override.split("=")[1])
    reuse_tuned_weight(cfg, run_dir, "union_clear", overrides)
    assert cfg.index.weight == weight and cfg.eval.tune_queries == tune_queries


def test_zero_shot_without_a_tuned_weight_tunes_nothing_and_another_index_keeps_its_own(tmp_path) -> None:
    run_dir, cfg = trained_run(tmp_path, None)
    reuse_tuned_weight(cfg, run_dir, "union_clear", ["dataset=beir"])
    assert cfg.index.weight == 0.5 and cfg.eval.tune_queries == 0
    run_dir, cfg = trained_run(tmp_path / "other", TUNED)
    cfg.index_name = "union"  # index=union on the command line: the run's λ belongs to union_clear
    reuse_tuned_weight(cfg, run_dir, "union_clear", ["index=union"])
    assert cfg.index.weight == 0.5


def test_tuning_on_a_collection_without_training_queries_says_so(tiny, tiny_bm25, tmp_path) -> None:
    from retrieval_zoo.index.vectors.union import Union
    from retrieval_zoo.methods.bm25 import BM25Method

    test_only = Collection("beir-like", tiny.corpus, {"test": tiny.queries["dev"]}, {"test": tiny.qrels["dev"]})
    with pytest.raises(ValueError, match="eval.tune_queries=10: beir-like has no judged 'train' queries"):
        evaluate_method(BM25Method(), Union(), test_only, tiny_bm25, "test", 10, tmp_path, "x", tune_queries=10)


def test_tuning_holds_out_a_share_of_the_training_queries_capped_and_refuses_to_empty_training(tiny) -> None:
    from dataclasses import replace

    from retrieval_zoo.data.collections import MIN_TRAINING_QUERIES

    judged = sorted(tiny.judged_queries(tiny.train_split))  # 120
    assert tiny.tuning_count(0) == 0 and tiny.tuning_count(5) == 5  # under the share: the cap
    assert tiny.tuning_count(500) == len(judged) // 10  # 10% of them, not 500 (which would leave none to train on)
    assert tiny.tuning_qids(500) == judged[-(len(judged) // 10) :]
    few = dict(list(tiny.qrels["train"].items())[:MIN_TRAINING_QUERIES])
    small = replace(tiny, qrels={**tiny.qrels, "train": few})
    with pytest.raises(ValueError, match=rf"has {MIN_TRAINING_QUERIES} judged 'train' queries; holding out 5 \(10%\)"):
        small.tuning_count(500)


def test_a_run_of_another_method_than_the_command_line_names_is_refused_naming_both() -> None:
    from retrieval_zoo.evaluation.config import apply_overrides

    trained = OmegaConf.create({"method_name": "clear", "index_name": "union", "eval": {"k": 10}})
    given = OmegaConf.create({"method_name": "roc", "trainer": {}, "encode": {}, "eval": {"k": 10}})
    with pytest.raises(ValueError, match="method=roc given, but the run_dir trained method=clear"):
        apply_overrides(trained, given, ["method=roc"])
