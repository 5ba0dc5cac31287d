"""The validation callback's settings: checked when it is built, and where under DDP its shards go."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from retrieval_zoo.index.vectors.faiss import Faiss
from retrieval_zoo.index.vectors.union import Union
from retrieval_zoo.training.validation import RetrievalValidation


def test_bad_settings_fail_when_built() -> None:
    with pytest.raises(ValueError, match="validation.corpus must be one of"):
        RetrievalValidation(Faiss(), None, corpus="dev")
    with pytest.raises(ValueError, match="validation.shard_size must be at least 1"):
        RetrievalValidation(Faiss(), None, shard_size=0)
    with pytest.raises(ValueError, match="pool_depth=100 is below the index's BM25 depth 1000"):
        RetrievalValidation(Union(depth=1000), None, corpus="pool", pool_depth=100)
    RetrievalValidation(Union(depth=1000), None, corpus="full", pool_depth=100)  # the pool depth is unused


def test_each_run_takes_its_own_shards_folder(tmp_path: Path) -> None:
    run_a, run_b = (SimpleNamespace(default_root_dir=str(tmp_path / name)) for name in ("a", "b"))
    default = RetrievalValidation(Faiss(), None)
    assert default.shards_root(run_a) == tmp_path / "a" / "validation-shards"
    shared = RetrievalValidation(Faiss(), None, shards_dir=str(tmp_path / "scratch"))
    roots = {shared.shards_root(run_a), shared.shards_root(run_b)}
    assert len(roots) == 2 and all(root.parent == tmp_path / "scratch" for root in roots)
    assert shared.shards_root(run_a) == shared.shards_root(run_a)  # ranks agree
