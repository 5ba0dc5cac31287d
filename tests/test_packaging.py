"""The package carries what a run needs: its configs, the embedded collection and the command lines (issue 42.5)."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_module(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m retrieval_zoo ARGS`` from ``cwd``, the checkout on the path as an installed package would be."""
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "-m", "retrieval_zoo", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_commands_compose_the_packaged_configs_from_any_directory(tmp_path: Path) -> None:
    train = run_module("train", "method=csurf", "--cfg", "job", cwd=tmp_path)
    assert train.returncode == 0, train.stderr
    assert "_target_: retrieval_zoo.methods.csurf.CSurF" in train.stdout
    # a further DDP rank is started as `python -m retrieval_zoo <overrides>`: its command comes from the environment
    rank = run_module("--cfg", "hydra", cwd=tmp_path, env={"RETRIEVAL_ZOO_COMMAND": "evaluate"})
    assert rank.returncode == 0, rank.stderr
    assert "name: evaluate" in rank.stdout
    unknown = run_module("index", cwd=tmp_path)
    assert unknown.returncode != 0 and "usage: python -m retrieval_zoo {train,evaluate,search}" in unknown.stderr
    search = run_module("search", "queries=topics.tsv", "--cfg", "job", cwd=tmp_path)
    assert search.returncode == 0 and "queries: topics.tsv" in search.stdout, search.stderr


@pytest.mark.slow
def test_the_wheel_ships_the_configs_the_embedded_collection_and_the_commands(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(REPO),
                    "-w", str(tmp_path)], check=True, timeout=300)  # fmt: skip
    (wheel,) = tmp_path.glob("retrieval_zoo-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(archive.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    configs = {str(p.relative_to(REPO)) for p in (REPO / "retrieval_zoo" / "conf").rglob("*.yaml")}
    data = {str(p.relative_to(REPO)) for p in (REPO / "retrieval_zoo" / "embedded").rglob("*") if p.is_file()}
    assert configs and configs <= names, sorted(configs - names)
    assert data and data <= names, sorted(data - names)
    assert "retrieval-zoo-train = retrieval_zoo.cli:train_main" in entry_points
    assert "retrieval-zoo-evaluate = retrieval_zoo.cli:evaluate_main" in entry_points
    assert "retrieval-zoo-search = retrieval_zoo.cli:search_main" in entry_points
