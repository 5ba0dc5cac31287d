"""Indexes over vectors: faiss inner-product search, and the hybrids with BM25 (union, concatenated vectors)."""
