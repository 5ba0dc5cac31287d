"""Search from Python with what was trained: ``retrieval_zoo.Retriever``.

.. code-block:: python

    import retrieval_zoo

    retriever = retrieval_zoo.Retriever.load("exports/clear")            # its collection and index, as trained
    retriever = retrieval_zoo.Retriever.load("outputs/2026-11-21/12-00-00_roc", corpus="python_docstrings",
                                             index="union")
    hits = retriever.search("how do I mount a usb drive", k=10)   # Hit(docid, score, parts, text), best first
    runs = retriever.search_batch({"q1": "...", "q2": "..."}, k=1000)   # qid → {docid: score}

A run directory or an export is configured as ``evaluate.py`` and ``search.py`` configure it
(:func:`retrieval_zoo.evaluation.config.configured_model`): its method, its index and the fusion weight it tuned, with
BM25 at the run's parameters. The corpus is encoded once (into the shared encoding cache, so a second load reads it)
and indexed when loading; queries are encoded in batches as the evaluation encodes them, so ``search_batch`` gives the
runs ``search.py`` writes (tested). This class is the user's handle on a loaded model and index; the index's own
:class:`retrieval_zoo.retriever.Retriever` does the search under it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from hydra import compose, initialize_config_module
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from lightning.pytorch.plugins import Precision
from omegaconf import DictConfig, OmegaConf, open_dict

from retrieval_zoo import retriever as contract
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.formats import Run, as_written, ranked
from retrieval_zoo.encoding.precision import encoding_precision, trainer_precision
from retrieval_zoo.evaluation.config import configured_model
from retrieval_zoo.evaluation.pipeline import build_collection_and_bm25, encode_then, saved_index
from retrieval_zoo.evaluation.stages import QuerySet, prepared_retriever, with_held_out
from retrieval_zoo.export.exported import MANIFEST
from retrieval_zoo.methods.method import RetrievalMethod

CONFIG_MODULE = "retrieval_zoo.conf"


@dataclass(frozen=True)
class Hit:
    """One retrieved document.

    Attributes:
        docid: Its id in the corpus.
        score: The retriever's score (the fused one for a fusion), as a run file writes it.
        parts: A fusion's part → that part's score for the document, or None where the part alone does not rank it
            within the fusion's depth; empty for a single-part retriever.
        text: The document's text.
    """

    docid: str
    score: float
    parts: dict[str, float | None]
    text: str


class Retriever:
    """A trained model, its collection and its built index, searched from Python (module docstring)."""

    def __init__(self, cfg: DictConfig, model: RetrievalMethod, collection: Collection,
                 searcher: contract.Retriever, tuning: dict, precision: Precision | None = None) -> None:  # fmt: skip
        """Wrap a loaded model and its built index.

        ``precision`` is the plugin of the trainer that encoded the corpus, in which the queries are encoded too
        (:mod:`retrieval_zoo.encoding.precision`); None encodes them as the model is (``32-true``).
        """
        self.cfg, self.model, self.collection, self.searcher, self.tuning = cfg, model, collection, searcher, tuning
        self.precision = precision or Precision()

    @classmethod
    def load(
        cls, path: str | Path | None, corpus: str | Path | None = None, index: str | None = None,
        overrides: Sequence[str] = (),
    ) -> Retriever:  # fmt: skip
        """Load a run directory (``train.py``'s) or an export (``python -m retrieval_zoo.export``) and index a corpus.

        Args:
            path: The run directory or exported folder; None for an untrained method named in ``overrides``
                (``method=bm25``, ``method=dlr_splade``), as ``evaluate.py`` runs one.
            corpus: None for the run's collection; a dataset config name (``python_docstrings``); or a folder of
                documents: BEIR's layout (``corpus.jsonl``) or MS MARCO's (``collection.tsv``).
            index: An index config name (``union``, ``faiss``, ...) the method × index matrix allows; or a folder
                (``index_dir``, any path with a ``/``) that holds this model's saved index, loaded without encoding or
                building, or that receives it once built; None for the run's index, built.
            overrides: Further Hydra overrides, as on ``search.py``'s command line (``eval.tune_queries=500``,
                ``encode.cache_dir=...``).
        """
        given = corpus_overrides(corpus)
        if path is not None:
            path = Path(path)
            if not path.is_dir():
                raise FileNotFoundError(f"{path}: no such run directory or exported folder")
            given.insert(0, f"{'model_dir' if (path / MANIFEST).exists() else 'run_dir'}={path}")
        if index:
            given.append(f"index_dir={index}" if "/" in index or Path(index).is_dir() else f"index={index}")
        given += list(overrides)
        cfg, model = configured_model(composed(given), given)
        collection, bm25 = build_collection_and_bm25(cfg)
        chosen = instantiate(cfg.index)
        make_trainer = partial(instantiate(cfg.trainer, _partial_=True), default_root_dir=tempfile.gettempdir())
        saved = saved_index(cfg, model, collection, make_trainer)
        queries = with_held_out(QuerySet("load", {}, {}), collection, int(cfg.eval.tune_queries))
        prepare = partial(prepared_retriever, model, chosen, collection, bm25, queries, saved=saved)
        prepared = encode_then(cfg, model, chosen, collection, bm25, make_trainer, prepare, saved)
        if prepared is None:
            raise RuntimeError("Retriever.load searches in one process: not under a multi-process trainer")
        return cls(cfg, model, collection, *prepared, trainer_precision(make_trainer))

    def search_batch(self, queries: dict[str, str], k: int = 1000) -> Run:
        """The top ``k`` of each query, qid → {docid: score}, with the scores a run file holds.

        The set is tokenized once into the token cache first and batched by length, as an evaluation batches it, so
        the runs are ``search.py``'s.
        """
        self.model.cache_queries({f"search/{qid}": text for qid, text in queries.items()})
        with encoding_precision(self.precision, self.model):
            return as_written(self.searcher.search(queries, k))

    def search(self, query: str, k: int = 10) -> list[Hit]:
        """The top ``k`` documents for one query, best first, with each fused part's score and the text.

        One query is tokenized as it comes (no token cache is written for it).
        """
        if not query.strip():
            raise ValueError("an empty query: nothing to search")
        with encoding_precision(self.precision, self.model):
            fused, part_runs = self.searcher.search_with_parts({"query": query}, k, self.searcher.depth)
        found = ranked(as_written(fused)["query"])
        parts = {part: as_written(run)["query"] for part, run in part_runs.items()}
        corpus = self.collection.corpus
        return [Hit(docid, score, {part: scores.get(docid) for part, scores in parts.items()}, corpus[docid])
                for docid, score in found]  # fmt: skip

    def close(self) -> None:
        """Let go of processes that serve parts of the index, if any."""
        self.searcher.release()


def corpus_overrides(corpus: str | Path | None) -> list[str]:
    """The dataset overrides that search ``corpus`` (see :meth:`Retriever.load`)."""
    if corpus is None:
        return []
    folder = Path(corpus)
    if (folder / "corpus.jsonl").exists() or (folder / "corpus.jsonl.gz").exists():
        return ["dataset=beir", f"dataset.root={folder}"]
    if (folder / "collection.tsv").exists() or (folder / "collection.tsv.gz").exists():
        return ["dataset=msmarco_passage", f"dataset.root={folder}"]
    if folder.is_dir():
        raise FileNotFoundError(f"{folder}: neither corpus.jsonl (BEIR) nor collection.tsv (MS MARCO) is in it")
    return [f"dataset={corpus}"]


def composed(overrides: list[str]) -> DictConfig:
    """``search.py``'s config with ``overrides``, resolved as Hydra resolves a command line's."""
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        cfg = compose(config_name="search", overrides=overrides, return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)  # what ${hydra:runtime.choices...} (the run's identity) reads
        with open_dict(cfg):
            del cfg["hydra"]
        OmegaConf.resolve(cfg)
    return cfg
