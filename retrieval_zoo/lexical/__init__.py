"""Lexical retrieval: BM25 through pyserini/Lucene."""
