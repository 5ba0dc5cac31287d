"""Functions through ``torch.compile``, each compiled once a process and kept for every later call.

Used where fused kernels replace many small ops: CSurF's pair scores at search (:mod:`retrieval_zoo.lexical.csf_bags`),
its fixed-shape step's CSFs and scores (:mod:`retrieval_zoo.lexical.csf_fixed`,
:mod:`retrieval_zoo.methods.csurf`).
Compiling needs what ``torch.compile`` needs: a C++ compiler on a CPU, Triton on a GPU.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch


@functools.cache
def compile_once(function: Callable, dynamic: bool | None = None, fullgraph: bool = False) -> Callable:
    """``torch.compile(function, dynamic=..., fullgraph=...)``, the same object for the same arguments.

    The graphs are built at the first call of each input shape (with ``dynamic=None``, a second shape compiles sizes
    as symbols); with ``fullgraph`` a break in the graph is an error rather than a silent return to eager code.
    """
    return torch.compile(function, dynamic=dynamic, fullgraph=fullgraph)
