"""Two-stage GIP over a corpus in several shards is two-stage GIP over the whole corpus (delade-dhr.md Eq. 18)."""

import numpy as np
import pytest

from retrieval_zoo.index.terms.dhr import DhrRetriever
from retrieval_zoo.index.terms.dlr import Slicing
from retrieval_zoo.index.terms.gip_search import GipIndex
from retrieval_zoo.index.terms.gip_shards import search_shards
from tests.test_gip import random_dlr

BOUNDS = [0, 130, 400, 401, 777, 1000]  # uneven shards, one of a single document
# 2,048 float16 values, each exactly representable: a column of distinct ones leaves no ties at K′
DISTINCT = np.concatenate([0.5 + np.arange(1024) / 2048, 1 + np.arange(1024) / 1024]).astype(np.float16)


def corpus_and_queries(seed: int = 3):
    """1,000 documents whose values are distinct in every dimension (positions of width 3), and 30 queries.

    A first stage's K′-th best is then never tied with the next, whichever way a corpus is split.
    """
    rng = np.random.default_rng(seed)
    values = np.stack([rng.permutation(DISTINCT)[:1000] for _ in range(16)], axis=1)
    indices = rng.integers(0, 3, (1000, 16)).astype(np.uint8)
    q_values, q_indices = random_dlr(rng, 30)
    return values, indices, [f"d{i}" for i in range(1000)], q_values, q_indices, [f"q{i}" for i in range(30)]


def shards_of(values, indices, docids, batched: bool) -> list[GipIndex]:
    return [GipIndex(values[a:b], indices[a:b], docids[a:b], device="cpu", chunk_elements=4096,
                     batched_first_stage=batched) for a, b in zip(BOUNDS, BOUNDS[1:], strict=False)]  # fmt: skip


@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize(("first_stage", "theta"), [("approximate_gip", 0.3), ("approximate_gip", 2.0),
                                                    ("inner_product", 0.3)])  # fmt: skip
def test_sharded_two_stage_search_is_the_one_index_search(first_stage: str, theta: float, batched: bool) -> None:
    """The corpus's K′ by the first stage, re-ranked exactly: the documents, order and scores of one index's search.

    K′ = 100 is below every shard's size but one and far below the corpus's: searching each shard in two stages on
    its own would keep 100 a shard, and search the shards of 100 documents or fewer exactly.
    """
    values, indices, docids, q_values, q_indices, qids = corpus_and_queries()
    settings = {"first_stage": first_stage, "theta": theta, "candidates": 100, "batch_size": 7}
    whole = GipIndex(values, indices, docids, device="cpu", chunk_elements=4096, batched_first_stage=batched)
    expected = whole.search(q_values, q_indices, qids, 10, **settings)
    found = search_shards(shards_of(values, indices, docids, batched), q_values, q_indices, qids, 10, **settings)
    assert found == expected  # each candidate's gated products summed as the one index sums them: the same bits
    exact = whole.search(q_values, q_indices, qids, 10)
    approximate = theta > 1 or first_stage == "inner_product"  # a first stage that misses documents: not exact
    assert (sum(list(found[q]) != list(exact[q]) for q in qids) > 10) == approximate


def retriever_over(shards: list[GipIndex], candidates: int, q_values, q_indices) -> DhrRetriever:
    retriever = DhrRetriever(None, shards, Slicing(vocab_size=1000, slices=16), candidates=candidates, theta=2.0)
    retriever.represent_queries = lambda queries: (q_values[: len(queries)], q_indices[: len(queries)])
    return retriever


def test_a_dhr_retriever_searches_its_shards_in_two_stages_unless_k_prime_holds_the_corpus() -> None:
    values, indices, docids, q_values, q_indices, qids = corpus_and_queries(4)
    queries = dict.fromkeys(qids, "text")
    whole = GipIndex(values, indices, docids, device="cpu")
    shards = [GipIndex(values[a : a + 100], indices[a : a + 100], docids[a : a + 100], device="cpu")
              for a in range(0, 1000, 100)]  # fmt: skip
    two_stage = retriever_over(shards, 150, q_values, q_indices)  # K′ above every shard's size, below the corpus's
    assert not two_stage.searched_exactly
    expected = whole.search(q_values, q_indices, qids, 10, "approximate_gip", 2.0, 150)
    assert two_stage.search(queries, 10) == expected
    exact = whole.search(q_values, q_indices, qids, 10)
    assert sum(list(expected[q]) != list(exact[q]) for q in qids) > 10  # θ = 2: the first stage misses documents
    covering = retriever_over(shards, 1000, q_values, q_indices)
    assert covering.searched_exactly
    assert [list(docs) for docs in covering.search(queries, 10).values()] == [list(exact[q]) for q in qids]


def test_a_corpus_too_large_for_a_batch_of_scores_is_searched_in_smaller_batches(monkeypatch) -> None:
    """Approximate GIP scores a batch's queries against the whole corpus: past FIRST_STAGE_ELEMENTS the batch
    shrinks (here to 2 queries), and the run stays the one index's."""
    from retrieval_zoo.index.terms import gip_shards

    values, indices, docids, q_values, q_indices, qids = corpus_and_queries()
    monkeypatch.setattr(gip_shards, "FIRST_STAGE_ELEMENTS", 2 * len(docids) + 1)
    batches = []
    monkeypatch.setattr(gip_shards, "corpus_approximate_top", lambda *args, top=gip_shards.corpus_approximate_top: (
        batches.append(args[2].shape[0]) or top(*args)))  # fmt: skip
    settings = {"first_stage": "approximate_gip", "theta": 0.3, "candidates": 100}
    whole = GipIndex(values, indices, docids, device="cpu", chunk_elements=4096)
    found = search_shards(shards_of(values, indices, docids, False), q_values, q_indices, qids, 10, **settings)
    assert batches == [2] * 15 and found == whole.search(q_values, q_indices, qids, 10, **settings)
