"""Indexes and search: faiss inner product and fusion of runs."""
