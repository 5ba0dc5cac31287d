"""Indexes, the zoo's second axis: one module per ``conf/index`` file, one folder per family.

Each builds a retriever from a representation a method produces, over a corpus encoded in shards, and tunes its
fusion weight: ``vectors/`` (faiss, union and concatenated fusion with BM25), ``terms/`` (DLR/DHR by gated inner
product, exact sparse, BMP, Seismic, Lucene impact), ``csurf/`` (CSurF's inverted lists) and ``lucene`` (BM25). Here
too: what an index is (``index``), what a method offers it (``representations``), and the shards it is built from.
"""

import logging

# faiss's loader logs, at INFO, each CPU-specific build it did not find before loading its dispatching one.
logging.getLogger("faiss.loader").setLevel(logging.WARNING)
