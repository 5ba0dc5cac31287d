"""Lexical machinery: Lucene BM25, term vectors, projections and surface forms.

BM25 through pyserini (and its Java), SPLADE and DeLADE term vectors, RoC's random projection of BM25, and CSurF's
bags of contextualized surface forms.
"""
