"""The run's config is held to its classes' signatures before any work: every shipped config passes, bad keys fail."""

import pytest

from retrieval_zoo.config_check import check_config
from tests.test_configs import composed, names, sweep_jobs


def checked(*overrides: str, config: str = "train") -> None:
    cfg = composed(*overrides, config=config)
    method = next((o.split("=")[1] for o in overrides if o.startswith("method=")), None)
    index = next((o.split("=")[1] for o in overrides if o.startswith("index=")), None)
    cfg.method_name, cfg.index_name = method or "dense", index or "default"  # Hydra's choices, unresolvable here
    check_config(cfg)


@pytest.mark.parametrize("config", ["train", "evaluate"])
@pytest.mark.parametrize("method", names("method"))
def test_every_method_file_passes(method: str, config: str) -> None:
    checked(f"method={method}", config=config)


@pytest.mark.parametrize(("group", "name"), [(g, n) for g in ("debug", "experiment") for n in names(g)])
def test_every_debug_and_experiment_file_passes(group: str, name: str) -> None:
    checked(f"{group}={name}")


@pytest.mark.parametrize(("experiment", "overrides"), sweep_jobs())
def test_every_sweep_job_passes(experiment: str, overrides: list[str]) -> None:
    checked(f"experiment={experiment}", *overrides)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data.batch_size=abc"], "data.batch_size='abc': expected int"),
        (["data.batch_size=0"], "data.batch_size=0: expected int ≥ 1"),
        (["data.num_workers=-1"], "data.num_workers=-1: expected int ≥ 0 or 'auto'"),
        (["data.num_workers=many"], "data.num_workers='many': expected int ≥ 0 or 'auto'"),
        (["progress.style=fancy"], "progress.style='fancy': expected 'auto' or 'bar' or 'lines'"),
        (["method=csurf", "method.similarity=euclid"], "method.similarity='euclid': expected 'cosine' or 'dot'"),
        (["index=gip", "index.slicing=diagonal"], "index.slicing='diagonal': expected 'contiguous' or 'stride'"),
        (["validation.corpus=half"], "validation.corpus='half': expected 'full' or 'pool'"),
        (["method.encoder.pooling=max"], "method.encoder.pooling='max': expected 'mean' or 'cls'"),
        (["index=gip", "index.tune_measure=P@5"], "index.tune_measure='P@5': expected 'MRR@10' or 'R@100'"),
        (["data.val_queries=1.5"], "data.val_queries=1.5: expected int ≥ 0 or null"),
        (["eval.k=0"], "eval.k=0: expected an integer ≥ 1"),
        (["eval.tune_queries=-1"], "eval.tune_queries=-1: expected an integer ≥ 0"),
        (["eval.k=ten"], "eval.k='ten': expected an integer ≥ 1"),
        (["+method.no_such_option=1"], "method.no_such_option: retrieval_zoo.methods.dense.DenseBiEncoder takes no"),
        (["method.encoder.doc_max_length=long"], "method.encoder.doc_max_length='long': expected int"),
        (["index=faiss", "index.factory=5"], "index.factory=5: expected str"),
        (["bm25.k1=high"], "bm25.k1='high': expected float"),
        (["data.random_negatives=yes"], "data.random_negatives='yes': expected bool"),
    ],
)
def test_a_bad_key_or_value_names_itself(overrides: list[str], message: str) -> None:
    with pytest.raises(ValueError) as err:
        checked(*overrides)
    assert message in str(err.value)


@pytest.mark.slow
def test_train_py_fails_on_a_bad_value_before_it_builds_anything(tmp_path, monkeypatch) -> None:
    from tests.test_end_to_end import run_app

    cache = tmp_path / "cache"
    monkeypatch.setenv("RETRIEVAL_ZOO_CACHE", str(cache))
    failed = run_app("train.py", "data.batch_size=0", f"hydra.run.dir={tmp_path / 'run'}", ok=False)
    assert "data.batch_size=0: expected int ≥ 1" in failed
    assert failed.count("Traceback") <= 1  # Hydra reports the error; train.py does not print it a second time
    assert "data.batch_size=0: expected int ≥ 1" in (tmp_path / "run" / "train.log").read_text()  # the log holds it
    assert not cache.exists()  # no BM25 index, no encoded shard: nothing was built


def test_each_fixed_choice_is_one_literal_type_that_its_code_reads() -> None:
    """The Literal types config_check enforces name exactly what the code dispatches on."""
    import typing

    from retrieval_zoo.encoding.encoder import POOLING, Pooling
    from retrieval_zoo.evaluation.metrics import MEASURES, Measure

    assert set(typing.get_args(Pooling)) == set(POOLING)
    assert set(typing.get_args(Measure)) == set(MEASURES)
