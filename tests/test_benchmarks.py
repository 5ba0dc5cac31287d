"""The benchmark scripts import what the package still has: a moved module or a renamed function fails here."""

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))


def project_imports(path: Path) -> list[tuple[int, str, str]]:
    """(line, module, name) of every ``from retrieval_zoo… / benchmarks… import name``, function bodies included."""
    found, ours = [], {"retrieval_zoo", "benchmarks"}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ours:
            found += [(node.lineno, node.module, alias.name) for alias in node.names]
    return found


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.stem)
def test_benchmark_imports_resolve(path: Path) -> None:
    for line, module, name in project_imports(path):
        imported = importlib.import_module(module)
        has = hasattr(imported, name) or importlib.util.find_spec(f"{module}.{name}") is not None
        assert has, f"{path.name}:{line}: {module} has no {name}"


@pytest.mark.slow
def test_gpu_throughput_measures_every_method_on_a_tiny_backbone(tiny, tiny_bm25, tmp_path, monkeypatch, capsys):
    """The benchmark runs each method's real step, encoding and search (a signature drift fails here, not on a GPU)."""
    from benchmarks.gpu_throughput import METHODS, measure, parse_args

    monkeypatch.setenv("RETRIEVAL_ZOO_CACHE", str(tmp_path))
    args = parse_args(["--device", "cpu", "--backbone", "tiny_random", "--docs", "12", "--queries", "4",
                       "--batch-size", "4", "--repeat", "1"])  # fmt: skip
    measure(args, tiny, tiny_bm25)
    rows = {line.split("|")[1].strip(): line.split("|")[2:-1] for line in capsys.readouterr().out.splitlines()
            if line.startswith("| ") and not line.startswith("| method")}  # fmt: skip
    assert set(rows) == set(METHODS)
    for method, cells in rows.items():
        trained = method not in ("dlr_splade", "dhr_bm25_dense")
        assert all(float(cell.replace(",", "")) > 0 for cell in (cells if trained else cells[3:])), (method, cells)
