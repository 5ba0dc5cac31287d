"""CSurF's training score in shapes fixed by the batch (lexical/csf_fixed.py) against the listed pairs' score."""

import itertools
from functools import partial

import pytest
import torch
import torch.nn.functional as F

from benchmarks.common import small_bags
from retrieval_zoo.encoding.backbones import TinyRandomBackbone
from retrieval_zoo.lexical import csf_fixed
from retrieval_zoo.lexical.csf_bags import Postings, max_sum_scores
from retrieval_zoo.lexical.csf_fixed import fixed_max_sum_scores, source_rows
from retrieval_zoo.lexical.csf_texts import TextCsfs, csf_texts
from retrieval_zoo.lexical.splade import max_pooled_logits
from retrieval_zoo.methods import csurf as csurf_module
from retrieval_zoo.methods.csurf import CSurF
from tests.conftest import float32_rounding, tiny_encoder
from tests.conftest import two_query_batch as batch


def texts(expansion: list[float], sources: list[int], own: list[float], ids: list[int],
          vectors: list[list[float]] | None) -> TextCsfs:  # fmt: skip
    """One text's CSFs by hand: w_t and s_t by form, E_i[x_i] and x_i by position."""
    return TextCsfs(torch.tensor([expansion]), torch.tensor([sources]), torch.tensor([own]), torch.tensor([ids]),
                    None if vectors is None else torch.tensor([vectors]), torch.tensor([len(ids)]), "both")  # fmt: skip


def stacked(*parts: TextCsfs) -> TextCsfs:
    """Texts of one length as one batch."""
    vectors = None if parts[0].vectors is None else torch.cat([p.vectors for p in parts])
    fields = ("expansion", "sources", "own", "ids")
    return TextCsfs(*(torch.cat([getattr(p, f) for p in parts]) for f in fields), vectors,
                    torch.cat([p.tokens for p in parts]), "both")  # fmt: skip


@pytest.mark.parametrize("with_vectors", [True, False])
def test_every_kind_of_pair_scores_as_worked_by_hand(with_vectors: bool) -> None:
    # |V| = 4, dot product. Query tokens x = (1, 2): token 0 keeps its original CSF (form 1, 0.5) and grounds form 3
    # (1.0); token 1 grounds form 2 (2.0), its own form, so its original CSF is that expansion CSF.
    v = (lambda rows: rows) if with_vectors else (lambda rows: None)
    query = texts([0, 0, 2.0, 1.0], [0, 0, 1, 0], [0.5, 0.0], [1, 2], v([[1.0, 0.0], [0.0, 1.0]]))
    # doc 0, x = (1, 3, 2): originals (form 1, 1.0) and (form 2, 0.5); token 1 grounds form 3 (2.0)
    doc0 = texts([0, 0, 0, 2.0], [0, 0, 0, 1], [1.0, 0.0, 0.5], [1, 3, 2], v([[1.0, 0], [0.5, 0.5], [0, 1.0]]))
    # doc 1, x = (2, 0, 0): no original CSF; token 1 grounds form 1 (3.0), token 0 form 2 (1.0)
    doc1 = texts([0, 3.0, 1.0, 0], [0, 1, 0, 0], [0.0, 0.0, 0.0], [2, 0, 0], v([[0, 1.0], [1.0, 1.0], [0, 0]]))
    # doc 0: token 0 = max(O×O 0.5·1.0·1, E×E 1.0·2.0·0.5) = 1.0; token 1 = E×O 2.0·0.5·1 = 1.0 → 2.0
    # doc 1: token 0 = O×E 0.5·3.0·1 = 1.5; token 1 = E×E 2.0·1.0·1 = 2.0 → 3.5
    # weights only (f = 1): doc 0 = max(0.5, 2.0) + 1.0 = 3.0; doc 1 = 1.5 + 2.0 = 3.5
    expected = [[2.0, 3.5]] if with_vectors else [[3.0, 3.5]]
    docs = stacked(doc0, doc1)
    assert fixed_max_sum_scores(query, docs).tolist() == expected
    assert fixed_max_sum_scores(query, docs, cells=4).tolist() == expected  # a document a block
    listed = max_sum_scores(query.listed(), Postings.build(docs.listed(), 4), num_docs=2)[0]
    assert listed.tolist() == expected


def encoded(count: int, length: int, kept: str, similarity: str | None, generator: torch.Generator, dim: int = 4):
    """Random texts' CSFs as CSurF makes them, and the leaves they come from (logits, self-projections, vectors)."""
    ids = torch.randint(5, 15, (count, length), generator=generator)  # 10 tokens: forms repeat within and across
    mask = torch.ones(count, length, dtype=torch.bool)
    mask[:, 0], mask[-1, -2:] = False, False  # [CLS]; padding
    logits = torch.randn(count, length, 50, generator=generator).masked_fill(~mask.unsqueeze(-1), -torch.inf)
    maxima, sources = logits.max(1)
    maxima = (maxima - 1.0).requires_grad_()  # about a sixth of the forms expand
    own = torch.randn(count, length, generator=generator).requires_grad_()
    raw = torch.randn(count, length, dim, generator=generator).requires_grad_()
    vectors = None if similarity is None else torch.relu(raw)
    vectors = F.normalize(vectors, dim=-1) if similarity == "cosine" else vectors
    csfs = csf_texts(torch.log1p(torch.relu(maxima)), sources, torch.log1p(torch.relu(own)), ids, mask, vectors, kept)
    return csfs, [maxima, own] + ([raw] if similarity else [])


@pytest.mark.parametrize(
    ("kept", "similarity", "by_product"),
    itertools.product(["both", "original", "expansion"], ["cosine", "dot", None], [False, True]),
)
def test_fixed_shapes_give_the_listed_pairs_scores_and_gradients(kept: str, similarity: str | None, by_product: bool,
                                                                 monkeypatch) -> None:  # fmt: skip
    monkeypatch.setattr(csf_fixed, "grounds_by_product", lambda vectors: by_product)  # a GPU's grounding, here too
    generator = torch.Generator().manual_seed(0)
    query, query_leaves = encoded(3, 6, kept, similarity, generator)
    docs, doc_leaves = encoded(5, 9, kept, similarity, generator)
    upstream = torch.randn(3, 5, generator=generator)
    leaves = query_leaves + doc_leaves

    def gradients(scores: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.autograd.grad((scores * upstream).sum(), leaves, allow_unused=True, materialize_grads=True,
                                   retain_graph=True)  # fmt: skip

    listed = max_sum_scores(query.listed(), Postings.build(docs.listed(), 50), num_docs=5)[0]
    grads = gradients(listed)
    scale = max(float(g.abs().max()) for g in grads)  # a leaf's gradient sums ≤ 15 products of ≤ 4-term dots
    for cells in (None, 3 * 50 * 2):  # one block; two documents a block, recomputed in the backward pass
        fixed = fixed_max_sum_scores(query, docs) if cells is None else fixed_max_sum_scores(query, docs, cells)
        # each score sums ≤ 6 cell maxima of products with a dot product of 4 terms: the same to float32 rounding
        largest = float(listed.detach().abs().max())
        assert torch.allclose(fixed, listed, rtol=0, atol=float32_rounding(6 * 4) * largest)
        for got, want in zip(gradients(fixed), grads, strict=True):
            assert torch.allclose(got, want, rtol=0, atol=float32_rounding(15 * 4) * scale)
    assert listed.detach().abs().max() > 0 and scale > 0


def test_compiled_csfs_need_fixed_shapes() -> None:
    with pytest.raises(ValueError, match="which method.step_shapes=data never runs"):
        CSurF(tiny_encoder(mlm_head=True), step_shapes="data", compile_csfs=True)
    model = CSurF(tiny_encoder(mlm_head=True), step_shapes="auto", compile_csfs=True)  # auto lists bags on a CPU
    with pytest.warns(UserWarning, match="compiling nothing"):
        model.losses(batch())


def test_source_rows_are_the_gathered_vectors_and_their_gradient_the_summed_rows() -> None:
    generator = torch.Generator().manual_seed(0)
    vectors = torch.randn(3, 7, 4, generator=generator, requires_grad=True)
    sources = torch.randint(0, 7, (3, 50), generator=generator)
    upstream = torch.randn(3, 50, 4, generator=generator)
    gathered = vectors[torch.arange(3).unsqueeze(1), sources]  # (3, 50, 4)
    (want,) = torch.autograd.grad((gathered * upstream).sum(), vectors)
    # each position's gradient sums the rows grounded on it (at most 50), in another order
    bound = float32_rounding(50) * torch.zeros_like(want).index_put_(
        (torch.arange(3).unsqueeze(1).expand(-1, 50), sources), upstream.abs(), accumulate=True
    )
    for values in (1 << 26, 2 * 50 * 7, 1):  # every text at once; two texts a chunk, then one
        rows = source_rows(vectors, sources, values)
        assert torch.equal(rows, gathered)  # one vector times 1, plus zeros: exact
        (got,) = torch.autograd.grad((rows * upstream).sum(), vectors)
        assert (got - want).abs().le(bound).all() and not torch.equal(want, torch.zeros_like(want))


def test_pooled_projection_fixed_backward_equals_the_sparse_one() -> None:
    model = TinyRandomBackbone(hidden_size=16).load_model(mlm_head=True).eval()
    ids, mask = torch.randint(1000, 2000, (2, 6)), torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    upstream = torch.randn(2, model.config.vocab_size) * (torch.rand(2, model.config.vocab_size) < 0.1)
    parameters = [model.cls.predictions.transform.dense.weight, model.cls.predictions.decoder.weight]
    sparse, fixed = (
        torch.autograd.grad(
            (max_pooled_logits(model, ids, mask, chunk=1000, fixed_backward=dense)[0] * upstream).sum(), parameters
        )  # fmt: skip
        for dense in (False, True)
    )
    for got, want in zip(fixed, sparse, strict=True):  # the same terms, summed by a product instead of row adds
        assert torch.allclose(got, want, rtol=0, atol=float32_rounding(2 * 6 * 16) * float(want.abs().max()))


@pytest.mark.parametrize(("vector_dim", "compiled"), [(8, False), (0, False), (8, True)])
def test_a_training_step_in_fixed_shapes_gives_the_same_losses_and_gradients(vector_dim: int, compiled: bool,
                                                                              monkeypatch) -> None:  # fmt: skip
    def step(shapes: str) -> tuple[dict[str, float], list[torch.Tensor]]:
        torch.manual_seed(0)
        compile_csfs = compiled and shapes == "fixed"
        model = CSurF(tiny_encoder(mlm_head=True), vector_dim=vector_dim, step_shapes=shapes,
                      compile_csfs=compile_csfs).eval()  # fmt: skip
        if compile_csfs:  # compiled, with a GPU's grounding (by product) and the documents scored 2 a block
            monkeypatch.setattr(csf_fixed, "grounds_by_product", lambda vectors: True)
            two_a_block = partial(fixed_max_sum_scores, cells=2 * 2 * model.vocab_size)  # 2 queries × 2 documents
            monkeypatch.setattr(csurf_module, "fixed_max_sum_scores", two_a_block)
        small_bags(model, csfs=2000)  # a random head expands most forms: a bias leaves about 100 CSFs a text
        losses, diagnostics = model.losses(batch())
        sum(losses.values()).backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        return {k: float(v.detach()) for k, v in {**losses, **diagnostics}.items() if v.numel() == 1}, grads

    (data, data_grads), (fixed, fixed_grads) = step("data"), step("fixed")
    assert data.keys() == fixed.keys() and 10 < data["csf_per_doc"] < 500
    for name, value in data.items():
        assert fixed[name] == pytest.approx(value, rel=1e-5, abs=1e-7), name
    assert len(data_grads) == len(fixed_grads)
    # every gradient sums the batch's pair and projection terms (~10^3) in another order, relative to the largest
    scale = max(float(g.abs().max()) for g in data_grads)
    for got, want in zip(fixed_grads, data_grads, strict=True):
        assert torch.allclose(got, want, rtol=0, atol=float32_rounding(1000) * scale)


def test_the_grounding_products_backward_takes_one_batched_multiply() -> None:
    # Its gradient comes back with no unit stride; uncopied, a CPU's bmm backward multiplies the |V| = 50 matrices one
    # at a time, each behind selects of its operands (4 × 8 × 32 products a matrix: under 400, torch loops unseen)
    generator = torch.Generator().manual_seed(0)
    query, _ = encoded(4, 6, "both", "dot", generator, dim=32)
    docs, _ = encoded(8, 9, "both", "dot", generator, dim=32)
    scores = fixed_max_sum_scores(query, docs)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        scores.sum().backward()
    backward_products = [event for event in profile.events() if event.name == "aten::bmm"]
    assert backward_products and all(len(event.cpu_children) < 10 for event in backward_products)
