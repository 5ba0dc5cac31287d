"""Inner-product search with faiss: Flat by default, any factory string by config, GPU when CUDA is present.

A corpus encoded in shards (:mod:`retrieval_zoo.index.shards`) becomes one faiss index per shard, joined in a
``faiss.IndexShards`` that searches every shard and merges their top k; on GPUs the shards are spread over the
devices. Indexes that need training (IVF, PQ) are trained once, on the first shards, and each shard gets a copy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar

import faiss
import numpy as np
import torch

from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.formats import Run
from retrieval_zoo.encoding.batching import PLAIN_QUERIES, QueryPrep, Texts, encode_all, encode_payload
from retrieval_zoo.id_index import IdIndex
from retrieval_zoo.index.index import EncodingIndex
from retrieval_zoo.index.representations import OffersVectors
from retrieval_zoo.index.shards import CorpusShards, Payload
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.retriever import Retriever

MAPPED = faiss.IO_FLAG_MMAP | faiss.IO_FLAG_MMAP_IFC  # a saved index's inverted lists and flat codes, memory-mapped

VectorShard = tuple[Sequence[str] | range, np.ndarray]


class FaissIndex:
    """A faiss inner-product index over document vectors.

    Args:
        factory: A faiss index factory string (``"Flat"``, ``"HNSW32"``, ``"IVF1024,Flat"``, ``"PQ64"``, ...).
        use_gpu: ``"auto"`` moves the index to all GPUs when faiss sees any; ``True`` requires them.
        nprobe: For IVF indexes, the lists probed per query.
        train_size: Vectors (from the first shards) an index that needs training is trained on.
    """

    def __init__(
        self, factory: str = "Flat", use_gpu: bool | str = "auto", nprobe: int = 32, train_size: int = 262_144
    ) -> None:
        self.factory, self.use_gpu, self.nprobe, self.train_size = factory, use_gpu, nprobe, train_size
        self.index: faiss.Index | None = None
        self.docids = np.array([], dtype=str)  # every shard's ids in row order, as numpy strings (not Python objects)
        self._parts: list[faiss.Index] = []  # IndexShards does not own its shards: keep them alive
        self._gpu_resources: list = []
        self._gpu_count = 0  # GPUs the shards were placed on (0: the CPU)
        self._rows: IdIndex | None = None  # docid → row over all shards, for candidate_scores (built on first use)

    def build(self, vectors: np.ndarray, docids: Sequence[str] | range) -> FaissIndex:
        """Index ``vectors`` (n, dim) whose rows belong to ``docids``, as one shard."""
        return self.build_sharded([(docids, vectors)])

    def build_sharded(self, shards: Sequence[VectorShard]) -> FaissIndex:
        """Index each (document ids, (n, dim) vectors) shard on its own; search merges the shards' top k."""
        shards = [(docids, np.ascontiguousarray(vectors, dtype=np.float32)) for docids, vectors in shards]
        for docids, vectors in shards:
            if len(vectors) != len(docids):
                raise ValueError(f"{len(vectors)} vectors for {len(docids)} document ids")
        dim = shards[0][1].shape[1]
        template = faiss.index_factory(dim, self.factory, faiss.METRIC_INNER_PRODUCT)
        if not template.is_trained:
            sample, rows = [], 0
            for _, vectors in shards:
                if rows >= self.train_size:
                    break
                sample.append(vectors[: self.train_size - rows])
                rows += len(sample[-1])
            template.train(np.concatenate(sample))
        self._gpu_count = self._gpus()
        parts = [self._placed(faiss.clone_index(template), number) for number in range(len(shards))]
        for part, (_, vectors) in zip(parts, shards, strict=True):
            part.add(vectors)
        return self._joined(parts, np.concatenate([np.asarray(docids, dtype=str) for docids, _ in shards]))

    def _placed(self, part: faiss.Index, number: int) -> faiss.Index:
        """Shard ``number``'s index with its search settings, on its GPU when there are GPUs (``_gpu_count``)."""
        if hasattr(part, "nprobe"):
            part.nprobe = self.nprobe
        gpus = self._gpu_count
        return faiss.index_cpu_to_gpu(self._gpu_resources[number % gpus], number % gpus, part) if gpus else part

    def _joined(self, parts: list[faiss.Index], docids: np.ndarray) -> FaissIndex:
        """The shards' indexes searched as one (their top k merged), over ``docids`` in row order."""
        self._parts = parts
        if len(parts) == 1:
            self.index = parts[0]
        else:
            self.index = faiss.IndexShards(parts[0].d, bool(self._gpu_count), True)  # type: ignore[call-arg]  # SWIG overload: threaded, successive ids
            for part in parts:
                self.index.add_shard(part)
        self.docids, self._rows = docids, None
        return self

    def save(self, folder: Path) -> None:
        """Write each shard's index (``faiss.write_index``, from the CPU) and the document ids into ``folder``."""
        if not self._parts:
            raise RuntimeError("save before build")
        for number, part in enumerate(self._parts):
            cpu = faiss.index_gpu_to_cpu(part) if self._gpu_count else part
            faiss.write_index(cpu, str(folder / f"faiss-{number:05d}.index"))
        np.save(folder / "docids.npy", self.docids, allow_pickle=False)

    def load(self, folder: Path) -> FaissIndex:
        """The index :meth:`save` wrote into ``folder``, with these settings (search parameters, GPUs).

        The files are memory-mapped, not read (:data:`MAPPED`): loading costs the same at any size, and the pages a
        search touches are read then (a GPU index is copied to the GPU whole).
        """
        files = sorted(folder.glob("faiss-*.index"))
        if not files:
            raise FileNotFoundError(f"{folder}: no faiss-*.index file")
        self._gpu_count = self._gpus()
        parts = [self._placed(faiss.read_index(str(path), MAPPED), number) for number, path in enumerate(files)]
        return self._joined(parts, np.load(folder / "docids.npy", mmap_mode="r", allow_pickle=False))

    def _gpus(self) -> int:
        """GPUs the shards go to (0: the CPU); one resource object per GPU, kept for the index's lifetime."""
        gpus = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
        if self.use_gpu is True and gpus == 0:
            raise RuntimeError("index.use_gpu=true but faiss sees no GPU (install the gpu extra on a CUDA machine)")
        if not (self.use_gpu and gpus):
            return 0
        self._gpu_resources = [faiss.StandardGpuResources() for _ in range(gpus)]
        return gpus

    def search_rows(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(Q, k) scores and row numbers of the top ``k`` (k capped by the corpus size; row −1 where none)."""
        if self.index is None:
            raise RuntimeError("search before build")
        return self.index.search(np.ascontiguousarray(vectors, dtype=np.float32), min(k, len(self.docids)))

    def search(self, vectors: np.ndarray, qids: list[str], k: int) -> Run:
        """Top ``k`` documents by inner product for each query vector."""
        scores, rows = self.search_rows(vectors, k)
        run: Run = {}
        for qid, srow, rrow in zip(qids, scores, rows, strict=True):
            found = rrow >= 0
            run[qid] = dict(zip(self.docids[rrow[found]].tolist(), srow[found].tolist(), strict=True))
        return run

    def candidate_scores(self, vectors: np.ndarray, qids: list[str], candidates: dict[str, list[str]]) -> Run:
        """Inner products of query vectors with given documents, at any rank: a run's scores completed beyond k.

        Each document's vector is read back from the shard that holds it (``reconstruct``; IVF indexes get a
        direct map on first use), so the score is the one the index gives the document: exact for Flat and HNSW,
        the quantised vector's for PQ and SQ.

        Args:
            vectors: (Q, dim) query vectors, in the order of ``qids``.
            qids: The queries' ids.
            candidates: qid → document ids to score.
        """
        if not self._parts:
            raise RuntimeError("candidate_scores before build")
        if self._rows is None:
            self._rows = IdIndex(self.docids)
        starts = np.cumsum([0] + [part.ntotal for part in self._parts])
        run: Run = {}
        for qid, query in zip(qids, np.asarray(vectors, dtype=np.float32), strict=True):
            docids = candidates.get(qid, [])
            rows = self._rows.known_rows(list(docids), "the dense index")
            shard_of = np.searchsorted(starts, rows, side="right") - 1
            scores = np.empty(len(rows), dtype=np.float32)
            for shard in np.unique(shard_of):
                where = np.flatnonzero(shard_of == shard)
                scores[where] = self._reconstruct(int(shard), rows[where] - starts[shard]) @ query
            run[qid] = {docid: float(score) for docid, score in zip(docids, scores, strict=True)}
        return run

    def _reconstruct(self, shard: int, rows: np.ndarray) -> np.ndarray:
        """(n, dim) stored vectors of ``rows`` of one shard."""
        part = self._parts[shard]
        try:
            return part.reconstruct_batch(rows)
        except RuntimeError:
            try:
                faiss.extract_index_ivf(part).make_direct_map()  # IVF keeps no id → list map until asked to
            except RuntimeError:
                raise RuntimeError(
                    f"faiss index {self.factory!r} cannot return its stored vectors, so documents outside its top k "
                    "cannot be scored; use index.union_scores=floor"
                ) from None
            return part.reconstruct_batch(rows)


class DenseRetriever(Retriever):
    """A corpus's encoded vectors in a :class:`FaissIndex`; searches with ``encode_query``.

    Args:
        encode_query: Query texts → (n, dim) tensors.
        index: The built (or loaded) faiss index of the corpus's vectors.
        batch_size: Texts per forward pass.
        queries: How query texts are batched (``method.query_prep()``): by their length in tokens, tokens ahead.
    """

    def __init__(
        self, encode_query: Callable[[list[str]], torch.Tensor], index: FaissIndex, batch_size: int = 128,
        queries: QueryPrep = PLAIN_QUERIES,
    ) -> None:  # fmt: skip
        self.encode_query, self.batch_size, self.queries = encode_query, batch_size, queries
        self._last: tuple[dict[str, str], np.ndarray] | None = None
        self.index = index

    def encode_queries(self, queries: dict[str, str]) -> np.ndarray:
        """Query vectors, in the order of ``queries`` (the last call's are kept for a search and its scoring)."""
        if self._last is None or self._last[0] != queries:
            texts = list(queries.values())
            vectors = encode_all(self.encode_query, texts, self.batch_size, "queries", self.queries.lengths(texts),
                                 self.queries.prepare)  # fmt: skip
            self._last = (dict(queries), vectors)
        return self._last[1]

    def search(self, queries: dict[str, str], k: int) -> Run:
        """Top ``k`` documents per query by inner product."""
        return self.index.search(self.encode_queries(queries), list(queries), k)

    def candidate_scores(self, queries: dict[str, str], candidates: dict[str, list[str]]) -> Run:
        """Inner products of each query with given documents, at any rank (:meth:`FaissIndex.candidate_scores`)."""
        return self.index.candidate_scores(self.encode_queries(queries), list(queries), candidates)


def vectors_payload(method: OffersVectors, texts: Texts) -> Payload:
    """``vectors``: (n, dim) float32 document vectors of ``texts`` by the method's ``encode_doc``."""
    return encode_payload(lambda batch: {"vectors": method.encode_doc(batch)}, texts, method.encode_batch_size, "docs")


class Faiss(EncodingIndex[OffersVectors]):
    """A method's vectors in faiss, searched by inner product (``conf/index/faiss.yaml``).

    Args:
        factory: faiss factory string (``Flat``, ``HNSW32``, ``IVF1024,Flat``, ...).
        nprobe: Lists probed per query by IVF indexes.
        use_gpu: ``auto`` (the GPUs faiss sees), true (required) or false.
        train_size: Vectors an index that needs training (IVF, PQ) is trained on.
    """

    accepts: ClassVar[tuple[str, ...]] = ("vectors",)
    saves: ClassVar[bool] = True

    def __init__(
        self, factory: str = "Flat", nprobe: int = 32, use_gpu: bool | str = "auto", train_size: int = 262_144
    ) -> None:
        super().__init__()
        self.factory, self.nprobe, self.use_gpu, self.train_size = factory, nprobe, use_gpu, train_size

    def faiss_index(self) -> FaissIndex:
        """An empty :class:`FaissIndex` with these settings."""
        return FaissIndex(self.factory, self.use_gpu, self.nprobe, self.train_size)

    def corpus_payload(self, method: OffersVectors, texts: Texts) -> Payload:
        """The documents' vectors."""
        return vectors_payload(method, texts)

    def build(
        self, method: OffersVectors, collection: Collection, bm25: BM25, shards: CorpusShards | None = None
    ) -> DenseRetriever:
        """The corpus's vectors in a (sharded) faiss inner-product index."""
        shards = self.corpus_shards(method, collection, bm25, shards)
        index = self.faiss_index().build_sharded([(ids, part["vectors"].numpy()) for ids, part in shards])
        return DenseRetriever(method.encode_query, index, method.encode_batch_size, method.query_prep())

    def save(self, retriever: Retriever, folder: Path) -> None:
        """The faiss shards of a retriever this index built."""
        self.built_here(retriever, DenseRetriever).index.save(folder)

    def load(self, method: OffersVectors, collection: Collection, bm25: BM25, folder: Path) -> DenseRetriever:
        """The retriever :meth:`save` wrote, its queries encoded by ``method``."""
        index = self.faiss_index().load(folder)
        return DenseRetriever(method.encode_query, index, method.encode_batch_size, method.query_prep())
