"""End-to-end retrieval with dense lexical (DLR) or dense hybrid (DHR) representations (delade-dhr.md §3.1–3.4).

A model's lexical vectors are densified batch by batch as the corpus is encoded, so the |V|-dimensional vectors
never exist for the whole corpus; a [CLS] part, when there is one, is appended as √λ·[CLS] (Eq. 15–16). Search is
GIP (Eq. 11), exact or in two stages (Eq. 18). Either part can be searched alone by zeroing the other part of the
query values, which is how evaluation reports the lexical and [CLS] components.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from tqdm import tqdm

from retrieval_zoo.data.formats import Run
from retrieval_zoo.index.dlr import Slicing, densify, explain, hybrid
from retrieval_zoo.index.gip import GipIndex
from retrieval_zoo.methods.encoding import length_sorted_batches

PartEncoder = Callable[[list[str]], tuple[torch.Tensor, torch.Tensor | None]]


@torch.inference_mode()
def represent(
    encode: PartEncoder,
    items: list[str],
    slicing: Slicing,
    lam: float,
    batch_size: int,
    desc: str = "densify",
    texts: list[str] | None = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """DLR (or DHR, when ``encode`` returns a [CLS] part) of every item, in input order.

    Args:
        encode: items → ((n, |V|) lexical vectors, (n, c) [CLS] vectors or None).
        items: What ``encode`` takes: query texts, or document ids.
        slicing: The DLR slicing.
        lam: λ of the [CLS] part (Eq. 14).
        batch_size: Items per forward pass.
        desc: Progress-bar label.
        texts: The items' texts, whose lengths group the batches (default: the items themselves).

    Returns:
        (n, M [+ c]) float16 values, (n, M [+ c]) indices, and the number of [CLS] dimensions c.
    """
    order, values, indices, cls_dims = slicing.order(), None, None, 0
    batches = length_sorted_batches(texts if texts is not None else items, batch_size)
    for batch in tqdm(batches, desc=desc, unit="batch", leave=False, mininterval=5):
        lexical, cls = encode([items[i] for i in batch])
        part_values, part_indices = densify(lexical, slicing, order)
        if cls is not None:
            cls_dims = cls.shape[1]
            part_values, part_indices = hybrid(part_values, part_indices, cls.float().cpu().numpy(), lam)
        if values is None:
            values = np.empty((len(items), part_values.shape[1]), dtype=np.float16)
            indices = np.empty((len(items), part_values.shape[1]), dtype=part_indices.dtype)
        values[batch], indices[batch] = part_values, part_indices
    if values is None:
        raise ValueError("nothing to densify")
    return values, indices, cls_dims


class PartSearch:
    """A lexical part and an optional [CLS] part, each searchable alone: shared by the DLR/DHR and exact retrievers.

    Subclasses implement ``search(queries, k, part=None, weight=None)``.
    """

    parts = ("lexical", "semantic")

    def check_part(self, part: str | None, has_semantic: bool) -> None:
        """Raise on a ``part`` this retriever does not have (``semantic`` needs a [CLS] part)."""
        available = self.parts if has_semantic else ("lexical",)
        if part is not None and part not in available:
            raise ValueError(f"unknown part {part!r}; parts: {available}")

    def side(self, name: str, queries: dict[str, str], k: int) -> Run:
        """One part's own top ``k`` (evaluation's component runs)."""
        return self.search(queries, k, part=name)


class DhrRetriever(PartSearch):
    """A corpus densified into a :class:`GipIndex`, searched with queries densified the same way.

    Args:
        encode_query: Query texts → (lexical, [CLS] or None) vectors.
        encode_doc: Document ids → (lexical, [CLS] or None) vectors.
        corpus: docid → text.
        slicing: DLR slicing.
        lam: λ of the [CLS] part, as indexed (√λ on both sides, Eq. 14–16).
        first_stage: None (exact GIP), ``approximate_gip`` or ``inner_product`` (see :meth:`GipIndex.search`).
        theta: θ of approximate GIP.
        candidates: K′ of the first stage.
        batch_size: Texts per forward pass.
        device: Where GIP runs (default: the GPU when present).
        terms: Vocabulary ids → their strings, for :meth:`explain` (default: the ids as text).
    """

    def __init__(
        self,
        encode_query: PartEncoder,
        encode_doc: PartEncoder,
        corpus: dict[str, str],
        slicing: Slicing,
        lam: float = 1.0,
        first_stage: str | None = "approximate_gip",
        theta: float = 0.3,
        candidates: int = 10_000,
        batch_size: int = 128,
        device: torch.device | str | None = None,
        terms: Callable[[list[int]], list[str]] | None = None,
    ) -> None:
        self.encode_query, self.encode_doc, self.slicing = encode_query, encode_doc, slicing
        self.lam, self.batch_size, self.weight = lam, batch_size, lam
        self.terms = terms or (lambda ids: [str(i) for i in ids])
        self.first_stage, self.theta, self.candidates = first_stage, theta, candidates
        docids = list(corpus)
        values, indices, self.cls_dims = represent(
            encode_doc, docids, slicing, lam, batch_size, "densify corpus", texts=[corpus[d] for d in docids]
        )
        self.index = GipIndex(values, indices, docids, device=device, open_dims=self.cls_dims)

    def represent_queries(self, queries: dict[str, str]) -> tuple[np.ndarray, np.ndarray]:
        """(Q, M [+ c]) values and indices of the queries, in the order of the dict."""
        values, indices, _ = represent(self.encode_query, list(queries.values()), self.slicing, self.lam,
                                       self.batch_size, "densify queries")  # fmt: skip
        return values, indices

    def search(self, queries: dict[str, str], k: int, part: str | None = None, weight: float | None = None) -> Run:
        """Top ``k`` by GIP over the whole DHR, or over one ``part`` (the other part of the queries zeroed).

        The [CLS] part weighs ``weight`` (default :attr:`weight`, the indexed λ until tuning sets it): the queries'
        [CLS] values are rescaled by weight / λ, so λ is tuned without re-indexing the corpus.
        """
        values, indices = self.represent_queries(queries)
        weight = self.weight if weight is None else weight
        if self.cls_dims and weight != self.lam:
            if self.lam <= 0:
                raise ValueError("the [CLS] part was indexed with λ = 0: re-index with λ > 0 to weigh it")
            values = values.copy()
            values[:, values.shape[1] - self.cls_dims :] *= weight / self.lam
        self.check_part(part, bool(self.cls_dims))
        if part is not None:
            split = values.shape[1] - self.cls_dims
            values = values.copy()
            if part == "lexical":
                values[:, split:] = 0
            else:
                values[:, :split] = 0
        return self.index.search(values, indices, list(queries), k, self.first_stage, self.theta, self.candidates)

    @property
    def nbytes(self) -> int:
        """Stored index size: float16 values, and uint8/uint16 positions for the DLR part only."""
        return self.index.nbytes

    @property
    def lexical_nonzero(self) -> float:
        """Mean non-zero DLR slices per document (Table 6's "# tokens/doc"; at most M)."""
        split = self.index.values.shape[1] - self.cls_dims
        return (self.index.values[:, :split] != 0).sum(dim=1).float().mean().item()

    def explain(self, queries: dict[str, str], run: Run, depth: int = 3) -> list[dict]:
        """What each query matched in its top ``depth`` documents: the DLR's open gates as weighted terms (Table 13).

        Returns:
            One record per (query, document): ids, score, the lexical part's GIP, and the matched terms with their
            query and document values, best first.
        """
        values, indices = self.represent_queries(queries)
        rows = {docid: row for row, docid in enumerate(self.index.docids)}
        doc_values, doc_indices = self.index.values.float().cpu().numpy(), self.index.indices.cpu().numpy()
        records = []
        for q, qid in enumerate(queries):
            for docid in list(run.get(qid, {}))[:depth]:
                r = rows[docid]
                matched = explain(values[q].astype(np.float32), indices[q], doc_values[r], doc_indices[r], self.slicing)
                words = self.terms([term for term, _, _ in matched])
                records.append({
                    "qid": qid, "docid": docid, "score": run[qid][docid],
                    "lexical": sum(a * b for _, a, b in matched),
                    "matches": [{"term": w, "query": a, "doc": b} for w, (_, a, b) in zip(words, matched, strict=True)],
                })  # fmt: skip
        return records
