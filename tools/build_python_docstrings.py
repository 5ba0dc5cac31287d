"""Build the embedded ``python_docstrings`` collection from the docstrings of Python's standard library.

Query = a docstring's summary (its first paragraph); document = the rest of the docstring. Docstrings whose bodies
are identical form one document, and each of their summaries is a query relevant to it (a known-item collection
shaped like MS MARCO, from a source and a register, technical prose about code, that ``debian_descriptions`` does
not share). Modules, classes, functions and methods are read with :mod:`ast` from the source files, never
imported, so the build is deterministic: the same files give byte-identical outputs.

Usage (with the interpreter whose standard library is the source, Python 3.11.7 for the committed files)::

    python -m tools.build_python_docstrings --out retrieval_zoo/embedded/python_docstrings
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import platform
import re
import sysconfig
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from tools.collection_build import (
    Document,
    assign_splits,
    clean,
    components,
    content_ids,
    write_manifest,
    write_variant,
)

SKIPPED_FOLDERS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
PARAGRAPH = re.compile(r"\n\s*\n")
MIN_DOC_WORDS = 12
MIN_QUERY_WORDS = 2
MAX_QUERY_WORDS = 32
DEV_QUERIES = 300
TEST_QUERIES = 600
SPLITS = ("train", "dev", "test")


def source_files(root: Path) -> list[Path]:
    """The library's ``.py`` files, tests and installed packages left out, in path order."""
    return sorted(p for p in root.rglob("*.py") if not SKIPPED_FOLDERS & set(p.relative_to(root).parts[:-1]))


def docstrings(tree: ast.Module, module: str) -> Iterator[tuple[str, str]]:
    """(qualified name, docstring) of a module and of its classes, functions and methods, in source order."""
    found = ast.get_docstring(tree)
    if found:
        yield module, found
    stack: list[tuple[ast.AST, str]] = [(tree, module)]
    while stack:
        node, prefix = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}.{child.name}"
                found = ast.get_docstring(child)
                if found:
                    yield name, found
                if isinstance(child, ast.ClassDef):
                    stack.append((child, name))


def pair(docstring: str) -> tuple[str, str]:
    """(summary, body): the first paragraph and the rest, whitespace collapsed."""
    first, *rest = PARAGRAPH.split(docstring.strip())
    return clean(first), clean(" ".join(rest))


def group_documents(root: Path, files: list[Path]) -> tuple[list[Document], dict[str, int]]:
    """Read every docstring, apply the rules in order, and group summaries by identical body."""
    removed: Counter[str] = Counter()
    docs: dict[str, Document] = {}
    for path in files:
        module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except SyntaxError:
            removed["file_not_parsed"] += 1
            continue
        for _, docstring in docstrings(tree, module):
            summary, body = pair(docstring)
            if len(body.split()) < MIN_DOC_WORDS:
                removed[f"body_shorter_than_{MIN_DOC_WORDS}_words"] += 1
            elif not MIN_QUERY_WORDS <= len(summary.split()) <= MAX_QUERY_WORDS:
                removed[f"summary_not_{MIN_QUERY_WORDS}_to_{MAX_QUERY_WORDS}_words"] += 1
            else:
                docs.setdefault(body, Document(body)).queries.add(summary)
    return list(docs.values()), dict(removed)


def inputs_digest(root: Path, files: list[Path]) -> str:
    """One SHA-256 over every source file's relative path and bytes, in path order."""
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def build(root: Path, out: Path) -> dict:
    """Build the collection from the library under ``root`` into ``out/default`` and return the manifest."""
    files = source_files(root)
    docs, removed = group_documents(root, files)
    pid, qid = content_ids(docs)
    every = list(range(len(docs)))
    split_of = assign_splits(docs, components(docs), {"dev": DEV_QUERIES, "test": TEST_QUERIES})
    manifest = {
        "source": f"docstrings of the Python {platform.python_version()} standard library ({len(files)} files)",
        "inputs_sha256": {"standard library .py files": inputs_digest(root, files)},
        "removed_by_rule": removed,
        "variants": {"default": write_variant(out / "default", docs, every, split_of, SPLITS, pid, qid)},
    }
    return write_manifest(out, manifest)


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stdlib", type=Path, default=Path(sysconfig.get_paths()["stdlib"]))
    parser.add_argument("--out", type=Path, default=Path("retrieval_zoo/embedded/python_docstrings"))
    args = parser.parse_args()
    print(json.dumps(build(args.stdlib, args.out), indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
