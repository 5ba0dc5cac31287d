"""The corpus on disk: the same documents as the in-memory readers, the same errors by line, rebuilt when damaged."""

import json
import pickle
from pathlib import Path

import pytest
import torch

from retrieval_zoo.data import corpus_store as store_module
from retrieval_zoo.data.corpus_store import CorpusStore, corpus_store
from retrieval_zoo.data.formats import FormatError, read_beir_jsonl, read_id_text_tsv, write_id_text_tsv

DOCS = {"d10": "first doc", "7": "ünïcode text ✓", "a": "x", "d2": "second\tdoc", "z9": "the last one"}


def test_a_tsv_store_is_the_same_mapping_as_the_reader(tmp_path: Path) -> None:
    write_id_text_tsv(tmp_path / "collection.tsv.gz", DOCS)
    store = corpus_store(tmp_path / "collection.tsv.gz", "tsv", tmp_path / "cache")
    expected = read_id_text_tsv(tmp_path / "collection.tsv.gz")
    assert isinstance(store, CorpusStore) and len(store) == 5 and list(store) == list(expected)
    assert list(store.items()) == list(expected.items()) and list(store.values()) == list(expected.values())
    assert store == expected and store["7"] == "ünïcode text ✓" and "d2" in store
    assert "d" not in store and "d100" not in store and 7 not in store  # no prefix, no other type
    with pytest.raises(KeyError):
        store["missing"]
    assert len(pickle.dumps(store)) < 1000  # pickled as its folder, not its arrays
    assert pickle.loads(pickle.dumps(store)) == expected


def test_a_beir_store_joins_title_and_text_as_the_reader_does(tmp_path: Path) -> None:
    lines = [{"_id": "b", "title": "T", "text": "body  text"}, {"_id": "a", "text": "  spaced\nout "}]
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    store = corpus_store(path, "beir", tmp_path / "cache")
    assert dict(store.items()) == read_beir_jsonl(path, "document") == {"b": "T body text", "a": "spaced out"}


@pytest.mark.parametrize(
    ("content", "line", "problem"),
    [
        ("1\tok\n2\n", 2, "expected 2 fields, found 1"),
        ("1\tok\n2\t  \n", 2, "empty text for document '2'"),
        ("1\tok\n\tno id\n", 2, "empty document id"),
        ("1\tok\n2\tb\n1\tagain\n2\tand again\n", 3, "duplicate document id '1'"),
        ("5\tok\n2\tb\n3\tc\n2\tagain\n5\tand again\n", 4, "duplicate document id '2'"),  # the first repeat in file
        ("1\tok\n\n", 2, "blank line"),
    ],
)
def test_malformed_corpora_name_file_line_and_problem(tmp_path: Path, content: str, line: int, problem: str) -> None:
    path = tmp_path / "collection.tsv"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(FormatError) as err:
        corpus_store(path, "tsv", tmp_path / "cache")
    assert err.value.line == line and problem in str(err.value) and str(path) in str(err.value)
    with pytest.raises(FormatError) as in_memory:  # the dict reader says the same
        read_id_text_tsv(path)
    assert str(in_memory.value) == str(err.value)
    assert not list((tmp_path / "cache" / "corpus").glob("*/ready.json"))  # nothing half-built is kept


def test_duplicates_across_id_chunks_are_found(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(store_module, "CHUNK", 2)
    path = tmp_path / "collection.tsv"
    path.write_text("a\t1\nb\t2\nc\t3\nd\t4\nb\t5\n", encoding="utf-8")
    with pytest.raises(FormatError, match=r"collection.tsv:5: duplicate document id 'b'"):
        corpus_store(path, "tsv", tmp_path / "cache")
    path.write_text("a\t1\nb\t2\nc\t3\nd\t4\ne\t5\n", encoding="utf-8")
    assert list(corpus_store(path, "tsv", tmp_path / "cache")) == ["a", "b", "c", "d", "e"]


def test_a_damaged_store_is_built_again(tmp_path: Path, capsys) -> None:
    write_id_text_tsv(tmp_path / "collection.tsv", DOCS)
    store, expected = corpus_store(tmp_path / "collection.tsv", "tsv", tmp_path / "cache"), dict(DOCS, d2="second doc")
    texts = store.folder / "texts.bin"
    texts.write_bytes(texts.read_bytes()[:-3])  # truncated
    assert dict(corpus_store(tmp_path / "collection.tsv", "tsv", tmp_path / "cache").items()) == expected
    assert "not the size the build wrote: building it again" in capsys.readouterr().out
    (store.folder / "ready.json").write_text("{not json")
    assert dict(corpus_store(tmp_path / "collection.tsv", "tsv", tmp_path / "cache").items()) == expected
    assert "ready.json is damaged" in capsys.readouterr().out


def test_a_missing_file_and_an_empty_corpus(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="nope.tsv: file not found"):
        corpus_store(tmp_path / "nope.tsv", "tsv", tmp_path / "cache")
    (tmp_path / "empty.tsv").write_text("")
    store = corpus_store(tmp_path / "empty.tsv", "tsv", tmp_path / "cache")
    assert len(store) == 0 and list(store.items()) == [] and "x" not in store


def test_the_joined_digest_is_the_hash_of_the_ids_joined_at_any_chunk_size(monkeypatch) -> None:
    import hashlib

    from retrieval_zoo import id_index

    keys = [str(i) for i in range(50)] + ["ü", "a b", "x"]
    expected = hashlib.sha256("\n".join(keys).encode()).hexdigest()  # the token cache's key, the shards' manifest
    for chunk in (1, 7, 53, 1 << 20):
        monkeypatch.setattr(id_index, "DIGEST_CHUNK", chunk)
        assert id_index.IdIndex(keys).joined_digest() == id_index.joined_sha256(keys) == expected  # index or list


def test_a_token_cache_of_a_store_uses_the_stores_own_ids(tmp_path: Path, monkeypatch) -> None:
    from retrieval_zoo.encoding.tokens import TokenCache
    from tests.conftest import clear_encoder

    monkeypatch.setenv("RETRIEVAL_ZOO_CACHE", str(tmp_path / "cache"))
    write_id_text_tsv(tmp_path / "collection.tsv", DOCS)
    store = corpus_store(tmp_path / "collection.tsv", "tsv", tmp_path / "cache")
    tokenizer = clear_encoder().text_tokenizer()
    cache = TokenCache.build(store, tokenizer, "doc", "content")
    assert cache.index is store.index  # no second copy of the corpus's ids
    in_memory = TokenCache.build(dict(store.items()), tokenizer, "doc", "content")
    assert in_memory.folder == cache.folder  # the same key: the same ids in the same order
    assert torch.equal(cache.tokens(["z9", "7"]).ids, in_memory.tokens(["z9", "7"]).ids)
