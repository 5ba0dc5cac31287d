"""retrieval_zoo: hybrid lexical + semantic first-stage retrievers, trained and evaluated as method × index.

The folders are the architecture: ``methods/`` (the method axis, one file a paper) and ``index/`` (the index axis,
one file a ``conf/index`` family), between them the typed representations (``index/representations.py``);
``encoding/`` (backbones, the encoder, token caches, batching), ``lexical/`` (Lucene BM25, term vectors, CSFs),
``data/`` (collections and run files), ``training/`` (the DataModule, validation), ``evaluation/`` (metrics, the
evaluation's stages, comparisons), ``export/`` (folders, CIFF, the ecosystem's loaders) and ``reproduce/``.
Imports run down the layers of ``tests/test_layers.py``.
"""


def __getattr__(name: str) -> object:
    """``retrieval_zoo.load`` and ``retrieval_zoo.Retriever``, imported when first asked for.

    They are :func:`retrieval_zoo.export.exported.load` and :class:`retrieval_zoo.search_api.Retriever`.
    """
    if name == "load":
        from retrieval_zoo.export.exported import load

        return load
    if name == "Retriever":
        from retrieval_zoo.search_api import Retriever

        return Retriever
    raise AttributeError(f"module 'retrieval_zoo' has no attribute {name!r}")
