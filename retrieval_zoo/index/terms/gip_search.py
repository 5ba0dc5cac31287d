"""Search over DLR/DHR vectors by gated inner product: exact brute force, and the paper's two-stage search (§3.4).

Exact search scores every document by GIP (Eq. 11), in chunks, on the GPU when there is one. Two-stage search
first scores with approximate GIP over only the query dimensions whose value exceeds θ (Eq. 18), or with a plain
inner product of the values (faiss Flat, gates ignored), keeps the top K′, and re-ranks those by exact GIP.
"""

from __future__ import annotations

import numpy as np
import torch
from tqdm import tqdm

from retrieval_zoo.data.formats import Run
from retrieval_zoo.index.terms.dlr import gip, gip_parts
from retrieval_zoo.index.vectors.faiss import FaissIndex
from retrieval_zoo.retriever import ranked_run

FIRST_STAGES = ("approximate_gip", "inner_product")
STORED_POSITIONS = (np.dtype(np.uint8), np.dtype(np.uint16))  # Slicing.index_dtype's widths


def held_positions(indices: np.ndarray, stored: np.dtype) -> torch.Tensor:
    """Positions as GIP scores them, converted to ``stored`` (uint8, uint16 or int32); uint16's bits held as int16.

    A gate only compares a query's position with a document's for equality, which the reinterpreted bits keep; torch
    covers int16's comparisons, not all of uint16's, and int32 would double the positions of BM25's vocabulary.
    """
    indices = np.ascontiguousarray(indices, dtype=stored)
    return torch.from_numpy(indices.view(np.int16) if stored == np.uint16 else indices)


def default_device() -> torch.device:
    """The GPU when there is one, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class GipIndex:
    """Documents as (values, indices) pairs, searched by GIP.

    Args:
        values: (C, M) float16 document values (DLR or DHR).
        indices: (C, M) document indices.
        docids: The documents' ids, in row order (held as a numpy string array).
        device: Where scoring runs (default: the GPU when present). Values are scored in float32 on the CPU and in
            float16 on a GPU.
        chunk_elements: Bound on the (queries × documents × M) gate tensor of one exact-GIP step.
        open_dims: Trailing dimensions whose gate is always open (a DHR's [CLS] part): their positions are not
            counted in :attr:`nbytes`, since they need not be stored.
        batched_first_stage: Eq. 18 for a whole query batch as one chunked GIP with the dimensions at or below θ
            zeroed (no host synchronisation a query; on a CPU about M / (dimensions above θ) times the work of the
            per-query loop over the dimensions above θ). Default: on a GPU.
    """

    def __init__(
        self,
        values: np.ndarray,
        indices: np.ndarray,
        docids: list[str],
        device: torch.device | str | None = None,
        chunk_elements: int = 1 << 25,
        open_dims: int = 0,
        batched_first_stage: bool | None = None,
    ) -> None:
        if not (values.shape == indices.shape and values.shape[0] == len(docids)):
            raise ValueError(f"values {values.shape}, indices {indices.shape} and {len(docids)} ids disagree")
        self.device = torch.device(device) if device is not None else default_device()
        self.dtype = torch.float16 if self.device.type == "cuda" else torch.float32
        self.values = torch.from_numpy(values).to(self.device, self.dtype)
        self.position_dtype = indices.dtype if indices.dtype in STORED_POSITIONS else np.dtype(np.int32)
        self.indices = held_positions(indices, self.position_dtype).to(self.device)
        self.docids, self.chunk_elements = np.asarray(docids, dtype=str), chunk_elements  # no object per id
        self.index_itemsize, self.open_dims = indices.dtype.itemsize, open_dims
        self._flat: FaissIndex | None = None
        self.batched_first_stage = self.device.type == "cuda" if batched_first_stage is None else batched_first_stage

    @property
    def nbytes(self) -> int:
        """Stored size: float16 values, plus positions at their stored width (uint8 or uint16) for gated dims."""
        rows, dims = self.values.shape
        return rows * (2 * dims + self.index_itemsize * (dims - self.open_dims))

    def queries(self, values: np.ndarray, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """(Q, M) query values and indices as this index scores them: on its device, in its dtypes."""
        return (
            torch.from_numpy(values).to(self.device, self.dtype),
            held_positions(indices, self.position_dtype).to(self.device),
        )

    def stored_positions(self, rows: slice | int) -> np.ndarray:
        """The positions of the documents at ``rows`` as given to the index (uint8, uint16 or int32)."""
        return self.indices[rows].cpu().numpy().view(self.position_dtype)

    def exact_scores(
        self, q_values: torch.Tensor, q_indices: torch.Tensor, rows: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(Q, C) exact GIP of each query with every document (or with ``rows`` of them, (Q, K′))."""
        if rows is not None:  # per-query candidate lists: (q, K′, M) gathered documents, q bounded by the chunk size
            step = max(1, self.chunk_elements // max(1, rows.shape[1] * q_values.shape[1]))
            parts = []
            for i in range(0, rows.shape[0], step):
                queries = slice(i, i + step)
                parts.append(
                    self.row_scores(rows[queries], q_values[queries].unsqueeze(1), q_indices[queries].unsqueeze(1))
                )
            return torch.cat(parts)
        parts = [gip(q_values, q_indices, self.values[rows], self.indices[rows]) for rows in self._blocks(q_values)]
        return torch.cat(parts, dim=1)

    def row_scores(self, rows: torch.Tensor, q_values: torch.Tensor, q_indices: torch.Tensor) -> torch.Tensor:
        """Exact GIP of the documents at ``rows`` (any shape) with queries broadcast against them: (..., M) → (...).

        Each document's gated products summed in float32, whatever the shape of the batch of rows: a candidate scores
        the same bits in a query's list (:meth:`exact_scores`) as in a sharded corpus's pairs (``gip_shards``).
        """
        gate = self.indices[rows] == q_indices
        return (gate * self.values[rows] * q_values).float().sum(dim=-1)

    def _blocks(self, q_values: torch.Tensor) -> list[slice]:
        """The document rows exact GIP scores at a time against ``q_values``: (Q × rows × M) within the chunk bound."""
        step = max(1, self.chunk_elements // max(1, q_values.shape[0] * q_values.shape[1]))
        return [slice(i, i + step) for i in range(0, self.values.shape[0], step)]

    def covered_by(self, candidates: int) -> bool:
        """Whether a first stage keeping K′ = ``candidates`` keeps every document: its re-rank is exact GIP."""
        return candidates >= len(self.docids)

    def search(
        self,
        values: np.ndarray,
        indices: np.ndarray,
        qids: list[str],
        k: int,
        first_stage: str | None = None,
        theta: float = 0.3,
        candidates: int = 10_000,
        batch_size: int = 64,
    ) -> Run:
        """Top ``k`` documents per query by exact GIP, after an optional first stage.

        Args:
            values: (Q, M) query values.
            indices: (Q, M) query indices.
            qids: Query ids, in row order.
            k: Documents returned per query.
            first_stage: None (exact GIP over the whole corpus), ``approximate_gip`` (Eq. 18, dimensions with
                value > θ) or ``inner_product`` (faiss Flat over the values); either keeps ``candidates`` (K′,
                capped by the corpus size) for the exact re-ranking.
            theta: θ of the approximate GIP.
            candidates: K′.
            batch_size: Queries scored together.
        """
        if first_stage is not None and first_stage not in FIRST_STAGES:
            raise ValueError(f"first_stage must be None or one of {FIRST_STAGES}, not {first_stage!r}")
        run: Run = {}
        depth = min(candidates, len(self.docids))
        for start in tqdm(range(0, len(qids), batch_size), desc="gip search", unit="batch", leave=False):
            q_values, q_indices = self.queries(values[start : start + batch_size], indices[start : start + batch_size])
            if first_stage is None or self.covered_by(candidates):
                scores, rows = self.exact_scores(q_values, q_indices).topk(min(k, len(self.docids)), dim=1)
            else:
                _, shortlist = self.first_stage_top(first_stage, q_values, q_indices, theta, depth, values[start:])
                rescored = self.exact_scores(q_values, q_indices, shortlist)
                scores, order = rescored.topk(min(k, depth), dim=1)
                rows = shortlist.gather(1, order)
            run.update(ranked_run(qids[start : start + batch_size], rows, scores, self.docids))
        return run

    def search_parts(self, values: np.ndarray, indices: np.ndarray, qids: list[str], depths: dict[str | None, int],
                     split: int, batch_size: int = 64) -> dict[str | None, Run]:  # fmt: skip
        """Exact GIP's top ``depth`` of the fused score (key None) and of its ``lexical`` and ``semantic`` parts.

        One product of the queries with every document gives all three (:func:`gip_parts`); ``split`` is where the
        [CLS] part's dimensions start. Arguments otherwise as :meth:`search` without a first stage.
        """
        runs: dict[str | None, Run] = {part: {} for part in depths}
        for start in range(0, len(qids), batch_size):
            q_values, q_indices = self.queries(values[start : start + batch_size], indices[start : start + batch_size])
            chunks = [gip_parts(q_values, q_indices, self.values[rows], self.indices[rows], split)
                      for rows in self._blocks(q_values)]  # fmt: skip
            for n, part in enumerate((None, "lexical", "semantic")):
                if part in depths:
                    scores, rows = torch.cat([c[n] for c in chunks], dim=1).topk(min(depths[part], len(self.docids)))
                    runs[part].update(ranked_run(qids[start : start + batch_size], rows, scores, self.docids))
        return runs

    def first_stage_top(
        self,
        name: str,
        q_values: torch.Tensor,
        q_indices: torch.Tensor,
        theta: float,
        depth: int,
        raw_values: np.ndarray,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(Q, depth) first-stage scores and candidate rows of a query batch, best first.

        ``raw_values`` are the batch's query values as given (their first Q rows), which the inner-product stage reads.
        """
        if name == "inner_product":
            if self._flat is None:
                self._flat = FaissIndex("Flat").build(self.values.float().cpu().numpy(), range(len(self.docids)))
            scores, rows = self._flat.search_rows(raw_values[: q_values.shape[0]].astype(np.float32), depth)
            return torch.from_numpy(scores).to(self.device), torch.from_numpy(rows).to(self.device)
        return self.approximate_scores(q_values, q_indices, theta).topk(depth, dim=1)

    def approximate_scores(self, q_values: torch.Tensor, q_indices: torch.Tensor, theta: float) -> torch.Tensor:
        """(Q, C) approximate GIP (Eq. 18) of a query batch with every document, in float32.

        Only the query dimensions above θ count (the largest one where none is): one chunked GIP a batch, or a loop
        over the queries.
        """
        if self.batched_first_stage:
            return self.exact_scores(above_theta(q_values, theta), q_indices)
        scores = torch.empty(q_values.shape[0], len(self.docids), dtype=torch.float32, device=self.device)
        for q, (q_value, q_index) in enumerate(zip(q_values, q_indices, strict=True)):
            dims = (q_value > theta).nonzero().flatten()
            if len(dims) == 0:  # nothing above θ: the largest dimension alone, as the reference code does
                dims = q_value.argmax().reshape(1)
            gate = self.indices[:, dims] == q_index[dims]
            scores[q] = (gate * self.values[:, dims]).float() @ q_value[dims].float()
        return scores


def above_theta(q_values: torch.Tensor, theta: float) -> torch.Tensor:
    """(Q, M) query values with the dimensions at or below θ zeroed (Eq. 18).

    A query with none above θ keeps its largest dimension alone, as the reference code does.
    """
    keep = q_values > theta
    largest = torch.arange(q_values.shape[1], device=q_values.device) == q_values.argmax(dim=1, keepdim=True)
    keep |= largest & ~keep.any(dim=1, keepdim=True)
    return torch.where(keep, q_values, torch.zeros((), dtype=q_values.dtype, device=q_values.device))
