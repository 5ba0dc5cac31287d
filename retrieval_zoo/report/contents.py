"""What a report shows, read from ``train.py`` / ``evaluate.py`` output directories.

Each directory holds ``results.json`` (the split, the system, metrics, moved queries, a fusion's complementarity and
its Venn figure), its TREC runs (``run.<split>.trec``, BM25's, each fused part's) and, when asked for,
``explain.<split>.jsonl``. The queries, documents and judgements come from the first directory's dataset config.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from hydra.utils import instantiate
from omegaconf import OmegaConf

from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.formats import FormatError, Qrels, Run, read_run
from retrieval_zoo.evaluation.compare import Comparison, compare
from retrieval_zoo.evaluation.metrics import evaluate

MEASURES = ["MRR@10", "R@100", "R@1000", "nDCG@10", "MAP@1000"]


@dataclass
class RunDir:
    """One output directory's systems and what its evaluation recorded.

    Attributes:
        path: The directory.
        system: Its method's row (``results.json``'s ``system``).
        runs: System → run: the method, ``BM25`` and ``<system> (<part>)`` for each fused part.
        parts: The fused parts' system names, in order.
        results: ``results.json`` as written.
        explained: (qid, docid) → the record ``explain.<split>.jsonl`` holds for it.
    """

    path: Path
    system: str
    runs: dict[str, Run]
    parts: list[str]
    results: dict
    explained: dict[tuple[str, str], dict] = field(default_factory=dict)


@dataclass
class Contents:
    """Everything a report renders."""

    dirs: list[RunDir]
    collection: Collection
    split: str
    queries: dict[str, str]
    qrels: Qrels
    metrics: dict[str, dict[str, float]]
    comparisons: list[Comparison]


def read_dir(path: Path) -> RunDir:
    """A run directory's systems; a missing or damaged file is named."""
    results_path = path / "results.json"
    if not results_path.exists():
        raise FileNotFoundError(f"{results_path}: not found; a report reads train.py / evaluate.py output folders")
    try:
        results = json.loads(results_path.read_text(encoding="utf-8"))
        split, system = results["split"], results["system"]
    except (json.JSONDecodeError, KeyError) as error:
        raise FormatError(results_path, None, f"damaged or of another format ({error})") from None
    runs = {system: read_run(path / f"run.{split}.trec")}
    if system != "BM25":
        runs["BM25"] = read_run(path / f"run.{split}.bm25.trec")
    parts = []
    for part in part_names(path, split):
        parts.append(f"{system} ({part})")
        runs[parts[-1]] = read_run(path / f"run.{split}.{part}.trec")
    explained = {}
    explain = path / f"explain.{split}.jsonl"
    if explain.exists():
        for number, line in enumerate(explain.read_text(encoding="utf-8").splitlines(), start=1):
            try:
                record = json.loads(line)
                explained[record["qid"], record["docid"]] = record
            except (json.JSONDecodeError, KeyError, TypeError):
                raise FormatError(explain, number, "not an explain record (qid, docid, matches)") from None
    return RunDir(path, system, runs, parts, results, explained)


def part_names(path: Path, split: str) -> list[str]:
    """The fused parts whose runs a directory holds (``run.<split>.<part>.trec``, BM25's left out)."""
    names = (p.name.removeprefix(f"run.{split}.").removesuffix(".trec") for p in path.glob(f"run.{split}.*.trec"))
    return sorted(name for name in names if name != "bm25")


def dataset_config(path: Path) -> object:
    """The dataset config a directory's run used (``.hydra/config.yaml``, else ``run_config.yaml``)."""
    for name in (".hydra/config.yaml", "run_config.yaml"):
        if (path / name).exists():
            return OmegaConf.load(path / name).dataset
    raise FileNotFoundError(f"{path}: neither .hydra/config.yaml nor run_config.yaml names the run's dataset")


def gather(paths: list[Path], resamples: int = 10_000) -> Contents:
    """Every directory's systems, the first one's collection, each system's metrics, significance vs the first."""
    dirs = [read_dir(Path(p)) for p in paths]
    collection: Collection = instantiate(dataset_config(dirs[0].path))
    split = dirs[0].results["split"]
    for other in dirs[1:]:
        if other.results["split"] != split or other.results.get("collection") != dirs[0].results.get("collection"):
            theirs, ours = (f"{d.results.get('collection')}/{d.results['split']}" for d in (other, dirs[0]))
            raise ValueError(f"{other.path} evaluated {theirs}, {dirs[0].path} {ours}: a report compares one "
                             "collection and split")  # fmt: skip
    qrels = collection.qrels[split]
    runs: dict[str, Run] = {}
    for run_dir in dirs:  # a system named twice (two CLEAR runs) takes its directory's name the second time
        renamed = {}
        for name, run in run_dir.runs.items():
            if name == "BM25" and "BM25" in runs:
                continue  # one BM25 row: every directory's is the same baseline
            renamed[name] = name if name not in runs else f"{name} ({run_dir.path.name})"
            runs[renamed[name]] = run
        run_dir.runs = {renamed.get(name, name): run for name, run in run_dir.runs.items()}
        run_dir.system, run_dir.parts = renamed[run_dir.system], [renamed[part] for part in run_dir.parts]
    metrics = {name: evaluate(run, qrels) for name, run in runs.items()}
    comparisons = compare(runs, qrels, MEASURES, resamples=resamples) if len(runs) > 1 else []
    judged = {qid: collection.queries[split][qid] for qid in sorted(qrels) if qid in collection.queries[split]}
    return Contents(dirs, collection, split, judged, qrels, metrics, comparisons)
