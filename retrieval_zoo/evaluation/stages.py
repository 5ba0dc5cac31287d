"""A model's evaluation as stages: queries → search (build, tune, search, parts) → write runs → measure → report.

Each stage is a function of a few arguments whose result the next one takes; :func:`evaluate_method` chains them as
``train.py`` and ``evaluate.py`` run them (through :func:`retrieval_zoo.evaluation.pipeline.encode_and_evaluate`). A
retriever is used only through :class:`retrieval_zoo.retriever.Retriever`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from retrieval_zoo.cache import atomic_path, write_json
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.formats import Qrels, Run, as_written, write_run
from retrieval_zoo.evaluation.complementarity import below_best_part, complementarity, moved_queries, venn_figure
from retrieval_zoo.evaluation.metrics import evaluate, format_table
from retrieval_zoo.evaluation.tuning import tuning_figure
from retrieval_zoo.index.index import Index
from retrieval_zoo.index.process_shards import split_over_processes
from retrieval_zoo.index.saved import SavedIndex
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.methods.method import RetrievalMethod
from retrieval_zoo.retriever import Retriever

BASELINE = "BM25"


@dataclass
class QuerySet:
    """The judged queries of the evaluated split, and the held-out training queries a fusion weight is tuned on."""

    split: str
    queries: dict[str, str]
    qrels: Qrels
    held_out: dict[str, str] = field(default_factory=dict)
    held_out_qrels: Qrels = field(default_factory=dict)


@dataclass
class Searched:
    """What search hands on: each system's run (BM25 first), a fusion's part runs, seconds, tuning, the retriever."""

    system: str  # the method's row (BM25's own when the method is BM25)
    runs: dict[str, Run]
    parts: dict[str, Run]
    seconds: dict[str, float]
    tuning: dict
    retriever: Retriever


def query_set(collection: Collection, split: str, tune_queries: int = 0) -> QuerySet:
    """``split``'s judged queries, and ``tune_queries`` held-out training queries (:meth:`Collection.tuning_qids`)."""
    return with_held_out(QuerySet(split, collection.judged_queries(split), collection.qrels[split]), collection,
                         tune_queries)  # fmt: skip


def with_held_out(queries: QuerySet, collection: Collection, tune_queries: int) -> QuerySet:
    """``queries`` with ``tune_queries`` held-out training queries to tune a fusion weight on (0: none)."""
    tuning_split = collection.train_split
    if tune_queries and (tuning_split not in collection.qrels or not collection.judged_queries(tuning_split)):
        raise ValueError(
            f"eval.tune_queries={tune_queries}: {collection.name} has no judged '{tuning_split}' queries to tune the "
            "fusion weight on; set eval.tune_queries=0 (and index.weight=W)"
        )
    if tune_queries:
        train_queries, train_qrels = collection.queries[tuning_split], collection.qrels[tuning_split]
        queries.held_out = {q: train_queries[q] for q in collection.tuning_qids(tune_queries)}
        queries.held_out_qrels = {q: train_qrels[q] for q in queries.held_out}
    return queries


def search(
    model: RetrievalMethod, index: Index, collection: Collection, bm25: BM25, queries: QuerySet, k: int, name: str,
    shards: CorpusShards | None = None, saved: SavedIndex | None = None,
) -> Searched:  # fmt: skip
    """BM25's run and the method's through ``index``, each scored as trec_eval scores the written file.

    The index's fusion weight is tuned first on the held-out queries, and a fusion's parts are searched alone too.
    The method BM25 itself is searched once.
    """
    model.cache_queries({f"{queries.split}/{q}": t for q, t in queries.queries.items()}
                        | {f"{collection.train_split}/{q}": t for q, t in queries.held_out.items()})  # fmt: skip
    started = time.perf_counter()
    runs = {BASELINE: as_written(bm25.search(queries.queries, k))}
    seconds = {BASELINE: time.perf_counter() - started}
    started = time.perf_counter()
    retriever, tuning = prepared_retriever(model, index, collection, bm25, queries, shards, saved)
    if retriever is bm25:  # method=bm25: the baseline is the method
        return Searched(BASELINE, runs, {}, seconds, {}, retriever)
    try:
        runs[name] = as_written(retriever.search(queries.queries, k))
        seconds[name] = time.perf_counter() - started
        parts = {part: as_written(retriever.side(part, queries.queries, k)) for part in retriever.fused_parts}
    finally:
        retriever.release()  # the ranks serving a split index may go
    return Searched(name, runs, parts, seconds, tuning, retriever)


def prepared_retriever(
    model: RetrievalMethod, index: Index, collection: Collection, bm25: BM25, queries: QuerySet,
    shards: CorpusShards | None = None, saved: SavedIndex | None = None,
) -> tuple[Retriever, dict]:  # fmt: skip
    """The retriever ``index`` builds over the corpus, its fusion weight tuned on ``queries.held_out`` when given.

    The model is put in evaluation mode on the accelerator, if any. With ``saved`` (``index_dir``), the index is
    loaded from its folder when ready there, else built and written there. Returns the retriever and the tuning's
    record ({} when nothing was tuned).
    """
    model.eval()  # every method: an untrained one may hold a dense part with dropout (dhr_bm25_dense)
    if model.trainable:
        model.to("cuda" if torch.cuda.is_available() else "cpu")
    with split_over_processes():  # under DDP, an index that splits over the ranks does (Index.serve on the others)
        if saved is None:
            retriever = index.build(model, collection, bm25, shards)
        else:
            retriever = saved.load_or_build(index, model, collection, bm25, shards)
    if retriever is bm25 or not queries.held_out:
        return retriever, {}
    try:
        return retriever, index.tune(retriever, queries.held_out, queries.held_out_qrels)
    except BaseException:
        retriever.release()
        raise


def write_runs(searched: Searched, out_dir: Path, split: str) -> dict[str, str]:
    """``run.<split>.bm25.trec``, the method's ``run.<split>.trec`` and ``run.<split>.<part>.trec`` per part.

    Returns:
        System (as :func:`measure` names it) → the file name of its run (BM25's own where the method is BM25).
    """
    files = {BASELINE: f"run.{split}.bm25.trec"}
    write_run(out_dir / files[BASELINE], searched.runs[BASELINE], tag=BASELINE)
    files[searched.system] = f"run.{split}.trec"
    write_run(out_dir / files[searched.system], searched.runs[searched.system], tag=searched.system)
    for part, run in searched.parts.items():
        files[f"{searched.system} ({part})"] = f"run.{split}.{part}.trec"
        write_run(out_dir / files[f"{searched.system} ({part})"], run, tag=f"{searched.system}_{part}")
    return files


def measure(searched: Searched, qrels: Qrels) -> dict[str, dict[str, float]]:
    """System (BM25, the method, ``<method> (<part>)``) → measure → value, as trec_eval gives them on the files."""
    runs = searched.runs | {f"{searched.system} ({part})": run for part, run in searched.parts.items()}
    return {system: evaluate(run, qrels) for system, run in runs.items()}


def report(
    searched: Searched, metrics: dict[str, dict[str, float]], collection: Collection, queries: QuerySet, k: int,
    out_dir: Path, roc_k: int = 10, explain: int = 0,
) -> dict:  # fmt: skip
    """Print the table and write ``results.json``; returns what it holds.

    It holds the metrics, the retriever's statistics and a fusion's complementarity (RoC Eq. 1), whose Venn figure
    is drawn; with ``explain`` > 0 the matches of the first queries go to ``explain.<split>.jsonl``.
    """
    system, retriever, split = searched.system, searched.retriever, queries.split
    print(
        f"\n{collection.name} / {split}: {len(queries.queries):,} judged queries, depth {k}\n{format_table(metrics)}\n"
    )
    summary = {"system": system, "collection": collection.name, "collection_fingerprint": collection.fingerprint}
    summary |= {"split": split, "queries": len(queries.queries), "k": k, "metrics": metrics}
    summary |= {"seconds": searched.seconds, "tuning": searched.tuning, "complementarity": {}}
    if system != BASELINE:  # CLEAR's Tables 3-4: the queries the method moved most against BM25
        summary["moved_queries"] = moved_queries(searched.runs[BASELINE], searched.runs[system], queries.qrels,
                                                 queries.queries)  # fmt: skip
    if retriever.nbytes is not None:
        summary["index_bytes"] = int(retriever.nbytes)
        print(f"{system} index: {retriever.nbytes / 2**20:.2f} MiB")
    if retriever.lexical_nonzero is not None:  # open DLR slices or sparse terms per document (Table 6's tokens/doc)
        summary["lexical_nonzero_per_doc"] = float(retriever.lexical_nonzero)
    efficiency = retriever.efficiency()  # CSurF's §5.2 numbers: |C^q|, |C^d|, E_OPS, all-to-all ops, latency
    if efficiency is not None:
        summary["efficiency"] = efficiency
        print(f"{system} efficiency: " + ", ".join(f"{key} {value:.4g}" for key, value in efficiency.items()))
    if searched.tuning and len(searched.tuning["curve"]) > 1:  # a weight tuned on a grid, not one given
        title = f"{system}: {searched.tuning['parameter']} tuned on held-out training queries"
        summary["tuning_figure"] = str(tuning_figure(searched.tuning, out_dir / f"tuning.{split}.png", title))
    if searched.parts:
        below = summary["below_best_part"] = below_best_part(metrics, system, list(searched.parts))
        for measure, found in below.items():  # a fusion that loses to one of its own sides is worth a look
            print(f"[warning] {system} is below its part {found['part']} on {measure}: {found['hybrid']:.4f} < "
                  f"{found['value']:.4f} (the tuned weight, its grid, or the parts' scales)")  # fmt: skip
        lexical, semantic = searched.parts.values()
        stats = summary["complementarity"] = complementarity(lexical, semantic, queries.qrels, roc_k)
        title = f"{system} ({' vs '.join(searched.parts)})"
        summary["complementarity_figure"] = str(venn_figure(stats, out_dir / f"roc.{split}.png", title))
        print(f"complementarity at {roc_k}: " + ", ".join(f"{key} {value:g}" for key, value in stats.items()))
    records = (
        retriever.explain(dict(list(queries.queries.items())[:explain]), searched.runs[system]) if explain else None
    )
    if records is not None:
        with atomic_path(out_dir / f"explain.{split}.jsonl") as tmp:
            tmp.write_text("\n".join(json.dumps(record) for record in records) + "\n")
    write_json(out_dir / "results.json", summary)
    return summary


def evaluate_method(
    model: RetrievalMethod, index: Index, collection: Collection, bm25: BM25, split: str, k: int, out_dir: Path,
    name: str, tune_queries: int = 0, roc_k: int = 10, explain: int = 0, shards: CorpusShards | None = None,
    saved: SavedIndex | None = None,
) -> dict:  # fmt: skip
    """The stages in order: search ``split``'s judged queries, write the runs, measure them, report.

    Args:
        model: The method.
        index: Its index.
        collection: What is searched.
        bm25: The baseline (and the BM25 part of a fusion).
        split: The evaluated split.
        k: Run depth.
        out_dir: Where the runs and ``results.json`` go.
        name: The method's row.
        tune_queries: Held-out training queries the fusion weight is tuned on first (0: none).
        roc_k: Cutoff of a fusion's complementarity.
        explain: Queries whose matches are explained (DLR/DHR indexes).
        shards: The corpus as the model encoded it; None encodes it on demand.
        saved: The index's folder (``index_dir``): loaded from it when ready there, else built and written there.

    Returns:
        What ``results.json`` holds.
    """
    queries = query_set(collection, split, tune_queries)
    searched = search(model, index, collection, bm25, queries, k, name, shards, saved)
    write_runs(searched, out_dir, split)
    return report(searched, measure(searched, queries.qrels), collection, queries, k, out_dir, roc_k, explain)
