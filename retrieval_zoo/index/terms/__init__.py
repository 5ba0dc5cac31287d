"""Indexes over term weights: DLR/DHR by gated inner product, the exact sparse reference, and the engines.

The learned-sparse engines (BMP, Seismic, Lucene impact) share integer impacts, a forward index and CIFF.
"""
