"""Train → index → search → evaluate, shared by ``train.py`` and ``evaluate.py``."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import lightning as L
import torch
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from retrieval_zoo.cache import atomic_path, write_json
from retrieval_zoo.complementarity import complementarity, moved_queries, venn_figure
from retrieval_zoo.corpus_encoding import encode_corpus
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.formats import as_written, write_run
from retrieval_zoo.evaluation import evaluate, format_table
from retrieval_zoo.index.base import Index, check_pair, fused_parts
from retrieval_zoo.index.process_shards import split_over_processes
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.lexical.bm25 import BM25
from retrieval_zoo.methods.base import RetrievalMethod

CONF = Path(__file__).resolve().parent.parent / "conf"


def identity(cfg: DictConfig) -> dict[str, str]:
    """Method, index, backbone and dataset names of a run (Hydra's group choices), for grouping in dashboards."""
    names = {"method": str(cfg.method_name), "backbone": str(cfg.backbone_name), "dataset": str(cfg.dataset_name)}
    return names | {"index": str(cfg.index_name)}


def run_config(cfg: DictConfig) -> dict:
    """The resolved config with ``method_name``, ``index_name``, ``backbone_name`` and ``dataset_name`` first."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    first = ("method_name", "index_name", "backbone_name", "dataset_name")
    return {**{k: resolved[k] for k in first}, **{k: v for k, v in resolved.items() if k not in first}}


def config_target(path: Path) -> str:
    """The ``_target_`` of a group's config file, or of the file its defaults list extends."""
    config = OmegaConf.load(path)
    if "_target_" in config:
        return str(config._target_)
    for parent in config.get("defaults", []):
        if isinstance(parent, str) and parent != "_self_":
            return config_target(path.parent / f"{parent}.yaml")
    raise ValueError(f"{path}: no _target_, and no config in its defaults list to take one from")


def index_classes(conf: Path = CONF) -> dict[str, type]:
    """Every ``conf/index`` choice → its class."""
    return {path.stem: get_class(config_target(path)) for path in sorted((conf / "index").glob("*.yaml"))}


def check_method_and_index(cfg: DictConfig) -> None:
    """Fail before anything is built when ``cfg.index`` cannot search what ``cfg.method`` produces."""
    method_class, index_class = get_class(cfg.method._target_), get_class(cfg.index._target_)
    check_pair(str(cfg.method_name), method_class, str(cfg.index_name), index_class, index_classes())


def evaluate_method(
    model: RetrievalMethod,
    index: Index,
    collection: Collection,
    bm25: BM25,
    split: str,
    k: int,
    out_dir: Path,
    name: str,
    tune_queries: int = 0,
    roc_k: int = 10,
    explain: int = 0,
    shards: CorpusShards | None = None,
) -> dict:
    """Retrieve ``split``'s judged queries with ``model`` through ``index`` and with BM25, write runs and results.

    With ``tune_queries`` > 0 the index first tunes its fusion weight on that many held-out training queries
    (:meth:`Collection.tuning_qids`, :meth:`Index.tune`). Writes ``run.<split>.trec``, ``run.<split>.bm25.trec``,
    one run per part of a fusing index (``run.<split>.<part>.trec``) and ``results.json`` into ``out_dir``, and prints
    the table. For a fusion of two parts, also RoC's complementarity of its two sides at ``roc_k`` (Eq. 1) and its
    Venn figure ``roc.<split>.png``. With ``explain`` > 0 and a retriever that can explain its matches (DLR/DHR),
    ``explain.<split>.jsonl`` lists the matched terms of the top 3 documents of the first ``explain`` queries.
    ``shards``: the corpus as the model encoded it (:func:`encode_for_index`); without them it is encoded here.

    Returns:
        What ``results.json`` holds: ``metrics`` (system → measure → value), ``tuning``, ``complementarity``,
        ``seconds``, ``moved_queries`` (the queries whose first relevant document the method moved most against
        BM25, up and down), ``index_bytes``, ``lexical_nonzero_per_doc`` and ``efficiency`` (when the retriever reports
        them) and the collection, split, query count and depth.
    """
    queries = collection.judged_queries(split)
    qrels = collection.qrels[split]
    tuning_split = collection.train_split
    if tune_queries and (tuning_split not in collection.qrels or not collection.judged_queries(tuning_split)):
        raise ValueError(
            f"eval.tune_queries={tune_queries}: {collection.name} has no judged '{tuning_split}' queries to tune the "
            "fusion weight on; set eval.tune_queries=0 (and index.weight=W)"
        )
    model.eval()  # every method: an untrained one may hold a dense part with dropout (dhr_bm25_dense)
    if model.trainable:
        model.to("cuda" if torch.cuda.is_available() else "cpu")
    held_out = {}
    if tune_queries:
        train_queries = collection.queries[tuning_split]
        held_out = {q: train_queries[q] for q in collection.tuning_qids(tune_queries)}
    searched = {f"{split}/{q}": t for q, t in queries.items()} | {f"{tuning_split}/{q}": t for q, t in held_out.items()}
    model.cache_queries(searched)  # query encoding reads their tokens, as training does
    results, timings, tuning, parts, runs = {}, {}, {}, {}, {}
    for system, run_name in (("BM25", f"run.{split}.bm25.trec"), (name, f"run.{split}.trec")):
        started = time.perf_counter()
        with split_over_processes():  # under DDP, an index that splits over the ranks does (Index.serve on the others)
            retriever = bm25 if system == "BM25" else index.build(model, collection, bm25, shards)
        if system == name and retriever is bm25:  # the method is BM25 itself (method=bm25): one search, one row
            write_run(out_dir / run_name, runs["BM25"], tag=name)
            name = "BM25"
            break
        try:
            if system == name and tune_queries:
                train_qrels = collection.qrels[tuning_split]
                tuning = index.tune(retriever, held_out, {q: train_qrels[q] for q in held_out})
            run = runs[system] = as_written(retriever.search(queries, k))  # scored as trec_eval scores the file
            timings[system] = time.perf_counter() - started
            if system == name:
                for part in fused_parts(retriever) or ():
                    parts[part] = as_written(retriever.side(part, queries, k))
        finally:
            if hasattr(retriever, "release"):  # the ranks serving a split index may go
                retriever.release()
        write_run(out_dir / run_name, run, tag=system)
        results[system] = evaluate(run, qrels)
        for part, part_run in parts.items() if system == name else ():
            write_run(out_dir / f"run.{split}.{part}.trec", part_run, tag=f"{name}_{part}")
            results[f"{name} ({part})"] = evaluate(part_run, qrels)
    table = format_table(results)
    print(f"\n{collection.name} / {split}: {len(queries):,} judged queries, depth {k}\n{table}\n")
    summary = {"system": name, "collection": collection.name, "collection_fingerprint": collection.fingerprint}
    summary["split"] = split
    summary |= {"queries": len(queries), "k": k}
    summary |= {"metrics": results, "seconds": timings, "tuning": tuning, "complementarity": {}}
    if name != "BM25":  # CLEAR's Tables 3-4: the queries the method moved most against BM25
        summary["moved_queries"] = moved_queries(runs["BM25"], runs[name], qrels, queries)
    if hasattr(retriever, "nbytes"):  # the method's index size (DLR/DHR indexes report theirs)
        summary["index_bytes"] = int(retriever.nbytes)
        print(f"{name} index: {retriever.nbytes / 2**20:.2f} MiB")
    if hasattr(retriever, "lexical_nonzero"):  # open DLR slices or sparse terms per document (Table 6's tokens/doc)
        summary["lexical_nonzero_per_doc"] = float(retriever.lexical_nonzero)
    if hasattr(retriever, "efficiency"):  # CSurF's §5.2 numbers: |C^q|, |C^d|, E_OPS, all-to-all ops, latency
        summary["efficiency"] = retriever.efficiency()
        print(f"{name} efficiency: " + ", ".join(f"{key} {value:.4g}" for key, value in summary["efficiency"].items()))
    if parts:
        lexical, semantic = parts.values()
        stats = summary["complementarity"] = complementarity(lexical, semantic, qrels, roc_k)
        title = f"{name} ({' vs '.join(parts)})"
        figure = venn_figure(stats, out_dir / f"roc.{split}.png", title)
        summary["complementarity_figure"] = str(figure)
        print(f"complementarity at {roc_k}: " + ", ".join(f"{key} {value:g}" for key, value in stats.items()))
    if explain and hasattr(retriever, "explain"):
        first = dict(list(queries.items())[:explain])
        lines = [json.dumps(record) for record in retriever.explain(first, run)]
        with atomic_path(out_dir / f"explain.{split}.jsonl") as tmp:
            tmp.write_text("\n".join(lines) + "\n")
    write_json(out_dir / "results.json", summary)
    return summary


def encode_for_index(
    model: RetrievalMethod,
    index: Index,
    collection: Collection,
    bm25: BM25,
    make_trainer: Callable[..., L.Trainer],
    encode: DictConfig,
) -> tuple[CorpusShards | None, bool]:
    """The corpus encoded by ``model`` as ``index`` needs it, in shards, by Lightning predict under the run's trainer.

    Returns:
        The shards (``encode.shard_size`` documents each, under ``encode.cache_dir``) or None for an index that
        encodes on demand, and whether this process is rank 0 (the one that goes on to evaluate).
    """
    return encode_corpus(model, index, collection, bm25, make_trainer, encode.shard_size, encode.cache_dir)


def build_collection_and_bm25(cfg: DictConfig) -> tuple[Collection, BM25]:
    """Instantiate the dataset and the BM25 it is searched with."""
    collection: Collection = instantiate(cfg.dataset)
    return collection, instantiate(cfg.bm25, _partial_=True)(collection=collection)
