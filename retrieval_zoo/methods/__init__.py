"""Retrieval methods: each an encoder (:mod:`retrieval_zoo.encoding.encoder`) plus its paper's losses.

One thin file each, on the shared LightningModule in :mod:`retrieval_zoo.methods.method`.
"""
