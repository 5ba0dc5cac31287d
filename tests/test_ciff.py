"""CIFF (retrieval_zoo/index/terms/ciff_format.py, retrieval_zoo/export/ciff.py): lists worked by hand, read back by
ciff-toolkit and by BMP's own reader, and the export as a user runs it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.index.terms.bmp_engine import ciff_to_bmp
from retrieval_zoo.index.terms.ciff_format import import_ciff_toolkit, spill, term_lists, write_ciff

REPO = Path(__file__).resolve().parents[1]
NAMES = {0: "zebra", 1: "apple", 2: "unused", 3: "##s", 4: "b"}
ROWS = [
    [0.0, 1.0, 0.0, 0.5, 0.0],  # impacts at 255 / 2: apple 127.5 → 128 (half to even), ##s 63.75 → 64
    [0.0, 0.0, 0.0, 0.0, 0.0],  # no term
    [2.0, 0.0, 0.0, 1.0, 0.0],  # zebra 255, ##s 127.5 → 128
    [0.0, 0.25, 0.0, 0.0, 0.001],  # apple 31.875 → 32, b 0.1275 → 0: left out
]
# lexicographic order of the names: "##s" < "apple" < "zebra"; "b" and "unused" have no impact
LISTS = [("##s", [0, 2], [64, 128]), ("apple", [0, 3], [128, 32]), ("zebra", [2], [255])]


def shards() -> CorpusShards:
    weights = torch.tensor(ROWS)
    encode = lambda ids: {"lexical": weights[[int(d[1:]) for d in ids]]}  # noqa: E731
    return CorpusShards.on_demand([f"d{i}" for i in range(4)], encode, shard_size=2)


def names(ids: list[int]) -> list[str]:
    return [NAMES[i] for i in ids]


@pytest.mark.parametrize("budget", [1, 2, 1000])  # a term at a time, two postings at a time, all at once
def test_lists_are_term_major_in_lexicographic_order_worked_by_hand(tmp_path: Path, budget: int) -> None:
    spilled = spill(shards(), 0, 255 / 2.0, tmp_path)
    assert spilled.doc_lengths.tolist() == [192, 0, 383, 32] and spilled.df.tolist() == [1, 2, 0, 2]
    count, lists = term_lists(spilled, names, budget)
    assert count == 3
    assert [(term, rows.tolist(), impacts.tolist()) for term, rows, impacts in lists] == LISTS


def test_repeated_term_names_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="term names repeat"):
        term_lists(spill(shards(), 0, 127.5, tmp_path), lambda ids: ["same"] * len(ids))


@pytest.mark.parametrize("name", ["index.ciff", "index.ciff.gz"])
def test_ciff_toolkit_reads_back_what_was_written(tmp_path: Path, name: str) -> None:
    from ciff_toolkit.read import CiffReader

    spilled = spill(shards(), 0, 127.5, tmp_path / "spilled")
    count, lists = term_lists(spilled, names)
    path = write_ciff(tmp_path / name, lists, count, ["d0", "d1", "d2", "d3"], spilled.doc_lengths, "hand")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["spilled", name])  # no partial file left
    reader = CiffReader(path)
    header = reader.read_header()
    assert (header.version, header.num_postings_lists, header.num_docs, header.total_postings_lists) == (1, 3, 4, 3)
    assert header.total_terms_in_collection == 607 and header.average_doclength == 607 / 4
    read = [(pl.term, pl.df, pl.cf, [(p.docid, p.tf) for p in pl.postings]) for pl in reader.read_postings_lists()]
    assert read == [("##s", 2, 192, [(0, 64), (2, 128)]),  # documents as gaps: 0, then 2 - 0
                    ("apple", 2, 160, [(0, 128), (3, 32)]), ("zebra", 1, 255, [(2, 255)])]  # fmt: skip
    assert [(d.docid, d.collection_docid, d.doclength) for d in reader.read_documents()] == [
        (0, "d0", 192), (1, "d1", 0), (2, "d2", 383), (3, "d3", 32)]  # fmt: skip


def test_a_failed_write_leaves_no_file(tmp_path: Path) -> None:
    def broken():
        yield "a", np.array([0]), np.array([1])
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_ciff(tmp_path / "index.ciff", broken(), 2, ["d0"], np.array([1]), "broken")
    assert list(tmp_path.iterdir()) == []


def test_bmp_reads_the_file_and_scores_the_impacts(tmp_path: Path) -> None:
    import bmp

    spilled = spill(shards(), 0, 127.5, tmp_path / "spilled")
    count, lists = term_lists(spilled, names)
    extra = [("~end", np.array([4, 5, 6, 7]), np.ones(4, dtype=np.int64))]  # a last block: bmp skips one (bmp.py)
    docs = ["d0", "d1", "d2", "d3", "x4", "x5", "x6", "x7"]
    ciff = write_ciff(tmp_path / "index.ciff", [*lists, *extra], count + 1, docs, np.ones(8, dtype=np.int64), "")
    ciff_to_bmp(ciff, tmp_path / "index.bmp", 4)
    query = {"##s": 16, "apple": 32, "~end": 1}  # largest at 32, which bmp keeps (bmp.py)
    found, scores = bmp.Searcher(str(tmp_path / "index.bmp")).search(query, 3, 1, 1)
    assert found == ["d0", "d2", "d3"] and scores == [16 * 64 + 32 * 128, 16 * 128, 32 * 32]  # Σ query × document


def test_a_damaged_file_is_a_clear_error_not_an_exit(tmp_path: Path) -> None:
    (tmp_path / "bad.ciff").write_bytes(b"\x05not a ciff header")
    with pytest.raises(RuntimeError, match=r"bmp\.ciff2bmp failed on .*bad\.ciff"):
        ciff_to_bmp(tmp_path / "bad.ciff", tmp_path / "index.bmp", 32)


def test_a_missing_toolkit_names_the_install_command(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ciff_toolkit", None)
    with pytest.raises(ImportError, match=r"pip install --no-deps ciff-toolkit==0\.2\.2"):
        import_ciff_toolkit()


def export(*overrides: str, ok: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "retrieval_zoo.export.ciff", *overrides], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert (done.returncode == 0) == ok, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_export_as_a_user_runs_it_and_bmp_searches_it_exactly(tiny_dir: Path, tmp_path: Path) -> None:
    import bmp
    from ciff_toolkit.read import CiffReader

    from tests.test_end_to_end import tiny_dataset

    out = tmp_path / "export"
    export(
        "method=dlr_splade",
        *tiny_dataset(tiny_dir),
        f"encode.cache_dir={tmp_path / 'cache'}",
        f"out={out}",
        "levels=15",
        "query_levels=32",
    )  # bmp keeps queries at 32 levels; 32 · 15 · |q| stays in its 16 bits
    summary = json.loads((out / "export.json").read_text())
    reader = CiffReader(out / "index.ciff")
    postings = {}  # term → {document: impact}, read back
    for plist in reader.read_postings_lists():
        rows = np.cumsum([p.docid for p in plist.postings])
        postings[plist.term] = dict(zip(rows.tolist(), [p.tf for p in plist.postings], strict=True))
    documents = [d.collection_docid for d in reader.read_documents()]
    corpus_ids = [line.split("\t")[0] for line in (tiny_dir / "collection.tsv").read_text().splitlines()]
    assert documents == corpus_ids and summary["documents"] == len(corpus_ids)
    assert list(postings) == sorted(postings) and summary["postings"] == sum(map(len, postings.values()))
    assert all(0 < impact <= 255 for plist in postings.values() for impact in plist.values())
    assert any(term.startswith("##") for term in postings)  # SPLADE's wordpieces, by name
    queries = [json.loads(line) for line in (out / "queries.dev.jsonl").read_text().splitlines()]
    assert len(queries) == len((tiny_dir / "queries.dev.tsv").read_text().splitlines())
    ciff_to_bmp(out / "index.ciff", tmp_path / "index.bmp", 8)
    searcher = bmp.Searcher(str(tmp_path / "index.bmp"))
    for query in queries[:20]:
        exact = np.zeros(len(documents), dtype=np.int64)
        for term, weight in query["vector"].items():
            for row, impact in postings.get(term, {}).items():
                exact[row] += weight * impact
        found, scores = searcher.search(query["vector"], 5, 1.0, 1.0)
        best = np.sort(exact)[::-1][: len(scores)]
        assert [exact[documents.index(d)] for d in found] == scores and scores[:3] == best[:3].tolist()
    export("method=dense", *tiny_dataset(tiny_dir), f"out={tmp_path / 'dense'}", ok=False)


@pytest.mark.parametrize("method", sorted(p.stem for p in (REPO / "retrieval_zoo" / "conf" / "method").glob("*.yaml")))
def test_the_export_config_composes_for_every_method_and_refuses_those_without_term_weights(
    method: str, tmp_path: Path
) -> None:
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from hydra.utils import instantiate

    from retrieval_zoo.config_check import check_config
    from retrieval_zoo.export.ciff import export

    with initialize_config_dir(config_dir=str(REPO / "retrieval_zoo" / "conf"), version_base="1.3"):
        cfg = compose("export_ciff", [f"method={method}", "backbone=tiny_random", f"out={tmp_path}"],
                      return_hydra_config=True)  # fmt: skip
    HydraConfig.instance().set_config(cfg)  # the identity keys read hydra's choices
    model = instantiate(cfg.method)
    if "term_weights" in model.representations:
        check_config(cfg)
        return
    with pytest.raises(ValueError, match=rf"method={method}\b.*(term_weights|term weights)"):
        check_config(cfg)  # index=sparse (the export config's) refuses a method without an index of its own
        export(cfg, model, tmp_path)  # the export refuses the others before anything is read or encoded
    assert list(tmp_path.iterdir()) == []
