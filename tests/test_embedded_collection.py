import hashlib
import json
from pathlib import Path

from retrieval_zoo.data.collections import EMBEDDED_ROOT, embedded
from tools.build_debian_descriptions import build

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


def test_committed_files_match_the_manifest() -> None:
    manifest = json.loads((ROOT / "manifest.json").read_text())
    for name, digest in manifest["outputs_sha256"].items():
        assert hashlib.sha256((ROOT / name).read_bytes()).hexdigest() == digest, name
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
