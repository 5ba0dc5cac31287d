"""Train → index → search → evaluate, shared by ``train.py`` and ``evaluate.py``.

A run's identity and config, the method × index check, the collection and its BM25, and the corpus encoding before
the evaluation's stages (:mod:`retrieval_zoo.evaluation.stages`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

import lightning as L
from hydra.utils import get_class, instantiate
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from retrieval_zoo.cache import fingerprint
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.query_sets import QuerySource
from retrieval_zoo.encoding.corpus import encode_corpus, weights_digest
from retrieval_zoo.encoding.precision import encoding_precision, trainer_precision
from retrieval_zoo.evaluation.search_runs import search_query_source
from retrieval_zoo.evaluation.stages import evaluate_method
from retrieval_zoo.index.index import Index, check_pair
from retrieval_zoo.index.saved import SavedIndex, index_identity
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.methods.method import RetrievalMethod
from retrieval_zoo.resume import exit_code_on_sigterm

CONF = Path(__file__).resolve().parents[1] / "conf"  # shipped with the package
T = TypeVar("T")


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


def encode_and_evaluate(
    cfg: DictConfig, model: RetrievalMethod, index: Index, collection: Collection, bm25: BM25,
    make_trainer: Callable[..., L.Trainer], out_dir: Path, name: str,
) -> dict | None:  # fmt: skip
    """What ``train.py`` and ``evaluate.py`` run once the model is loaded: encoding, then evaluation.

    The corpus is encoded on every rank, then rank 0 evaluates (:func:`retrieval_zoo.evaluation.stages.evaluate_method`)
    with the run's ``eval`` settings.

    Returns:
        What ``results.json`` holds, on rank 0; None on the other ranks, which serve an index split over the ranks
        while rank 0 searches it, and return after.
    """
    settings, saved = cfg.eval, saved_index(cfg, model, collection, make_trainer)
    split = settings.get("split") or collection.eval_split
    evaluate = partial(evaluate_method, model, index, collection, bm25, split, settings.k, out_dir, name,
                       settings.tune_queries, settings.get("roc_k", 10), settings.get("explain", 0),
                       saved=saved)  # fmt: skip
    return encode_then(cfg, model, index, collection, bm25, make_trainer, evaluate, saved)


def encode_and_search(
    cfg: DictConfig, model: RetrievalMethod, index: Index, collection: Collection, bm25: BM25,
    make_trainer: Callable[..., L.Trainer], out_dir: Path, name: str, source: QuerySource,
) -> dict | None:  # fmt: skip
    """What ``search.py`` runs once the model is loaded: encoding, then the search of ``source``'s queries.

    Returns:
        What ``search.json`` holds, on rank 0; None on the other ranks (see :func:`encode_and_evaluate`).
    """
    saved = saved_index(cfg, model, collection, make_trainer)
    search = partial(search_query_source, model, index, collection, bm25, source, cfg.eval.k, out_dir, name,
                     cfg.eval.tune_queries, saved=saved)  # fmt: skip
    return encode_then(cfg, model, index, collection, bm25, make_trainer, search, saved)


def encode_then(
    cfg: DictConfig, model: RetrievalMethod, index: Index, collection: Collection, bm25: BM25,
    make_trainer: Callable[..., L.Trainer], then: Callable[[CorpusShards | None], T], saved: SavedIndex | None = None,
) -> T | None:  # fmt: skip
    """Encode the corpus on every rank, then ``then(shards)`` on rank 0 while the other ranks serve a split index.

    With a ``saved`` index folder (``index_dir``) that holds this index ready, nothing is encoded. What follows the
    corpus's encoding (queries, an index that encodes on demand) runs in the trainer's precision, as the corpus did.
    """
    in_precision = encoding_precision(trainer_precision(make_trainer), model)
    if saved is not None and saved.state() == "ready":
        with in_precision:
            return then(None) if rank_zero_only.rank == 0 else None
    with exit_code_on_sigterm():
        shards, rank_zero = encode_for_index(model, index, collection, bm25, make_trainer, cfg.encode)
    with in_precision:
        if not rank_zero:
            index.serve(model, collection, bm25, shards)
            return None
        return then(shards)


def saved_index(
    cfg: DictConfig, model: RetrievalMethod, collection: Collection, make_trainer: Callable[..., L.Trainer]
) -> SavedIndex | None:
    """The ``index_dir`` of this run's model, collection, index settings and precision; None without one."""
    if not cfg.get("index_dir"):
        return None
    model_digest = weights_digest(model) if model.trainable else fingerprint(OmegaConf.to_container(cfg.method))
    index_config = OmegaConf.to_container(cfg.index, resolve=True)
    encoding = model.encoding_settings() | {"precision": trainer_precision(make_trainer).precision}
    identity = index_identity(str(cfg.method_name), model_digest, collection, str(cfg.index_name), index_config,
                              encoding)  # fmt: skip
    return SavedIndex(cfg.index_dir, identity)


def build_collection_and_bm25(cfg: DictConfig) -> tuple[Collection, BM25]:
    """Instantiate the dataset and the BM25 it is searched with."""
    collection: Collection = instantiate(cfg.dataset)
    return collection, instantiate(cfg.bm25, _partial_=True)(collection=collection)
