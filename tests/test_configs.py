"""Every config file composes and instantiates; a stale key fails loudly."""

from pathlib import Path

import lightning as L
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import InstantiationException
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from retrieval_zoo.data.collections import Collection
from retrieval_zoo.encoding.backbones import Backbone
from retrieval_zoo.methods.method import RetrievalMethod
from retrieval_zoo.training.validation import RetrievalValidation
from tests.conftest import beir_layout
from tests.test_teachers import tiny_run

CONF = Path(__file__).resolve().parents[1] / "retrieval_zoo" / "conf"


def names(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def composed(*overrides: str, config: str = "train"):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name=config, overrides=list(overrides))


def msmarco_layout(root: Path, tiny_dir: Path) -> None:
    for name in ("collection.tsv", "queries.train.tsv", "qrels.train.tsv"):
        (root / name).write_text((tiny_dir / name).read_text())
    (root / "queries.dev.small.tsv").write_text((tiny_dir / "queries.dev.tsv").read_text())
    (root / "qrels.dev.small.tsv").write_text((tiny_dir / "qrels.dev.tsv").read_text())


@pytest.mark.parametrize("config", ["train", "evaluate"])
@pytest.mark.parametrize("method", names("method"))
def test_every_method_instantiates(method: str, config: str) -> None:
    cfg = composed(f"method={method}", "backbone=tiny_random", config=config)
    model = instantiate(cfg.method)
    assert isinstance(model, RetrievalMethod)


def test_stale_key_is_rejected() -> None:
    cfg = composed("method=dense", "backbone=tiny_random", "+method.no_such_option=1")
    with pytest.raises(InstantiationException, match="no_such_option"):
        instantiate(cfg.method)


@pytest.mark.parametrize("backbone", names("backbone"))
def test_every_backbone_instantiates_and_resolves_or_explains(backbone: str, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec = instantiate(composed(f"backbone={backbone}").backbone)
    assert isinstance(spec, Backbone) and spec.name == backbone
    try:
        source, local_only = spec.source()
    except FileNotFoundError as err:  # hub backbones offline, or an optional package not installed
        assert "backbone.path=DIR" in str(err) or "pip install" in str(err)
    else:
        assert (Path(source) / "config.json").exists() and local_only


@pytest.mark.parametrize("dataset", names("dataset"))
def test_every_dataset_instantiates(dataset: str, tiny_dir: Path, tmp_path: Path) -> None:
    overrides = [f"dataset={dataset}"]
    if dataset == "msmarco_passage":
        msmarco_layout(tmp_path, tiny_dir)
        overrides.append(f"dataset.root={tmp_path}")
    if dataset == "beir":
        beir_layout(tiny_dir, tmp_path)
        overrides.append(f"dataset.root={tmp_path}")
    if dataset == "irds":  # a dataset registered with ir_datasets' API on the tiny files
        from tests.test_irds import register_file

        register = register_file(tiny_dir, tmp_path, "zoo-configs")
        overrides += ["dataset.id=zoo-configs/train", "dataset.eval_id=zoo-configs/dev", f"dataset.register={register}"]
    collection = instantiate(composed(*overrides).dataset)
    assert isinstance(collection, Collection)
    assert collection.judged_queries(collection.eval_split)


@pytest.mark.parametrize("trainer", names("trainer"))
def test_every_trainer_instantiates(trainer: str, tmp_path: Path) -> None:
    overrides = [f"trainer={trainer}"]
    if trainer in ("gpu", "ddp"):  # composed as written; built on CPU here
        overrides += ["trainer.accelerator=cpu", "trainer.precision=32-true", "trainer.devices=2"]
    cfg = composed(*overrides)
    built = instantiate(cfg.trainer, _partial_=True)(default_root_dir=str(tmp_path), logger=False)
    assert isinstance(built, L.Trainer)


@pytest.mark.parametrize("logger", names("logger"))
def test_every_logger_instantiates(logger: str, tmp_path: Path) -> None:
    cfg = composed(f"logger={logger}")
    built = instantiate(cfg.logger, _partial_=True)(
        save_dir=str(tmp_path), run_name="t", group="g", tags=["x"], config={}
    )
    assert built is False if logger == "none" else built.save_dir is not None


def test_an_unknown_logger_fails_at_composition() -> None:
    from hydra.errors import MissingConfigException

    with pytest.raises(MissingConfigException, match="logger"):
        composed("logger=tensorboard")


@pytest.mark.parametrize(("group", "name"), [(g, n) for g in ("debug", "experiment") for n in names(g)])
def test_debug_and_experiment_files_compose_and_instantiate(group: str, name: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    overrides = [f"{group}={name}"]
    cfg = composed(*overrides)
    try:
        instantiate(cfg.backbone).source()
    except FileNotFoundError as err:  # a hub backbone offline: the recipe still builds, on a tiny stand-in
        assert "backbone.path=DIR" in str(err)
        overrides.append("backbone=tiny_random")
    if cfg.trainer.accelerator == "gpu":  # built on CPU here
        overrides += ["trainer.accelerator=cpu", "trainer.precision=32-true", "trainer.devices=1"]
    teacher = cfg.method.get("teacher")
    if teacher is not None and OmegaConf.is_missing(teacher, "run_dir"):
        overrides.append(f"method.teacher.run_dir={tiny_run(tmp_path)}")  # the run a user names on the command line
    cfg = composed(*overrides)
    assert isinstance(instantiate(cfg.method), RetrievalMethod)
    instantiate(cfg.trainer, _partial_=True)(default_root_dir=str(tmp_path), logger=False)
    assert OmegaConf.select(cfg, "data._target_").endswith("TriplesDataModule")
    assert isinstance(instantiate(cfg.validation, index=instantiate(cfg.index), bm25=None), RetrievalValidation)


def test_evaluate_config_composes() -> None:
    cfg = composed(config="evaluate")
    assert cfg.run_dir is None and instantiate(cfg.method).trainable is False


def test_unknown_key_on_the_command_line_is_rejected() -> None:
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException, match="no_such_key"):
        composed("data.no_such_key=1")


def test_experiment_files_override_the_main_config() -> None:
    cfg = composed("experiment=clear_constant_margin")
    assert cfg.eval.tune_queries == 500 and cfg.data.holdout_queries == 500
    assert cfg.method.lambda_train == 0.0 and cfg.method._target_.endswith("CLEAR")
    assert composed("experiment=dense_minilm").method.optim.lr == 2.0e-5
    assert composed("debug=fast_dev_run").trainer.fast_dev_run == 2


def swept_values(key: str, value: object) -> list[object]:
    """The values a sweeper tries for ``key``, read by Hydra's own override parser: every value of a list, choice or
    range (the basic sweeper's and Optuna's), and both ends of an Optuna interval."""
    (override,) = OverridesParser.create().parse_overrides([f"{key}={value}"])
    if override.is_discrete_sweep():
        return list(override.sweep_iterator())
    interval = override.value()
    return [interval.start, interval.end]


def sweep_jobs() -> list[tuple[str, list[str]]]:
    """(experiment, overrides) of the jobs ``python train.py -m experiment=<name>`` launches from its
    ``hydra.sweeper.params``: the Cartesian product of each key's values (an interval's two ends)."""
    jobs = []
    for name in names("experiment"):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose(config_name="train", overrides=[f"experiment={name}"], return_hydra_config=True)
        params = OmegaConf.select(cfg, "hydra.sweeper.params") or {}
        combos = [[]]
        for key, values in params.items():
            combos = [combo + [f"{key}={value}"] for combo in combos for value in swept_values(key, values)]
        jobs += [(name, combo) for combo in combos if combo]
    return jobs


@pytest.mark.parametrize(("experiment", "overrides"), sweep_jobs())
def test_every_sweep_job_composes_and_instantiates(experiment: str, overrides: list[str]) -> None:
    cfg = composed(f"experiment={experiment}", *overrides)
    model = instantiate(cfg.method)
    for override in overrides:  # each swept value reaches the model
        key, value = override.split("=")
        assert getattr(model, key.split(".")[-1]) == pytest.approx(float(value))


def test_the_csurf_sweep_spans_table_3s_lambdas() -> None:
    jobs = [o for e, o in sweep_jobs() if e == "csurf_flops_sweep"]
    assert len(jobs) == 4 and ["method.lambda_q=0.1", "method.lambda_d=0.001"] in jobs


def test_the_optuna_sweep_searches_clears_margin() -> None:
    jobs = [o for e, o in sweep_jobs() if e == "clear_optuna"]
    assert ["method.lambda_train=0.0", "method.xi=0.5"] in jobs and len(jobs) == 6


@pytest.mark.parametrize(
    ("override", "target"),
    [
        ("hydra/launcher=slurm", "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"),
        ("hydra/sweeper=optuna_tpe", "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"),
    ],
)
def test_cluster_launcher_and_optuna_sweeper_compose(override: str, target: str) -> None:
    """The optional plugins' configs (the ``sweeps`` extra) compose with train.py's, and their classes import."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[override, "experiment=clear_optuna"], return_hydra_config=True)
    group = override.split("=")[0].split("/")[1]
    assert cfg.hydra[group]._target_ == target
    get_class(target)
    assert cfg.objective == "MRR@10" and cfg.hydra.sweeper.direction == "maximize"
    if group == "launcher":
        assert (
            cfg.hydra.launcher.tasks_per_node == cfg.hydra.launcher.gpus_per_node and cfg.hydra.launcher.max_num_timeout
        )


DEFAULTS_HOMES = [
    f"{g}/{p.name}" for g in ("encoder", "optim", "index", "logger") for p in sorted((CONF / g).glob("*.yaml"))
]
METHOD_FILES = [f"method/{p.name}" for p in sorted((CONF / "method").glob("*.yaml"))]


def targeted_node(path: str) -> DictConfig:
    """The node of ``conf/<path>`` that names a ``_target_`` (a method file in the global package keeps it under
    ``method:``; train.yaml's DataModule under ``data:``, shared.yaml's BM25 under ``bm25:``)."""
    config = OmegaConf.load(CONF / path.split(":")[0])
    for key in path.split(":")[1:] or (["method"] if "method" in config and "_target_" not in config else []):
        config = config[key]
    return config


@pytest.mark.parametrize(
    "path", DEFAULTS_HOMES + METHOD_FILES + ["train.yaml:data", "train.yaml:validation", "shared.yaml:bm25"]
)
def test_a_file_that_restates_python_defaults_agrees_with_them(path: str) -> None:
    """One source per default: a key of these files that is also a keyword default of its target equals it.

    The group files (encoder, optim, index, logger), train.yaml's ``data`` and shared.yaml's ``bm25`` are where a
    user reads the defaults; a method file restates its constructor's (the paper's values, with their equations),
    while what it changes is the shared groups it composes (``encoder:``, ``optim:``, whose nested blocks are
    exempt). Interpolations such as ``${seed}`` wire one key to another and are exempt too. Files that extend
    another (``union_clear`` extends ``union``, ``delade`` extends ``delade_cls``) hold only what they change.
    """
    import inspect

    from hydra._internal.utils import _locate

    config = targeted_node(path)
    if "_target_" not in config:
        assert config.get("defaults"), f"{path}: neither a _target_ nor a config it extends"
        return
    parameters = inspect.signature(_locate(config._target_)).parameters  # a class or a function
    raw = OmegaConf.to_container(config, resolve=False)
    checked = 0
    for key, value in raw.items():
        if key == "_target_" or key not in parameters or parameters[key].default is inspect.Parameter.empty:
            continue
        if isinstance(value, dict) or (isinstance(value, str) and value.startswith("${")):
            continue
        default = parameters[key].default
        expected = list(default) if isinstance(default, tuple) else default
        assert value == expected, f"{path}: {key} is {value!r} in YAML but {default!r} in {config._target_}"
        checked += 1
    assert checked or len(config) <= 2, f"{path}: restates no default of {config._target_}"


FUSIONS = {"dhr_fusion": ("dlr_bm25",)}  # one module assembles the paper's fusions; the others inherit dlr_bm25


@pytest.mark.parametrize("group", ["index", "method"])
def test_each_config_is_named_like_the_module_it_selects(group: str) -> None:
    """A config that sets a ``_target_`` is named like its module (a variant may add a suffix: ``delade_cls``); one
    that does not inherits its target from a config of its group."""
    folder = Path(__file__).resolve().parents[1] / "retrieval_zoo" / "conf" / group
    for path in sorted(folder.glob("*.yaml")):
        raw = OmegaConf.load(path)
        target = raw.get("_target_") or OmegaConf.select(raw, "method._target_")
        if target is None:
            parents = [d for d in raw.get("defaults", []) if isinstance(d, str) and d != "_self_"]
            assert parents and all((folder / f"{d}.yaml").exists() for d in parents), path.name
            continue
        module = target.rsplit(".", 2)[-2]
        assert path.stem.startswith(module) or path.stem in FUSIONS.get(module, ()), (path.name, target)


def test_no_two_modules_share_a_file_name() -> None:
    package = Path(__file__).resolve().parents[1] / "retrieval_zoo"
    names = [p.name for p in package.rglob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []
