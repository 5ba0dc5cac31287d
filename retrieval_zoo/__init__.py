"""retrieval_zoo: hybrid lexical + semantic first-stage retrievers, trained and evaluated as method × index.

Layers, lowest first (``tests/test_layers.py`` keeps imports running down): ground helpers (cache, batching,
backbones, encoder, losses, ...), ``data`` (collections and runs), measures (``evaluation``, ``complementarity``),
``lexical``, ``training`` (the DataModule), ``index``, ``methods``, and the runs on top (``pipeline``,
``corpus_encoding``, ``validation``, ``reproduce``, ``summary``).
"""


def __getattr__(name: str) -> object:
    """``retrieval_zoo.load``: :func:`retrieval_zoo.exported.load`, imported when first asked for."""
    if name == "load":
        from retrieval_zoo.exported import load

        return load
    raise AttributeError(f"module 'retrieval_zoo' has no attribute {name!r}")
