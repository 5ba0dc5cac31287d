import gzip
import json
import re
from pathlib import Path

import pytest

from retrieval_zoo.data.collections import beir, msmarco_tsv
from retrieval_zoo.data.formats import (
    FormatError,
    read_beir_jsonl,
    read_id_text_tsv,
    read_qrels,
    read_run,
    read_triples,
    write_id_text_tsv,
    write_qrels,
    write_run,
)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_tsv_round_trip_gz(tmp_path: Path) -> None:
    table = {"1": "first doc", "7": "second\tdoc with a tab"}
    write_id_text_tsv(tmp_path / "c.tsv.gz", table)
    with gzip.open(tmp_path / "c.tsv.gz", "rt") as f:
        assert f.read() == "1\tfirst doc\n7\tsecond doc with a tab\n"
    assert read_id_text_tsv(tmp_path / "c.tsv.gz") == {"1": "first doc", "7": "second doc with a tab"}


@pytest.mark.parametrize(
    ("content", "line", "problem"),
    [
        ("1\tok\n2\n", 2, "expected 2 fields, found 1"),
        ("1\tok\n2\t  \n", 2, "empty text for document '2'"),
        ("1\tok\n1\tagain\n", 2, "duplicate document id '1'"),
        ("1\tok\n\n", 2, "blank line"),
        ("1\tok\t3\n", 1, "expected 2 fields, found 3"),
    ],
)
def test_tsv_malformed_names_file_line_problem(tmp_path: Path, content: str, line: int, problem: str) -> None:
    path = write(tmp_path / "collection.tsv", content)
    with pytest.raises(FormatError) as err:
        read_id_text_tsv(path)
    assert err.value.line == line and problem in str(err.value) and str(path) in str(err.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="file not found"):
        read_id_text_tsv(tmp_path / "nope.tsv")


def test_qrels_trec_and_beir(tmp_path: Path) -> None:
    assert read_qrels(write(tmp_path / "q.tsv", "1\t0\td1\t1\n1 0 d2 2\n2\t0\td1\t0\n")) == {
        "1": {"d1": 1, "d2": 2},
        "2": {"d1": 0},
    }
    beir_qrels = write(tmp_path / "test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t2\n")
    assert read_qrels(beir_qrels) == {"q1": {"d1": 2}}


@pytest.mark.parametrize(
    ("content", "line", "problem"),
    [("1 0 d1 x\n", 1, "relevance 'x' is not an integer"), ("1 0 d1 1\n1 0 d1 0\n", 2, "duplicate judgement")],
)
def test_qrels_malformed(tmp_path: Path, content: str, line: int, problem: str) -> None:
    with pytest.raises(FormatError) as err:
        read_qrels(write(tmp_path / "qrels.tsv", content))
    assert err.value.line == line and problem in err.value.problem


def test_run_round_trip_and_errors(tmp_path: Path) -> None:
    run = {"q1": {"a": 1.5, "b": 2.5}, "q2": {"c": 0.1}}
    write_run(tmp_path / "run.trec", run, tag="t")
    lines = (tmp_path / "run.trec").read_text().splitlines()
    assert lines[0] == "q1 Q0 b 1 2.500000 t" and lines[1] == "q1 Q0 a 2 1.500000 t"
    assert read_run(tmp_path / "run.trec") == run
    with pytest.raises(FormatError, match=r"run.trec:2: score 'nan' is not finite"):
        read_run(write(tmp_path / "run.trec", "q Q0 a 1 1.0 t\nq Q0 b 2 nan t\n"))
    with pytest.raises(FormatError, match=r":2: document 'a' appears twice"):
        read_run(write(tmp_path / "run.trec", "q Q0 a 1 1.0 t\nq Q0 a 2 0.5 t\n"))
    with pytest.raises(FormatError, match=r":1: expected 6 fields, found 5"):
        read_run(write(tmp_path / "run.trec", "q Q0 a 1 1.0\n"))


def test_triples(tmp_path: Path) -> None:
    path = write(tmp_path / "triples.tsv", "what is x\tx is y\tz is w\nq\t\tneg\n")
    rows = read_triples(path)
    assert next(rows) == ("what is x", "x is y", "z is w")
    with pytest.raises(FormatError, match=r"triples.tsv:2: empty text in triple"):
        next(rows)


def test_beir_reader_and_errors(tmp_path: Path) -> None:
    path = write(tmp_path / "corpus.jsonl", json.dumps({"_id": "d1", "title": "T", "text": "body"}) + "\n")
    assert read_beir_jsonl(path, "document") == {"d1": "T body"}
    bad = write(tmp_path / "bad.jsonl", '{"_id": "d1", "text": "a"}\n{"_id": "d2", "text": \n')
    with pytest.raises(FormatError, match=r"bad.jsonl:2: invalid JSON"):
        read_beir_jsonl(bad, "document")
    with pytest.raises(FormatError, match=r":1: a record needs '_id' and 'text'"):
        read_beir_jsonl(write(tmp_path / "x.jsonl", '{"id": "d1"}\n'), "query")


def test_beir_directory(tmp_path: Path) -> None:
    write(tmp_path / "corpus.jsonl", '{"_id": "d1", "text": "alpha"}\n{"_id": "d2", "text": "beta"}\n')
    write(tmp_path / "queries.jsonl", '{"_id": "q1", "text": "alpha?"}\n{"_id": "q2", "text": "none"}\n')
    (tmp_path / "qrels").mkdir()
    write(tmp_path / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    collection = beir("toy", str(tmp_path), ["test"])
    assert collection.queries["test"] == {"q1": "alpha?"} and collection.eval_split == "test"
    write(tmp_path / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\nq1\td9\t1\n")
    with pytest.raises(FormatError, match=r"test.tsv:2: unknown document id 'd9'"):
        beir("toy", str(tmp_path), ["test"])


def test_unknown_ids_in_msmarco_qrels(tmp_path: Path) -> None:
    write(tmp_path / "collection.tsv", "1\tdoc one\n2\tdoc two\n")
    write(tmp_path / "queries.tsv", "10\tquery\n")
    write_qrels(tmp_path / "qrels.tsv", {"10": {"1": 1}, "11": {"2": 1}})
    with pytest.raises(FormatError, match=r"qrels.tsv:2: unknown query id '11'"):
        msmarco_tsv("x", str(tmp_path), "collection.tsv", {"dev": "queries.tsv"}, {"dev": "qrels.tsv"})
    write_qrels(tmp_path / "qrels.tsv", {"10": {"1": 1, "3": 1}})
    with pytest.raises(FormatError, match=r"qrels.tsv:2: unknown document id '3'"):
        msmarco_tsv("x", str(tmp_path), "collection.tsv", {"dev": "queries.tsv"}, {"dev": "qrels.tsv"})
    with pytest.raises(FileNotFoundError, match="does not exist"):
        msmarco_tsv("x", str(tmp_path / "nope"), "collection.tsv", {}, {})


def test_evaluating_as_written_matches_the_file(tmp_path: Path) -> None:
    from retrieval_zoo.data.formats import as_written
    from retrieval_zoo.evaluation.metrics import evaluate

    # 4e-7 apart: distinct for trec_eval in memory, tied once written with 6 decimals (then: higher id first).
    run = {"q": {"a": 0.5 + 4e-7, "b": 0.5}}
    qrels = {"q": {"b": 1}}
    write_run(tmp_path / "run.trec", run)
    from_file = evaluate(read_run(tmp_path / "run.trec"), qrels)["MRR@10"]
    assert evaluate(run, qrels)["MRR@10"] == 0.5 and from_file == 1.0 == evaluate(as_written(run), qrels)["MRR@10"]
    assert (tmp_path / "run.trec").read_text().splitlines()[0].split()[2:4] == ["b", "1"]  # ranks agree with scores


@pytest.mark.parametrize("name", ["collection.tsv", "collection.tsv.gz", "qrels.dev.tsv", "corpus.jsonl"])
def test_bytes_that_are_not_utf8_name_the_file_and_line(tmp_path: Path, name: str) -> None:
    lines = {
        "tsv": [b"1\tfirst doc\n", b"2\tcaf\xe9 latin-1\n"],
        "qrels": [b"1\t0\td1\t1\n", b"2\t0\td\xff\t1\n"],
        "jsonl": [b'{"_id": "d1", "text": "a"}\n', b'{"_id": "d2", "text": "caf\xe9"}\n'],
    }["jsonl" if name.endswith("jsonl") else "qrels" if name.startswith("qrels") else "tsv"]
    path = tmp_path / name
    (gzip.open if name.endswith(".gz") else open)(path, "wb").write(b"".join(lines))
    read = {"corpus.jsonl": lambda p: read_beir_jsonl(p, "document"), "qrels.dev.tsv": read_qrels}
    with pytest.raises(FormatError) as err:
        read.get(name, read_id_text_tsv)(path)
    assert err.value.line == 2 and str(path) in str(err.value) and "not UTF-8 at byte" in str(err.value)


@pytest.mark.parametrize("name", ["collection.tsv", "qrels.dev.tsv"])
def test_a_byte_order_mark_is_refused_not_read_into_the_first_id(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"\xef\xbb\xbf" + (b"1\tfirst doc\n" if name.startswith("collection") else b"1\t0\td1\t1\n"))
    with pytest.raises(FormatError, match=rf"{name}:1: the file starts with a UTF-8 byte-order mark"):
        (read_qrels if name.startswith("qrels") else read_id_text_tsv)(path)


def test_a_carriage_return_ends_no_line(tmp_path: Path) -> None:
    path = tmp_path / "collection.tsv"
    path.write_bytes(b"1\tfirst\rdoc\r\n2\tsecond doc\r\n")
    assert read_id_text_tsv(path) == {"1": "first\rdoc", "2": "second doc"}


@pytest.mark.parametrize(("value", "shown"), [("null", "null"), ("7", "7"), ('["d1"]', '["d1"]')])
def test_beir_ids_must_be_strings(tmp_path: Path, value: str, shown: str) -> None:
    record = '{"_id": "d1", "text": "a"}\n{"_id": ' + value + ', "text": "b"}\n'
    path = write(tmp_path / "corpus.jsonl", record)
    with pytest.raises(FormatError, match=rf"corpus.jsonl:2: '_id' must be a string, not {re.escape(shown)}"):
        read_beir_jsonl(path, "document")


@pytest.mark.parametrize("content", ["", "query-id\tcorpus-id\tscore\n"])
def test_qrels_without_a_judgement_name_the_file(tmp_path: Path, content: str) -> None:
    with pytest.raises(FormatError, match=r"qrels.dev.tsv: no judgements"):
        read_qrels(write(tmp_path / "qrels.dev.tsv", content))


def test_the_corpus_fingerprint_follows_the_corpus_file_whatever_its_name(tmp_path: Path) -> None:
    from retrieval_zoo.data.collections import Collection

    write(tmp_path / "queries.tsv", "10\tquery\n")
    write(tmp_path / "qrels.tsv", "10\t0\t1\t1\n")

    def load():
        return msmarco_tsv("toy", str(tmp_path), "passages.tsv", {"dev": "queries.tsv"}, {"dev": "qrels.tsv"})

    write(tmp_path / "passages.tsv", "1\tdoc one\n2\tdoc two\n")
    before = load().corpus_fingerprint
    write(tmp_path / "queries.tsv", "10\tanother query\n")
    assert load().corpus_fingerprint == before  # the queries are not the corpus
    write(tmp_path / "passages.tsv", "1\tdoc one, edited\n2\tdoc two\n")
    assert load().corpus_fingerprint != before  # a stale BM25 index is not served for an edited passages.tsv
    in_memory = [Collection("m", {"1": text}, {}, {}).corpus_fingerprint for text in ("a", "b")]
    assert in_memory[0] != in_memory[1]
