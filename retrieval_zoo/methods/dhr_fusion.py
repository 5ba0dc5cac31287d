"""Independent model fusion through dense representations (delade-dhr.md §3.1–3.2, Eq. 4–16; Tables 4 and 7).

Off-the-shelf lexical vectors are densified into DLRs and, when a dense model is given, joined with its vectors into
DHRs (DLR ⊕ √λ·dense, all-ones gate for the dense part), so BM25 + dense runs as one GIP search instead of Lucene
plus faiss. The lexical vectors are either BM25's, as query IDF and document TF saturation, whose inner product is
BM25 (RoC Eq. 3), over the collection's analysed vocabulary; or the backbone's own SPLADE vectors (Eq. 20), e.g. the
embedded SPLADE-tiny's. Nothing is trained.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from retrieval_zoo.backbones import Backbone
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.formats import Qrels
from retrieval_zoo.evaluation import tune_weight
from retrieval_zoo.index.dhr import DhrRetriever
from retrieval_zoo.index.shards import CorpusShards, Payload
from retrieval_zoo.index.sparse import ON_DEMAND_SHARD, SparseRetriever, lexical_retriever
from retrieval_zoo.lexical.bm25 import BM25
from retrieval_zoo.lexical.splade import splade_vectors
from retrieval_zoo.methods.base import RetrievalMethod
from retrieval_zoo.methods.encoding import encode_payload

LEXICAL = ("bm25", "splade")


def bag_matrix(bags: list[dict[str, float]], vocabulary: dict[str, int]) -> torch.Tensor:
    """(n,) term → weight bags as an (n, |vocabulary|) matrix; terms outside the vocabulary match nothing."""
    matrix = torch.zeros(len(bags), len(vocabulary))
    for row, bag in enumerate(bags):
        for term, weight in bag.items():
            if term in vocabulary:
                matrix[row, vocabulary[term]] = weight
    return matrix


class DhrFusion(RetrievalMethod):
    """(lexical + dense)_DHR, or a lexical model's DLR alone.

    Args:
        lexical: ``bm25`` or ``splade`` (the backbone's MLM head, Eq. 20).
        backbone: The SPLADE backbone (unused for ``bm25``).
        dense: A dense method (``encode_query`` / ``encode_doc``) for the semantic part, or None for the DLR alone.
        dense_checkpoint: A ``train.py`` checkpoint whose weights ``dense`` loads (e.g. the default dense run's).
        lambda_dense: λ of Eq. 13–14 (the indexed value; tuning replaces it at query time).
        lambda_grid: λ values tried on held-out training queries when evaluation tunes (``eval.tune_queries``).
        tune_measure: What tuning maximises (MRR@10 in §5.2).
        bm25_k1: BM25's k1.
        bm25_b: BM25's b.
        slices: M, the DLR dimension; 0 searches the exact sparse vectors instead (the reference).
        slicing: ``stride``, ``contiguous`` or ``random``.
        discard: Leading vocabulary ids dropped (570 for BERT's vocabulary; BM25's ids are the sorted vocabulary).
        first_stage: ``approximate_gip``, ``inner_product`` or null (exact GIP).
        theta: θ of approximate GIP.
        candidates: K′ of the first stage.
        encode_batch_size: Texts per forward pass.
        max_length: SPLADE's truncation, in tokens.
    """

    trainable: ClassVar[bool] = False

    def __init__(
        self,
        lexical: str = "bm25",
        backbone: Backbone | None = None,
        dense: RetrievalMethod | None = None,
        dense_checkpoint: str | None = None,
        lambda_dense: float = 1.0,
        lambda_grid: tuple[float, ...] = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0),
        tune_measure: str = "MRR@10",
        bm25_k1: float = 0.9,
        bm25_b: float = 0.4,
        slices: int = 768,
        slicing: str = "stride",
        discard: int = 0,
        first_stage: str | None = "approximate_gip",
        theta: float = 0.3,
        candidates: int = 10_000,
        encode_batch_size: int = 64,
        max_length: int = 256,
    ) -> None:
        super().__init__()
        if lexical not in LEXICAL:
            raise ValueError(f"lexical must be one of {LEXICAL}, not {lexical!r}")
        if lexical == "splade" and backbone is None:
            raise ValueError("lexical=splade needs a backbone with an MLM head")
        self.lexical, self.dense, self.lambda_dense = lexical, dense, lambda_dense
        self.lambda_grid, self.tune_measure = tuple(lambda_grid), tune_measure
        self.complementarity_parts = ("lexical", "semantic") if dense is not None else None
        if dense is not None and dense_checkpoint:
            state = torch.load(dense_checkpoint, map_location="cpu", weights_only=False)["state_dict"]
            dense.load_state_dict(state)
        if lexical == "splade":
            self.tokenizer, self.mlm = backbone.load_tokenizer(), backbone.load_model(mlm_head=True).eval()
        self.bm25_k1, self.bm25_b = bm25_k1, bm25_b
        self.slices, self.slicing, self.discard = slices, slicing, discard
        self.first_stage, self.theta, self.candidates = first_stage, theta, candidates
        self.encode_batch_size, self.max_length = encode_batch_size, max_length

    def _semantic(self, texts: list[str], query: bool) -> torch.Tensor | None:
        if self.dense is None:
            return None
        return (self.dense.encode_query if query else self.dense.encode_doc)(texts)

    def tune(self, retriever: DhrRetriever | SparseRetriever, queries: dict[str, str], qrels: Qrels) -> dict:
        """Grid-search λ of the dense part on held-out training queries (§5.2 tunes it on MRR@10)."""
        if self.dense is None:
            return {}
        return tune_weight(retriever, queries, qrels, self.lambda_grid, self.tune_measure, "lambda_dense")

    def build_retriever(
        self, collection: Collection, shards: CorpusShards | None = None
    ) -> DhrRetriever | SparseRetriever:
        """Densify the corpus's lexical vectors (and join the dense ones) into a GIP index; ``slices=0``: exact.

        Nothing is trained, so the corpus is encoded here, on demand, one shard of ``ON_DEMAND_SHARD`` at a time.
        """
        corpus = collection.corpus
        if self.lexical == "bm25":
            bm25 = BM25(collection, self.bm25_k1, self.bm25_b)
            docids = list(corpus)
            bags = dict(zip(docids, bm25.document_term_weights(docids, saturation_only=True), strict=True))
            vocabulary = {term: i for i, term in enumerate(sorted(set().union(*bags.values())))}

            def lexical_queries(texts: list[str]) -> torch.Tensor:
                return bag_matrix(bm25.query_idf(texts), vocabulary)

            def lexical_docs(ids: list[str]) -> torch.Tensor:
                return bag_matrix([bags[d] for d in ids], vocabulary)

            vocab_size, words = len(vocabulary), list(vocabulary)
            terms = lambda ids: [words[i] for i in ids]  # noqa: E731
        else:

            def lexical_queries(texts: list[str]) -> torch.Tensor:
                tokens = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length,
                                        return_tensors="pt")  # fmt: skip
                return splade_vectors(self.mlm, tokens["input_ids"], tokens["attention_mask"])

            def lexical_docs(ids: list[str]) -> torch.Tensor:
                return lexical_queries([corpus[d] for d in ids])

            vocab_size = self.mlm.get_output_embeddings().out_features
            terms = self.tokenizer.convert_ids_to_tokens

        def encode_docs(ids: list[str]) -> dict[str, torch.Tensor | None]:
            return {"lexical": lexical_docs(ids), "cls": self._semantic([corpus[d] for d in ids], query=False)}

        def encode_shard(ids: list[str]) -> Payload:
            return encode_payload(encode_docs, ids, self.encode_batch_size, "docs")

        shards = CorpusShards.on_demand(list(corpus), encode_shard, ON_DEMAND_SHARD)
        return lexical_retriever(
            lambda texts: (lexical_queries(texts), self._semantic(texts, query=True)), shards, vocab_size,
            self.slices, self.slicing, self.discard, self.lambda_dense, self.first_stage, self.theta, self.candidates,
            self.encode_batch_size, terms=terms,
        )  # fmt: skip
