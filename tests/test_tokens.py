import pytest
import torch

from retrieval_zoo.tokens import TokenCache
from tests.conftest import clear_encoder


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RETRIEVAL_ZOO_CACHE", str(tmp_path))
    return tmp_path


def texts_of(tiny, n: int = 50) -> dict[str, str]:
    return dict(list(tiny.corpus.items())[:n])


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_a_batch_from_the_cache_is_what_the_tokenizer_gives(tiny, cache_dir, padding_side: str) -> None:
    tokenizer = clear_encoder().text_tokenizer()  # with CLEAR's <DOC> marker
    tokenizer.tokenizer.padding_side = padding_side
    texts = texts_of(tiny)
    cache = TokenCache.build(texts, tokenizer, "doc", content="tiny", chunk_size=7)  # 8 chunks, the last short
    assert len(cache) == 50 and not list(cache.folder.glob("part-*"))  # the chunks are joined and removed
    for keys in (list(texts)[:9], list(texts)[40:][::-1], [list(texts)[3]] * 2):
        expected = tokenizer([texts[k] for k in keys], "doc")
        got = cache.tokens(keys)
        assert torch.equal(got.ids, expected.ids) and torch.equal(got.mask, expected.mask)


def test_the_cache_is_keyed_by_content_tokenizer_and_side_and_built_once(tiny, cache_dir) -> None:
    tokenizer, texts = clear_encoder().text_tokenizer(), texts_of(tiny, 10)
    first = TokenCache.build(texts, tokenizer, "doc", content="v1")
    assert TokenCache.build(texts, tokenizer, "doc", content="v1").folder == first.folder
    assert TokenCache.build(texts, tokenizer, "doc", content="v2").folder != first.folder  # edited texts
    assert TokenCache.build(texts, tokenizer, "query", content="v1").folder != first.folder  # another marker
    tokenizer.max_length["doc"] = 8
    assert TokenCache.build(texts, tokenizer, "doc", content="v1").folder != first.folder  # another length


class Killed(Exception):
    pass


def test_a_killed_build_resumes_and_a_damaged_cache_is_rebuilt(tiny, cache_dir, monkeypatch, capsys) -> None:
    tokenizer, texts = clear_encoder().text_tokenizer(), texts_of(tiny, 20)
    calls: list[int] = []
    killing = [True]
    original = type(tokenizer).unpadded

    def counting(self, chunk, side):
        calls.append(len(chunk))
        if killing[0] and len(calls) == 3:
            raise Killed  # as if killed while tokenizing the third chunk
        return original(self, chunk, side)

    monkeypatch.setattr(type(tokenizer), "unpadded", counting)
    with pytest.raises(Killed):
        TokenCache.build(texts, tokenizer, "doc", content="c", chunk_size=5)
    killing[0] = False
    calls.clear()
    cache = TokenCache.build(texts, tokenizer, "doc", content="c", chunk_size=5)
    assert calls == [5, 5]  # the two finished chunks were kept; only the other two were tokenized
    keys = list(texts)
    assert torch.equal(cache.tokens(keys).ids, tokenizer(list(texts.values()), "doc").ids)
    (cache.folder / "ids.npy").write_bytes(b"truncated")  # damaged: its size no longer matches ready.json
    calls.clear()
    rebuilt = TokenCache.build(texts, tokenizer, "doc", content="c", chunk_size=5)
    assert "is damaged (ids.npy not of the size ready.json recorded); tokenizing again" in capsys.readouterr().out
    assert calls == [5, 5, 5, 5] and torch.equal(rebuilt.tokens(keys).ids, tokenizer(list(texts.values()), "doc").ids)


def test_corpus_encoding_from_cached_tokens_equals_encoding_the_texts(tiny, tiny_bm25, cache_dir) -> None:
    from retrieval_zoo.index.csf import InvertedLists
    from retrieval_zoo.index.dense import Faiss
    from retrieval_zoo.methods.delade import DeLADE
    from retrieval_zoo.methods.dense import DenseBiEncoder
    from retrieval_zoo.tokens import CachedTexts
    from tests.conftest import tiny_encoder
    from tests.test_csurf import sparse_model

    ids = list(tiny.corpus)[:30]
    texts = [tiny.corpus[d] for d in ids]
    dense, csurf = DenseBiEncoder(clear_encoder()).eval(), sparse_model(vector_dim=8).eval()
    assert isinstance(dense.corpus_texts(tiny)(ids), CachedTexts)  # what encoding reads: tokens, not strings
    with torch.no_grad():
        vectors = Faiss().doc_encoder(dense, tiny, tiny_bm25)(ids)
        assert torch.equal(vectors["vectors"], Faiss().corpus_payload(dense, texts)["vectors"])
        bags = InvertedLists().doc_encoder(csurf, tiny, tiny_bm25)(ids)
        for name, value in InvertedLists().corpus_payload(csurf, texts).items():
            assert torch.equal(bags[name], value), name
        delade = DeLADE(tiny_encoder(mlm_head=True), cls_dim=8).eval()
        encoded = delade.term_encoder(tiny, tiny_bm25).encode_docs(ids)
        lexical, cls = delade.encode_parts(*delade.encoder.tokenize(texts, "doc"))
        assert torch.equal(encoded["lexical"], lexical) and torch.equal(encoded["cls"], cls)
