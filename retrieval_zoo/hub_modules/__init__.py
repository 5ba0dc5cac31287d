"""Modules copied into exported folders, for libraries that load them with ``trust_remote_code=True``.

Each file imports only torch and the library that loads it, never ``retrieval_zoo``: a folder carries it to users who
do not install this package.
"""
