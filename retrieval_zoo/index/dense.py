"""Inner-product search with faiss: Flat by default, any factory string by config, GPU when CUDA is present.

A corpus encoded in shards (:mod:`retrieval_zoo.index.shards`) becomes one faiss index per shard, joined in a
``faiss.IndexShards`` that searches every shard and merges their top k; on GPUs the shards are spread over the
devices. Indexes that need training (IVF, PQ) are trained once, on the first shards, and each shard gets a copy.
"""

from __future__ import annotations

import faiss
import numpy as np

from retrieval_zoo.data.formats import Run
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.methods.encoding import encode_all

VectorShard = tuple[list[str], np.ndarray]


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
        self.docids: list[str] = []
        self._parts: list[faiss.Index] = []  # IndexShards does not own its shards: keep them alive
        self._gpu_resources: list = []

    def build(self, vectors: np.ndarray, docids: list[str]) -> FaissIndex:
        """Index ``vectors`` (n, dim) whose rows belong to ``docids``, as one shard."""
        return self.build_sharded([(list(docids), vectors)])

    def build_sharded(self, shards: list[VectorShard]) -> FaissIndex:
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
        gpus = self._gpus()
        self._parts = []
        for number, (_, vectors) in enumerate(shards):
            part = faiss.clone_index(template)
            if hasattr(part, "nprobe"):
                part.nprobe = self.nprobe
            if gpus:
                part = faiss.index_cpu_to_gpu(self._gpu_resources[number % gpus], number % gpus, part)
            part.add(vectors)
            self._parts.append(part)
        if len(self._parts) == 1:
            self.index = self._parts[0]
        else:
            self.index = faiss.IndexShards(dim, bool(gpus), True)  # threaded on GPUs; successive ids
            for part in self._parts:
                self.index.add_shard(part)
        self.docids = [docid for docids, _ in shards for docid in docids]
        return self

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
        return {
            qid: {self.docids[r]: float(s) for s, r in zip(srow, rrow, strict=True) if r >= 0}
            for qid, srow, rrow in zip(qids, scores, rows, strict=True)
        }


class DenseRetriever:
    """A corpus's encoded ``vectors`` shards in a :class:`FaissIndex`; searches with the method's ``encode_query``.

    Args:
        method: Anything with ``encode_query`` mapping texts to (n, dim) tensors.
        shards: The corpus encoded by the method's ``encode_doc``, as ``vectors`` (n, dim) per shard.
        factory: faiss factory string.
        batch_size: Texts per forward pass.
    """

    def __init__(self, method: object, shards: CorpusShards, factory: str = "Flat", batch_size: int = 128) -> None:
        self.method, self.batch_size = method, batch_size
        self.index = FaissIndex(factory).build_sharded([(ids, part["vectors"].numpy()) for ids, part in shards])

    def encode_queries(self, queries: dict[str, str]) -> np.ndarray:
        """Query vectors, in the order of ``queries``."""
        return encode_all(self.method.encode_query, list(queries.values()), self.batch_size, desc="queries")

    def search(self, queries: dict[str, str], k: int) -> Run:
        """Top ``k`` documents per query by inner product."""
        return self.index.search(self.encode_queries(queries), list(queries), k)
