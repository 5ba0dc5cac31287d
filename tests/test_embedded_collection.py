import hashlib
import itertools
import json
from pathlib import Path

import pytest

from retrieval_zoo.data.collections import EMBEDDED_ROOT, embedded
from tools import build_python_docstrings
from tools.build_debian_descriptions import build
from tools.collection_build import Document, assign_splits

ROOT = EMBEDDED_ROOT / "debian_descriptions"

PACKAGES = """Package: alpha
Description: Alpha tool for parsing logs
Description-md5: m1

Package: alpha-doc
Description: Alpha tool for parsing logs - documentation
Description-md5: m1

Package: beta
Description: Beta compiler for a small language
Description-md5: m2

Package: oldpkg
Description: transitional package for gamma
Description-md5: m3

Package: shorty
Description: Short description example
Description-md5: m4
"""
LONG = " Some words about the package that make the long description long enough to keep.\\n .\\n More text here."
TRANSLATIONS = f"""Package: alpha
Description-md5: m1
Description-en: Alpha tool for parsing logs
{LONG.replace("package", "alpha parser")}

Package: beta
Description-md5: m2
Description-en: Beta compiler for a small language
{LONG.replace("package", "beta compiler")}

Package: oldpkg
Description-md5: m3
Description-en: transitional package for gamma
{LONG}

Package: shorty
Description-md5: m4
Description-en: Short description example
 Too short.
"""


@pytest.mark.parametrize("name", ["debian_descriptions", "python_docstrings"])
def test_committed_files_match_the_manifest(name: str) -> None:
    root = EMBEDDED_ROOT / name
    manifest = json.loads((root / "manifest.json").read_text())
    assert set(manifest["outputs_sha256"]) == {str(p.relative_to(root)) for p in root.rglob("*.gz")}
    for file, digest in manifest["outputs_sha256"].items():
        assert hashlib.sha256((root / file).read_bytes()).hexdigest() == digest, file


def test_debian_descriptions_sizes() -> None:
    manifest = json.loads((ROOT / "manifest.json").read_text())
    assert manifest["variants"]["default"]["documents"] == 10_000
    assert 55_000 <= manifest["variants"]["full"]["documents"] <= 60_000
    assert manifest["variants"]["default"]["queries_dev"] >= 1000


def test_dev_and_train_never_share_a_relevant_document() -> None:
    collection = embedded("default")
    dev_docs = {d for judged in collection.qrels["dev"].values() for d in judged}
    train_docs = {d for judged in collection.qrels["train"].values() for d in judged}
    assert dev_docs and train_docs and not dev_docs & train_docs
    assert len(collection.corpus) == 10_000


def test_builder_is_deterministic_and_applies_the_rules(tmp_path: Path) -> None:
    (tmp_path / "Packages").write_text(PACKAGES.replace("\\n", "\n"))
    (tmp_path / "Translation-en").write_text(TRANSLATIONS.replace("\\n", "\n"))
    first = build(tmp_path / "Packages", tmp_path / "Translation-en", tmp_path / "a")
    second = build(tmp_path / "Packages", tmp_path / "Translation-en", tmp_path / "b")
    assert first["outputs_sha256"] == second["outputs_sha256"]
    assert first["removed_by_rule"] == {"transitional_or_dummy": 1, "shorter_than_12_words": 1}
    assert first["variants"]["full"]["documents"] == 2
    # alpha and alpha-doc share one long description: one document, two relevant queries.
    queries = first["variants"]["full"]["queries_train"] + first["variants"]["full"]["queries_dev"]
    assert queries == 3


def test_python_docstrings_splits_share_no_relevant_document() -> None:
    collection = embedded(name="python_docstrings", eval_split="test")
    assert collection.eval_split == "test" and sorted(collection.qrels) == ["dev", "test", "train"]
    relevant = {split: {d for judged in qrels.values() for d in judged} for split, qrels in collection.qrels.items()}
    assert all(relevant.values())
    for a, b in itertools.combinations(relevant, 2):
        assert not relevant[a] & relevant[b], (a, b)
    assert len(collection.judged_queries("test")) == 600 and len(collection.corpus) == 2631


def test_split_quotas_fill_in_order_and_keep_groups_whole() -> None:
    docs = [Document(f"d{i}", {f"q{i}"}) for i in range(5)] + [Document("d5", {"q4", "q5"})]
    groups = [[0], [1], [2, 3], [4, 5]]
    # dev takes groups until it holds 1 query; test until it holds 2 (a group of 2 is taken whole), then train
    split_of = assign_splits(docs, groups, {"dev": 1, "test": 2})
    assert split_of == {0: "dev", 1: "test", 2: "test", 3: "test", 4: "train", 5: "train"}


SOURCE = '''"""A module.

Its body is long enough to become a document of this tiny collection, twelve words at least.
"""


def kept(x):
    """Return the square of a number.

    The argument may be any number; the result has the type of the argument itself, squared once.
    """


def too_short():
    """Return one.

    Short body.
    """


class Thing:
    """A thing with a method."""

    def twin(self):
        """Return the square of a number twice.

        The argument may be any number; the result has the type of the argument itself, squared once.
        """
'''


def test_python_docstrings_builder_is_deterministic_and_applies_the_rules(tmp_path: Path) -> None:
    (tmp_path / "lib" / "pkg").mkdir(parents=True)
    (tmp_path / "lib" / "pkg" / "__init__.py").write_text(SOURCE)
    (tmp_path / "lib" / "test").mkdir()
    (tmp_path / "lib" / "test" / "test_x.py").write_text(SOURCE)  # tests are left out
    first = build_python_docstrings.build(tmp_path / "lib", tmp_path / "a")
    second = build_python_docstrings.build(tmp_path / "lib", tmp_path / "b")
    assert first["outputs_sha256"] == second["outputs_sha256"]
    # too_short's body and Thing's missing body fall to the first rule
    assert first["removed_by_rule"] == {"body_shorter_than_12_words": 2}
    counts = first["variants"]["default"]
    # kept and Thing.twin share one body: one document, two relevant queries; the module is the other document
    assert counts["documents"] == 2
    assert sum(counts[f"queries_{split}"] for split in ("train", "dev", "test")) == 3
