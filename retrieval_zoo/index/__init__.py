"""Indexes, the zoo's second axis: one family per ``conf/index`` file.

Each builds a retriever from a representation a method produces (faiss, union and concatenated fusion, DLR/DHR by
gated inner product, exact sparse, CSurF's inverted lists, Lucene BM25), over a corpus encoded in shards, and tunes
its fusion weight.
"""

import logging

# faiss's loader logs, at INFO, each CPU-specific build it did not find before loading its dispatching one.
logging.getLogger("faiss.loader").setLevel(logging.WARNING)
