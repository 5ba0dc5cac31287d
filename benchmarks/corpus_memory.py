"""The corpus at MS MARCO's size: the on-disk store (``data/corpus_store.py``) against a dict of every text.

A synthetic ``collection.tsv`` of 8,841,823 passages (ids as MS MARCO's, 0..N − 1; 56 random words a passage drawn
from a 50k-word vocabulary, about MS MARCO's 3 GB) is written, then, in one process, step by step: building the store
(reading and checking every line), opening it, 100,000 random lookups, one streaming pass over every (id, text),
and last, for comparison, reading the file into a dict as the collection did before the store
(``read_id_text_tsv``). Each step prints its seconds, the process's peak resident memory and its peak anonymous
memory (without the file pages of the memory-mapped texts, which the kernel can drop); peaks include what earlier
steps left, so the dict comes last.

    python -m benchmarks.corpus_memory [--docs 8841823] [--work /tmp/retrieval_zoo-corpus]
"""

from __future__ import annotations

import argparse
import random
import shutil
from pathlib import Path

import numpy as np

from benchmarks.datamodule_memory import measured
from retrieval_zoo.data.corpus_store import corpus_store
from retrieval_zoo.data.formats import read_id_text_tsv

WORDS = 56  # MS MARCO's passages average about 56 words


def write_collection(path: Path, docs: int, seed: int = 0) -> None:
    """``docs`` lines of ``id<TAB>text``, written a block at a time."""
    rng = np.random.default_rng(seed)
    vocabulary = np.asarray([f"word{i:x}" for i in range(50_000)] + ["the", "of", "and", "a", "to", "in", "is"])
    with open(path, "w", encoding="utf-8") as out:
        for start in range(0, docs, 100_000):
            count = min(100_000, docs - start)
            words = vocabulary[rng.zipf(1.3, size=(count, WORDS)) % len(vocabulary)]
            out.writelines(f"{start + i}\t{' '.join(row)}\n" for i, row in enumerate(words.tolist()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=8_841_823)
    parser.add_argument("--work", type=Path, default=Path("/tmp/retrieval_zoo-corpus"))
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    path, cache = args.work / "collection.tsv", args.work / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    print(f"## The corpus at {args.docs:,} passages\n")
    print("| step | seconds | peak_rss | peak_anon |\n|---|---|---|---|")
    if not path.exists():
        measured("synthetic collection.tsv written", lambda: write_collection(path, args.docs))
    measured("store built (every line read and checked)", lambda: corpus_store(path, "tsv", cache))
    store = measured("store opened", lambda: corpus_store(path, "tsv", cache))
    picked = [str(random.Random(0).randrange(args.docs)) for _ in range(100_000)]
    measured("100,000 random lookups", lambda: [store[docid] for docid in picked])
    measured("one pass over every (id, text)", lambda: sum(len(text) for _, text in store.items()))
    measured("read into a dict instead (read_id_text_tsv)", lambda: len(read_id_text_tsv(path)))
    print(f"\n{path.stat().st_size / 2**30:.2f} GiB of TSV; the store: "
          f"{sum(f.stat().st_size for f in store.folder.iterdir()) / 2**30:.2f} GiB")  # fmt: skip


if __name__ == "__main__":
    main()
