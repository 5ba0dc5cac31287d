"""Learned sparse term weights searched approximately by Seismic (``conf/index/seismic.yaml``).

Seismic (Bruch, Nardini, Rulli and Venturini, SIGIR 2024; ``pyseismic-lsr`` on PyPI) prunes each term's inverted
list to its ``n_postings`` highest-weighted documents (on average over terms), groups a list into blocks of similar
documents (``centroid_fraction``), and summarises each block by the weights that keep ``summary_energy`` of its
mass. A query keeps its ``query_cut`` highest-weighted terms and skips a block whose summary's score is below
``heap_factor`` × the current k-th score. It is approximate by design: the README's benchmark reports its recall of
the exact top 1,000 beside its latency. Document weights are stored as float16, so a returned score is the inner
product to about 3 significant digits; no other quantization is applied (unlike :mod:`retrieval_zoo.index.terms.bmp`).

A ``term_weights`` method's lexical vectors go in as they are (BERT's unused leading ids dropped), shard by shard,
in CSR batches; terms are named by their vocabulary id. With a [CLS] part, the engine's top ``candidates`` are
re-ranked as :mod:`retrieval_zoo.index.terms.impact` describes. Vocabularies past 65,535 terms take Seismic's large
vocabulary variant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from tqdm import tqdm

from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.corpus_store import corpus_ids
from retrieval_zoo.encoding.batching import QueryPrep
from retrieval_zoo.evaluation.metrics import Measure
from retrieval_zoo.host_memory import release_freed_memory
from retrieval_zoo.index.representations import OffersTermWeights
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.index.terms.dhr_vectors import PartEncoder
from retrieval_zoo.index.terms.impact import Hits, ImpactCorpus, ImpactRetriever
from retrieval_zoo.index.terms.term_index import DHR_GRID, TermIndex
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.retriever import Retriever
from retrieval_zoo.term_matrix import columns_from, parts, to_csr

INSTALL = "pip install pyseismic-lsr==0.5.4  (or: pip install -e '.[engines]')"
SMALL_VOCABULARY = 65_535  # Seismic's standard index names terms in 16 bits
SAVED, SAVED_FILE = "seismic", "seismic.index.seismic"  # a saved index's file, before and after Seismic names it


def import_seismic() -> Any:
    """The ``seismic`` module; a clear error with the install command when it is missing."""
    try:
        import seismic
    except ImportError:
        raise ImportError(f"index=seismic needs the Seismic engine, which is not installed: {INSTALL}") from None
    return seismic


def large_vocabulary(corpus: ImpactCorpus) -> bool:
    """Whether the corpus's terms need Seismic's large vocabulary variant."""
    return len(corpus.term_max) > SMALL_VOCABULARY


def csr_arrays(matrix: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A (n, m) matrix's non-zero entries as CSR arrays: int64 offsets (n + 1,) and column ids, float32 values."""
    offsets, columns, values = parts(to_csr(matrix.float()))
    return offsets.numpy().astype(np.int64), columns.numpy().astype(np.int64), values.numpy()


def check_density(offsets: np.ndarray, first_row: int, max_doc_terms: int) -> None:
    """Refuse a shard (row offsets (n + 1,)) with a document of more than ``max_doc_terms`` non-zero weights.

    Seismic summarises each block of an inverted list over its documents' terms: on near-dense vectors (DeLADE's
    softmax bag of words, Eq. 23, or an untrained SPLADE: every term of the vocabulary) its build takes minutes for a
    handful of documents (measured: 104 s for 5 documents of 30,000 terms), where learned sparse documents have a
    few hundred.
    """
    counts = np.diff(offsets)
    if len(counts) and counts.max() > max_doc_terms:
        row = int(counts.argmax())
        raise ValueError(f"index=seismic: document row {first_row + row} has {int(counts[row]):,} non-zero term "
                         f"weights, over index.max_doc_terms={max_doc_terms:,}; Seismic is built for sparse vectors "
                         "(its build on near-dense ones does not finish): use index=sparse, gip, bmp or "
                         "lucene_impact, or raise index.max_doc_terms")  # fmt: skip


class SeismicRetriever(ImpactRetriever):
    """A corpus's term weights in a Seismic index (module docstring; settings as :class:`Seismic`).

    :meth:`from_shards` builds one; ``index`` is Seismic's (``SeismicIndex`` or, past 65,535 terms, its large
    vocabulary variant).
    """

    name = "seismic"

    def __init__(
        self, encode_query: PartEncoder, corpus: ImpactCorpus, index: Any, lam: float, discard: int,
        query_cut: int = 10, heap_factor: float = 0.7, candidates: int = 1000, threads: int = 0,
        batch_size: int = 128, queries: QueryPrep | None = None,
    ) -> None:  # fmt: skip
        super().__init__(encode_query, corpus, lam, discard, candidates, batch_size, queries)
        self.index, self.query_cut, self.heap_factor, self.threads = index, query_cut, heap_factor, threads
        self.string_type = import_seismic().get_seismic_string()
        self.measured_nbytes = self.postings * 6 + corpus.cls_nbytes  # a posting: f16 value, id

    @classmethod
    def from_shards(
        cls, encode_query: PartEncoder, shards: CorpusShards, lam: float, discard: int, n_postings: int = 3500,
        centroid_fraction: float = 0.1, summary_energy: float = 0.4, doc_cut: int = 15, query_cut: int = 10,
        heap_factor: float = 0.7, max_doc_terms: int = 2048, candidates: int = 1000, threads: int = 0,
        batch_size: int = 128, queries: QueryPrep | None = None,
    ) -> SeismicRetriever:  # fmt: skip
        """Index the corpus's ``lexical`` (n, |V|) vectors by shard, their weights as they are (scale 1)."""
        corpus = ImpactCorpus.scan(shards, discard, 1)
        corpus.scale = 1.0
        seismic, large = import_seismic(), large_vocabulary(corpus)
        dataset = (seismic.SeismicDatasetLV if large else seismic.SeismicDataset)(dim=len(corpus.term_max))
        row = 0
        for docids, payload in tqdm(shards, desc="seismic dataset", unit="shard", leave=False):
            offsets, columns, values = csr_arrays(columns_from(payload["lexical"], discard))
            check_density(offsets, row, max_doc_terms)
            dataset.add_documents_by_id([str(r) for r in range(row, row + len(docids))], columns, values, offsets)
            corpus.postings += len(values)
            row += len(docids)
        build = (seismic.SeismicIndexLV if large else seismic.SeismicIndex).build_from_dataset
        index = build(dataset, n_postings=n_postings, centroid_fraction=centroid_fraction,
                      summary_energy=summary_energy, doc_cut=doc_cut, num_threads=threads)  # fmt: skip
        del dataset
        release_freed_memory()  # the dataset's copy of the postings and the shards' arrays, freed
        return cls(encode_query, corpus, index, lam, discard, query_cut, heap_factor, candidates, threads, batch_size,
                   queries)  # fmt: skip

    def save(self, folder: Path) -> None:
        """Seismic's index file and what is kept beside it, into ``folder``."""
        self.index.save(str(folder / SAVED))  # Seismic adds its extension
        self.corpus.save(folder)

    def query_impacts(self, weights: torch.Tensor) -> tuple[torch.Tensor, float]:
        """The weights as they are (Seismic takes floats), scale 1."""
        return weights, 1.0

    def lexical_hits(self, lexical: torch.Tensor, depth: int) -> list[Hits]:
        """Every query in one parallel ``batch_search``; its results come back by query id, in any order."""
        offsets, columns, values = csr_arrays(lexical)
        asked = [n for n in range(len(lexical)) if offsets[n + 1] > offsets[n]]
        hits: list[Hits] = [(np.zeros(0, dtype=np.int64), np.zeros(0))] * len(lexical)
        if not asked:
            return hits
        spans = [slice(offsets[n], offsets[n + 1]) for n in asked]
        found = self.index.batch_search(
            np.array([str(n) for n in asked], dtype=self.string_type),
            [columns[span].astype(str).astype(self.string_type) for span in spans],
            [values[span] for span in spans],
            k=depth, query_cut=self.query_cut, heap_factor=self.heap_factor, num_threads=self.threads,
        )  # fmt: skip
        for results in found:
            if results:
                number = int(results[0][0])
                hits[number] = (np.asarray([int(doc) for _, _, doc in results], dtype=np.int64),
                                np.asarray([score for _, score, _ in results], dtype=np.float64))  # fmt: skip
        return hits


class Seismic(TermIndex):
    """A ``term_weights`` method's lexical vectors in Seismic, searched approximately (module docstring).

    Args:
        n_postings: Average postings kept per term (Seismic's λ; its MS MARCO setting is 3,500).
        centroid_fraction: Blocks per inverted list, as a fraction of its postings (β).
        summary_energy: Mass of a block each summary keeps (α).
        doc_cut: Terms of a document used to cluster it into blocks.
        query_cut: Highest-weighted query terms searched.
        heap_factor: A block is skipped when its summary scores below this × the current k-th score.
        max_doc_terms: Non-zero weights a document may have (:func:`check_density`); more is a clear error.
        candidates: Documents the engine returns for the fused re-ranking with a [CLS] part.
        threads: Build and search threads (0: Seismic's default, every core).
        weight: λ of the [CLS] part at indexing; null takes the method's.
        weight_grid: λ values tried when evaluation tunes.
        tune_measure: What tuning maximises.
        extend_grid: Go past the grid's edge where the best value lies (False: the grid only).
    """

    saves: ClassVar[bool] = True

    def __init__(
        self, n_postings: int = 3500, centroid_fraction: float = 0.1, summary_energy: float = 0.4, doc_cut: int = 15,
        query_cut: int = 10, heap_factor: float = 0.7, max_doc_terms: int = 2048, candidates: int = 1000,
        threads: int = 0, weight: float | None = None, weight_grid: tuple[float, ...] = DHR_GRID,
        tune_measure: Measure = "MRR@10",
        extend_grid: bool = True,
    ) -> None:  # fmt: skip
        super().__init__(weight, weight_grid, tune_measure, extend_grid)
        import_seismic()  # when the config is read: a missing engine fails at once, before anything is encoded
        if not (0 < centroid_fraction <= 1 and 0 < summary_energy <= 1 and 0 < heap_factor <= 1):
            raise ValueError("index.centroid_fraction, index.summary_energy and index.heap_factor must be in (0, 1], "
                             f"not {centroid_fraction}, {summary_energy}, {heap_factor}")  # fmt: skip
        if min(n_postings, doc_cut, query_cut, max_doc_terms) < 1:
            raise ValueError(f"index.n_postings, index.doc_cut, index.query_cut and index.max_doc_terms must be at "
                             f"least 1, not {n_postings}, {doc_cut}, {query_cut}, {max_doc_terms}")  # fmt: skip
        self.settings: dict[str, Any] = {
            "n_postings": n_postings, "centroid_fraction": centroid_fraction, "doc_cut": doc_cut,
            "summary_energy": summary_energy, "query_cut": query_cut, "heap_factor": heap_factor,
            "max_doc_terms": max_doc_terms, "candidates": candidates, "threads": threads,
        }  # fmt: skip

    def build(
        self, method: OffersTermWeights, collection: Collection, bm25: BM25, shards: CorpusShards | None = None
    ) -> SeismicRetriever:
        """The corpus's term weights in a Seismic index (the [CLS] vectors beside it)."""
        encoder, shards = self.encoder_and_shards(method, collection, bm25, shards)
        return SeismicRetriever.from_shards(encoder.encode_queries, shards, self.fusion_weight(encoder),
                                            encoder.discard, **self.settings, batch_size=encoder.batch_size,
                                            queries=encoder.queries)  # fmt: skip

    def save(self, retriever: Retriever, folder: Path) -> None:
        """The Seismic index this index built, and the [CLS] part kept beside it."""
        self.built_here(retriever, SeismicRetriever).save(folder)

    def load(self, method: OffersTermWeights, collection: Collection, bm25: BM25, folder: Path) -> SeismicRetriever:
        """The saved Seismic index, its queries encoded by ``method``."""
        encoder = method.term_encoder(collection, bm25)
        corpus = ImpactCorpus.load(folder, corpus_ids(collection.corpus))
        seismic = import_seismic()
        index = (seismic.SeismicIndexLV if large_vocabulary(corpus) else seismic.SeismicIndex).load(
            str(folder / SAVED_FILE)
        )
        search = {key: self.settings[key] for key in ("query_cut", "heap_factor", "candidates", "threads")}
        return SeismicRetriever(encoder.encode_queries, corpus, index, self.fusion_weight(encoder), encoder.discard,
                                **search, batch_size=encoder.batch_size, queries=encoder.queries)  # fmt: skip
