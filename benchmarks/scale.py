"""The scale harness: how each stage's time, memory and disk grow with the corpus, projected to MS MARCO's 8.8M.

For each size, a synthetic collection (:mod:`benchmarks.synthetic`: the embedded collection's real documents, then
perturbed copies, training queries in proportion) is written, and each stage runs in a fresh process under its own
artifact cache, sampled every 0.1 s for the resident memory of its whole process tree (the Lucene JVM included),
``peak_rss``, and for the anonymous part of it, ``peak_anon`` (what the processes allocated, without the file pages of
memory-mapped arrays they read, which the kernel can drop), and for the part of its worker processes,
``peak_workers`` (the Lucene worker, whose JVM's heap ``RETRIEVAL_ZOO_JVM_HEAP`` caps):

- ``collection``: reading the TSV files into the project's collection (every stage below starts with it);
- ``bm25``: the Lucene BM25 index (Anserini), then the 1,200 dev queries at k = 1000;
- ``datamodule``: the DataModule's setup for CLEAR's recipe (BM25 top 1,000 of each training query as the pool,
  BM25 scores of the sampled pairs, token caches) on MS MARCO's share of training queries a document, over the bm25
  stage's index;
- ``shards``: BM25's document vectors (``method=dlr_bm25``) encoded into shards on disk, which the term-weight
  families below index: ``sparse`` (exact), ``gip`` (DLR, 768 slices, approximate GIP), ``bmp``, ``lucene_impact``,
  ``seismic``;
- ``faiss``: a Flat inner-product index of 768-d vectors (bert-base's width; random, since a Flat index's cost
  depends on n and d alone);
- ``csf_shards``, ``csf``, ``csf_fp16``, ``csf_pruned``, ``csf_split``, ``csf_compiled``: CSurF's bags and inverted
  lists, in float32, float16, pruned at α = 0.5, split over 2 processes, and scored by a compiled kernel
  (:mod:`benchmarks.scale_csf`);
- ``encode_dense``, ``encode_splade``: the corpus encoded into an index's shards on the model's device, CUDA in bf16
  where there is one (:mod:`benchmarks.scale_gpu`; bert-base-size dense vectors, SPLADE-tiny's term weights);
  ``gip_splade``: ``index=gip`` over ``encode_splade``'s shards, on the model's device, without Java;
  ``sparse_splade``, ``bmp_splade``, ``lucene_impact_splade``, ``seismic_splade``: the term-weight families over the
  same shards, SPLADE's 30,522-term vocabulary (the one learned sparse engines are made for; BMP refuses BM25's past
  65,536 terms), their agreement measured against ``sparse_splade``'s exact run;

Each family's query latency is the 1,200 dev queries at k = 1000, their encoding done before (best of 2). The
growth exponent between the two largest sizes (time ∝ n^e) projects each figure to 8,841,823 passages, and so does the
straight line through them (:func:`line`: the projection of a figure with a fixed part, whose exponent is below 1).

    python -m benchmarks.scale [--sizes 10000,100000] [--stages bm25,datamodule,...] [--work /tmp/scale]
                               [--plot docs/figures] [--resume]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

MSMARCO = 8_841_823
RESUME = "SCALE_RESUME"  # set to "1" in a stage's environment by --resume: an encoding keeps what a stopped run wrote
TREE_MEMORY = ("peak_rss", "peak_anon", "peak_workers")  # the peaks of tree_rss's three figures, in its order
STAGES = (
    "collection",
    "bm25",
    "datamodule",
    "shards",
    "sparse",
    "gip",
    "bmp",
    "lucene_impact",
    "seismic",
    "faiss",
    "csf_shards",
    "csf",
    "csf_fp16",
    "csf_pruned",
    "csf_split",
    "csf_compiled",
    "encode_dense",
    "encode_splade",
    "gip_splade",
    "sparse_splade",
    "bmp_splade",
    "lucene_impact_splade",
    "seismic_splade",
)
# projected to MS MARCO
GROWING = ("seconds", "tokens", *TREE_MEMORY, "peak_gpu", "disk", "ms_per_query", "rank_disk")
# reported: an encoding's rates and the runs it took; agreement with an exact run
MEASURES = (*GROWING, "docs_per_s", "tokens_per_s", "segments", "recall_exact", "top10_overlap", "same_run")


def tree_rss(root: int) -> tuple[int, int, int]:
    """Resident bytes of ``root`` and all its descendants, the anonymous part of them, and the descendants' alone.

    Anonymous memory is what the processes allocated (the JVM's heap, Python's objects, arrays in memory); the rest
    is file pages, such as memory-mapped arrays that were read, which the kernel can drop under pressure. The
    descendants are a stage's workers: the Lucene worker, whose JVM's heap ``RETRIEVAL_ZOO_JVM_HEAP`` caps.
    """
    children: dict[int, list[int]] = {}
    rss: dict[int, tuple[int, int]] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry.name}/statm") as handle:
                resident, shared = (int(v) for v in handle.read().split()[1:3])
        except OSError:
            continue
        pid = int(entry.name)
        children.setdefault(int(fields[1]), []).append(pid)
        rss[pid] = (resident * page, (resident - shared) * page)
    total, anonymous, stack = 0, 0, [root]
    while stack:
        pid = stack.pop()
        resident, anon = rss.get(pid, (0, 0))
        total, anonymous = total + resident, anonymous + anon
        stack.extend(children.get(pid, []))
    return total, anonymous, total - rss.get(root, (0, 0))[0]


def run_stage(
    stage: str, collection: Path, work: Path, memory_limit: int, resume: bool = False
) -> dict[str, float | str]:
    """One stage in a fresh process: its JSON result, plus the peak resident memory of its process tree.

    A stage whose tree passes ``memory_limit`` bytes is stopped (this machine would start swapping or kill
    something else): its result is then the failure and the memory it reached. The peaks so far are kept in
    ``<work>/<stage>.peaks.json`` while the stage runs: with ``resume``, a stage that an earlier run left part-way
    (an encoding stage goes on from its shards) starts from them, so its peaks are those of all its runs.
    """
    from retrieval_zoo.cache import write_json

    env = os.environ | {"RETRIEVAL_ZOO_CACHE": str(work / "cache"), RESUME: "1" if resume else "0"}
    command = [sys.executable, "-m", "benchmarks.scale_stages", stage, str(collection), str(work)]
    kept = work / f"{stage}.peaks.json"
    peaks = dict.fromkeys(TREE_MEMORY, 0) | (json.loads(kept.read_text()) if resume and kept.exists() else {})
    process = subprocess.Popen(command, stdout=subprocess.PIPE, env=env, text=True, start_new_session=True)
    over, done = False, threading.Event()

    def sample() -> None:
        nonlocal over
        written = time.monotonic()
        while not done.is_set():
            for measure, value in zip(TREE_MEMORY, tree_rss(process.pid), strict=True):
                peaks[measure] = max(peaks[measure], value)
            if peaks["peak_rss"] > memory_limit and not over:
                over = True
                os.killpg(process.pid, signal.SIGKILL)
            if time.monotonic() - written > 5:
                write_json(kept, peaks)
                written = time.monotonic()
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        output, _ = process.communicate()
    finally:  # the harness stopped (a signal, Ctrl-C): its stage, in a session of its own, stops with it
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        done.set()
        sampler.join()
    kept.unlink(missing_ok=True)
    memory = {measure: value for measure, value in peaks.items() if value or measure != "peak_workers"}
    if over:
        return {"failed": f"stopped past {memory_limit / 2**30:.0f} GiB resident"} | memory
    if process.returncode:
        return {"failed": f"exit {process.returncode}"} | memory
    return json.loads(output.strip().splitlines()[-1]) | memory


def human(measure: str, value: float | None) -> str:
    """A figure as the table prints it."""
    if value is None:
        return ""
    if measure in (*TREE_MEMORY, "peak_gpu", "disk", "rank_disk"):
        return f"{value / 2**30:.2f} GiB" if value >= 2**30 else f"{value / 2**20:.0f} MiB"
    if measure in ("docs_per_s", "tokens", "tokens_per_s", "segments"):
        return f"{value:,.0f}"
    if measure == "seconds":
        return f"{value / 3600:.1f} h" if value >= 3600 else f"{value:.1f} s" if value >= 10 else f"{value:.2f} s"
    return f"{value:.2f}"


def exponent(small: float | None, large: float | None, ratio: float) -> float | None:
    """e in value ∝ n^e between two sizes ``ratio`` apart."""
    if not small or not large:
        return None
    return math.log(large / small) / math.log(ratio)


def line(small_n: int, small: float | None, large_n: int, large: float | None) -> float | None:
    """The value at MS MARCO's size on the straight line through two sizes' values (None where it is not above 0).

    A figure made of a fixed part and a part per document (a process's imports beside its index) grows as n^e with
    e < 1 between two sizes, and the power law projects the fixed part shrinking per document: the line keeps it fixed
    and the rest per document, which the power law underestimates by far at 8.8M. For e ≥ 1 the line is the lower.
    """
    if small is None or large is None:
        return None
    value = large + (large - small) / (large_n - small_n) * (MSMARCO - large_n)
    return value if value > 0 else None


def report(results: dict[int, dict[str, dict[str, float]]], stages: list[str]) -> None:
    """The markdown table: every measured size, the growth exponent, and the projection to MS MARCO."""
    sizes = sorted(results)
    head = [f"{n:,}" for n in sizes]
    print(f"| stage | measure | {' | '.join(head)} | exponent | projected to {MSMARCO:,} | line to {MSMARCO:,} |")
    print("|---|---|" + "---|" * (len(sizes) + 3))
    for stage in stages:
        for measure in MEASURES:
            values = [results[n].get(stage, {}).get(measure) for n in sizes]
            failures = [results[n].get(stage, {}).get("failed") for n in sizes]
            failed = [why if measure == "seconds" else None for why in failures]
            if all(v is None for v in values) and not any(failed):
                continue
            growth = None  # a stage stopped part-way has no growth to project
            if len(sizes) > 1 and not any(failures[-2:]) and measure in GROWING:
                growth = exponent(values[-2], values[-1], sizes[-1] / sizes[-2])
            projected = straight = None
            if growth is not None:
                projected = values[-1] * (MSMARCO / sizes[-1]) ** growth
                straight = line(sizes[-2], values[-2], sizes[-1], values[-1])
            cells = [why or human(measure, v) for v, why in zip(values, failed, strict=True)]
            shown = f"{growth:.2f}" if growth is not None else ""
            ends = f"{shown} | {human(measure, projected)} | {human(measure, straight)}"
            print(f"| {stage} | {measure} | {' | '.join(cells)} | {ends} |")


def main() -> None:
    from benchmarks.synthetic import synthesize

    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000", help="corpus sizes, comma-separated")
    parser.add_argument("--stages", default=",".join(STAGES), help=f"any of {', '.join(STAGES)}")
    parser.add_argument("--work", type=Path, default=Path("/tmp/retrieval_zoo-scale"))
    parser.add_argument("--memory-limit-gib", type=float, default=16.0, help="a stage past it is stopped")
    parser.add_argument("--plot", type=Path, help="a folder: also draw each measure's growth there (scale_plot)")
    resume = "skip each size's stages measured without failure; an encoding stopped part-way goes on"
    parser.add_argument("--resume", action="store_true", help=resume)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # unwinds, so the stage is stopped too
    stages = args.stages.split(",")
    unknown = set(stages) - set(STAGES)
    if unknown:
        parser.error(f"unknown stages {sorted(unknown)}; known: {', '.join(STAGES)}")
    saved = args.work / "results.json"  # earlier runs' stages are kept: a stage can be measured again alone
    results = {int(n): r for n, r in json.loads(saved.read_text()).items()} if saved.exists() else {}
    for size in map(int, args.sizes.split(",")):
        work = args.work / f"n{size}"
        collection = synthesize(size, work / "collection")
        results.setdefault(size, {})
        for stage in stages:
            if args.resume and stage in results[size] and "failed" not in results[size][stage]:
                print(f"[scale] {size:,} documents, {stage}: measured before (--resume)", file=sys.stderr)
                continue
            limit = int(args.memory_limit_gib * 2**30)
            results[size][stage] = run_stage(stage, collection, work, limit, resume=args.resume)
            print(f"[scale] {size:,} documents, {stage}: {results[size][stage]}", file=sys.stderr, flush=True)
            saved.write_text(json.dumps({str(n): r for n, r in sorted(results.items())}, indent=1))
    print(f"\n## Scale harness  ({os.cpu_count()} cores)\n")
    report(results, [stage for stage in STAGES if any(stage in r for r in results.values())])
    if args.plot is not None:
        from benchmarks.scale_plot import plot

        for path in plot(results, args.plot):
            print(path)


if __name__ == "__main__":
    main()
