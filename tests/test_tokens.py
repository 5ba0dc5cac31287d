import numpy as np
import pytest
import torch

from retrieval_zoo.encoding.tokens import TokenCache
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
    with pytest.raises(KeyError, match="no entry for 'not-a-doc'"):
        cache.tokens([list(texts)[0], "not-a-doc"])


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


def counted_chunks(monkeypatch, tokenizer, kill_at: int) -> tuple[list[int], list[bool]]:
    """Each chunk size ``tokenizer`` is handed, recorded; while ``killing[0]``, call ``kill_at`` raises Killed."""
    calls: list[int] = []
    killing = [True]
    original = type(tokenizer).unpadded

    def counting(self, chunk, side):
        calls.append(len(chunk))
        if killing[0] and len(calls) == kill_at:
            raise Killed  # as if the process were killed while tokenizing that chunk
        return original(self, chunk, side)

    monkeypatch.setattr(type(tokenizer), "unpadded", counting)
    return calls, killing


def test_a_killed_build_resumes_and_a_damaged_cache_is_rebuilt(tiny, cache_dir, monkeypatch, capsys) -> None:
    tokenizer, texts = clear_encoder().text_tokenizer(), texts_of(tiny, 20)
    calls, killing = counted_chunks(monkeypatch, tokenizer, kill_at=3)  # the third chunk
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


def test_a_build_resumed_with_another_chunk_size_tokenizes_its_own_ranges(tiny, cache_dir, monkeypatch) -> None:
    tokenizer, texts = clear_encoder().text_tokenizer(), texts_of(tiny, 20)
    calls, killing = counted_chunks(monkeypatch, tokenizer, kill_at=3)  # texts 0-4 and 5-9 are then on disk
    with pytest.raises(Killed):
        TokenCache.build(texts, tokenizer, "doc", content="c", chunk_size=5)
    killing[0] = False
    calls.clear()
    cache = TokenCache.build(texts, tokenizer, "doc", content="c", chunk_size=8)
    assert calls == [8, 8, 4]  # chunks of 5 are not taken for chunks of 8
    assert not list(cache.folder.glob("part-*"))  # nor left behind
    assert torch.equal(cache.tokens(list(texts)).ids, tokenizer(list(texts.values()), "doc").ids)


def test_corpus_encoding_from_cached_tokens_equals_encoding_the_texts(tiny, tiny_bm25, cache_dir) -> None:
    from retrieval_zoo.encoding.tokens import CachedTexts
    from retrieval_zoo.index.csurf.csf import InvertedLists
    from retrieval_zoo.index.vectors.faiss import Faiss
    from retrieval_zoo.methods.delade import DeLADE
    from retrieval_zoo.methods.dense import DenseBiEncoder
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
        expected = InvertedLists().corpus_payload(csurf, texts)
        in_order = [np.lexsort((b["surface"], b["source"], b["text"])) for b in (bags, expected)]  # batches differ
        for name, value in expected.items():
            got = bags[name] if value.ndim == 0 or name == "tokens" else bags[name][in_order[0]]
            assert torch.equal(got, value if got is bags[name] else value[in_order[1]]), name
        delade = DeLADE(tiny_encoder(mlm_head=True), cls_dim=8).eval()
        encoded = delade.term_encoder(tiny, tiny_bm25).encode_docs(ids)
        lexical, cls = delade.term_parts(*delade.encoder.tokenize(texts, "doc"))
        assert torch.equal(encoded["lexical"], lexical) and torch.equal(encoded["cls"], cls)


def test_cached_texts_are_batched_by_their_length_in_tokens(tiny, cache_dir) -> None:
    from retrieval_zoo.encoding.batching import length_sorted_batches
    from retrieval_zoo.encoding.tokens import CachedTexts

    tokenizer, texts = clear_encoder().text_tokenizer(), texts_of(tiny, 40)
    cached = CachedTexts(TokenCache.build(texts, tokenizer, "doc", content="tiny"), list(texts))
    lengths = [len(ids) for ids in tokenizer.unpadded(list(texts.values()), "doc")]
    assert cached.lengths == lengths
    batches = length_sorted_batches(cached, 8)
    assert [lengths[i] for batch in batches for i in batch] == sorted(lengths, reverse=True)


class Spy:
    """Records what an encoder's ``tokenize`` and its tokenizer receive."""

    def __init__(self, monkeypatch) -> None:
        from retrieval_zoo.encoding.encoder import Encoder
        from retrieval_zoo.encoding.tokens import TextTokenizer

        self.handed, self.tokenized = [], []
        tokenize, call = Encoder.tokenize, TextTokenizer.__call__

        self.query_batches: list[list[int]] = []  # each query batch's lengths in tokens, as encoded

        def spy_tokenize(encoder, texts, side):
            self.handed.append((side, type(texts).__name__))
            ids, mask = tokenize(encoder, texts, side)
            if side == "query":
                self.query_batches.append(mask.sum(dim=1).tolist())
            return ids, mask

        def spy_call(tokenizer, texts, side):
            self.tokenized.append((side, list(texts)))
            return call(tokenizer, texts, side)

        monkeypatch.setattr(Encoder, "tokenize", spy_tokenize)
        monkeypatch.setattr(TextTokenizer, "__call__", spy_call)


def test_cached_queries_are_read_from_the_cache_and_typed_ones_tokenized(tiny, cache_dir, monkeypatch) -> None:
    from retrieval_zoo.methods.dense import DenseBiEncoder

    model = DenseBiEncoder(clear_encoder())
    queries = dict(list(tiny.queries["dev"].items())[:6])
    model.cache_queries(queries)
    spy, texts = Spy(monkeypatch), list(queries.values())[::-1]
    ids, mask = model.encoder.tokenize(texts, "query")
    expected = model.encoder.text_tokenizer()(texts, "query")  # the spy records this call too
    assert torch.equal(ids, expected.ids) and torch.equal(mask, expected.mask)
    assert spy.tokenized == [("query", texts)]  # only the comparison tokenized
    model.encoder.tokenize([*texts[:2], "a query typed at search time"], "query")
    assert spy.tokenized[-1] == ("query", [*texts[:2], "a query typed at search time"])


def test_query_lengths_are_read_from_the_query_cache(tiny, cache_dir) -> None:
    from retrieval_zoo.methods.dense import DenseBiEncoder

    model, queries = DenseBiEncoder(clear_encoder()), dict(list(tiny.queries["dev"].items())[:12])
    model.cache_queries(queries)
    texts = list(queries.values())[::-1]
    assert model.query_lengths(texts) == [len(ids) for ids in model.text_tokenizer().unpadded(texts, "query")]
    assert model.query_lengths([*texts[:2], "a query typed at search time"]) is None  # then: by characters


@pytest.mark.parametrize("method", ["dense", "dlr_splade", pytest.param("csurf", marks=pytest.mark.slow)])
def test_evaluation_encodes_corpus_and_queries_from_token_caches(tiny, tiny_bm25, cache_dir, tmp_path, monkeypatch,
                                                                 method: str) -> None:  # fmt: skip
    """Nothing is tokenized while an evaluation encodes the corpus and searches: every text comes from a cache.

    Query batches are ordered by the queries' length in tokens, so each batch's lengths fall from its first query
    to its last (ordered by characters, they do not on these queries).
    """
    from retrieval_zoo.evaluation.stages import evaluate_method
    from retrieval_zoo.index.csurf.csf import InvertedLists
    from retrieval_zoo.index.terms.gip import Gip
    from retrieval_zoo.index.vectors.faiss import Faiss
    from retrieval_zoo.methods.csurf import CSurF
    from retrieval_zoo.methods.dense import DenseBiEncoder
    from retrieval_zoo.methods.dhr_fusion import DhrFusion
    from tests.conftest import tiny_encoder

    if method == "dense":
        model, index = DenseBiEncoder(clear_encoder()), Faiss()
    elif method == "csurf":
        model, index = CSurF(tiny_encoder(mlm_head=True, doc_max_length=16), vector_dim=4).eval(), InvertedLists()
    else:
        model = DhrFusion(lexical="splade", encoder=tiny_encoder(mlm_head=True, doc_max_length=16))
        index = Gip(slices=64, first_stage=None, weight_grid=(1.0,))
    queries = list(tiny.queries["dev"].values())[:20]
    lengths = [len(ids) for ids in model.text_tokenizer().unpadded(queries, "query")]
    by_characters = sorted(range(len(queries)), key=lambda i: len(queries[i]), reverse=True)
    assert [lengths[i] for i in by_characters] != sorted(lengths, reverse=True)  # the check below can fail
    TokenCache.build(tiny.corpus, model.text_tokenizer(), "doc", tiny.corpus_fingerprint)  # as training leaves it
    spy = Spy(monkeypatch)
    evaluate_method(model, index, tiny, tiny_bm25, "dev", 20, tmp_path, method, tune_queries=5)
    handed = {side: {kind for s, kind in spy.handed if s == side} for side in ("query", "doc")}
    docs = "TokenizedBatch" if method == "dlr_splade" else "Tokens"  # a fusion's ids come with their tokens
    assert handed == {"doc": {docs}, "query": {"TokenizedBatch"}}  # queries as texts with their tokens, which ...
    assert spy.tokenized == []  # ... are read from their cache (built unpadded, once): the tokenizer never ran
    assert spy.query_batches and all(batch == sorted(batch, reverse=True) for batch in spy.query_batches)
