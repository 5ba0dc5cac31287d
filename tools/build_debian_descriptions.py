"""Build the embedded ``debian_descriptions`` collection from Debian bookworm's package lists.

Query = a package's one-line synopsis; document = its long description. Packages whose long descriptions
are identical form one document, and each of their synopses is a query relevant to it (a known-item
collection shaped like MS MARCO). The build is deterministic: the same inputs give byte-identical outputs.

Usage (after ``apt-get -o Acquire::Languages=en update``)::

    python -m tools.build_debian_descriptions --out retrieval_zoo/embedded/debian_descriptions
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import subprocess
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

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


def clean(text: str) -> str:
    """Collapse whitespace so that text is safe in one TSV field."""
    return " ".join(text.split())


def long_description(description_en: str) -> str:
    """The long part of a ``Description-en`` field: continuation lines, with ' .' paragraph marks removed."""
    lines = description_en.split("\n")[1:]
    return clean(" ".join("" if line.strip() == "." else line.strip() for line in lines))


@dataclass
class Document:
    """One document and the synopses (queries) of the packages that share it."""

    text: str
    synopses: set[str] = field(default_factory=set)


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
        docs.setdefault(text, Document(text)).synopses.add(synopsis)
    return list(docs.values())


def drop_boilerplate(docs: list[Document]) -> tuple[list[Document], dict[str, int]]:
    """Apply the cleaning rules in order; return the kept documents and how many each rule removed."""
    removed: Counter[str] = Counter()
    kept = []
    for doc in docs:
        if BOILERPLATE.search(doc.text) or any(BOILERPLATE.search(s) for s in doc.synopses):
            removed["transitional_or_dummy"] += 1
            continue
        if len(doc.text.split()) < MIN_DOC_WORDS:
            removed[f"shorter_than_{MIN_DOC_WORDS}_words"] += 1
            continue
        doc.synopses = {s for s in doc.synopses if len(s.split()) >= MIN_QUERY_WORDS}
        if not doc.synopses:
            removed[f"no_query_of_{MIN_QUERY_WORDS}_words"] += 1
            continue
        kept.append(doc)
    return kept, dict(removed)


def sha(text: str) -> str:
    """Hex SHA-256 of a string, the deterministic sort key of the build."""
    return hashlib.sha256(text.encode()).hexdigest()


def components(docs: list[Document]) -> list[list[int]]:
    """Groups of document indices linked by a shared query text, in a content-defined order."""
    parent = list(range(len(docs)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first_doc_of_query: dict[str, int] = {}
    for i, doc in enumerate(docs):
        for s in doc.synopses:
            j = first_doc_of_query.setdefault(s, i)
            parent[find(i)] = find(j)
    groups: dict[int, list[int]] = defaultdict(list)
    for i in range(len(docs)):
        groups[find(i)].append(i)
    return sorted(groups.values(), key=lambda g: min(sha(docs[i].text) for i in g))


def write_gz(path: Path, lines: list[str]) -> None:
    """Write lines to a gzip file with a fixed mtime so the bytes are reproducible."""
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
        gz.write("".join(line + "\n" for line in lines).encode())


def write_variant(
    out: Path, docs: list[Document], doc_ids: list[int], dev: set[int], pid: dict[int, int], qid: dict[str, int]
) -> dict[str, int]:
    """Write one variant in MS MARCO layout; document and query ids are shared by all variants."""
    out.mkdir(parents=True, exist_ok=True)
    write_gz(out / "collection.tsv.gz", [f"{pid[i]}\t{docs[i].text}" for i in sorted(doc_ids, key=pid.get)])
    counts = {"documents": len(doc_ids)}
    for split in ("train", "dev"):
        rel: dict[str, set[int]] = defaultdict(set)
        for i in doc_ids:
            if (i in dev) == (split == "dev"):
                for s in docs[i].synopses:
                    rel[s].add(pid[i])
        texts = sorted(rel, key=qid.get)
        write_gz(out / f"queries.{split}.tsv.gz", [f"{qid[t]}\t{t}" for t in texts])
        write_gz(out / f"qrels.{split}.tsv.gz", [f"{qid[t]}\t0\t{p}\t1" for t in texts for p in sorted(rel[t])])
        counts[f"queries_{split}"] = len(texts)
        counts[f"qrels_{split}"] = sum(len(v) for v in rel.values())
    return counts


def build(packages: Path, translations: Path, out: Path) -> dict:
    """Build both variants under ``out`` and return the manifest (counts, cleaning, input hashes)."""
    packages_text, translations_text = read_text(packages), read_text(translations)
    docs, removed = drop_boilerplate(group_documents(packages_text, translations_text))
    order = sorted(range(len(docs)), key=lambda i: sha(docs[i].text))
    pid = {i: rank for rank, i in enumerate(order)}
    qid = {t: rank for rank, t in enumerate(sorted({s for d in docs for s in d.synopses}, key=sha))}
    dev: set[int] = set()
    default: list[int] = []
    n_dev_queries = 0
    for group in components(docs):
        if n_dev_queries < DEV_QUERIES:
            dev.update(group)
            n_dev_queries += len({s for i in group for s in docs[i].synopses})
        if len(default) < DEFAULT_DOCS:
            default.extend(group)
    manifest = {
        "source": "Debian bookworm main: binary-amd64 Packages + i18n Translation-en",
        "inputs_sha256": {
            p.name: hashlib.sha256(t.encode()).hexdigest()
            for p, t in ((packages, packages_text), (translations, translations_text))
        },
        "removed_by_rule": removed,
        "variants": {
            "full": write_variant(out / "full", docs, list(range(len(docs))), dev, pid, qid),
            "default": write_variant(out / "default", docs, default, dev, pid, qid),
        },
    }
    manifest["outputs_sha256"] = {
        str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.rglob("*.gz"))
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


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
