"""Figures as files: matplotlib without a display, and a PNG written whole or not at all.

Every figure the project draws (an evaluation's Venn figure and tuning curve, the registered tables' figures, the
benchmarks' plots) is made with :func:`pyplot` and written with :func:`save_png`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from retrieval_zoo.cache import atomic_path


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (no display needed), imported when a figure is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(figure: Any, path: str | Path, dpi: int, tight: bool = True, metadata: dict | None = None) -> Path:
    """Write ``figure`` to ``path`` as a PNG, renamed into place once complete, and close it.

    Args:
        figure: A matplotlib figure.
        path: The PNG.
        dpi: Its resolution.
        tight: Crop to what is drawn (``bbox_inches="tight"``).
        metadata: PNG text fields (a ``Description``).
    """
    path = Path(path)
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=dpi, bbox_inches="tight" if tight else None, metadata=metadata)
    pyplot().close(figure)
    return path
