"""Host-only work inside a training step or a search, marked so that counting host synchronisations can tell it apart.

On a CPU run every tensor lives on the host, so a profiler cannot tell a read of a device tensor (which stops the host
on CUDA) from a read of a tensor kept on the host on purpose (a draw from a CPU generator). Code of the second kind
runs inside :func:`host_only`; ``benchmarks/host_syncs.py`` leaves the ops under it out of its count. What runs there
must touch host tensors only: on a GPU, ``benchmarks.gpu_throughput --sync-debug`` checks that it does.
"""

from __future__ import annotations

from torch.profiler import record_function

HOST_ONLY = "host-only: "


def host_only(what: str) -> record_function:
    """A profiler range named ``host-only: <what>`` around work on host tensors only."""
    return record_function(HOST_ONLY + what)
