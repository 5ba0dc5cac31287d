"""Why a document matched a query under CSurF's score (csurf.md §3.3): each query token's best CSF pair.

Score(q, d) sums, over the query's tokens q_i, the best w_A·w_B·f(v_A, v_B) of a query CSF A grounded on q_i and a
document CSF B of the same surface form. An explanation lists those maxima, one per query token that matched: the
query token, the surface form both CSFs share, the document token B is grounded on, and the pair's score; they sum
to the document's score. Evaluation writes them with ``eval.explain=N`` (``explain.<split>.jsonl``), and the HTML
report shows them beside each document.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from retrieval_zoo.index.csurf.lists import Lists
from retrieval_zoo.lexical.csf_bags import CsfBags, pair_values


@dataclass
class CsfWords:
    """What an explanation names things with.

    Args:
        tokens: (texts, ``query`` or ``doc``) → each text's tokens as strings, by position (a bag's ``source``).
        forms: Surface forms (vocabulary ids) → their strings.
        doc_texts: Document ids → their texts.
    """

    tokens: Callable[[list[str], str], list[list[str]]]
    forms: Callable[[list[int]], list[str]]
    doc_texts: Callable[[list[str]], list[str]]


def document_csfs(lists: Lists, row: int) -> CsfBags:
    """The CSFs the lists hold for the document at corpus ``row`` (one text), read back from its shard's lists."""
    for postings, first_row in lists:
        if first_row <= row < first_row + postings.doc_end:
            at = (postings.doc == row - first_row).nonzero().squeeze(1)
            surface = torch.searchsorted(postings.ptr, at, right=True) - 1  # the list each posting lies in
            vector = None if postings.vector is None else postings.vector[at]
            return CsfBags(torch.zeros_like(at), surface, postings.source[at].long(), postings.weight[at], vector,
                           torch.zeros_like(at, dtype=torch.bool), 1, 0)  # fmt: skip
    raise KeyError(f"no list holds corpus row {row}")


def best_pairs(query: CsfBags, doc: CsfBags) -> list[tuple[int, int, int, float]]:
    """Each matched query token's best pair, best first: (query position, surface form, document position, score).

    Args:
        query: One query's CSFs.
        doc: One document's CSFs (:func:`document_csfs`).
    """
    pair_query, pair_doc = (query.surface[:, None] == doc.surface[None, :]).nonzero(as_tuple=True)
    if not len(pair_query):
        return []
    values = pair_values(query.weight.float(), doc.weight.float(), query.vector, doc.vector, pair_query, pair_doc)
    best: dict[int, tuple[int, int, int, float]] = {}
    for a, b, value in zip(pair_query.tolist(), pair_doc.tolist(), values.tolist(), strict=True):
        token = int(query.source[a])
        if value > 0 and (token not in best or value > best[token][3]):
            best[token] = (token, int(query.surface[a]), int(doc.source[b]), value)
    return sorted(best.values(), key=lambda pair: pair[3], reverse=True)


def explanation(pairs: list[tuple[int, int, int, float]], query_tokens: list[str], doc_tokens: list[str],
                forms: list[str]) -> list[dict]:  # fmt: skip
    """:func:`best_pairs` as the report reads them: query token, surface form, document token, score."""
    return [{"query": query_tokens[q] if q < len(query_tokens) else str(q), "term": form,
             "doc": doc_tokens[d] if d < len(doc_tokens) else str(d), "score": round(score, 4)}
            for (q, _, d, score), form in zip(pairs, forms, strict=True)]  # fmt: skip
