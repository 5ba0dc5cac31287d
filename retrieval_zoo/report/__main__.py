"""Write one self-contained HTML page about evaluated runs, to look at in a browser.

    python -m retrieval_zoo.report outputs/<clear_run> [outputs/<roc_run> ...] --out report.html

The page holds the metrics table with paired significance tests against the first system; for each query, every
system's top 10 side by side (the method's, BM25's, each fused part's), judged documents marked, where each document
ranks in the other systems and with what score, the rank of the first relevant document in each; the queries each
method moved most against BM25 (CLEAR Tables 3–4); a fusion's complementarity (RoC Eq. 1) with its Venn figure; and
for DLR/DHR and CSurF runs evaluated with ``eval.explain=N``, the matched terms. A box filters the queries by text.
Nothing is fetched: no network, no server; every text is escaped (:mod:`retrieval_zoo.report.page`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from retrieval_zoo.cache import atomic_path
from retrieval_zoo.report.contents import gather
from retrieval_zoo.report.page import page


def main(argv: list[str] | None = None) -> Path:
    """Parse the command line, write the page, return its path."""
    parser = argparse.ArgumentParser(prog="python -m retrieval_zoo.report", description=__doc__.split("\n")[0])
    parser.add_argument("run_dirs", nargs="+", type=Path, help="train.py / evaluate.py output directories")
    parser.add_argument("--out", type=Path, default=Path("report.html"))
    parser.add_argument("--queries", type=int, default=300, help="query sections shown, the first by id")
    parser.add_argument("--resamples", type=int, default=10_000, help="permutation test resamples")
    args = parser.parse_args(argv)
    if args.queries < 0:
        parser.error(f"--queries must be 0 or more, not {args.queries}")
    contents = gather(args.run_dirs, args.resamples)
    with atomic_path(args.out) as tmp:
        tmp.write_text(page(contents, args.queries), encoding="utf-8")
    print(f"[report] {args.out}: {len(contents.metrics)} systems, {min(args.queries, len(contents.queries))} of "
          f"{len(contents.queries):,} queries")  # fmt: skip
    return args.out


if __name__ == "__main__":
    main()
