"""Host synchronisations a training step would make on a GPU, counted on the CPU (benchmarks/host_syncs.py)."""

from collections import Counter

import pytest
import torch

from benchmarks.host_syncs import host_syncs, method_syncs
from retrieval_zoo.host_work import host_only

# What a step of 4 queries makes on the path CUDA takes (CSurF: step_shapes=fixed): none. A change that adds one
# fails here.
STEP_SYNCS = {"dense": 0, "clear": 0, "delade_cls": 0, "roc": 0, "csurf": 0}


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


@pytest.mark.parametrize("method", list(STEP_SYNCS))
def test_a_training_step_makes_no_host_sync_beyond_its_documented_remainder(method, tiny, tiny_bm25) -> None:
    encodes = method in ("dense", "delade_cls")  # one copy to the host a call (a part), however many batches
    step, few, many = method_syncs(method, "tiny_random", tiny, tiny_bm25, batch_size=4, docs=40 if encodes else 0)
    assert sum(step.values()) <= STEP_SYNCS[method], step
    if encodes:
        assert sum(few.values()) == sum(many.values()) == {"dense": 1, "delade_cls": 2}[method], many
