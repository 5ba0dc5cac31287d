"""retrieval_zoo: hybrid lexical + semantic first-stage retrievers, trained and evaluated as method × index.

Layers, lowest first (``tests/test_layers.py`` keeps imports running down): ground helpers (cache, batching,
backbones, encoder, losses, ...), ``data`` (collections and runs), measures (``evaluation``, ``complementarity``),
``lexical``, ``training`` (the DataModule), ``index``, ``methods``, and the runs on top (``pipeline``,
``corpus_encoding``, ``validation``, ``reproduce``, ``summary``).
"""
