"""The scale harness (benchmarks/scale.py): its synthetic corpora, its growth arithmetic and its memory watch."""

import os
from pathlib import Path

import pytest

from benchmarks import scale
from benchmarks.scale_stages import load, msmarco_share
from benchmarks.synthetic import MINIMUM, synthesize


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    return synthesize(60_000, tmp_path_factory.mktemp("synthetic") / "collection")


def test_a_synthetic_collection_reads_as_any_collection_with_queries_in_proportion(synthetic) -> None:
    collection = load(synthetic)
    assert len(collection.corpus) == 60_000 and "0" in collection.corpus
    copies = [docid for docid in collection.corpus if "." in docid]
    assert len(copies) == 60_000 - 58_625  # the full collection, then copies of generation 1
    train = collection.judged_queries("train")
    assert 0.9 < len(train) / len(collection.corpus) < 1.0  # as in the source collection (0.97)
    assert len(collection.judged_queries("dev")) == 1_200  # judged on real documents, all present
    copy = copies[0]
    qid = next(q for q, judged in collection.qrels["train"].items() if copy in judged)
    assert qid.endswith(".1") and collection.qrels["train"][qid] == {copy: 1}


def test_copies_are_perturbed_so_the_vocabulary_grows(synthetic) -> None:
    collection = load(synthetic)
    copy = next(docid for docid in collection.corpus if "." in docid)
    original = collection.corpus[copy.split(".")[0]]
    variants = [word for word in collection.corpus[copy].split() if "zq" in word and word not in original]
    assert variants and all(word.split("zq")[1].isalpha() for word in variants)  # one token to Lucene's analyzer


def test_the_same_size_and_seed_give_the_same_files(synthetic, tmp_path) -> None:
    again = synthesize(60_000, tmp_path / "again")
    for name in ("collection.tsv", "queries.train.tsv", "qrels.train.tsv"):
        assert (again / name).read_bytes() == (synthetic / name).read_bytes(), name


def test_the_datamodule_stage_trains_on_msmarcos_share_of_queries_a_document(synthetic) -> None:
    collection = load(synthetic)
    train = collection.judged_queries("train")
    shared = msmarco_share(collection)
    kept = shared.judged_queries("train")
    assert len(kept) == round(60_000 * 502_939 / 8_841_823) == 3_413  # MS MARCO's 0.057 a passage, not 0.97
    assert list(kept) == [qid for qid in train if qid in kept]  # a sample, in the qrels' order
    assert all(shared.qrels["train"][q] == collection.qrels["train"][q] and kept[q] == train[q] for q in kept)
    assert set(shared.queries["train"]) == set(kept) and shared.queries["dev"] == collection.queries["dev"]
    assert len(collection.judged_queries("train")) == len(train)  # the collection itself is left whole
    assert list(msmarco_share(collection).judged_queries("train")) == list(kept)  # seeded
    assert list(msmarco_share(collection, seed=1).judged_queries("train")) != list(kept)


def test_too_small_a_corpus_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match=f"at least {MINIMUM:,}"):
        synthesize(500, tmp_path / "small")


def test_growth_exponent_and_projection_worked_by_hand(capsys) -> None:
    assert scale.exponent(2.0, 20.0, 10.0) == pytest.approx(1.0)
    assert scale.exponent(1.0, 100.0, 10.0) == pytest.approx(2.0)
    results = {10_000: {"bm25": {"seconds": 1.0}}, 100_000: {"bm25": {"seconds": 10.0}, "gip": {"failed": "exit 1"}}}
    scale.report(results, ["bm25", "gip"])
    lines = capsys.readouterr().out.splitlines()
    bm25 = next(line for line in lines if line.startswith("| bm25 | seconds"))
    assert "| 1.00 |" in bm25 and f"{scale.MSMARCO / 10_000:.1f} s" in bm25  # linear: 1 s per 10,000 documents
    gip = next(line for line in lines if line.startswith("| gip | seconds"))
    assert "exit 1" in gip


def test_the_straight_line_projection_keeps_a_fixed_part_fixed_worked_by_hand(capsys) -> None:
    # 1 GiB of imports plus 1 KiB a document: 1.01 GiB at 10,000 documents, 1.10 GiB at 100,000
    fixed, per_doc = 2**30, 1024
    small, large = fixed + per_doc * 10_000, fixed + per_doc * 100_000
    assert scale.line(10_000, small, 100_000, large) == pytest.approx(fixed + per_doc * scale.MSMARCO)
    assert scale.exponent(small, large, 10.0) < 0.05  # the power law keeps it near 1.10 GiB at 8.8M
    assert scale.line(10_000, 2.0, 100_000, 1.0) is None  # falling: the line crosses 0 before 8.8M
    assert scale.line(10_000, None, 100_000, 1.0) is None
    scale.report({10_000: {"bmp": {"peak_rss": small}}, 100_000: {"bmp": {"peak_rss": large}}}, ["bmp"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(f"| exponent | projected to {scale.MSMARCO:,} | line to {scale.MSMARCO:,} |")
    cells = next(line for line in lines if line.startswith("| bmp | peak_rss")).strip("|").split("|")
    power = large * (scale.MSMARCO / 100_000) ** scale.exponent(small, large, 10.0)
    assert [cell.strip() for cell in cells[-2:]] == [
        f"{power / 2**30:.2f} GiB",
        f"{(fixed + per_doc * scale.MSMARCO) / 2**30:.2f} GiB",
    ]


def test_an_encodings_tokens_are_what_its_tokenizer_gives_each_document(tiny, isolated_cache) -> None:
    from benchmarks.common import composed
    from benchmarks.scale_gpu import corpus_tokens
    from retrieval_zoo.data.corpus_store import corpus_ids
    from retrieval_zoo.index.shards import CorpusShards

    model = composed("method", "dlr_splade")
    tokenizer = model.text_tokenizer()
    assert tokenizer is not None
    expected = sum(len(ids) for ids in tokenizer.unpadded(list(tiny.corpus.values()), "doc"))
    shards = CorpusShards(corpus_ids(tiny.corpus), 7)  # a last shard shorter than the others
    assert corpus_tokens(model, tiny, shards) == expected > len(tiny.corpus)


CHILD = """
import sys
import numpy as np
print("imported", flush=True)
sys.stdin.readline()
mapped = np.load(sys.argv[1], mmap_mode="r")
print(float(mapped.sum()), flush=True)  # reads every page: resident, but file-backed
sys.stdin.readline()
"""


def test_a_process_trees_memory_counts_its_children_and_tells_file_pages_apart(tmp_path) -> None:
    import subprocess
    import sys

    import numpy as np

    # The pages are watched in a quiet child: this process's own anonymous memory moves with whatever earlier tests
    # left running in it (a JVM, loader threads).
    np.save(tmp_path / "a.npy", np.ones(64 * 2**20 // 8))
    stdio = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
    with subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "a.npy")], **stdio) as child:
        assert child.stdin is not None and child.stdout is not None
        assert child.stdout.readline() == "imported\n"
        alone, anonymous, below = scale.tree_rss(child.pid)
        assert alone > 10 * 2**20 and 0 < anonymous < alone and below == 0  # numpy's libraries are files; no workers
        tree, _, workers = scale.tree_rss(os.getpid())
        own = int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        assert tree - own > alone // 2 and workers > alone // 2  # this process's tree holds the child, as a worker
        child.stdin.write("\n")
        child.stdin.flush()
        assert float(child.stdout.readline()) == 64 * 2**20 // 8
        resident, anon, _ = scale.tree_rss(child.pid)
        child.stdin.write("\n")
        child.stdin.flush()
    assert child.returncode == 0
    assert resident - alone > 48 * 2**20 and anon - anonymous < 16 * 2**20


def test_growth_figures_plot_measured_points_and_the_projection_worked_by_hand(tmp_path) -> None:
    from PIL import Image

    from benchmarks.scale import MSMARCO
    from benchmarks.scale_plot import plot, series

    results = {
        10_000: {"bm25": {"seconds": 2.0, "disk": 1e6}, "bmp": {"seconds": 1.0}},
        100_000: {"bm25": {"seconds": 20.0, "disk": 1e7}, "bmp": {"failed": "exit 1", "seconds": 5.0}},
    }
    points, projected = series(results, "bm25", "seconds")
    assert points == [(10_000, 2.0), (100_000, 20.0)] and projected == pytest.approx(20.0 * MSMARCO / 100_000)
    assert series(results, "bmp", "seconds") == ([(10_000, 1.0)], None)  # failed at the largest size: no projection
    written = plot(results, tmp_path)
    assert [p.name for p in written] == ["scale-seconds.png", "scale-disk.png"]  # measures nothing measured: none
    with Image.open(written[0]) as image:
        assert image.format == "PNG" and image.size[0] > 400


def test_the_harness_table_is_read_as_measured_figures_failures_included(tmp_path) -> None:
    from benchmarks.scale_plot import read_table

    page = tmp_path / "page.md"
    page.write_text(
        "# Benchmarks\n\n| stage | measure | 10 | 20 |\n|---|---|---|---|\n| other | table | 1 | 2 |\n\n"
        "## Scale harness: growth\n\ntext\n\n"
        "| stage | measure | 10,000 | 100,000 | exponent | projected to 8,841,823 |\n|---|---|---|---|---|---|\n"
        "| bm25 | seconds | 7.48 s | 1.5 h | 0.25 | 41.7 s |\n"
        "| bm25 | peak_rss | 2.73 GiB | 317 MiB | 0.01 | 3.01 GiB |\n"
        "| gip | seconds § | 0.148 s | 1.49 s | 1.00 | 131 s |\n"
        "| gip | recall_exact ‡ | 0.973 | not measured |  |  |\n"
        "| bmp | seconds | 0.49 s | refused † |  |  |\n"
        "| bmp | ms_per_query | 1.85 | 1,002.5 |  |  |\n\n"
        "| stage | measure | 1 | 2 |\n|---|---|---|---|\n| later | table | 1 | 2 |\n"
    )
    assert read_table(page) == {
        10_000: {"bm25": {"seconds": 7.48, "peak_rss": 2.73 * 2**30}, "gip": {"seconds": 0.148},
                 "bmp": {"seconds": 0.49, "ms_per_query": 1.85}},
        100_000: {"bm25": {"seconds": 5400.0, "peak_rss": 317 * 2**20}, "gip": {"seconds": 1.49},
                  "bmp": {"failed": "refused", "ms_per_query": 1002.5}},
    }  # fmt: skip
    (tmp_path / "empty.md").write_text("# Nothing here\n")
    with pytest.raises(ValueError, match="empty.md: no table under"):
        read_table(tmp_path / "empty.md")


def test_the_docs_scale_figures_plot_the_docs_table() -> None:
    from PIL import Image

    from benchmarks.scale_plot import PLOTTED, digest, drawn_series, read_table

    docs = Path(__file__).resolve().parents[1] / "docs"
    results = read_table(docs / "benchmarks.md")
    for measure in PLOTTED:
        path = docs / "figures" / f"scale-{measure}.png"
        with Image.open(path) as image:
            assert image.info.get("Description") == digest(drawn_series(results, measure)), (
                f"{path} plots other numbers than docs/benchmarks.md's scale table: run python -m "
                "benchmarks.scale_plot --table docs/benchmarks.md --out docs/figures"
            )
        assert f"figures/scale-{measure}.png" in (docs / "benchmarks.md").read_text()


def test_resume_skips_the_stages_a_size_measured_and_reruns_its_failures(tmp_path, monkeypatch, capsys) -> None:
    import json

    saved = {"10000": {"collection": {"seconds": 1.0}, "faiss": {"failed": "exit 1", "peak_rss": 5}}}
    (tmp_path / "results.json").write_text(json.dumps(saved))
    ran = []
    monkeypatch.setattr("benchmarks.synthetic.synthesize", lambda size, out: out)

    def run_stage(stage, *_, resume):
        assert resume  # an encoding stopped part-way goes on
        ran.append(stage)
        return {"seconds": 2.0, "docs_per_s": 5e3, "segments": 2}

    monkeypatch.setattr(scale, "run_stage", run_stage)
    argv = ["scale", "--sizes", "10000", "--stages", "collection,faiss,encode_dense", "--work", str(tmp_path)]
    monkeypatch.setattr("sys.argv", [*argv, "--resume"])
    scale.main()
    assert ran == ["faiss", "encode_dense"]
    results = json.loads((tmp_path / "results.json").read_text())["10000"]
    assert results["collection"] == {"seconds": 1.0} and results["faiss"]["seconds"] == 2.0
    printed = capsys.readouterr().out
    assert "| encode_dense | docs_per_s | 5,000 |" in printed and "| encode_dense | segments | 2 |" in printed


def test_a_resumed_encodings_seconds_are_its_segments_each_to_its_end_or_its_last_file(tmp_path) -> None:
    from benchmarks.scale_gpu import segment_seconds

    def wrote(name: str, at: float) -> None:
        path = tmp_path / "encoded" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text("x")
        os.utime(path, (at, at))

    wrote("shard-00000.pt", 1010.0)
    wrote("shard-00001.pt", 1030.0)  # the first run's last file: it was stopped after it
    wrote("shard-00002.pt", 2050.0)  # written by the second run
    (tmp_path / "segments.json").write_text("[]")  # the log itself is no work
    segments = [{"started": 1000.0}, {"started": 2000.0, "ended": 2100.0}]
    assert segment_seconds(segments, tmp_path) == 30.0 + 100.0
    assert segment_seconds([{"started": 3000.0}, *segments[1:]], tmp_path) == 0.0 + 100.0  # stopped before a file


def test_every_harness_stage_has_its_stage_and_only_those() -> None:
    from benchmarks.scale_stages import STAGES

    assert set(STAGES) == set(scale.STAGES)
    assert {"sparse_splade", "bmp_splade", "lucene_impact_splade", "seismic_splade"} <= set(STAGES)


def test_a_stage_over_splades_shards_names_the_folder_and_the_stage_to_run_first(synthetic, tmp_path) -> None:
    from benchmarks.scale_gpu import splade_shards

    before = os.environ.get("RETRIEVAL_ZOO_CACHE")
    with pytest.raises(FileNotFoundError, match=r"encoded-dlr_splade/encoded: 15 of 15 shards missing; run the "
                                                r"encode_splade stage at this size first"):  # fmt: skip
        splade_shards(load(synthetic), tmp_path)
    assert os.environ.get("RETRIEVAL_ZOO_CACHE") == before  # nothing redirected when nothing is there
