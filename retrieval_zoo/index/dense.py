"""Inner-product search with faiss: Flat by default, any factory string by config, GPU when CUDA is present."""

from __future__ import annotations

import faiss
import numpy as np

from retrieval_zoo.data.formats import Run
from retrieval_zoo.methods.encoding import encode_all


class FaissIndex:
    """A faiss inner-product index over document vectors.

    Args:
        factory: A faiss index factory string (``"Flat"``, ``"HNSW32"``, ``"IVF1024,Flat"``, ``"PQ64"``, ...).
        use_gpu: ``"auto"`` moves the index to all GPUs when faiss sees any; ``True`` requires them.
        nprobe: For IVF indexes, the lists probed per query.
    """

    def __init__(self, factory: str = "Flat", use_gpu: bool | str = "auto", nprobe: int = 32) -> None:
        self.factory, self.use_gpu, self.nprobe = factory, use_gpu, nprobe
        self.index: faiss.Index | None = None
        self.docids: list[str] = []

    def build(self, vectors: np.ndarray, docids: list[str]) -> FaissIndex:
        """Index ``vectors`` (n, dim) whose rows belong to ``docids``."""
        if len(vectors) != len(docids):
            raise ValueError(f"{len(vectors)} vectors for {len(docids)} document ids")
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        index = faiss.index_factory(vectors.shape[1], self.factory, faiss.METRIC_INNER_PRODUCT)
        gpus = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
        if self.use_gpu is True and gpus == 0:
            raise RuntimeError("index.use_gpu=true but faiss sees no GPU (install the gpu extra on a CUDA machine)")
        if self.use_gpu and gpus > 0:
            index = faiss.index_cpu_to_all_gpus(index)
        if not index.is_trained:
            index.train(vectors)
        index.add(vectors)
        if hasattr(index, "nprobe"):
            index.nprobe = self.nprobe
        self.index, self.docids = index, list(docids)
        return self

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
    """Encodes a corpus with a method's ``encode_doc`` into a :class:`FaissIndex`; searches with ``encode_query``.

    Args:
        method: Anything with ``encode_query`` / ``encode_doc`` mapping texts to (n, dim) tensors.
        corpus: docid → text.
        factory: faiss factory string.
        batch_size: Texts per forward pass.
    """

    def __init__(self, method: object, corpus: dict[str, str], factory: str = "Flat", batch_size: int = 128) -> None:
        self.method, self.batch_size = method, batch_size
        docids = list(corpus)
        vectors = encode_all(method.encode_doc, [corpus[d] for d in docids], batch_size, desc="encode corpus")
        self.index = FaissIndex(factory).build(vectors, docids)

    def encode_queries(self, queries: dict[str, str]) -> np.ndarray:
        """Query vectors, in the order of ``queries``."""
        return encode_all(self.method.encode_query, list(queries.values()), self.batch_size, desc="queries")

    def search(self, queries: dict[str, str], k: int) -> Run:
        """Top ``k`` documents per query by inner product."""
        return self.index.search(self.encode_queries(queries), list(queries), k)
