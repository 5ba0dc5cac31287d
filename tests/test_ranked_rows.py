"""Columnar runs: what read_run + trec_eval's ranking give, in arrays; every bad line named; BM25 searched in parts."""

import gzip
import random
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from retrieval_zoo.data import run_blocks as run_blocks_module
from retrieval_zoo.data.doc_rows import RankedRows
from retrieval_zoo.data.formats import FormatError, read_run, top_k, write_run
from retrieval_zoo.data.ranked_rows import cached_ranked_rows, read_ranked_rows
from retrieval_zoo.id_index import IdIndex
from retrieval_zoo.lexical import lucene_bm25 as bm25_module
from retrieval_zoo.training.lookups import PairTable


def read(tmp_path: Path, lines: str, qids: list[str], docs: IdIndex, depth: int | None = None, block: int = 2):
    (tmp_path / "run.trec").write_text(lines)
    folder = tmp_path / "rows"
    folder.mkdir(exist_ok=True)
    queries = dict.fromkeys(["q1", "q2", "q3", "q9"])
    return read_ranked_rows([tmp_path / "run.trec"], queries, qids, docs, depth, folder, block_lines=block)


def as_run(rows: RankedRows, qids: list[str], docs: IdIndex) -> dict:
    return {q: dict(zip(docs.names(rows.row(i)), rows.row_scores(i).tolist(), strict=True)) for i, q in enumerate(qids)}


def test_id_index_maps_ids_to_corpus_rows_and_back() -> None:
    docs = IdIndex(["d3", "d1", "d10", "d2"])
    assert docs.rows(["d10", "d3", "nope", "d2"]).tolist() == [2, 0, -1, 3]
    assert docs.names([3, 0]) == ["d2", "d3"] and docs.id_rank.tolist() == [3, 0, 1, 2]  # "d1" < "d10" < "d2" < "d3"
    assert IdIndex([]).rows(["x"]).tolist() == [-1]
    assert IdIndex(["d1", "d2"]).rows(["d10", "d", "d2"]).tolist() == [
        -1,
        -1,
        1,
    ]  # longer and shorter ids: no prefix match


def test_id_index_looks_up_many_ids_in_any_order() -> None:  # past 64 ids the keys are sorted before the search
    rng = random.Random(0)
    ids = [f"d{i}" for i in rng.sample(range(10_000), 500)]
    wanted = [rng.choice(ids) if rng.random() < 0.8 else f"x{i}" for i in range(300)]  # repeats and unknown ids
    expected = [ids.index(w) if w in ids else -1 for w in wanted]
    assert IdIndex(ids).rows(wanted).tolist() == expected and IdIndex(ids).rows(wanted[:50]).tolist() == expected[:50]
    assert IdIndex([]).rows(wanted).tolist() == [-1] * 300


def test_interleaved_queries_are_ranked_as_trec_eval_ranks_them_and_cut(tmp_path: Path) -> None:
    rng = random.Random(0)
    docs = IdIndex([f"d{i}" for i in range(40)])
    scores = [1.0, 2.0, 2.5, 3.0]  # few values: many ties
    lines = [(q, f"d{d}", rng.choice(scores)) for q in ("q1", "q2", "q9") for d in rng.sample(range(40), 15)]
    rng.shuffle(lines)  # queries interleave across the blocks of 7 lines
    text = "".join(f"{q} Q0 {d} 0 {s} t\n" for q, d, s in lines)
    rows = read(tmp_path, text, ["q2", "q3", "q1"], docs, depth=10, block=7)
    expected = top_k(read_run(tmp_path / "run.trec"), 10)  # ties broken by docid descending
    assert [docs.names(rows.row(i)) for i in range(3)] == [list(expected["q2"]), [], list(expected["q1"])]
    assert as_run(rows, ["q2", "q3", "q1"], docs) == {"q2": expected["q2"], "q3": {}, "q1": expected["q1"]}
    assert rows.docs.dtype == np.int32 and rows.scores.dtype == np.float32 and isinstance(rows.docs, np.memmap)


@pytest.mark.parametrize(
    ("content", "line", "problem"),
    [
        ("q1 Q0 d1 1 1.0 t\nq7 Q0 d1 1 1.0 t\n", 2, "unknown query id 'q7'"),
        ("q1 Q0 d1 1 1.0 t\nq1 Q0 d1 1 1.0 t\nq1 Q0 dx 1 1.0 t\n", 3, "unknown document id 'dx'"),
        ("q1 Q0 d1 1 1.0 t\nq1 Q0 d2 1 1.0 t\nq1 Q0 d3 1 high t\n", 3, "score 'high' is not a number"),
        ("q1 Q0 d1 1 1.0 t\nq1 Q0 d2 1 nan t\n", 2, "score 'nan' is not finite"),
        ("q1 Q0 d1 1 1 t\nq2 Q0 d1 1 1 t\nq2 Q0 d2 1 1 t\nq1 Q0 d1 1 0.5 t\n", 4, "'d1' appears twice for query 'q1'"),
        ("q1 Q0 d1 1 1.0 t\nq1 d1 1 1.0 t\n", 2, "expected 6 fields, found 5"),
    ],
)
def test_every_bad_line_is_named_across_blocks(tmp_path: Path, content: str, line: int, problem: str) -> None:
    with pytest.raises(FormatError, match=f"run.trec:{line}: .*{problem}"):
        read(tmp_path, content, ["q1", "q2"], IdIndex(["d1", "d2", "d3"]))


def test_a_short_line_and_a_long_one_in_one_block_are_still_named(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="run.trec:2: expected 6 fields, found 5"):  # 5 + 7 fields: 12, as 2 × 6
        read(tmp_path, "q1 Q0 d1 1 1.0 t\nq1 Q0 d2 1 1.0\nq1 Q0 d3 1 1.0 t x\n", ["q1"], IdIndex(["d1", "d2", "d3"]))


def test_a_damaged_gzip_run_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "run.trec.gz"
    path.write_bytes(gzip.compress(b"q1 Q0 d1 1 1.0 t\n" * 1000)[:-30])
    folder = tmp_path / "rows"
    folder.mkdir()
    with pytest.raises(FormatError, match="run.trec.gz: damaged file"):
        read_ranked_rows([path], {"q1": None}, ["q1"], IdIndex(["d1"]), None, folder)


def test_a_run_file_is_read_once_and_cached_by_its_content(tmp_path: Path) -> None:
    docs = IdIndex(["d1", "d2"])
    path = tmp_path / "run.trec"
    write_run(path, {"q1": {"d1": 1.0, "d2": 2.0}})
    first = cached_ranked_rows(path, {"q1": None}, ["q1"], docs, 1)
    assert docs.names(first.docs) == ["d2"]
    again = cached_ranked_rows(path, {"q1": None}, ["q1"], docs, 1)
    assert Path(first.docs.filename).parent == Path(again.docs.filename).parent
    write_run(path, {"q1": {"d1": 3.0, "d2": 2.0}})  # new content, new entry
    assert docs.names(cached_ranked_rows(path, {"q1": None}, ["q1"], docs, 1).docs) == ["d1"]


def test_bm25_rows_are_searched_in_parts_resumed_and_equal_the_run(tiny, tiny_bm25, monkeypatch, capsys) -> None:
    queries = {q: tiny.queries["train"][q] for q in sorted(tiny.judged_queries("train"))[:25]}
    docs = IdIndex(tiny.corpus)
    monkeypatch.setattr(bm25_module, "SEARCH_HITS", 10 * 20)  # 10 queries a part at k = 20: three parts
    rows = tiny_bm25.search_rows(queries, 20, docs)
    assert capsys.readouterr().out.count("[bm25] queries ") == 3
    run, columnar = top_k(tiny_bm25.search(queries, 20), 20), as_run(rows, list(queries), docs)
    assert [list(columnar[q]) for q in queries] == [list(run[q]) for q in queries]  # the same ranking
    assert all(columnar[q] == pytest.approx(run[q]) for q in queries)  # float32 scores
    again = tiny_bm25.search_rows(queries, 20, docs)  # cached: nothing is searched
    assert "[bm25] queries" not in capsys.readouterr().out and np.array_equal(again.docs, rows.docs)
    more = dict(list(tiny.judged_queries("train").items())[:35])  # a killed search resumes: done parts are read
    more = {q: more[q] for q in sorted(more)}
    tiny_bm25.search_rows(more, 20, docs)  # parts 1–10 and 11–20 are those of the first search
    assert re.findall(r"queries (\S+) of", capsys.readouterr().out) == ["21–30", "31–35"]


def test_a_damaged_part_is_searched_again(tiny, tiny_bm25, monkeypatch, capsys) -> None:
    queries = {q: tiny.queries["train"][q] for q in sorted(tiny.judged_queries("train"))[40:50]}
    docs = IdIndex(tiny.corpus)
    expected = tiny_bm25.search_rows(queries, 7, docs)
    part = next((tiny_bm25.cache / "bm25" / "runs").glob("run-k7-*.trec.gz"))
    part.write_bytes(part.read_bytes()[:-40])
    for folder in (tiny_bm25.cache / "bm25" / "rows").glob("rows-k7-*"):
        if folder.is_dir():
            shutil.rmtree(folder)
    again = tiny_bm25.search_rows(queries, 7, docs)
    assert "is unusable" in capsys.readouterr().out and np.array_equal(again.docs, expected.docs)


def test_pair_table_gives_batches_and_names_a_missing_pair() -> None:
    docs = IdIndex(["a", "b", "c"])
    keys = np.array([0 * 3 + 1, 1 * 3 + 0, 1 * 3 + 2])  # (q1, b), (q2, a), (q2, c)
    table = PairTable("teacher_scores", {"q1": 0, "q2": 1}, docs, keys, np.array([0.5, 1.5, 2.5], np.float32))
    assert torch.equal(table.matrix(["q2", "q1"], [["c", "a"], ["b", "b"]]), torch.tensor([[2.5, 1.5], [0.5, 0.5]]))
    with pytest.raises(KeyError, match=r"teacher_scores: no score for query 'q2' and documents \['b'\]"):
        table.matrix(["q1", "q2"], [["b"], ["b"]])


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ("", "blank line"),
        ("q1 Q0 d2 3 1.0", "expected 6 fields, found 5"),
        ("q1 Q0 d2 3 1.0 t extra", "expected 6 fields, found 7"),
    ],
)
def test_a_bad_line_deep_in_a_file_read_in_small_pieces_is_named(
    tmp_path: Path, monkeypatch, bad: str, problem: str
) -> None:
    monkeypatch.setattr(run_blocks_module, "READ_BYTES", 64)  # a few lines a piece: the bad one is far from the first
    good = [f"q{1 + i % 2} Q0 d{i % 3 + 1}x{i} 1 {i}.5 t" for i in range(40)]
    docs = IdIndex([f"d{i % 3 + 1}x{i}" for i in range(40)] + ["d2"])
    (tmp_path / "run.trec").write_text("\r\n".join(good[:30] + [bad] + good[30:]) + "\r\n")
    folder = tmp_path / "rows"
    folder.mkdir()
    with pytest.raises(FormatError, match=f"run.trec:31: {problem}"):
        read_ranked_rows([tmp_path / "run.trec"], {"q1": 0, "q2": 0}, ["q1", "q2"], docs, None, folder, block_lines=4)
    (tmp_path / "run.trec").write_text("\r\n".join(good))  # CRLF endings, no final newline: all 40 lines
    rows = read_ranked_rows(
        [tmp_path / "run.trec"], {"q1": 0, "q2": 0}, ["q1", "q2"], docs, None, folder, block_lines=4
    )
    assert len(rows.docs) == 40 and rows.scores[[0, 20]].tolist() == [38.5, 39.5]  # q1 has the even lines
