"""The contracts across the method | index | evaluation boundaries.

What an index reads of any method is :class:`Represented`; what evaluation may ask of the retriever an index builds
is :class:`Retriever`.

An index builds a :class:`Retriever` (BM25 is one too). ``search`` is all a retriever must do; everything else the
pipeline reads has a default meaning "not this kind", which a retriever that is that kind overrides:

- a fusion of two parts names them and the attribute its weight lives in (``parts``, ``weight_name``), searches
  each part alone (:meth:`Retriever.side`) and takes the candidates of its parts from ``depth``;
- an index that measures itself reports its size (``nbytes``), its lexical entries per document
  (``lexical_nonzero``) and its efficiency figures (:meth:`Retriever.efficiency`);
- one that can say why a document matched explains it (:meth:`Retriever.explain`);
- one whose parts live in other processes lets them go (:meth:`Retriever.release`).

The pipeline calls these unconditionally: nothing across this boundary is probed with ``hasattr``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np
import torch

from retrieval_zoo.data.formats import Run
from retrieval_zoo.id_index import IdIndex

REPRESENTATIONS = ("bm25", "vectors", "term_weights", "csf_bags", "lexical_semantic")  # each: index/index.py


@runtime_checkable
class Represented(Protocol):
    """What an index reads of any method, whatever its class: every ``RetrievalMethod`` declares it.

    Attributes:
        representations: What the method produces for an index to search (of :data:`REPRESENTATIONS`), its own first.
        trainable: False for a method without parameters (BM25, off-the-shelf term vectors): nothing is trained or
            encoded ahead.
    """

    representations: ClassVar[tuple[str, ...]]
    trainable: ClassVar[bool]


class Retriever(ABC):
    """Search over an indexed corpus, and what evaluation reports about it (module docstring).

    Attributes:
        parts: The (lexical, semantic) parts of a fusion, each searchable alone; empty for one part.
        weight_name: The attribute that holds the fusion weight, which tuning sets; None without one.
        depth: Candidates a fusion takes from each part (tuning searches this deep).
        nbytes: Bytes the index holds; None where it does not measure itself.
        lexical_nonzero: Lexical entries (open DLR slices, sparse terms, CSFs) per document; None where there are
            none.
    """

    parts: tuple[str, ...] = ()
    weight_name: str | None = None
    depth: int = 1000
    measured_nbytes: int | None = None  # what ``nbytes`` reports, for a retriever that sizes itself when built

    @property
    def nbytes(self) -> int | None:
        """Bytes the index holds; None where it does not measure itself."""
        return self.measured_nbytes

    @property
    def lexical_nonzero(self) -> float | None:
        """Lexical entries per document; None where there are none."""
        return None

    @abstractmethod
    def search(self, queries: dict[str, str], k: int) -> Run:
        """The top ``k`` documents of each query: qid → {docid: score}."""

    def side(self, part: str, queries: dict[str, str], k: int) -> Run:
        """The top ``k`` of one part of a fusion alone (evaluation's component runs)."""
        raise ValueError(f"{type(self).__name__} is not a fusion: it has no part {part!r}")

    def search_with_parts(self, queries: dict[str, str], k: int, depth: int) -> tuple[Run, dict[str, Run]]:
        """The fused top ``k`` and each of :attr:`fused_parts`' own top ``depth``: one search, then one per part.

        A retriever that scores every part on its way to the fused score returns them from that one pass.
        """
        return self.search(queries, k), {part: self.side(part, queries, depth) for part in self.fused_parts}

    @property
    def fused_parts(self) -> tuple[str, ...]:
        """The parts evaluation searches alone: those of a fusion with a weight, else none."""
        return tuple(self.parts) if self.weight_name else ()

    def efficiency(self) -> dict[str, float] | None:
        """Efficiency figures (CSurF's §5.2: |C^q|, |C^d|, E_OPS, latency); None where none are measured."""
        return None

    def explain(self, queries: dict[str, str], run: Run) -> list[dict] | None:
        """Why the top documents of ``run`` matched each of ``queries``; None where the retriever cannot say."""
        return None

    def release(self) -> None:  # noqa: B027 (a default that does nothing, not a method left to implement)
        """Let go of the processes that serve parts of the index (none by default)."""


def ranked_run(
    qids: Sequence[str],
    rows: torch.Tensor | np.ndarray | list[list[int]],
    scores: torch.Tensor | np.ndarray | list[list[float]],
    docids: Sequence[str] | np.ndarray | IdIndex,
    positive_only: bool = False,
) -> Run:
    """A run from each query's top corpus rows: the ids of a whole batch are looked up at once.

    A corpus's :class:`~retrieval_zoo.id_index.IdIndex` answers one row in microseconds; at k = 1,000 that was
    most of a fast index's time a query, so the rows are named in one vectorised call.

    Args:
        qids: (Q,) the queries, in the rows' order.
        rows: (Q, k) corpus row numbers, best first.
        scores: (Q, k) their scores.
        docids: The corpus's document ids by row.
        positive_only: Leave out documents scoring 0 or less (an index whose scores are matches only).

    Returns:
        qid → {docid: score}.
    """
    row_lists = rows.tolist() if isinstance(rows, torch.Tensor | np.ndarray) else rows
    score_lists = scores.tolist() if isinstance(scores, torch.Tensor | np.ndarray) else scores
    if isinstance(docids, IdIndex | np.ndarray):  # Python strings for this batch's rows alone
        ids = docids.ids if isinstance(docids, IdIndex) else docids
        flat = iter(ids[np.asarray([r for row in row_lists for r in row], dtype=np.int64)].tolist())
        names = [[next(flat) for _ in row] for row in row_lists]
    else:  # a list answers a row at list speed
        names = [[docids[r] for r in row] for row in row_lists]
    run: Run = {}
    for qid, row_names, row_scores in zip(qids, names, score_lists, strict=True):
        if positive_only:
            run[qid] = {d: s for d, s in zip(row_names, row_scores, strict=True) if s > 0}
        else:
            run[qid] = dict(zip(row_names, row_scores, strict=True))
    return run
