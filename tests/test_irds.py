"""``dataset=irds``: a small dataset registered with ir_datasets' own API on files made here, read offline."""

import json
from pathlib import Path

import pytest

from retrieval_zoo.data.formats import FormatError, read_qrels
from retrieval_zoo.data.irds import irds
from retrieval_zoo.data.query_sets import read_query_set
from tests.conftest import load_tiny

REGISTER = """
from pathlib import Path

import ir_datasets
from ir_datasets.datasets.base import Dataset
from ir_datasets.formats import TrecQrels, TrecScoredDocs, TsvDocs, TsvQueries
from ir_datasets.util import LocalDownload

root, name = Path({root!r}), {name!r}
if name not in ir_datasets.registry:
    docs = TsvDocs(LocalDownload(root / "collection.tsv"))
    relevance = {{0: "not relevant", 1: "relevant"}}

    def split(part, scored=None):
        scoreddocs = [TrecScoredDocs(LocalDownload(root / scored))] if scored else []
        return Dataset(docs, TsvQueries(LocalDownload(root / f"queries.{{part}}.tsv")),
                       TrecQrels(LocalDownload(root / f"{qrels}.{{part}}.tsv"), relevance), *scoreddocs)

    ir_datasets.registry.register(name, Dataset(docs))
    ir_datasets.registry.register(f"{{name}}/train", split("train", "scored.train.txt"))
    ir_datasets.registry.register(f"{{name}}/dev", split("dev"))
"""


def register_file(tiny_dir: Path, folder: Path, name: str, qrels: str = "qrels") -> Path:
    """A Python file that registers ``name``, ``name``/train and ``name``/dev over the tiny collection's files."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"register_{name.replace('-', '_')}.py"
    path.write_text(REGISTER.format(root=str(tiny_dir), name=name, qrels=qrels))
    return path


@pytest.fixture(scope="module")
def scored(tiny_dir: Path) -> None:
    """Scored documents for two training queries, listed out of order (as some datasets ship them)."""
    qids = list(read_qrels(tiny_dir / "qrels.train.tsv"))[:2]
    docs = [line.split("\t")[0] for line in (tiny_dir / "collection.tsv").read_text().splitlines()[:3]]
    lines = [f"{qids[0]} Q0 {docs[0]} 2 1.5 bm25", f"{qids[0]} Q0 {docs[1]} 1 2.5 bm25",
             f"{qids[1]} Q0 {docs[2]} 1 0.5 bm25"]  # fmt: skip
    (tiny_dir / "scored.train.txt").write_text("\n".join(lines) + "\n")
    return qids, docs


def test_a_registered_dataset_reads_as_the_same_files_read_directly(tiny_dir, tmp_path, scored) -> None:
    register = register_file(tiny_dir, tmp_path, "zoo-tiny")
    run = tmp_path / "scored.trec"
    collection = irds("zoo-tiny/train", "zoo-tiny/dev", register=str(register), scoreddocs_run=str(run))
    direct = load_tiny(tiny_dir)
    assert collection.name == "zoo-tiny-train" and (collection.train_split, collection.eval_split) == ("train", "dev")
    assert list(collection.corpus.items()) == list(direct.corpus.items())
    assert collection.queries == direct.queries and collection.qrels == direct.qrels
    again = irds("zoo-tiny/train", "zoo-tiny/dev", register=str(register))  # from the cache: the same content
    assert again.fingerprint == collection.fingerprint and again.corpus_fingerprint == collection.corpus_fingerprint
    assert collection.corpus.folder == again.corpus.folder and collection.corpus.facts()["documents"] == len(
        direct.corpus
    )
    source = read_query_set("irds:zoo-tiny/dev", direct)  # search.py's queries=irds:<id>, judged or not
    assert source.name == "zoo-tiny_dev" and source.queries == direct.queries["dev"]
    alone = irds("zoo-tiny/train", register=str(register))  # evaluates id's own queries
    assert alone.eval_split == "train" and alone.fingerprint != collection.fingerprint
    qids, docs = scored
    assert run.read_text().splitlines() == [f"{qids[0]} Q0 {docs[1]} 1 2.5 irds", f"{qids[0]} Q0 {docs[0]} 2 1.5 irds",
                                            f"{qids[1]} Q0 {docs[2]} 1 0.5 irds"]  # fmt: skip


def test_bad_input_names_the_dataset_the_record_and_the_problem(tiny_dir, tmp_path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("collection.tsv", "queries.train.tsv", "queries.dev.tsv", "qrels.dev.tsv"):
        (bad / name).write_text((tiny_dir / name).read_text())
    lines = (tiny_dir / "qrels.train.tsv").read_text().splitlines()
    fields = lines[2].split()
    lines[2] = f"{fields[0]} 0 nosuchdoc 1"
    (bad / "qrels.train.tsv").write_text("\n".join(lines) + "\n")
    register = register_file(bad, tmp_path, "zoo-bad")
    with pytest.raises(FormatError, match=r"ir_datasets:zoo-bad/train qrels:3: unknown document id 'nosuchdoc'"):
        irds("zoo-bad/train", register=str(register))
    with pytest.raises(ValueError, match="ir_datasets has no dataset 'zoo-nothing'"):
        irds("zoo-nothing", register=str(register))
    with pytest.raises(ValueError, match="'zoo-bad' has no queries"):
        irds("zoo-bad", register=str(register))
    with pytest.raises(ValueError, match="'zoo-bad/dev' has no scored documents"):
        irds("zoo-bad/dev", register=str(register), scoreddocs_run=str(tmp_path / "run.trec"))
    duplicated = tmp_path / "duplicated"
    duplicated.mkdir()
    for name in ("collection.tsv", "queries.dev.tsv", "qrels.train.tsv", "qrels.dev.tsv"):
        (duplicated / name).write_text((tiny_dir / name).read_text())
    queries = (tiny_dir / "queries.train.tsv").read_text().splitlines()
    (duplicated / "queries.train.tsv").write_text("\n".join([*queries[:3], queries[1], *queries[3:]]) + "\n")
    register_dup = register_file(duplicated, tmp_path, "zoo-dup")
    qid = queries[1].split("\t")[0]
    with pytest.raises(FormatError, match=rf"ir_datasets:zoo-dup/train queries:4: duplicate query id '{qid}'"):
        irds("zoo-dup/train", register=str(register_dup))
    with pytest.raises(FileNotFoundError, match="dataset.register"):
        irds("zoo-bad/train", register=str(tmp_path / "missing.py"))


def test_a_missing_download_fails_at_once_naming_the_id_and_how_to_fetch_it(tiny_dir, tmp_path) -> None:
    register = register_file(tmp_path / "nowhere", tmp_path, "zoo-absent")  # its files were never fetched
    with pytest.raises(RuntimeError, match=r"could not read the docs of 'zoo-absent/train'.*ir_datasets export "
                       r"zoo-absent/train docs.*IR_DATASETS_HOME"):  # fmt: skip
        irds("zoo-absent/train", register=str(register))


def test_the_dataset_config_composes_and_a_missing_ir_datasets_names_the_install(monkeypatch, tmp_path) -> None:
    import sys

    from hydra import compose, initialize_config_dir

    from retrieval_zoo.data.irds import import_irds

    conf = Path(__file__).resolve().parents[1] / "retrieval_zoo" / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose("train", ["dataset=irds", "dataset.id=msmarco-passage/train/judged"])
    assert cfg.dataset._target_ == "retrieval_zoo.data.irds.irds" and cfg.dataset.eval_id is None
    monkeypatch.setitem(sys.modules, "ir_datasets", None)
    with pytest.raises(ImportError, match=r"pip install -c constraints.txt -e '\.\[irds\]'"):
        import_irds()


@pytest.mark.slow
def test_train_then_evaluate_on_a_registered_dataset_offline(tiny_dir, tmp_path) -> None:
    from tests.test_end_to_end import run_app, tiny_dataset

    register = register_file(tiny_dir, tmp_path, "zoo-e2e")
    dataset = [
        "dataset=irds",
        "dataset.id=zoo-e2e/train",
        "dataset.eval_id=zoo-e2e/dev",
        f"dataset.register={register}",
    ]
    common = ["backbone=tiny_random", "trainer=cpu", "trainer.max_steps=3", "data.batch_size=8", "data.val_queries=10",
              "eval.k=100", "logger=csv"]  # fmt: skip
    run_app("train.py", *dataset, *common, f"hydra.run.dir={tmp_path / 'train'}")
    run_app("evaluate.py", f"run_dir={tmp_path / 'train'}", f"hydra.run.dir={tmp_path / 'eval'}")
    run_app("evaluate.py", "method=bm25", *tiny_dataset(tiny_dir), f"hydra.run.dir={tmp_path / 'tsv'}")
    trained, evaluated = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("train", "eval"))
    tsv = json.loads((tmp_path / "tsv" / "results.json").read_text())
    assert trained["metrics"]["BM25"] == tsv["metrics"]["BM25"]  # the same documents, queries and qrels
    assert evaluated["metrics"] == trained["metrics"]
    assert (tmp_path / "eval" / "run.dev.trec").exists()
