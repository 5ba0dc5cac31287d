"""An index split over processes: the merge of ranks' top k, exact α-pruning across ranks, and CSurF's inverted
lists on 2 gloo ranks equal to one process."""

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from retrieval_zoo.index.csurf.csf import InvertedLists
from retrieval_zoo.index.csurf.csf_retriever import CsfRetriever
from retrieval_zoo.index.process_shards import lowest_share_masks, merge_rows, own_shards, split_over_processes
from tests.test_csurf import bag_shards, sparse_model
from tests.test_ddp_losses import free_port

INF = float("-inf")


def test_merge_keeps_the_best_k_ties_by_lowest_row_padding_last() -> None:
    scores = torch.tensor([[0.5, 2.0, INF, 0.5, 1.0], [INF, INF, 3.0, INF, INF]])
    rows = torch.tensor([[9, 4, -1, 2, 7], [-1, -1, 5, -1, -1]])
    top_scores, top_rows = merge_rows(scores, rows, 4)
    assert top_rows.tolist() == [[4, 7, 2, 9], [5, -1, -1, -1]]  # 0.5 at rows 2 and 9: row 2 first
    assert top_scores.tolist() == [[2.0, 1.0, 0.5, 0.5], [3.0, INF, INF, INF]]


def test_lowest_share_drops_ties_in_corpus_order_across_shards() -> None:
    # Corpus order: shard 0 = (0.3, 0.1, 0.3), shard 1 = (0.3, 0.2). α = 0.6 of 5 drops 3: 0.1, 0.2 and the first 0.3.
    weights = [torch.tensor([0.3, 0.1, 0.3]), torch.tensor([0.3, 0.2])]
    masks = lowest_share_masks(weights, [0, 1], 2, 0.6)
    assert [m.tolist() for m in masks] == [[False, False, True], [True, False]]
    assert all(m.all() for m in lowest_share_masks(weights, [0, 1], 2, 0.0))
    assert [m.tolist() for m in lowest_share_masks(weights, [0, 1], 2, 0.2)] == [[True, False, True], [True, True]]
    with pytest.raises(ValueError, match="prune_fraction"):
        lowest_share_masks(weights, [0, 1], 2, 1.0)


def tied_weights(shard: int) -> torch.Tensor:
    """A shard's weights drawn from 7 values, so the threshold falls among many ties."""
    return torch.randint(1, 8, (50 + 13 * shard,), generator=torch.Generator().manual_seed(shard)).float() / 8


def reference_masks(num_shards: int, fraction: float) -> list[torch.Tensor]:
    """One process: a stable sort of every shard's weights in corpus order drops the lowest share."""
    weights = [tied_weights(s) for s in range(num_shards)]
    keep = torch.ones(sum(len(w) for w in weights), dtype=torch.bool)
    keep[torch.argsort(torch.cat(weights), stable=True)[: int(fraction * len(keep))]] = False
    return list(keep.split([len(w) for w in weights]))


def rank_main(rank: int, port: int, out: str, corpus: dict[str, str], queries: dict[str, str]) -> None:
    """One of 2 ranks: the pruning masks of its shards, and a search over its half of CSurF's lists."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = sparse_model(vector_dim=8, doc_max_length=24)
    shards = bag_shards(model, corpus, 7)
    whole = CsfRetriever.from_shards(model.encode_query, shards, model.vocab_size, device="cpu")  # outside: no split
    with split_over_processes():  # as evaluation builds it
        own = own_shards(5)
        masks = lowest_share_masks([tied_weights(s) for s in own], own, 5, 0.37)
        retriever = CsfRetriever.from_shards(model.encode_query, shards, model.vocab_size, prune_fraction=0.3,
                                             device="cpu", vector_dtype="float16")  # fmt: skip
    assert len(whole.shards) == 6 and not whole.split and retriever.split
    assert "split over the processes" in InvertedLists().save_refusal(retriever)  # a share is not the index
    saved = Path(f"{out}.saved{rank}")
    saved.mkdir()
    whole.save(saved)
    with split_over_processes():  # a saved index, loaded where evaluation loads it, is held whole by this process
        loaded = CsfRetriever.load(model.encode_query, saved, shards.docids)
    assert not loaded.split and loaded.search(queries, 10) == whole.search(queries, 10)
    if rank == 0:
        run = retriever.search(queries, 10)
        retriever.release()
        torch.save({"masks": dict(zip(own, masks, strict=True)), "run": run, "postings": retriever.postings_count,
                    "efficiency": retriever.efficiency(), "lists": len(retriever.shards)}, out)  # fmt: skip
    else:
        retriever.serve()
        torch.save({"masks": dict(zip(own, masks, strict=True)), "lists": len(retriever.shards)}, f"{out}.1")
    dist.destroy_process_group()


@pytest.mark.slow
def test_two_gloo_ranks_search_their_halves_and_merge_to_one_process(tiny, tmp_path: Path) -> None:
    corpus = {d: tiny.corpus[d] for d in list(tiny.corpus)[:40]}
    queries = dict(list(tiny.judged_queries("dev").items())[:12])
    out = str(tmp_path / "rank")
    mp.spawn(rank_main, args=(free_port(), out, corpus, queries), nprocs=2, join=True)
    ranks = [torch.load(out, weights_only=False), torch.load(f"{out}.1", weights_only=False)]
    expected = reference_masks(5, 0.37)
    masks = ranks[0]["masks"] | ranks[1]["masks"]
    assert sorted(masks) == [0, 1, 2, 3, 4] and all(torch.equal(masks[s], expected[s]) for s in range(5))
    assert [r["lists"] for r in ranks] == [3, 3]  # 40 documents in 6 shards of 7: shards 0, 2, 4 and 1, 3, 5
    torch.manual_seed(0)
    model = sparse_model(vector_dim=8, doc_max_length=24)
    one = CsfRetriever.from_shards(model.encode_query, bag_shards(model, corpus, 7), model.vocab_size,
                                   prune_fraction=0.3, device="cpu", vector_dtype="float16")  # fmt: skip
    assert one.search(queries, 10) == ranks[0]["run"]
    assert one.postings_count == ranks[0]["postings"]
    single = one.efficiency()
    for name in ("csf_per_doc", "e_ops", "pairs_per_query", "postings_pruned_share", "tokens_per_doc"):
        assert ranks[0]["efficiency"][name] == pytest.approx(single[name]), name


def test_bad_settings_fail_at_construction_with_the_choices() -> None:
    from retrieval_zoo.index.csurf.csf import InvertedLists

    choices = r"vector_dtype must be one of \('float32', 'float16', 'bfloat16'\), not 'int8'"
    with pytest.raises(ValueError, match=choices):
        InvertedLists(vector_dtype="int8")
    with pytest.raises(ValueError, match="prune_fraction"):
        InvertedLists(prune_fraction=1.0)


def test_fewer_shards_than_processes_is_an_error(monkeypatch) -> None:
    import retrieval_zoo.index.process_shards as process_shards

    monkeypatch.setattr(process_shards, "world", lambda: (1, 4))
    assert own_shards(9) == [0, 1, 2, 3, 4, 5, 6, 7, 8]  # outside split_over_processes: every shard
    with split_over_processes():
        assert own_shards(9) == [1, 5]
        with pytest.raises(ValueError, match="3 shards cannot be split over 4 processes: lower encode.shard_size"):
            own_shards(3)
