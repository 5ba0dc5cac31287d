"""Handing the host memory that an index build freed back to the operating system.

A build over the corpus's shards reads each shard, cuts and concatenates its arrays, then frees them: freed memory
of about the index's size. glibc's malloc keeps freed blocks below its mmap threshold (which rises to 32 MiB as
large blocks are freed) in its heaps for reuse instead of returning them, so without a trim a process that built an
index over SPLADE's shards stays about one index larger than it needs to be (``benchmarks/stage_memory.py``
measures it, a phase of its own). ``malloc_trim(0)`` returns every free page of every heap, as Dask's workers do
after a task.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """The C library's ``malloc_trim`` (glibc's), or None where it has none (macOS, musl).

    Looked up among the symbols this process has loaded (``dlopen(NULL)``): ``ctypes.util.find_library`` would fork
    ``ldconfig`` or a compiler, a child process as large as this one until it execs.
    """
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # no such symbol: not glibc
        return None


def release_freed_memory() -> bool:
    """Return the pages malloc holds free to the OS; whether this C library could (glibc's ``malloc_trim``)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
