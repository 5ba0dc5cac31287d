"""What every embedded collection's build shares: known-item documents, content-defined ids and splits, MS MARCO files.

A builder turns its source into :class:`Document` s (a text and the query texts relevant to it), then calls
:func:`write_collection`, which numbers documents and queries by content hash, keeps documents linked by a shared
query in one split, and writes each variant in MS MARCO's TSV layout with byte-reproducible gzip files.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Document:
    """One document and the query texts relevant to it."""

    text: str
    queries: set[str] = field(default_factory=set)


def sha(text: str) -> str:
    """Hex SHA-256 of a string, the deterministic sort key of a build."""
    return hashlib.sha256(text.encode()).hexdigest()


def clean(text: str) -> str:
    """Collapse whitespace so that text is safe in one TSV field."""
    return " ".join(text.split())


def components(docs: Sequence[Document]) -> list[list[int]]:
    """Groups of document indices linked by a shared query text, in a content-defined order."""
    parent = list(range(len(docs)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first_doc_of_query: dict[str, int] = {}
    for i, doc in enumerate(docs):
        for s in doc.queries:
            j = first_doc_of_query.setdefault(s, i)
            parent[find(i)] = find(j)
    groups: dict[int, list[int]] = defaultdict(list)
    for i in range(len(docs)):
        groups[find(i)].append(i)
    return sorted(groups.values(), key=lambda g: min(sha(docs[i].text) for i in g))


def assign_splits(docs: Sequence[Document], groups: list[list[int]], quotas: Mapping[str, int]) -> dict[int, str]:
    """Split → documents: groups in order fill each held-out split up to its query quota; the rest is ``train``.

    Args:
        docs: The documents.
        groups: :func:`components` of ``docs``.
        quotas: Held-out split → the number of queries at which it stops taking groups, filled in this order.
    """
    split_of: dict[int, str] = {}
    taken = dict.fromkeys(quotas, 0)
    for group in groups:
        split = next((s for s, quota in quotas.items() if taken[s] < quota), "train")
        if split != "train":
            taken[split] += len({q for i in group for q in docs[i].queries})
        split_of.update(dict.fromkeys(group, split))
    return split_of


def write_gz(path: Path, lines: list[str]) -> None:
    """Write lines to a gzip file with a fixed mtime so the bytes are reproducible."""
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
        gz.write("".join(line + "\n" for line in lines).encode())


def write_variant(
    out: Path,
    docs: Sequence[Document],
    doc_ids: list[int],
    split_of: Mapping[int, str],
    splits: Sequence[str],
    pid: Mapping[int, int],
    qid: Mapping[str, int],
) -> dict[str, int]:
    """Write one variant in MS MARCO layout; document and query ids are shared by all variants."""
    out.mkdir(parents=True, exist_ok=True)
    write_gz(out / "collection.tsv.gz", [f"{pid[i]}\t{docs[i].text}" for i in sorted(doc_ids, key=pid.__getitem__)])
    counts = {"documents": len(doc_ids)}
    for split in splits:
        rel: dict[str, set[int]] = defaultdict(set)
        for i in doc_ids:
            if split_of[i] == split:
                for s in docs[i].queries:
                    rel[s].add(pid[i])
        texts = sorted(rel, key=qid.__getitem__)
        write_gz(out / f"queries.{split}.tsv.gz", [f"{qid[t]}\t{t}" for t in texts])
        write_gz(out / f"qrels.{split}.tsv.gz", [f"{qid[t]}\t0\t{p}\t1" for t in texts for p in sorted(rel[t])])
        counts[f"queries_{split}"] = len(texts)
        counts[f"qrels_{split}"] = sum(len(v) for v in rel.values())
    return counts


def content_ids(docs: Sequence[Document]) -> tuple[dict[int, int], dict[str, int]]:
    """Document index → pid and query text → qid, both ranked by content hash."""
    order = sorted(range(len(docs)), key=lambda i: sha(docs[i].text))
    queries = sorted({s for d in docs for s in d.queries}, key=sha)
    return {i: rank for rank, i in enumerate(order)}, {t: rank for rank, t in enumerate(queries)}


def write_manifest(out: Path, manifest: dict) -> dict:
    """Add the output files' hashes to ``manifest`` and write it as ``out/manifest.json``."""
    manifest["outputs_sha256"] = {
        str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.rglob("*.gz"))
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest
