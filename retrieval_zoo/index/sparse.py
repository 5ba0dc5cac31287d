"""Exact search over full-vocabulary sparse vectors: the reference that DLR/DHR densification approximates.

delade-dhr.md compares each DLR/DHR with the sparse retrieval it replaces (Tables 4, 7, 9). Here the corpus's
|V|-dimensional lexical vectors are kept as one matrix (sparse CSR, or dense where that is smaller) and scored
exactly, <q_BoW, d_BoW>, beside an optional [CLS] part added as λ·<q_cls, d_cls>: the exact fused score the model
trains on (Eq. 13). The same ``search(part=) / side / nbytes`` interface as
:class:`retrieval_zoo.index.dhr.DhrRetriever`; ``index=sparse`` selects it (:class:`retrieval_zoo.index.terms.Sparse`).
"""

from __future__ import annotations

import warnings

import torch

from retrieval_zoo.batching import PLAIN_QUERIES, QueryPrep, encode_payload
from retrieval_zoo.data.formats import Run
from retrieval_zoo.index.dhr import PartEncoder, PartSearch
from retrieval_zoo.index.gip import default_device
from retrieval_zoo.index.shards import CorpusShards

# torch warns that sparse CSR support is in beta; building a CSR matrix and multiplying it by a dense one is all
# that is used here, and both are covered by tests.
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta", category=UserWarning)


def lexical_matrix(shards: CorpusShards, discard: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The corpus's lexical vectors as one matrix, in corpus order, and its [CLS] vectors or None.

    The matrix is sparse CSR (float32 values, int32 term ids and row offsets), or dense float32 when the first rows
    are more than half non-zero, where CSR would be larger: SPLADE and BM25 vectors are sparse, DeLADE's softmax
    vectors (Eq. 23) are not. Ids below ``discard`` are zeroed.
    """
    offsets, cols, vals, cls_parts, rows, nonzeros, vocab_size = [], [], [], [], 0, 0, 0
    dense: torch.Tensor | None = None
    for _, payload in shards:
        if payload.get("cls") is not None:
            cls_parts.append(payload["cls"])
        for start in range(0, len(payload["lexical"]), batch_size):
            lexical = payload["lexical"][start : start + batch_size].clone()
            lexical[:, :discard] = 0
            vocab_size = lexical.shape[1]
            if not rows and lexical.count_nonzero() * 2 >= lexical.numel():  # denser than one half: store dense
                dense = torch.empty(len(shards.docids), vocab_size)
            if dense is not None:
                dense[rows : rows + len(lexical)] = lexical
            else:
                csr = lexical.to_sparse_csr()
                offsets.append((csr.crow_indices()[1:] + nonzeros).to(torch.int32))
                cols.append(csr.col_indices().to(torch.int32))
                vals.append(csr.values())
                nonzeros += csr.values().numel()
            rows += len(lexical)
    cls = torch.cat(cls_parts) if cls_parts else None
    if dense is not None:
        return dense, cls
    offsets.insert(0, torch.zeros(1, dtype=torch.int32))
    matrix = torch.sparse_csr_tensor(torch.cat(offsets), torch.cat(cols), torch.cat(vals), (rows, vocab_size),
                                     check_invariants=False)  # fmt: skip
    return matrix, cls


class SparseRetriever(PartSearch):
    """Exact lexical (+ λ·[CLS]) inner products over the whole corpus, documents held as one matrix.

    Args:
        encode_query: Query texts → ((n, |V|) lexical, (n, c) [CLS] or None) vectors.
        shards: The corpus's ``lexical`` (n, |V|) and optional ``cls`` (n, c) vectors, by shard.
        lam: λ of the [CLS] part (Eq. 13).
        discard: Leading vocabulary ids zeroed, as the DLR drops them.
        batch_size: Texts per forward pass, and queries scored together.
        device: Where scoring runs (default: the GPU when present).
        queries: How query texts are batched: by their length in tokens, tokens prepared ahead.
    """

    def __init__(
        self,
        encode_query: PartEncoder,
        shards: CorpusShards,
        lam: float = 1.0,
        discard: int = 0,
        batch_size: int = 128,
        device: torch.device | str | None = None,
        queries: QueryPrep = PLAIN_QUERIES,
    ) -> None:
        self.encode_query, self.weight, self.discard, self.batch_size = encode_query, lam, discard, batch_size
        self.queries = queries
        self.device = torch.device(device) if device is not None else default_device()
        docs, cls = lexical_matrix(shards, discard, batch_size)
        self.docids = shards.docids
        self.docs, self.cls = docs.to(self.device), cls.to(self.device) if cls is not None else None
        self.weight_name = "semantic_weight" if cls is not None else None  # tuning sets the [CLS] part's weight

    @property
    def nbytes(self) -> int:
        """Stored size: the lexical matrix (CSR: float32 values, int32 ids and offsets; or dense float32) and [CLS]."""
        parts = [self.docs] if self.docs.layout == torch.strided else [self.docs.values(), self.docs.col_indices(),
                                                                       self.docs.crow_indices()]  # fmt: skip
        parts += [self.cls] if self.cls is not None else []
        return sum(t.numel() * t.element_size() for t in parts)

    @property
    def lexical_nonzero(self) -> float:
        """Mean non-zero vocabulary terms per document."""
        dense = self.docs.layout == torch.strided
        return (self.docs.count_nonzero().item() if dense else self.docs.values().numel()) / len(self.docids)

    @torch.inference_mode()
    def search(self, queries: dict[str, str], k: int, part: str | None = None, weight: float | None = None) -> Run:
        """Top ``k`` by the exact fused score, or by one ``part`` alone (``lexical`` or ``semantic``).

        The [CLS] part weighs ``weight`` (default :attr:`weight`: λ until tuning sets it).
        """
        weight = self.weight if weight is None else weight
        self.check_part(part, self.cls is not None)
        qids = list(queries)
        encode = lambda batch: dict(zip(("lexical", "cls"), self.encode_query(batch), strict=True))  # noqa: E731
        texts = list(queries.values())
        encoded = encode_payload(encode, texts, self.batch_size, "encode queries (exact)", self.queries.lengths(texts),
                                 self.queries.prepare)  # fmt: skip
        lexical, cls = encoded["lexical"], encoded.get("cls") if self.cls is not None else None
        lexical[:, : self.discard] = 0
        run: Run = {}
        for start in range(0, len(qids), self.batch_size):
            scores = torch.zeros(len(self.docids), len(qids[start : start + self.batch_size]), device=self.device)
            if part != "semantic":
                scores += self.docs @ lexical[start : start + self.batch_size].T.to(self.device)
            if part != "lexical" and self.cls is not None:
                scores += weight * (self.cls @ cls[start : start + self.batch_size].T.to(self.device))
            top_scores, rows = scores.T.topk(min(k, len(self.docids)), dim=1)
            for qid, row_scores, row_ids in zip(qids[start:], top_scores.tolist(), rows.tolist(), strict=False):
                run[qid] = {self.docids[r]: s for r, s in zip(row_ids, row_scores, strict=True)}
        return run
