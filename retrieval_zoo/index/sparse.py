"""Exact search over full-vocabulary sparse vectors: the reference that DLR/DHR densification approximates.

delade-dhr.md compares each DLR/DHR with the sparse retrieval it replaces (Tables 4, 7, 9). Here the corpus's
|V|-dimensional lexical vectors are kept as one sparse CSR matrix and scored exactly, <q_BoW, d_BoW>, beside an
optional [CLS] part added as λ·<q_cls, d_cls>: the exact fused score the model trains on (Eq. 13). The same
``search(part=) / side / nbytes`` interface as :class:`retrieval_zoo.index.dhr.DhrRetriever`; methods take it with
``slices=0`` (:func:`lexical_retriever`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from tqdm import tqdm

from retrieval_zoo.data.formats import Run
from retrieval_zoo.index.dhr import DhrRetriever, PartEncoder
from retrieval_zoo.index.dlr import Slicing
from retrieval_zoo.index.gip import default_device
from retrieval_zoo.methods.encoding import length_sorted_batches


@torch.inference_mode()
def encode_sparse(
    encode: PartEncoder, items: list[str], discard: int, batch_size: int, desc: str, texts: list[str] | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(n, |V|) sparse CSR lexical vectors (ids below ``discard`` zeroed) and (n, c) [CLS] vectors or None."""
    rows, cols, vals, cls_parts, order = [], [], [], [], []
    vocab_size = 0
    for batch in tqdm(length_sorted_batches(texts if texts is not None else items, batch_size), desc=desc,
                      unit="batch", leave=False, mininterval=5):  # fmt: skip
        lexical, cls = encode([items[i] for i in batch])
        lexical = lexical.float().cpu()
        lexical[:, :discard] = 0
        vocab_size = lexical.shape[1]
        nonzero = lexical.nonzero(as_tuple=True)
        rows.append(torch.tensor(batch)[nonzero[0]])
        cols.append(nonzero[1])
        vals.append(lexical[nonzero])
        order.extend(batch)
        if cls is not None:
            cls_parts.append(cls.float().cpu())
    size = (len(items), vocab_size)
    ids = torch.stack([torch.cat(rows), torch.cat(cols)])
    matrix = torch.sparse_coo_tensor(ids, torch.cat(vals), size, check_invariants=True)
    cls_matrix = None
    if cls_parts:
        cls_matrix = torch.empty(len(items), cls_parts[0].shape[1])
        cls_matrix[torch.tensor(order)] = torch.cat(cls_parts)
    with warnings.catch_warnings():  # "sparse CSR support is in beta": sparse @ dense is all that is used
        warnings.simplefilter("ignore", UserWarning)
        return matrix.coalesce().to_sparse_csr(), cls_matrix


class SparseRetriever:
    """Exact lexical (+ λ·[CLS]) inner products over the whole corpus, documents held as one sparse matrix.

    Args:
        encode_query: Query texts → ((n, |V|) lexical, (n, c) [CLS] or None) vectors.
        encode_doc: Document ids → the same.
        corpus: docid → text.
        lam: λ of the [CLS] part (Eq. 13).
        discard: Leading vocabulary ids zeroed, as the DLR drops them.
        batch_size: Texts per forward pass, and queries scored together.
        device: Where scoring runs (default: the GPU when present).
        terms: Vocabulary ids → their strings, for :meth:`explain`.
    """

    parts = ("lexical", "semantic")

    def __init__(
        self,
        encode_query: PartEncoder,
        encode_doc: PartEncoder,
        corpus: dict[str, str],
        lam: float = 1.0,
        discard: int = 0,
        batch_size: int = 128,
        device: torch.device | str | None = None,
        terms: Callable[[list[int]], list[str]] | None = None,
    ) -> None:
        self.encode_query, self.lam, self.discard, self.batch_size = encode_query, lam, discard, batch_size
        self.terms = terms or (lambda ids: [str(i) for i in ids])
        self.device = torch.device(device) if device is not None else default_device()
        self.docids = list(corpus)
        docs, cls = encode_sparse(encode_doc, self.docids, discard, batch_size, "encode corpus (sparse)",
                                  [corpus[d] for d in self.docids])  # fmt: skip
        self.docs, self.cls = docs.to(self.device), cls.to(self.device) if cls is not None else None

    @property
    def nbytes(self) -> int:
        """Stored size: float32 values, int64 term ids and row offsets, and the float32 [CLS] part."""
        sparse = sum(t.numel() * t.element_size() for t in (self.docs.values(), self.docs.col_indices(),
                                                            self.docs.crow_indices()))  # fmt: skip
        return sparse + (self.cls.numel() * self.cls.element_size() if self.cls is not None else 0)

    @property
    def lexical_nonzero(self) -> float:
        """Mean non-zero vocabulary terms per document."""
        return self.docs.values().numel() / len(self.docids)

    @torch.inference_mode()
    def search(self, queries: dict[str, str], k: int, part: str | None = None) -> Run:
        """Top ``k`` by the exact fused score, or by one ``part`` alone (``lexical`` or ``semantic``)."""
        if part is not None and (part not in self.parts or (part == "semantic" and self.cls is None)):
            raise ValueError(f"unknown part {part!r}; parts: {self.parts if self.cls is not None else ('lexical',)}")
        qids = list(queries)
        lexical, cls = encode_sparse(self.encode_query, list(queries.values()), self.discard, self.batch_size,
                                     "encode queries (sparse)")  # fmt: skip
        lexical = lexical.to_dense()
        run: Run = {}
        for start in range(0, len(qids), self.batch_size):
            scores = torch.zeros(len(self.docids), len(qids[start : start + self.batch_size]), device=self.device)
            if part != "semantic":
                scores += self.docs @ lexical[start : start + self.batch_size].T.to(self.device)
            if part != "lexical" and self.cls is not None:
                scores += self.lam * (self.cls @ cls[start : start + self.batch_size].T.to(self.device))
            top_scores, rows = scores.T.topk(min(k, len(self.docids)), dim=1)
            for qid, row_scores, row_ids in zip(qids[start:], top_scores.tolist(), rows.tolist(), strict=False):
                run[qid] = {self.docids[r]: s for r, s in zip(row_ids, row_scores, strict=True)}
        return run

    def side(self, name: str, queries: dict[str, str], k: int) -> Run:
        """One part's own top ``k`` (evaluation's component runs)."""
        return self.search(queries, k, part=name)


def lexical_retriever(
    encode_query: PartEncoder,
    encode_doc: PartEncoder,
    corpus: dict[str, str],
    vocab_size: int,
    slices: int,
    slicing: str,
    discard: int,
    lam: float,
    first_stage: str | None,
    theta: float,
    candidates: int,
    batch_size: int,
    terms: Callable[[list[int]], list[str]] | None = None,
) -> DhrRetriever | SparseRetriever:
    """A DLR/DHR index of M = ``slices`` dimensions searched by GIP, or with ``slices=0`` the exact sparse vectors.

    The sparse vectors are the reference the densification approximates. Arguments as in :class:`DhrRetriever`.
    """
    if slices == 0:
        return SparseRetriever(encode_query, encode_doc, corpus, lam, discard, batch_size, terms=terms)
    return DhrRetriever(
        encode_query, encode_doc, corpus, Slicing(vocab_size, slices, discard, slicing), lam, first_stage, theta,
        candidates, batch_size, terms=terms,
    )  # fmt: skip
