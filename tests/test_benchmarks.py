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
