"""The query sets search.py reads: a split, a TSV or BEIR JSONL file, each bad line named."""

import gzip
import json

import pytest

from retrieval_zoo.data.formats import FormatError
from retrieval_zoo.data.query_sets import read_query_set


def test_a_split_a_tsv_and_a_jsonl_file_each_give_their_queries_in_order(tiny, tmp_path) -> None:
    dev = read_query_set("dev", tiny)
    assert dev.name == "dev" and dev.queries == tiny.queries["dev"]
    assert read_query_set(None, tiny).queries == tiny.queries[tiny.eval_split]
    tsv = tmp_path / "topics.dl19.tsv"
    tsv.write_text("q2\thow do I mount a usb drive\nq1\tpython imaging library\n", encoding="utf-8")
    topics = read_query_set(str(tsv), tiny)
    assert topics.name == "topics.dl19" and list(topics.queries.items()) == [
        ("q2", "how do I mount a usb drive"), ("q1", "python imaging library")]  # fmt: skip
    jsonl = tmp_path / "my queries.jsonl.gz"
    with gzip.open(jsonl, "wt", encoding="utf-8") as f:
        f.write(json.dumps({"_id": "a", "text": "mount usb"}) + "\n")
    assert read_query_set(str(jsonl), tiny).queries == {"a": "mount usb"}
    assert read_query_set(str(jsonl), tiny).name == "my_queries"
    assert topics.fingerprint != read_query_set(str(jsonl), tiny).fingerprint


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"q1\tfine\nq2 no tab here\n", r"q\.tsv:2: expected 2 fields, found 1"),
        (b"q1\tfine\n\tno id\n", r"q\.tsv:2: empty query id"),
        (b"q1\tfine\nq1\tagain\n", r"q\.tsv:2: duplicate query id 'q1'"),
        (b"q1\tfine\nq2\t \n", r"q\.tsv:2: empty text for query 'q2'"),
        (b"q1\tfine\nq2\tbad \xff byte\n", r"q\.tsv:2: not UTF-8 at byte 7 of the line"),
        (b"", r"q\.tsv: no queries"),
    ],
)
def test_a_bad_query_file_is_refused_naming_the_file_and_line(tiny, tmp_path, content, problem) -> None:
    path = tmp_path / "q.tsv"
    path.write_bytes(content)
    with pytest.raises(FormatError, match=problem):
        read_query_set(str(path), tiny)


def test_a_missing_file_or_an_unknown_name_says_what_queries_may_be(tiny, tmp_path) -> None:
    with pytest.raises(FormatError, match=r"missing\.tsv: file not found"):
        read_query_set(str(tmp_path / "missing.tsv"), tiny)
    with pytest.raises(ValueError, match=r"queries=devv: not a split of tiny \(dev, train\), nor a \.tsv or \.jsonl"):
        read_query_set("devv", tiny)
    bad = tmp_path / "q.jsonl"
    bad.write_text('{"_id": "a", "text": "x"}\n{"_id": "b"}\n', encoding="utf-8")
    with pytest.raises(FormatError, match=r"q\.jsonl:2: a record needs '_id' and 'text'"):
        read_query_set(str(bad), tiny)
