"""Retrieval methods: one thin file each, on the shared base in :mod:`retrieval_zoo.methods.base`."""
