"""Host synchronisations a training step would make on a GPU, counted on the CPU (benchmarks/host_syncs.py)."""

from collections import Counter

import pytest
import torch

from benchmarks.host_syncs import host_syncs, method_syncs
from retrieval_zoo.host_work import host_only

# What a step of 4 queries makes on the path CUDA takes (CSurF: step_shapes=fixed): none. A change that adds one
# fails here.
STEP_SYNCS = {"dense": 0, "clear": 0, "delade_cls": 0, "roc": 0, "csurf": 0}
# What an encoding call makes however many batches it holds: the copy to the host of each part, and where sizes
# follow from the data, one listing a group of batches (batching.held_groups; a call here is one group). CSurF:
# expansion and original CSFs; SPLADE's DLR: the group's entries, their copy, and the reordering of the call's rows.
ENCODING_SYNCS = {"dense": 1, "delade_cls": 2, "csurf": 2, "dlr_splade": 5}


def test_the_counter_sees_each_kind_of_sync_once_at_its_outermost_op() -> None:
    x, repeats = torch.arange(3), torch.tensor([1, 2, 3])

    def syncing() -> None:
        torch.repeat_interleave(x, repeats)  # its size read from the device: 1 (two item() inside, one op)
        torch.repeat_interleave(x, repeats, output_size=6)  # sized by the caller: 0
        bool(x.sum() > 0)  # 1
        x[x > 0]  # boolean mask: 1
        torch.unique(x)  # 1
        x.tolist()  # 1
        x.nonzero()  # 1
        with host_only("a draw on the CPU generator"):  # marked host work: 0
            bool(torch.rand(()) < 0.5)

    syncing()  # imports on first use: their module code, freed, would leave the profile's frame names dangling
    syncs = host_syncs(syncing)
    assert sum(syncs.values()) == 6, syncs
    assert Counter(key.split(" at ")[0] for key in syncs.elements()) == Counter({
        "aten::repeat_interleave": 1, "aten::is_nonzero": 1, "aten::index": 1, "aten::_unique2": 1, "tolist": 1,
        "aten::nonzero": 1,
    })  # fmt: skip


@pytest.mark.parametrize("method", sorted(STEP_SYNCS.keys() | ENCODING_SYNCS.keys()))
def test_a_step_and_an_encoding_call_make_no_host_sync_beyond_the_documented_ones(method, tiny, tiny_bm25) -> None:
    encodes = method in ENCODING_SYNCS
    step, few, many = method_syncs(method, "tiny_random", tiny, tiny_bm25, batch_size=4, docs=40 if encodes else 0)
    if method in STEP_SYNCS:
        assert sum(step.values()) <= STEP_SYNCS[method], step
    if encodes:  # 40 and 160 documents: the larger call takes several batches, and the same count
        assert sum(few.values()) == sum(many.values()) == ENCODING_SYNCS[method], many
