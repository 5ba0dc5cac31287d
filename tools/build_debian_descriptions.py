"""Build the embedded ``debian_descriptions`` collection from Debian bookworm's package lists.

Query = a package's one-line synopsis; document = its long description. Packages whose long descriptions
are identical form one document, and each of their synopses is a query relevant to it (a known-item
collection shaped like MS MARCO). The build is deterministic: the same inputs give byte-identical outputs.

Usage (after ``apt-get -o Acquire::Languages=en update``)::

    python -m tools.build_debian_descriptions --out retrieval_zoo/embedded/debian_descriptions
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
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

APT_LISTS = Path("/var/lib/apt/lists")
DEFAULT_PACKAGES = APT_LISTS / "deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages.lz4"
DEFAULT_TRANSLATIONS = APT_LISTS / "deb.debian.org_debian_dists_bookworm_main_i18n_Translation-en.lz4"

BOILERPLATE = re.compile(r"\b(transitional|dummy)\b", re.IGNORECASE)
MIN_DOC_WORDS = 12
MIN_QUERY_WORDS = 2
DEV_QUERIES = 1200
DEFAULT_DOCS = 10_000


def read_text(path: Path) -> str:
    """Read a Debian list file, decompressing ``.lz4`` through apt's own helper."""
    if path.suffix == ".lz4":
        out = subprocess.run(["/usr/lib/apt/apt-helper", "cat-file", str(path)], check=True, capture_output=True)
        return out.stdout.decode("utf-8")
    return path.read_text(encoding="utf-8")


def stanzas(text: str) -> Iterator[dict[str, str]]:
    """Yield RFC-822 stanzas as field → raw value (continuation lines kept with their newlines)."""
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        key = None
        for line in block.splitlines():
            if line.startswith((" ", "\t")) and key is not None:
                fields[key] += "\n" + line
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if fields:
            yield fields


def long_description(description_en: str) -> str:
    """The long part of a ``Description-en`` field: continuation lines, with ' .' paragraph marks removed."""
    lines = description_en.split("\n")[1:]
    return clean(" ".join("" if line.strip() == "." else line.strip() for line in lines))


def group_documents(packages_text: str, translations_text: str) -> list[Document]:
    """Join Packages to Translation-en by Description-md5 and group packages by long description."""
    long_by_md5: dict[str, str] = {}
    for stanza in stanzas(translations_text):
        if "Description-en" in stanza and "Description-md5" in stanza:
            long_by_md5[stanza["Description-md5"]] = long_description(stanza["Description-en"])
    docs: dict[str, Document] = {}
    for stanza in stanzas(packages_text):
        md5, synopsis = stanza.get("Description-md5"), clean(stanza.get("Description", ""))
        text = long_by_md5.get(md5 or "")
        if not text or not synopsis:
            continue
        docs.setdefault(text, Document(text)).queries.add(synopsis)
    return list(docs.values())


def drop_boilerplate(docs: list[Document]) -> tuple[list[Document], dict[str, int]]:
    """Apply the cleaning rules in order; return the kept documents and how many each rule removed."""
    removed: Counter[str] = Counter()
    kept = []
    for doc in docs:
        if BOILERPLATE.search(doc.text) or any(BOILERPLATE.search(s) for s in doc.queries):
            removed["transitional_or_dummy"] += 1
            continue
        if len(doc.text.split()) < MIN_DOC_WORDS:
            removed[f"shorter_than_{MIN_DOC_WORDS}_words"] += 1
            continue
        doc.queries = {s for s in doc.queries if len(s.split()) >= MIN_QUERY_WORDS}
        if not doc.queries:
            removed[f"no_query_of_{MIN_QUERY_WORDS}_words"] += 1
            continue
        kept.append(doc)
    return kept, dict(removed)


def build(packages: Path, translations: Path, out: Path) -> dict:
    """Build both variants under ``out`` and return the manifest (counts, cleaning, input hashes)."""
    packages_text, translations_text = read_text(packages), read_text(translations)
    docs, removed = drop_boilerplate(group_documents(packages_text, translations_text))
    pid, qid = content_ids(docs)
    groups = components(docs)
    split_of = assign_splits(docs, groups, {"dev": DEV_QUERIES})
    default: list[int] = []
    for group in groups:
        if len(default) < DEFAULT_DOCS:
            default.extend(group)
    splits = ("train", "dev")
    manifest = {
        "source": "Debian bookworm main: binary-amd64 Packages + i18n Translation-en",
        "inputs_sha256": {
            p.name: hashlib.sha256(t.encode()).hexdigest()
            for p, t in ((packages, packages_text), (translations, translations_text))
        },
        "removed_by_rule": removed,
        "variants": {
            "full": write_variant(out / "full", docs, list(range(len(docs))), split_of, splits, pid, qid),
            "default": write_variant(out / "default", docs, default, split_of, splits, pid, qid),
        },
    }
    return write_manifest(out, manifest)


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--packages", type=Path, default=DEFAULT_PACKAGES)
    parser.add_argument("--translations", type=Path, default=DEFAULT_TRANSLATIONS)
    parser.add_argument("--out", type=Path, default=Path("retrieval_zoo/embedded/debian_descriptions"))
    args = parser.parse_args()
    print(json.dumps(build(args.packages, args.translations, args.out), indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
