"""Host synchronisations of a search on the device, counted on the CPU (benchmarks/search_syncs.py).

The index families that search on the model's device, each with one method: a count above the documented one (what
docs/benchmarks.md justifies, site by site) fails here. The engines on the host (BMP, Seismic, Lucene) mark their
search as host work; their count is the queries' encoding, which these pairs cover.
"""

import pytest

from benchmarks.search_syncs import search_syncs, split_count
from retrieval_zoo.training.validation_pool import candidate_pool

# (index, method): (syncs paid once a call, syncs a batch of 8 queries), as docs/benchmarks.md lists them; gip with
# both of its paths, dense vectors (DeLADE's, and SPLADE's as its encoder gives them) and a CSR's entries (BM25's)
SEARCH_SYNCS = {
    ("faiss", "dense"): (1, 0),
    ("sparse", "dlr_splade"): (7, 0),
    ("gip", "delade_cls"): (5, 0),
    ("gip", "dlr_splade"): (4, 0),
    ("gip", "dlr_bm25"): (4, 1),
    ("csf", "csurf"): (0, 8),
}


@pytest.mark.parametrize(("index", "method"), sorted(SEARCH_SYNCS))
def test_a_search_makes_no_host_sync_beyond_the_documented_ones(index, method, tiny, tiny_bm25) -> None:
    once, per_batch = SEARCH_SYNCS[index, method]
    queries = dict(list(tiny.judged_queries("dev").items())[:16])
    pool = candidate_pool(tiny, tiny_bm25, "dev", list(queries), depth=8)  # fewer documents to encode: same count
    few, many = search_syncs(method, index, pool, tiny_bm25, queries, k=10)
    assert split_count(sum(few.values()), sum(many.values()), len(queries)) == (once, per_batch), many


def test_the_count_splits_into_a_call_s_part_and_a_batch_s() -> None:
    # 16 queries are 2 batches of 8, 64 are 8: 3 + 2·5 = 13 and 3 + 8·5 = 43
    assert split_count(13, 43, 16) == (3, 5)
