"""CSurF's inverted lists as an index family (``conf/index/csf.yaml``): built, saved and loaded.

The lists and their search are :class:`~retrieval_zoo.index.csurf.csf_retriever.CsfRetriever`'s; this module is the
index the configs name, which builds that retriever from a method's bags of CSFs, splits it over processes under DDP,
and keeps it in a saved index folder (``index_dir``).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.corpus_store import corpus_ids
from retrieval_zoo.encoding.batching import Texts
from retrieval_zoo.index.csurf.csf_retriever import CsfRetriever
from retrieval_zoo.index.csurf.explain import CsfWords
from retrieval_zoo.index.csurf.payload import VectorDtype, encode_bags_payload, storage_dtype
from retrieval_zoo.index.index import EncodingIndex
from retrieval_zoo.index.process_shards import check_share, split_over_processes, split_world
from retrieval_zoo.index.representations import OffersCsfBags
from retrieval_zoo.index.shards import CorpusShards, Payload
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.retriever import Retriever


def words(method: OffersCsfBags, collection: Collection) -> CsfWords:
    """How ``method`` names tokens and forms, and the collection's document texts: what explanations read."""
    corpus = collection.corpus
    return CsfWords(method.token_strings, method.form_strings, lambda docids: [corpus[docid] for docid in docids])


class InvertedLists(EncodingIndex[OffersCsfBags]):
    """CSurF's inverted lists of CSFs (csurf.md §4; ``conf/index/csf.yaml``), scored exactly as CSurF trains.

    Args:
        prune_threshold: Postings with a lower weight are not indexed (1e-8 in the paper).
        prune_fraction: α, the lowest-weight share of postings removed after indexing (Figure 2).
        query_batch_size: Queries scored at a time.
        vector_dtype: How the postings' 32-d vectors are stored: ``float32``, ``float16`` or ``bfloat16`` (half the
            bytes of the lists; pairs are scored in float32).
        compile: Score CSF pairs with a torch.compile'd kernel (about 1.7× faster on a CPU thread; needs a C++
            compiler there; scores equal to float32 rounding, so ties may order differently).
    """

    accepts: ClassVar[tuple[str, ...]] = ("csf_bags",)

    saves: ClassVar[bool] = True

    def __init__(
        self,
        prune_threshold: float = 1e-8,
        prune_fraction: float = 0.0,
        query_batch_size: int = 8,
        vector_dtype: VectorDtype = "float32",
        compile: bool = False,
    ) -> None:
        super().__init__()
        check_share(prune_fraction)  # fail at construction on a bad α or dtype
        storage_dtype(vector_dtype)
        self.prune_threshold, self.prune_fraction = prune_threshold, prune_fraction
        self.query_batch_size, self.vector_dtype, self.compile = query_batch_size, vector_dtype, compile

    def corpus_payload(self, method: OffersCsfBags, texts: Texts) -> Payload:
        """The documents' bags of CSFs."""
        return encode_bags_payload(method.doc_csfs, texts, method.encode_batch_size)

    def serve(self, method: OffersCsfBags, collection: Collection, bm25: BM25, shards: CorpusShards | None) -> None:
        """Under DDP, on ranks other than 0: build this rank's share of the lists and answer rank 0's searches."""
        with split_over_processes():
            if split_world()[1] > 1:
                self.build(method, collection, bm25, shards).serve()

    def build(
        self, method: OffersCsfBags, collection: Collection, bm25: BM25, shards: CorpusShards | None = None
    ) -> CsfRetriever:
        """Inverted lists of the corpus's CSFs, one set per shard."""
        shards = self.corpus_shards(method, collection, bm25, shards)
        return CsfRetriever.from_shards(method.encode_query, shards, method.vocab_size, self.prune_threshold,
                                        self.prune_fraction, self.query_batch_size, queries=method.query_prep(),
                                        vector_dtype=self.vector_dtype, compiled=self.compile,
                                        words=words(method, collection))  # fmt: skip

    def save_refusal(self, retriever: Retriever) -> str:
        """Lists split over the processes (evaluation under DDP) are not saved: each process holds its share."""
        if self.built_here(retriever, CsfRetriever).split:
            return "is split over the processes (each holds its share of the lists): evaluate on one to save it"
        return ""

    def save(self, retriever: Retriever, folder: Path) -> None:
        """The lists this index built, held whole by this process."""
        self.built_here(retriever, CsfRetriever).save(folder)

    def load(self, method: OffersCsfBags, collection: Collection, bm25: BM25, folder: Path) -> CsfRetriever:
        """The saved lists, held whole by this process, searched with ``method``'s query bags."""
        return CsfRetriever.load(method.encode_query, folder, corpus_ids(collection.corpus), self.query_batch_size,
                                 method.query_prep(), self.compile, words(method, collection))  # fmt: skip
