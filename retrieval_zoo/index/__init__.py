"""Indexes and search: faiss inner product and fusion of runs."""

import logging

# faiss's loader logs, at INFO, each CPU-specific build it did not find before loading its dispatching one.
logging.getLogger("faiss.loader").setLevel(logging.WARNING)
