"""Deterministic synthetic corpora of any size, derived from the full embedded collection (the scale harness's input).

The first 58,625 documents are the full ``debian_descriptions`` collection itself (the default variant's 10,000
first), with its training and dev queries and qrels. Every further document is a *copy generation* g ≥ 1 of a real
one (the real documents in a fixed permutation, then again for g + 1, ...): its sentences in a shuffled order with
one sentence of another real document appended, and each word, with probability ``PERTURB``, replaced by a variant
``<word>zq<k>``, k drawn from a Zipf law (a = 2) and written in letters. Variants make the vocabulary grow with the
corpus the way a real one does (a few very common new forms, a long tail of rare ones) while term frequencies,
document lengths and sentence structure stay those of real descriptions. Each real training query of a copied
document gives the copy one training query: the query with the copy's own replacements applied, so it remains a
known-item query of that copy (and, weakly, of its original: realistic hard negatives). Training queries therefore
grow in proportion to documents (0.97 a document, as in the source). The dev queries stay the 1,200 real ones,
judged on real documents.

    python -m benchmarks.synthetic --documents 100000 --out /tmp/synthetic-100k
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
from contextlib import ExitStack
from pathlib import Path

import numpy as np

from retrieval_zoo.data.collections import EMBEDDED_ROOT
from retrieval_zoo.data.formats import read_id_text_tsv, read_qrels

SOURCE = EMBEDDED_ROOT / "debian_descriptions" / "full"
DEFAULT = EMBEDDED_ROOT / "debian_descriptions" / "default"
MINIMUM = 10_000  # the default variant's documents: every dev query's relevant one among them
PERTURB = 0.1  # share of a copy's words replaced by a variant
SENTENCE = re.compile(r"(?<=[.!?])\s+")
FILES = ("collection.tsv", "queries.train.tsv", "queries.dev.tsv", "qrels.train.tsv", "qrels.dev.tsv")


def _suffix(k: int) -> str:
    """``zq`` and k in base 26 letters: one token to Lucene's analyzer (no digits or punctuation to split at)."""
    letters = ""
    while k:
        k, digit = divmod(k, 26)
        letters = "abcdefghijklmnopqrstuvwxyz"[digit] + letters
    return "zq" + letters


def _copy(text: str, other: str, rng: np.random.Generator) -> tuple[str, dict[str, str]]:
    """A copy of ``text`` (module docstring) and the replacements it made, word → variant."""
    sentences = SENTENCE.split(text)
    rng.shuffle(sentences)
    extra = SENTENCE.split(other)
    words = " ".join([*sentences, extra[int(rng.integers(len(extra)))]]).split(" ")
    replaced: dict[str, str] = {}
    for position in np.flatnonzero(rng.random(len(words)) < PERTURB):
        word = words[position]
        if word.isalpha():
            variant = replaced.setdefault(word, word + _suffix(int(rng.zipf(2.0))))
            words[position] = variant
    return " ".join(words), replaced


def _real_documents() -> tuple[dict[str, str], list[str]]:
    """The full collection, ordered with the default variant's 10,000 documents (every dev-judged one) first."""
    corpus = read_id_text_tsv(SOURCE / "collection.tsv.gz", "document")
    first = list(read_id_text_tsv(DEFAULT / "collection.tsv.gz", "document"))
    chosen = set(first)
    return corpus, first + [d for d in corpus if d not in chosen]


def synthesize(documents: int, out: Path, seed: int = 0) -> Path:
    """Write a collection of ``documents`` documents in MS MARCO's TSV layout to ``out`` (kept if complete)."""
    out = Path(out)
    if (out / "complete").exists():
        return out
    if documents < MINIMUM:
        raise ValueError(f"--documents must be at least {MINIMUM:,}: the dev queries are judged on those documents")
    out.mkdir(parents=True, exist_ok=True)
    corpus, docids = _real_documents()
    queries = read_id_text_tsv(SOURCE / "queries.train.tsv.gz", "query")
    qrels = read_qrels(SOURCE / "qrels.train.tsv.gz")
    owned: dict[str, list[str]] = {}  # a query's copies go with the copies of its first relevant document
    for qid, judged in qrels.items():
        owned.setdefault(min(judged), []).append(qid)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(docids))
    with ExitStack() as stack:
        handles = {name: stack.enter_context(open(out / f"{name}.part", "w", encoding="utf-8")) for name in FILES}
        for number in range(documents):
            generation, position = divmod(number, len(docids))
            real = docids[position if generation == 0 else int(order[position])]
            if generation == 0:
                handles["collection.tsv"].write(f"{real}\t{corpus[real]}\n")
                continue
            text, replaced = _copy(corpus[real], corpus[docids[int(rng.integers(len(docids)))]], rng)
            handles["collection.tsv"].write(f"{real}.{generation}\t{text}\n")
            for qid in owned.get(real, []):
                words = (replaced.get(word, word) for word in queries[qid].split(" "))
                handles["queries.train.tsv"].write(f"{qid}.{generation}\t{' '.join(words)}\n")
                handles["qrels.train.tsv"].write(f"{qid}.{generation} 0 {real}.{generation} 1\n")
        written = set(docids[:documents])
        for qid, judged in qrels.items():  # the real queries, judged on the real documents written
            present = sorted(d for d in judged if d in written)
            if present:
                handles["queries.train.tsv"].write(f"{qid}\t{queries[qid]}\n")
                handles["qrels.train.tsv"].writelines(f"{qid} 0 {d} {judged[d]}\n" for d in present)
        for name in ("queries.dev.tsv", "qrels.dev.tsv"):
            with gzip.open(SOURCE / f"{name}.gz", "rt", encoding="utf-8") as source:
                handles[name].write(source.read())
    for name in FILES:
        os.replace(out / f"{name}.part", out / name)
    (out / "complete").write_text(f"{documents} documents, seed {seed}\n")
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--documents", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(synthesize(args.documents, args.out, args.seed))


if __name__ == "__main__":
    main()
