"""CSurF (csurf.md): CSF bags, the §3.3 score, FLOPS, grounding, and the inverted index against brute force."""

import math

import pytest
import torch

from retrieval_zoo.encoding.backbones import TinyRandomBackbone
from retrieval_zoo.index.csurf.csf import InvertedLists
from retrieval_zoo.index.csurf.csf_retriever import CsfRetriever
from retrieval_zoo.index.csurf.explain import best_pairs, explanation
from retrieval_zoo.index.csurf.payload import encode_bags_payload
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.lexical.csf_bags import CsfBags, Postings, max_sum_scores
from retrieval_zoo.lexical.csf_texts import csf_texts
from retrieval_zoo.lexical.splade import max_pooled_logits
from retrieval_zoo.losses import flops, quadratic_warmup
from retrieval_zoo.methods.csurf import CSurF
from retrieval_zoo.term_matrix import dense_rows
from tests.conftest import float32_rounding, tiny_encoder
from tests.conftest import two_query_batch as batch


def bags(rows: list[tuple[int, int, int, float, list[float]]], num_texts: int, length: int) -> CsfBags:
    """CSFs from (text, surface, source, weight, vector) rows."""
    text, surface, source, weight, vector = zip(*rows, strict=True)
    return CsfBags(torch.tensor(text), torch.tensor(surface), torch.tensor(source), torch.tensor(weight),
                   torch.tensor(vector), torch.zeros(len(rows), dtype=torch.bool), num_texts, length)  # fmt: skip


def test_csf_score_by_hand_on_a_toy_vocabulary() -> None:
    # Query tokens 0 and 1. Token 0 grounds forms 5 and 7, token 1 form 9. Vectors 2-d, dot product.
    query = bags([(0, 5, 0, 2.0, [1.0, 0.0]), (0, 7, 0, 1.0, [1.0, 0.0]), (0, 9, 1, 3.0, [0.0, 1.0])], 1, 2)
    docs = bags(
        [
            (0, 5, 0, 1.0, [0.5, 0.5]),  # doc 0: form 5 twice (two sources), form 9 once
            (0, 5, 1, 0.5, [2.0, 0.0]),
            (0, 9, 2, 1.0, [0.0, 0.25]),
            (1, 7, 0, 4.0, [0.25, 1.0]),  # doc 1: form 7 only; form 6 matches nothing
            (1, 6, 1, 9.0, [1.0, 1.0]),
        ],
        2,
        3,
    )
    # doc 0: q token 0 = max(2·1·0.5, 2·0.5·2.0) = 2.0 (form 7 unmatched); q token 1 = 3·1·0.25 = 0.75 → 2.75
    # doc 1: q token 0 = max(form 5 unmatched, 1·4·0.25) = 1.0; q token 1 unmatched → 0 → 1.0
    scores, columns, pairs = max_sum_scores(query, Postings.build(docs, vocab_size=10), num_docs=2)
    assert scores.tolist() == [[2.75, 1.0]] and columns.tolist() == [0, 1] and pairs == 4
    sparse, columns, _ = max_sum_scores(query, Postings.build(docs, vocab_size=10, doc_offset=100))
    assert sparse.tolist() == [[2.75, 1.0]] and columns.tolist() == [100, 101]
    with torch.inference_mode():  # search scores a block of pairs at a time: the same values, any block size
        for chunk in (1, 2, 3):
            blocks = max_sum_scores(query, Postings.build(docs, vocab_size=10, doc_offset=100), pair_chunk=chunk)
            assert blocks[0].tolist() == [[2.75, 1.0]] and blocks[1].tolist() == [100, 101] and blocks[2] == 4
            # every document's cell (search when they fit): a document no pair reaches scores 0
            every = max_sum_scores(query, Postings.build(docs, vocab_size=10), num_docs=3, pair_chunk=chunk)
            assert every[0].tolist() == [[2.75, 1.0, 0.0]] and every[1].tolist() == [0, 1, 2] and every[2] == 4
    with pytest.raises(ValueError, match="inference_mode"):
        max_sum_scores(query, Postings.build(docs, vocab_size=10), pair_chunk=2)


def bag_term_weights(bags: CsfBags, width: int) -> torch.Tensor:
    """(T, width) dense: §3.4's bags read with |v| = 0 from their listed CSFs, literally: for each text and surface
    form, the largest weight among the text's CSFs of that form (0 where it has none)."""
    weights = torch.zeros(bags.num_texts, width)
    for text, surface, weight in zip(bags.text.tolist(), bags.surface.tolist(), bags.weight.tolist(), strict=True):
        weights[text, surface] = max(float(weights[text, surface]), weight)
    return weights


def test_bags_read_as_term_weights_take_each_forms_largest_weight_by_hand() -> None:
    # Two texts of 4 positions, [CLS] a b [SEP] and [CLS] b [SEP] [PAD]; |V| = 6, tokens a = 1, b = 2. Text 0 expands
    # forms 1 (from a, 1.5), 4 (from b, 3.0) and 2 (from a, 0.5: b's own CSF of form 2, 0.75, outweighs it); text 1
    # only keeps b's own CSF (form 2, 2.0)
    ids = torch.tensor([[0, 1, 2, 3], [0, 2, 3, 5]])
    source_mask = torch.tensor([[False, True, True, False], [False, True, False, False]])
    expansion = torch.tensor([[0.0, 1.5, 0.5, 0.0, 3.0, 0.0], [0.0] * 6])
    sources = torch.tensor([[0, 1, 1, 0, 2, 0], [0] * 6])
    self_weights = torch.tensor([[9.0, 1.5, 0.75, 9.0], [9.0, 2.0, 9.0, 9.0]])  # [CLS], [SEP], padding never count
    expected = {
        "both": [[0.0, 1.5, 0.75, 0.0, 3.0, 0.0], [0.0, 0.0, 2.0, 0.0, 0.0, 0.0]],
        "original": [[0.0, 1.5, 0.75, 0.0, 0.0, 0.0], [0.0, 0.0, 2.0, 0.0, 0.0, 0.0]],
        "expansion": [[0.0, 1.5, 0.5, 0.0, 3.0, 0.0], [0.0] * 6],
    }
    for kept, rows in expected.items():
        texts = csf_texts(expansion, sources, self_weights, ids, source_mask, None, kept)
        weights = texts.term_weights()  # dense, in the encoder's shapes: listing them is the caller's
        assert weights.layout == torch.strided and weights.shape == (2, 6)
        assert weights.tolist() == rows, kept
        assert torch.equal(weights, bag_term_weights(texts.listed(), 6)), kept
    # |v| = 0 scores are SPLADE's sum over shared forms: text 0 against text 1, 0.75·2.0
    both = csf_texts(expansion, sources, self_weights, ids, source_mask, None).term_weights()
    assert (both[:1] @ both[1:].T).tolist() == [[1.5]]


@pytest.mark.parametrize("kept", ["both", "original", "expansion"])
def test_csurf_term_encoder_gives_its_bags_as_term_weights(tiny, kept: str) -> None:
    model = CSurF(tiny_encoder(mlm_head=True), vector_dim=0, bags=kept).eval()
    encoder = model.term_encoder(tiny, None)
    texts, docids = list(tiny.judged_queries("dev").values())[:3], list(tiny.corpus)[:4]
    with torch.inference_mode():
        queries, cls = encoder.encode_queries(texts)
        docs = encoder.encode_docs(docids)["lexical"]
        q_bags, d_bags = model.encode_query(texts), model.encode_doc([tiny.corpus[d] for d in docids])
    assert cls is None and encoder.discard == 0 and encoder.vocab_size == model.vocab_size
    assert encoder.queries.as_csr == {"lexical"} and docs.layout == torch.sparse_csr  # listed a group at a time
    assert torch.equal(dense_rows(queries), bag_term_weights(q_bags, model.vocab_size))
    # the corpus is encoded in other batches (their lengths): the same weights to float32 rounding
    expected = bag_term_weights(d_bags, model.vocab_size)
    assert torch.allclose(dense_rows(docs), expected, rtol=0, atol=float32_rounding(32) * float(expected.max()))
    assert "term_weights" in CSurF.representations


def test_csf_bags_ground_expansions_and_keep_a_shared_csf_once() -> None:
    # One text of 4 positions: [CLS] a b [SEP]; |V| = 4, tokens a = 1, b = 2.
    ids = torch.tensor([[0, 1, 2, 3]])
    source_mask = torch.tensor([[False, True, True, False]])
    expansion = torch.tensor([[0.0, 1.5, 0.5, 2.0]])  # forms 1, 2, 3 expanded
    sources = torch.tensor([[0, 1, 1, 2]])  # form 1 ← a (its own token), form 2 ← a (not b), form 3 ← b
    self_weights = torch.tensor([[9.0, 1.5, 0.25, 9.0]])  # [CLS] and [SEP] never count
    vectors = torch.arange(8.0).view(1, 4, 2)
    both = csf_texts(expansion, sources, self_weights, ids, source_mask, vectors, "both").listed()
    columns = (both.surface, both.source, both.weight, both.original)
    rows = set(zip(*(c.tolist() for c in columns), strict=True))
    # E: (1, a, 1.5), (2, a, 0.5), (3, b, 2.0); O: (b's own form 2, b, 0.25); a's own CSF (1, a) is already in E
    assert rows == {(1, 1, 1.5, False), (2, 1, 0.5, False), (3, 2, 2.0, False), (2, 2, 0.25, True)}
    assert both.vector[both.source == 2].tolist() == [[4.0, 5.0], [4.0, 5.0]] and both.tokens.tolist() == [2]
    original = csf_texts(expansion, sources, self_weights, ids, source_mask, vectors, "original").listed()
    assert set(zip(original.surface.tolist(), original.source.tolist(), strict=True)) == {(1, 1), (2, 2)}
    expanded = csf_texts(expansion, sources, self_weights, ids, source_mask, None, "expansion").listed()
    assert expanded.surface.tolist() == [1, 2, 3] and expanded.vector is None
    with pytest.raises(ValueError, match="bags must be one of"):
        csf_texts(expansion, sources, self_weights, ids, source_mask, None, "neither").listed()


def test_grounding_is_the_argmax_over_source_positions() -> None:
    model = TinyRandomBackbone(hidden_size=16).load_model(mlm_head=True).eval()
    ids = torch.randint(1000, 2000, (3, 7))
    mask = torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 3 + [0] * 4])
    pool = mask.clone()
    pool[:, 0] = 0  # [CLS] is no source
    with torch.no_grad():
        maxima, argmax, hidden = max_pooled_logits(model, ids, mask, pool, chunk=1000)
        logits = model(input_ids=ids, attention_mask=mask).logits.masked_fill(pool.unsqueeze(-1) == 0, -torch.inf)
    expected = logits.amax(1)  # chunked GEMMs against the full projection: width 16, another order
    assert torch.allclose(
        maxima, expected, rtol=0, atol=float32_rounding(16) * float(expected[expected.isfinite()].abs().max())
    )
    assert torch.equal(argmax, logits.argmax(1)) and hidden.shape == (3, 7, 16)


def test_pooled_projection_backward_equals_autograd_through_the_logits() -> None:
    model = TinyRandomBackbone(hidden_size=16).load_model(mlm_head=True).eval()  # eval: the same dropout twice
    model.cls.predictions.bias.data.normal_()
    model.bert.embeddings.word_embeddings.weight.data[0].normal_()  # the zero [PAD] row would tie every position
    ids, mask = torch.randint(1000, 2000, (2, 6)), torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    upstream = torch.randn(2, model.config.vocab_size) * (torch.rand(2, model.config.vocab_size) < 0.5)
    parameters = [model.cls.predictions.transform.dense.weight, model.cls.predictions.decoder.weight,
                  model.cls.predictions.bias]  # fmt: skip
    fast = torch.autograd.grad((max_pooled_logits(model, ids, mask, chunk=1000)[0] * upstream).sum(), parameters)
    logits = model(input_ids=ids, attention_mask=mask).logits.masked_fill(mask.unsqueeze(-1) == 0, -torch.inf)
    naive = torch.autograd.grad((logits.amax(1) * upstream).sum(), parameters)
    for fast_grad, naive_grad in zip(fast, naive, strict=True):  # sums over up to every (text, id) pair, reordered
        atol = float32_rounding(upstream.numel()) * float(naive_grad.abs().max())
        assert torch.allclose(fast_grad, naive_grad, rtol=0, atol=atol)


def test_vocabulary_chunk_holds_a_budget_of_products() -> None:
    from retrieval_zoo.lexical.splade import CPU_CHUNK_BYTES, DEVICE_CHUNK_BYTES, MIN_CHUNK, vocabulary_chunk

    assert vocabulary_chunk(torch.empty(64, 256, 8), 30522) == MIN_CHUNK  # a training batch on a CPU: as ever
    assert vocabulary_chunk(torch.empty(2, 8, 8), 30522) == CPU_CHUNK_BYTES // (2 * 8 * 4) == 16384  # short texts
    assert vocabulary_chunk(torch.empty(1, 8, 8), 30522) == 30522  # one short query: the whole vocabulary at once
    meta = torch.empty(64, 256, 8, device="meta", dtype=torch.bfloat16)  # an accelerator: fewer, larger chunks
    assert vocabulary_chunk(meta, 30522) == DEVICE_CHUNK_BYTES // (64 * 256 * 2) == 16384
    assert vocabulary_chunk(meta[:2, :8], 30522) == 30522
    assert vocabulary_chunk(torch.empty(4096, 512, 8, device="meta"), 30522) == MIN_CHUNK  # never fewer ids


@pytest.mark.parametrize("fixed_backward", [False, True])
def test_pooled_projection_in_one_chunk_equals_it_in_many(fixed_backward: bool) -> None:
    # One chunk over the whole vocabulary is what vocabulary_chunk gives a GPU for most batches: the same maxima,
    # positions and gradients as 1,000 ids at a time, to float32 rounding (GEMMs of another width).
    model = TinyRandomBackbone(hidden_size=16).load_model(mlm_head=True).eval()
    ids, mask = torch.randint(1000, 2000, (2, 6)), torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    upstream = torch.randn(2, model.config.vocab_size)
    parameters = [model.cls.predictions.transform.dense.weight, model.cls.predictions.decoder.weight]
    results = []
    for chunk in (1000, model.config.vocab_size):
        maxima, argmax, _ = max_pooled_logits(model, ids, mask, chunk=chunk, fixed_backward=fixed_backward)
        results.append((maxima.detach(), argmax, torch.autograd.grad((maxima * upstream).sum(), parameters)))
    (many, many_at, many_grads), (one, one_at, one_grads) = results
    assert torch.allclose(one, many, rtol=0, atol=float32_rounding(16) * float(many.abs().max()))
    assert torch.equal(one_at, many_at)
    for got, want in zip(one_grads, many_grads, strict=True):
        assert torch.allclose(got, want, rtol=0, atol=float32_rounding(upstream.numel()) * float(want.abs().max()))


def test_pooled_projection_backward_is_bitwise_repeatable_on_two_threads(two_threads) -> None:
    # One text, 4 positions, 20k ids: both threads add into the same 4 rows of grad_x at once. index_put_(accumulate=
    # True) summed them in a thread-dependent order here (two CSurF trainings of one command differed).
    from retrieval_zoo.lexical.splade import _PooledProjection

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(1, 4, 32, generator=generator, requires_grad=True)
    weight = torch.randn(20000, 32, generator=generator, requires_grad=True)
    upstream = torch.randn(1, 20000, generator=generator)

    def gradients() -> tuple[torch.Tensor, ...]:
        maxima, _ = _PooledProjection.apply(x, weight, torch.ones(1, 4), 4096)
        return torch.autograd.grad((maxima * upstream).sum(), (x, weight))

    first = gradients()
    for _ in range(4):
        assert all(torch.equal(a, b) for a, b in zip(first, gradients(), strict=True))


def test_pooled_projection_backward_under_bf16_autocast_sums_in_float32() -> None:
    # Under CPU autocast the MLM transform's output (x) is bf16 and the maxima too: the backward must not mix dtypes,
    # and gives each input's dtype back, close to the float32 gradients.
    from retrieval_zoo.lexical.splade import _PooledProjection

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 32, generator=generator, requires_grad=True)
    weight = torch.randn(3000, 32, generator=generator, requires_grad=True)
    upstream = torch.randn(2, 3000, generator=generator)

    def gradients(source: torch.Tensor) -> tuple[torch.Tensor, ...]:
        maxima, _ = _PooledProjection.apply(source, weight, torch.ones(2, 5), 1024)
        return torch.autograd.grad((maxima.float() * upstream).sum(), (x, weight))

    exact = gradients(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = gradients(x.to(torch.bfloat16))
    assert low[0].dtype == torch.float32 and low[1].dtype == torch.float32  # through the cast back to x's dtype
    for got, want in zip(low, exact, strict=True):
        assert torch.nn.functional.cosine_similarity(got.flatten(), want.flatten(), dim=0) > 0.99


def test_flops_and_its_warmup_by_hand() -> None:
    weights = torch.tensor([[1.0, 0.0, 2.0], [3.0, 0.0, 0.0]])  # batch means (2, 0, 1) → 4 + 0 + 1
    assert flops(weights.mean(0)).item() == 5.0
    assert [quadratic_warmup(s, 10) for s in (0, 5, 10, 50)] == [0.0, 0.25, 1.0, 1.0]
    assert quadratic_warmup(0, 0) == 1.0


def literal_score(query: CsfBags, docs: CsfBags, q: int, d: int) -> float:
    """§3.3 written as its sums and maxima, one CSF pair at a time."""
    total = 0.0
    for token in range(query.length):
        best = 0.0
        for a in ((query.text == q) & (query.source == token)).nonzero().flatten().tolist():
            for b in ((docs.text == d) & (docs.surface == query.surface[a])).nonzero().flatten().tolist():
                similarity = 1.0 if query.vector is None else float(query.vector[a] @ docs.vector[b])
                best = max(best, float(query.weight[a] * docs.weight[b]) * similarity)
        total += best
    return total


def sparse_model(bias: float = -0.3, doc_max_length: int = 128, **kwargs: object) -> CSurF:
    """CSurF on a tiny random BERT whose MLM bias keeps about 1 logit in 300 positive, so bags stay small."""
    model = CSurF(tiny_encoder(mlm_head=True, doc_max_length=doc_max_length), **kwargs).eval()
    with torch.no_grad():
        model.encoder.model.cls.predictions.bias.fill_(bias)
    return model


@pytest.mark.parametrize(("vector_dim", "similarity", "kind"), [(8, "cosine", "both"), (4, "dot", "original"),
                                                                 (0, "cosine", "expansion")])  # fmt: skip
def test_model_score_is_the_literal_formula(vector_dim: int, similarity: str, kind: str) -> None:
    model = sparse_model(0.0 if kind == "original" else -0.3, vector_dim=vector_dim, similarity=similarity, bags=kind)
    with torch.no_grad():
        query = model.encode_query(["python library", "debian"])
        docs = model.encode_doc(["a python library for data", "debian tools", "nothing"])
        scores = model.score(query, docs)
    assert 0 < len(query.weight) < 2000 and (scores > 0).any()
    for q in range(2):
        for d in range(3):
            assert scores[q, d].item() == pytest.approx(literal_score(query, docs, q, d), rel=1e-5)
    if vector_dim and similarity == "cosine":
        assert torch.allclose(query.vector.norm(dim=1)[query.vector.norm(dim=1) > 0], torch.tensor(1.0))


def test_losses_are_named_weighted_and_reach_every_part() -> None:
    model = CSurF(
        tiny_encoder(mlm_head=True),
        vector_dim=4,
        lambda_q=0.5,
        lambda_d=0.25,
        flops_warmup_steps=10,
        kd_weight=2.0,
    ).eval()  # fmt: skip (eval: no dropout, so counts repeat)
    assert model.needs == {"teacher_scores"}
    losses, diagnostics = model.losses(batch(teacher=True))
    assert set(losses) == {"nll", "flops_query", "flops_doc", "kd"}
    assert losses["flops_query"].item() == 0.0 and diagnostics["flops_warmup"].item() == 0.0  # step 0 of warm-up
    sum(losses.values()).backward()
    assert model.vector_projection.weight.grad.abs().sum() > 0
    assert model.encoder.model.cls.predictions.transform.dense.weight.grad.abs().sum() > 0
    q, q_weights = model.encode_bags(*model.encoder.tokenize(batch().queries, "query"))
    assert q.counts().float().mean().item() == pytest.approx(diagnostics["csf_per_query"].item())
    assert flops(q_weights.mean(0)).item() > 0


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])  # the GPU path wherever a GPU is present


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("vector_dim", [8, 0])
def test_inverted_index_equals_brute_force_with_the_training_score(vector_dim: int, device: str, tiny) -> None:
    model = sparse_model(vector_dim=vector_dim, doc_max_length=24)
    docids = list(tiny.corpus)[:60]
    corpus = {d: tiny.corpus[d] for d in docids}
    queries = dict(list(tiny.judged_queries("dev").items())[:6])
    # One encoder batch each way, so the index and the brute force score bit-identical CSFs.
    retriever = CsfRetriever.from_shards(model.encode_query, bag_shards(model, corpus, 64), model.vocab_size,
                                         prune_threshold=0.0, query_batch_size=8, device=device)  # fmt: skip
    run = retriever.search(queries, k=10)
    with torch.no_grad():
        brute = model.score(model.encode_query(list(queries.values())), model.encode_doc(list(corpus.values())))
    same = (lambda a, b: a == b) if device == "cpu" else (lambda a, b: a == pytest.approx(b, rel=1e-5, abs=1e-6))
    for row, qid in enumerate(queries):
        top = brute[row].topk(10)
        expected = {docids[i]: s for s, i in zip(top.values.tolist(), top.indices.tolist(), strict=True) if s > 0}
        assert same(sorted(run[qid].values()), sorted(expected.values()))  # on the CPU, the very same floats
        assert all(same(brute[row, docids.index(d)].item(), s) for d, s in run[qid].items())
    stats = retriever.efficiency()
    assert stats["csf_per_doc"] == pytest.approx(retriever.postings_count / 60)
    # E_OPS = Σ_t n̂_t^q·n̂_t^d is the average number of CSF pairs a query scores per document.
    assert stats["pairs_per_query"] == pytest.approx(stats["e_ops"] * 60, rel=1e-4) and stats["e_ops"] > 0
    assert stats["all_to_all_ops"] == pytest.approx(stats["tokens_per_query"] * stats["tokens_per_doc"])
    assert retriever.nbytes > 0


def bag_shards(model: CSurF, corpus: dict[str, str], size: int) -> CorpusShards:
    """``corpus``'s bags of CSFs in shards of ``size`` documents, each encoded in one batch."""
    encode = lambda ids: encode_bags_payload(model.doc_csfs, [corpus[d] for d in ids], size)  # noqa: E731
    return CorpusShards.on_demand(list(corpus), encode, size)


@pytest.mark.slow
def test_compiled_scoring_gives_the_eager_scores_to_rounding(tiny) -> None:
    model = sparse_model(vector_dim=8, doc_max_length=24)
    corpus = {d: tiny.corpus[d] for d in list(tiny.corpus)[:60]}
    queries = dict(list(tiny.judged_queries("dev").items())[:6])
    runs = []
    for compiled in (False, True):
        shards = bag_shards(model, corpus, 64)
        retriever = CsfRetriever.from_shards(model.encode_query, shards, model.vocab_size, compiled=compiled)
        runs.append(retriever.search(queries, 20))
    for qid in queries:  # the same documents with the same scores, to float32 rounding
        assert runs[1][qid].keys() == runs[0][qid].keys()
        assert all(runs[1][qid][d] == pytest.approx(s, rel=1e-5, abs=1e-6) for d, s in runs[0][qid].items())


def test_each_query_tokens_best_pair_by_hand() -> None:
    # Query token 1 grounds forms 5 (w 2) and 7 (w 1), token 2 form 5 (w 0.5); the document holds form 5 from its
    # token 0 (w 3) and form 7 from token 3 (w 10). Weights only (|v| = 0): token 1's pairs score 2·3 = 6 and
    # 1·10 = 10, so its best is form 7; token 2's one pair 0.5·3 = 1.5. They sum to the score, 11.5.
    query = bags([(0, 5, 1, 2.0, [1.0]), (0, 7, 1, 1.0, [1.0]), (0, 5, 2, 0.5, [1.0])], 1, 3)
    doc = bags([(0, 5, 0, 3.0, [1.0]), (0, 7, 3, 10.0, [1.0])], 1, 4)
    query.vector = doc.vector = None
    assert best_pairs(query, doc) == [(1, 7, 3, 10.0), (2, 5, 0, 1.5)]
    assert max_sum_scores(query, Postings.build(doc, 10), num_docs=1)[0].item() == 11.5
    matches = explanation(best_pairs(query, doc), ["[CLS]", "usb", "drive"], ["disk", "a", "b", "mount"], ["g", "f"])
    assert matches == [{"query": "usb", "term": "g", "doc": "mount", "score": 10.0},
                       {"query": "drive", "term": "f", "doc": "disk", "score": 1.5}]  # fmt: skip


def test_an_explanation_names_the_pairs_that_sum_to_each_documents_score(tiny, tiny_bm25) -> None:
    model, collection = sparse_model(vector_dim=8, doc_max_length=24), tiny
    queries = dict(list(tiny.judged_queries("dev").items())[:3])
    with torch.inference_mode():
        retriever = InvertedLists().build(model, collection, tiny_bm25)
        run = retriever.search(queries, 5)
    records = retriever.explain(queries, run)
    assert [(r["qid"], r["docid"]) for r in records] == [(q, d) for q in queries for d in list(run[q])[:3]]
    for record in records:
        assert sum(m["score"] for m in record["matches"]) == pytest.approx(record["score"], abs=1e-4 * 30)
        query_tokens = model.token_strings([queries[record["qid"]]], "query")[0]
        doc_tokens = model.token_strings([collection.corpus[record["docid"]]], "doc")[0]
        assert all(m["query"] in query_tokens and m["doc"] in doc_tokens for m in record["matches"])


def test_pruned_index_drops_postings_and_efficiency_counts_them(tiny) -> None:
    model = sparse_model(vector_dim=4, doc_max_length=16)
    corpus = {d: tiny.corpus[d] for d in list(tiny.corpus)[:20]}
    full, half = (CsfRetriever.from_shards(model.encode_query, bag_shards(model, corpus, 7), model.vocab_size,
                                           prune_fraction=alpha) for alpha in (0.0, 0.5))  # fmt: skip
    assert len(half.shards) == 3  # α is the share of the whole corpus's postings, whatever the shards
    assert half.postings_count == full.postings_count - int(0.5 * full.postings_count)
    weights = {name: torch.cat([p.weight for p, _ in r.shards]) for name, r in (("full", full), ("half", half))}
    assert weights["half"].min() >= torch.quantile(weights["full"], 0.49)
    half.search({"q": "python"}, 5)
    assert half.efficiency()["postings_pruned_share"] == pytest.approx(0.5, abs=0.01)
    assert math.isfinite(half.efficiency()["ms_per_query"])


@pytest.mark.slow
def test_two_round_csurf_hn_recipe_runs_as_documented(tiny_dir, tmp_path) -> None:
    """Round 1 trains, evaluate.py writes its own top 100 on the training queries, round 2 trains on that run's hard
    negatives with KL to its scores, as experiment=csurf_hn documents (SPLADE-tiny: sparse bags from the start)."""
    import json

    from tests.test_end_to_end import run_app, tiny_dataset

    common = [*tiny_dataset(tiny_dir), "trainer=cpu", "trainer.max_steps=4", "trainer.log_every_n_steps=1",
              "data.batch_size=8", "data.val_queries=10", "method.encoder.doc_max_length=32", "eval.k=100",
              "logger=csv"]  # fmt: skip
    first, mined = tmp_path / "round1", tmp_path / "mined"
    run_app("train.py", "experiment=csurf", *common, "method.vector_dim=8", f"hydra.run.dir={first}")
    results = json.loads((first / "results.json").read_text())
    assert set(results["metrics"]) == {"BM25", "csurf"} and results["index_bytes"] > 0
    efficiency = results["efficiency"]
    assert efficiency["csf_per_query"] > 0 and efficiency["e_ops"] > 0 and efficiency["all_to_all_ops"] > 0
    logged = (first / "csv" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"train/loss/nll", "train/loss/flops_query", "train/loss/flops_doc", "train/csf_per_doc"} <= set(logged)

    export_trained_bags_as_ciff(first, tiny_dir, tmp_path / "ciff")
    export_expansion_weights_as_sparse_encoder(first, tiny_dir, tmp_path / "hf")

    run_app("evaluate.py", f"run_dir={first}", "eval.split=train", f"hydra.run.dir={mined}")
    run = mined / "run.train.trec"
    assert len({line.split()[0] for line in run.read_text().splitlines()}) == 120
    second = tmp_path / "round2"
    run_app("train.py", "experiment=csurf_hn", *common, "method.vector_dim=8", f"data.negatives_run={run}",
            f"data.teacher_run={run}", f"hydra.run.dir={second}")  # fmt: skip
    logged = (second / "csv" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "train/loss/kd" in logged and (second / "results.json").exists()


def export_trained_bags_as_ciff(run_dir, tiny_dir, out) -> None:
    """``python -m retrieval_zoo.export.ciff run_dir=<a csurf run>``: the bags read with |v| = 0, as CIFF impacts."""
    import json

    from ciff_toolkit.read import CiffReader

    from retrieval_zoo.trained import load_trained, trained_config
    from tests.test_ciff import export

    export(f"run_dir={run_dir}", f"out={out}", f"encode.cache_dir={out / 'cache'}")
    summary = json.loads((out / "export.json").read_text())
    reader = CiffReader(out / "index.ciff")
    first_doc: dict[str, int] = {}  # the first document's impacts, by term
    for plist in reader.read_postings_lists():
        if plist.postings[0].docid == 0:
            first_doc[plist.term] = plist.postings[0].tf
    lines = (tiny_dir / "collection.tsv").read_text().splitlines()
    assert [d.collection_docid for d in reader.read_documents()] == [line.split("\t")[0] for line in lines]
    model = load_trained(run_dir, trained_config(run_dir)).eval()
    with torch.inference_mode():
        weights = bag_term_weights(model.encode_doc([lines[0].split("\t")[1]]), model.vocab_size)[0]
    impacts = torch.round(weights.double() * summary["document_scale"]).long()
    ids = torch.nonzero(impacts).flatten()
    names = model.encoder.tokenizer.convert_ids_to_tokens(ids.tolist())
    expected = dict(zip(names, impacts[ids].tolist(), strict=True))
    assert summary["method"] == "csurf" and len(expected) > 0
    for term in first_doc.keys() | expected.keys():  # batched encoding may round an impact the other way, no more
        assert abs(first_doc.get(term, 0) - expected.get(term, 0)) <= 1, term
    assert sum(first_doc.values()) == pytest.approx(sum(expected.values()), rel=0.01)


def export_expansion_weights_as_sparse_encoder(run_dir, tiny_dir, out) -> None:
    """``python -m retrieval_zoo.export run_dir=<a csurf run>``: its expansion weights w_t as a sentence-transformers
    ``SparseEncoder`` (with the pooling module the folder ships), equal to the model's own to 1e-5."""
    import json

    from sentence_transformers import SparseEncoder

    import retrieval_zoo
    from tests.test_export import export

    export(f"run_dir={run_dir}", f"out={out}")
    assert json.loads((out / "retrieval_zoo.json").read_text())["sentence_transformers"] == "SparseEncoder"
    model = retrieval_zoo.load(out)
    with pytest.raises(ValueError, match="trust_remote_code"):  # the pooling module is code in the folder
        SparseEncoder(str(out), device="cpu")
    st = SparseEncoder(str(out), device="cpu", trust_remote_code=True)
    queries = [line.split("\t", 1)[1] for line in (tiny_dir / "queries.dev.tsv").read_text().splitlines()]
    docs = [line.split("\t", 1)[1] for line in (tiny_dir / "collection.tsv").read_text().splitlines()[:32]]
    for side, texts in (("query", queries), ("doc", docs)):
        with torch.inference_mode():
            bags = model.encode_query(texts) if side == "query" else model.encode_doc(texts)
        ours = bag_term_weights(bags, model.vocab_size)
        encode = st.encode_query if side == "query" else st.encode_document
        theirs = encode(texts, convert_to_tensor=True, batch_size=16).to_dense()
        atol = float32_rounding(32 * 2) * float(ours.abs().max())  # batches of 16 against ours: other sum orders
        assert torch.allclose(theirs, ours, rtol=0, atol=atol), (side, float((theirs - ours).abs().max()))


def test_a_compiled_encoder_compiles_the_encoder_below_the_mlm_head_that_csurf_calls(monkeypatch) -> None:
    compiled: list[torch.nn.Module] = []
    monkeypatch.setattr(torch.nn.Module, "compile", lambda module: compiled.append(module))  # record, compile nothing
    encoder = tiny_encoder(mlm_head=True, compile=True)
    assert compiled == [encoder.model, encoder.model.base_model]  # DeLADE calls the first, CSurF and SPLADE the second
    compiled.clear()
    encoder = tiny_encoder(compile=True)  # no MLM head: the model is the encoder
    assert compiled == [encoder.model]
