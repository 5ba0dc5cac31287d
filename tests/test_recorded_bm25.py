"""BM25's answers recorded where Java runs and replayed where it does not (benchmarks/recorded_bm25.py).

BM25's own calls are replaced by fakes that count them, so these tests run no Java.
"""

import dataclasses
from pathlib import Path

import pytest

from benchmarks.recorded_bm25 import JAVA_CALLS, SEARCH_CALLS, RecordedBM25, bm25_recording
from retrieval_zoo.id_index import IdIndex
from retrieval_zoo.lexical.lucene_bm25 import BM25


@pytest.fixture
def asked(monkeypatch) -> list[tuple]:
    """BM25's query_idf, candidate_scores and search_rows faked: each call is listed, its answer made from its
    arguments and the collection."""
    calls: list[tuple] = []

    def query_idf(self, texts):
        calls.append(("query_idf", self.collection.name, tuple(texts)))
        return [{f"{self.collection.name}:{text}": 1.0} for text in texts]

    def candidate_scores(self, queries, candidates):
        calls.append(("candidate_scores", self.collection.name))
        return {qid: dict.fromkeys(docids, 2.0) for qid, docids in candidates.items()}

    def search_rows(self, queries, k, docs):
        calls.append(("search_rows", docs.digest, k))
        return {"rows of": list(queries), "k": k}

    for fake in (query_idf, candidate_scores, search_rows):
        monkeypatch.setattr(BM25, fake.__name__, fake)
    return calls


def test_a_record_answers_a_replay_without_calling_bm25(tiny, tmp_path: Path, asked) -> None:
    path = tmp_path / "bm25.pkl.gz"
    recorder = RecordedBM25(tiny, path, "record")
    answer = recorder.query_idf(["a text"])
    assert recorder.query_idf(["a text"]) == answer and len(asked) == 1  # the second answer is the record's
    recorder.save()
    replayer = RecordedBM25(tiny, path, "replay")
    assert replayer.query_idf(["a text"]) == answer and len(asked) == 1
    with pytest.raises(KeyError, match=rf"{path}: BM25.query_idf was not recorded"):
        replayer.query_idf(["another text"])


def test_a_replay_without_a_record_names_the_missing_file(tiny, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no BM25 record; make one with --bm25 record="):
        RecordedBM25(tiny, tmp_path / "missing.pkl.gz", "replay")


def test_equal_arguments_are_one_answer_however_they_were_built(tiny, tmp_path: Path, asked) -> None:
    recorder = RecordedBM25(tiny, tmp_path / "bm25.pkl.gz", "record")
    shared = "doc-1"  # the same string object twice: a pickle of these arguments differs from one of fresh copies
    recorder.candidate_scores({"q1": "a query"}, {"q1": [shared, "doc-2"], "q2": [shared]})
    recorder.candidate_scores({"q1": "a query"}, {"q2": ["".join("doc-1")], "q1": ["doc-2", "doc-" + "1"]})
    assert len(asked) == 1  # candidates in another order, their strings other objects: the recorded answer


def test_an_id_index_is_keyed_by_its_ids(tiny, tmp_path: Path, asked) -> None:
    recorder = RecordedBM25(tiny, tmp_path / "bm25.pkl.gz", "record", JAVA_CALLS + SEARCH_CALLS)
    recorder.search_rows({"q1": "a query"}, 10, IdIndex(["d1", "d2"]))
    recorder.search_rows({"q1": "a query"}, 10, IdIndex(["d1", "d2"]))  # another object, the same ids
    recorder.search_rows({"q1": "a query"}, 10, IdIndex(["d2", "d1"]))
    assert [call[1] for call in asked] == [IdIndex(["d1", "d2"]).digest, IdIndex(["d2", "d1"]).digest]


def test_searches_are_recorded_only_where_asked(tiny, tmp_path: Path, asked) -> None:
    recorder = RecordedBM25(tiny, tmp_path / "bm25.pkl.gz", "record")  # JAVA_CALLS only
    recorder.search_rows({"q1": "a query"}, 10, IdIndex(["d1"]))
    recorder.search_rows({"q1": "a query"}, 10, IdIndex(["d1"]))
    assert len(asked) == 2 and recorder.answers == {}  # BM25's own call each time, nothing kept
    with pytest.raises(ValueError, match="not a recordable BM25 call: \\['bm25_rows'\\]"):
        RecordedBM25(tiny, tmp_path / "bm25.pkl.gz", "record", ("query_idf", "bm25_rows"))


def test_a_pool_s_recorder_shares_the_file_and_keys_its_own_corpus(tiny, tmp_path: Path, asked) -> None:
    path = tmp_path / "bm25.pkl.gz"
    recorder = RecordedBM25(tiny, path, "record")
    pool = dataclasses.replace(tiny, name="pool")
    pool.__dict__["corpus_fingerprint"] = "another corpus"  # a pool's corpus (candidate_pool keys it so)
    pool_recorder = recorder.over(pool)
    whole, cut = recorder.query_idf(["a text"]), pool_recorder.query_idf(["a text"])
    assert whole != cut and len(asked) == 2  # the same arguments over another corpus: asked again
    recorder.save()  # one save keeps both
    assert RecordedBM25(pool, path, "replay").query_idf(["a text"]) == cut
    assert RecordedBM25(tiny, path, "replay").query_idf(["a text"]) == whole


def test_a_recording_block_saves_what_it_recorded_when_it_fails(tiny, tmp_path: Path, asked) -> None:
    path = tmp_path / "bm25.pkl.gz"
    with pytest.raises(RuntimeError, match="a benchmark's error"), bm25_recording(tiny, f"record={path}") as bm25:
        answer = bm25.query_idf(["a text"])
        raise RuntimeError("a benchmark's error")
    with bm25_recording(tiny, f"replay={path}") as bm25:
        assert bm25.query_idf(["a text"]) == answer and len(asked) == 1
    with bm25_recording(tiny, None) as bm25:
        assert type(bm25) is BM25  # no --bm25: BM25 itself
