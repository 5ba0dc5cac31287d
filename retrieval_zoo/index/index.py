"""What an index is to the pipeline: the representations it accepts, how it builds a retriever, its weight grid.

The zoo's axis is method × index. A method declares the representations it produces (``representations``, its own
first); an index declares the ones it accepts (``accepts``) and is generic in the Protocol of what it reads of a
method (:mod:`retrieval_zoo.index.representations`: ``vectors``, ``term_weights``, ``csf_bags``,
``lexical_semantic``, ``bm25``), so the reads across the boundary are typed and a type checker holds them to it.

An index that fuses two parts has a retrieval-time weight: :meth:`Index.tune` grid-searches it on held-out queries
with :func:`retrieval_zoo.evaluation.tuning.tune_weight`, one function for every fused index, which goes past the
grid's edge where the best value lies (``extend_grid``).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Generic, TypeVar

from retrieval_zoo.bounds import require_choice
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.corpus_store import corpus_ids
from retrieval_zoo.data.formats import Qrels
from retrieval_zoo.encoding.batching import Texts
from retrieval_zoo.evaluation.metrics import Measure
from retrieval_zoo.evaluation.tuning import tune_weight
from retrieval_zoo.index.representations import Encodes
from retrieval_zoo.index.shards import CorpusShards, Payload, ShardEncoder
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.retriever import Represented, Retriever

TENTHS_TO_TWO = tuple(round(0.1 * i, 1) for i in range(21))  # 0, 0.1, ..., 2.0: a fusion weight's default grid
M = TypeVar("M", bound=Represented)  # what an index reads of a method: a Protocol of index/representations.py
E = TypeVar("E", bound=Encodes)
R = TypeVar("R", bound=Retriever)


class Index(Generic[M]):
    """Base of every index family (``conf/index/*.yaml``), generic in what it reads of a method (``M``).

    Args:
        weight_grid: Values of the fusion weight tried when evaluation tunes it (``eval.tune_queries`` > 0); empty
            for an index with nothing to fuse.
        tune_measure: What tuning maximises (a name of :data:`retrieval_zoo.evaluation.metrics.MEASURES`).
        extend_grid: Tuning goes past the grid's edge where the best value lies
            (:mod:`retrieval_zoo.evaluation.tuning`); False keeps to the grid (a paper's protocol).
    """

    accepts: ClassVar[tuple[str, ...]] = ()
    saves: ClassVar[bool] = False  # whether :meth:`save` and :meth:`load` keep a built index on disk (``index_dir``)
    on_demand_shard: ClassVar[int | None] = None  # documents encoded at once when no shards are given (None: all)

    def __init__(
        self, weight_grid: tuple[float, ...] = (), tune_measure: Measure = "MRR@10", extend_grid: bool = True
    ) -> None:
        require_choice("tune_measure", tune_measure, Measure)
        self.weight_grid, self.tune_measure = tuple(float(v) for v in weight_grid), tune_measure
        self.extend_grid = extend_grid

    def representation(self, method: Represented) -> str:
        """The representation of ``method`` this index searches: the first it accepts among the method's."""
        for name in method.representations:
            if name in self.accepts:
                return name
        raise ValueError(
            f"{type(self).__name__} accepts {', '.join(self.accepts)}; {type(method).__name__} produces "
            f"{', '.join(method.representations) or 'nothing'}"
        )

    def encodes_corpus(self, method: Represented) -> bool:
        """Whether the corpus is encoded ahead (Lightning predict, cached shards) rather than on demand, by shard.

        Trained models are; off-the-shelf ones (BM25 DLRs, SPLADE before training) are encoded on demand.
        """
        return method.trainable

    def doc_encoder(self, method: M, collection: Collection, bm25: BM25) -> ShardEncoder:
        """Document ids → what this index needs of them, as named row-aligned tensors: how a shard is encoded.

        An index over no encoding of its own (Lucene's BM25) has nothing to encode: its encoder refuses when called.
        """

        def encode(ids: list[str]) -> Payload:
            raise NotImplementedError(f"{type(self).__name__} encodes no corpus ahead")

        return encode

    def corpus_shards(self, method: M, collection: Collection, bm25: BM25, shards: CorpusShards | None) -> CorpusShards:
        """``shards`` when evaluation encoded them; else the corpus encoded on demand, by shard (validation)."""
        if shards is not None:
            return shards
        corpus = collection.corpus
        encode = self.doc_encoder(method, collection, bm25)
        return CorpusShards.on_demand(corpus_ids(corpus), encode, self.on_demand_shard or len(corpus))

    def build(self, method: M, collection: Collection, bm25: BM25, shards: CorpusShards | None = None) -> Retriever:
        """Index ``collection``'s corpus as ``method`` represents it (from its encoded ``shards`` when given)."""
        raise NotImplementedError

    def save(self, retriever: Retriever, folder: Path) -> None:
        """Write what :meth:`build` made into ``folder`` (a new, empty one), for :meth:`load`.

        Only where ``saves`` is True; :class:`retrieval_zoo.index.saved.SavedIndex` writes the manifest and checksum.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot save its index yet")

    def save_refusal(self, retriever: Retriever) -> str:
        """Why :meth:`save` cannot write ``retriever`` (for a message); "" when it can."""
        return "" if self.saves else "cannot be saved yet"

    def built_here(self, retriever: Retriever, kind: type[R]) -> R:
        """``retriever``, checked to be the ``kind`` this index builds: the only one its :meth:`save` can write."""
        if not isinstance(retriever, kind):
            raise TypeError(f"{type(self).__name__} saves the retrievers it builds, not a {type(retriever).__name__}")
        return retriever

    def load(self, method: M, collection: Collection, bm25: BM25, folder: Path) -> Retriever:
        """The retriever :meth:`save` wrote into ``folder``, searching with ``method`` (nothing encoded or built)."""
        raise NotImplementedError(f"{type(self).__name__} cannot load a saved index yet")

    def serve(self, method: M, collection: Collection, bm25: BM25, shards: CorpusShards | None) -> None:
        """On ranks other than 0, after evaluation's encoding: answer rank 0's searches with this rank's part.

        Only for an index split over the processes (:mod:`retrieval_zoo.index.process_shards`); nothing for one that
        rank 0 holds whole, as every index but CSurF's inverted lists does.
        """

    def tune(self, retriever: Retriever, queries: dict[str, str], qrels: Qrels) -> dict:
        """Grid-search the retriever's fusion weight on held-out queries and set it; {} when there is none."""
        if not self.weight_grid or retriever.weight_name is None:
            return {}
        return tune_weight(retriever, queries, qrels, self.weight_grid, self.tune_measure, retriever.weight_name,
                           retriever.depth, self.extend_grid)  # fmt: skip


class EncodingIndex(Index[E]):
    """An index over what the method's own encoder makes of each document (``corpus_payload``)."""

    def corpus_payload(self, method: E, texts: Texts) -> Payload:
        """What this index needs of these documents, as named row-aligned tensors (one shard of the corpus)."""
        raise NotImplementedError

    def doc_encoder(self, method: E, collection: Collection, bm25: BM25) -> ShardEncoder:
        """Document ids → :meth:`corpus_payload` of their texts, which come as the method's cached tokens."""
        texts = method.corpus_texts(collection)
        return lambda ids: self.corpus_payload(method, texts(ids))


def compatible(method_class: type[Represented], index_class: type[Index]) -> bool:
    """Whether an index of ``index_class`` accepts a representation that ``method_class`` produces."""
    return bool(set(method_class.representations) & set(index_class.accepts))


def check_pair(method_name: str, method_class: type[Represented], index_name: str, index_class: type[Index],
               indexes: dict[str, type[Index]]) -> None:  # fmt: skip
    """Raise, naming both and the compatible choices, when the index cannot search the method's representations.

    Args:
        method_name: The method's config name (``method=...``).
        method_class: Its class.
        index_name: The index's config name (``index=...``).
        index_class: Its class.
        indexes: Every index config name → class, for the list of compatible choices.
    """
    if compatible(method_class, index_class):
        return
    choices = sorted(name for name, cls in indexes.items() if compatible(method_class, cls))
    produces = ", ".join(method_class.representations) or "nothing"
    raise ValueError(
        f"index={index_name} cannot search method={method_name}: the index accepts {', '.join(index_class.accepts)}, "
        f"the method produces {produces}; indexes for method={method_name}: {', '.join(choices) or 'none'}"
    )
