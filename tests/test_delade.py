import pytest
import torch

import retrieval_zoo
from retrieval_zoo.index.terms.gip import Gip
from retrieval_zoo.lexical.delade_vectors import (
    _WeightedSoftmaxMax,
    delade_vectors,
    delade_vectors_naive,
    fused_candidates,
    log_normalisers,
    rows_per_chunk,
)
from retrieval_zoo.losses import kl_distillation
from retrieval_zoo.methods.delade import DeLADE
from tests.conftest import float32_rounding, tiny_encoder
from tests.conftest import two_query_batch as batch


def test_delade_vectors_by_hand() -> None:
    # One text: [CLS], two real tokens, one pad; |V| = 2. w = h (identity term weight on 1-d hidden states).
    logits = torch.tensor([[[9.0, 9.0], [0.0, 0.0], [0.0, torch.log(torch.tensor(3.0))], [50.0, 0.0]]])
    hidden = torch.tensor([[[100.0], [2.0], [4.0], [100.0]]])  # [CLS] and the pad carry huge weights: excluded
    mask = torch.tensor([[1, 1, 1, 0]])
    weight = torch.nn.Linear(1, 1)
    torch.nn.init.ones_(weight.weight), torch.nn.init.zeros_(weight.bias)
    # token 1: 2·softmax(0, 0) = (1, 1); token 2: 4·softmax(0, log 3) = (1, 3) → max: (1, 3)
    assert delade_vectors(logits, hidden, mask, weight).tolist() == [pytest.approx([1.0, 3.0])]
    assert delade_vectors_naive(logits, hidden, mask, weight).tolist() == [pytest.approx([1.0, 3.0])]


@pytest.mark.parametrize("bias", [0.0, -5.0, 5.0])  # mixed, all-negative and all-positive term weights
def test_fast_delade_vectors_equal_the_literal_formula(bias: float) -> None:
    torch.manual_seed(0)
    logits = (torch.randn(3, 6, 50) * 3).requires_grad_(True)
    hidden = torch.randn(3, 6, 4, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0]])
    weight = torch.nn.Linear(4, 1)
    torch.nn.init.constant_(weight.bias, bias)
    fast, naive = delade_vectors(logits, hidden, mask, weight), delade_vectors_naive(logits, hidden, mask, weight)
    assert torch.allclose(fast, naive, rtol=1e-5, atol=1e-7)
    upstream = torch.randn(3, 50)  # a non-uniform incoming gradient
    fast_grads = torch.autograd.grad((fast * upstream).sum(), (logits, hidden))
    naive_grads = torch.autograd.grad((naive * upstream).sum(), (logits, hidden))
    for fast_grad, naive_grad in zip(fast_grads, naive_grads, strict=True):  # sums over the 50 ids, reordered
        atol = float32_rounding(50) * float(naive_grad.abs().max())
        assert torch.allclose(fast_grad, naive_grad, rtol=1e-4, atol=atol)


def running_max_reference(z: torch.Tensor, weights: torch.Tensor, real: torch.Tensor) -> tuple:
    """The forward as it was before issue 20: a Python loop over positions keeping a running max and its winner."""
    log_normaliser = torch.logsumexp(z, dim=-1)
    best = torch.full(z.shape[::2], float("-inf"))
    winner = torch.zeros(best.shape, dtype=torch.long)
    for i in range(z.shape[1]):
        candidate = weights[:, i : i + 1] * torch.exp(z[:, i] - log_normaliser[:, i : i + 1])
        candidate = candidate.masked_fill(~real[:, i : i + 1], float("-inf"))
        better = candidate > best
        best, winner = torch.where(better, candidate, best), torch.where(better, i, winner)
    return best, winner


@pytest.mark.parametrize("fused", [False, True])  # the CPU's path, and the accelerator's (forced here on a CPU)
def test_vectorised_forward_equals_the_running_max_it_replaced(fused: bool) -> None:
    torch.manual_seed(1)
    z = torch.randn(4, 9, 300) * 4
    weights = torch.randn(4, 9)
    weights[0, 2:5] = weights[0, 1]  # equal weights and equal logits: ties, which the first position must win
    z[0, 2:5] = z[0, 1]
    real = torch.ones(4, 9, dtype=torch.bool)
    real[1, 5:], real[2, 1:] = False, False
    real[3] = False  # no real token at all: -inf everywhere, as before
    ctx = type("Ctx", (), {"save_for_backward": lambda self, *tensors: setattr(self, "saved", tensors)})()
    best = _WeightedSoftmaxMax.forward(ctx, z, weights, real, fused)
    expected_best, expected_winner = running_max_reference(z, weights, real)
    rtol = float32_rounding(300) if fused else 1e-6  # fused: probabilities normalised another way over 300 ids
    assert torch.allclose(best, expected_best, rtol=rtol, atol=0) and torch.equal(best.isinf(), expected_best.isinf())
    assert torch.equal(ctx.saved[2], expected_winner)


def test_cpu_chunks_and_the_encoding_path_give_the_very_same_vectors_and_gradients(monkeypatch) -> None:
    # Chunking rows on a CPU (to reuse heap pages) and skipping the winners without gradients change no bit.
    torch.manual_seed(2)
    logits, hidden = torch.randn(5, 7, 40) * 3, torch.randn(5, 7, 4)
    mask = torch.tensor([[1] * 7, [1] * 3 + [0] * 4, [1] * 7, [1, 1] + [0] * 5, [1] * 6 + [0]])
    weight, upstream = torch.nn.Linear(4, 1), torch.randn(5, 40)

    def vectors_and_gradients() -> tuple[torch.Tensor, ...]:
        leaves = logits.clone().requires_grad_(True), hidden.clone().requires_grad_(True)
        out = delade_vectors(*leaves, mask, weight)
        return out.detach(), *torch.autograd.grad((out * upstream).sum(), leaves)

    whole = vectors_and_gradients()
    monkeypatch.setattr("retrieval_zoo.lexical.delade_vectors.CPU_CHUNK_BYTES", 2 * 7 * 40 * 4)  # two rows a chunk
    assert rows_per_chunk(logits) == 2
    # elsewhere chunks bound the scratch tensor at 1 GiB: 34 rows of 256 tokens × |V| float32 logits
    assert rows_per_chunk(torch.empty(96, 256, 30522, device="meta")) == 34
    for expected, chunked in zip(whole, vectors_and_gradients(), strict=True):
        assert torch.equal(expected, chunked)
    with torch.inference_mode():
        assert torch.equal(delade_vectors(logits, hidden, mask, weight), whole[0])
    assert delade_vectors(logits[:0], hidden[:0], mask[:0], weight).shape == (0, 40)  # an empty batch


@pytest.mark.parametrize("chunk_rows", [None, 2])
def test_the_accelerators_fused_encoding_gives_the_vectors_to_float32_rounding(monkeypatch, chunk_rows) -> None:
    # On a GPU, encoding takes softmax's own kernel: another rounding of the same probabilities (forced here on a CPU)
    torch.manual_seed(4)
    logits, hidden = (torch.randn(5, 7, 40) * 3).bfloat16(), torch.randn(5, 7, 4)  # bf16, as autocast gives them
    mask = torch.tensor([[1] * 7, [1] * 3 + [0] * 4, [1] * 7, [1] + [0] * 6, [1] * 6 + [0]])  # row 3: [CLS] alone
    weight = torch.nn.Linear(4, 1)
    with torch.no_grad():
        expected = delade_vectors(logits, hidden, mask, weight)  # the CPU's path
        if chunk_rows:
            monkeypatch.setattr("retrieval_zoo.lexical.delade_vectors.CPU_CHUNK_BYTES", chunk_rows * 7 * 40 * 4)
        weights = torch.nn.functional.pad(weight(hidden[:, 1:]).squeeze(-1), (1, 0))
        real = mask != 0
        real[:, 0] = False
        fused = fused_candidates(logits, weights, real, winners=False)[1]
    assert fused.dtype == torch.float32 and torch.equal(fused.isinf(), expected.isinf()) and fused[3].isinf().all()
    finite = expected.isfinite()  # a probability normalised over 40 ids, times w: a few roundings apart
    scale = float(expected[finite].abs().max())
    assert torch.allclose(fused[finite], expected[finite], rtol=0, atol=float32_rounding(40) * scale)
    assert fused_candidates(logits[:0], weights[:0], real[:0], winners=False)[1].shape == (0, 40)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_accelerators_fused_training_gives_vectors_and_gradients_to_float32_rounding(monkeypatch, dtype) -> None:
    # Off the CPU, training takes softmax's own kernel too (forced here on a CPU), on logits in autocast's dtype
    torch.manual_seed(5)
    monkeypatch.setattr("retrieval_zoo.lexical.delade_vectors.DEVICE_CHUNK_BYTES", 2 * 7 * 40 * 4)  # 2 rows a chunk
    logits = (torch.randn(5, 7, 40) * 3).to(dtype)
    weights = torch.randn(5, 7).abs() + 0.5  # winners apart by more than rounding: the same winners both ways
    real = torch.tensor([[1] * 7, [1] * 3 + [0] * 4, [1] * 7, [1, 1] + [0] * 5, [1] * 6 + [0]]) != 0
    real[:, 0] = False
    upstream = torch.randn(5, 40)

    def vectors_and_gradients(fused: bool) -> tuple[torch.Tensor, ...]:
        z = logits.clone().requires_grad_(True) if fused else logits.float().requires_grad_(True)
        w = weights.clone().requires_grad_(True)
        out = _WeightedSoftmaxMax.apply(z, w, real, fused)
        return out.detach(), *torch.autograd.grad((out * upstream).sum(), (z, w))

    expected, fused = vectors_and_gradients(False), vectors_and_gradients(True)
    assert fused[1].dtype == dtype and fused[0].dtype == fused[2].dtype == torch.float32
    for name, want, got in zip(("vectors", "logits' gradient", "weights' gradient"), expected, fused, strict=True):
        got = got.float()
        # probabilities normalised over 40 ids (a few roundings apart), in sums of up to 40 terms; bf16's own
        # rounding of the gradient it returns on top (8 bits of mantissa: 2^-8 of each value)
        rtol = 2.0**-8 if dtype == torch.bfloat16 and name == "logits' gradient" else 0
        atol = float32_rounding(40) * float(want.abs().max())
        assert torch.allclose(got, want, rtol=rtol, atol=atol), name


def test_log_normalisers_are_torch_logsumexp_bit_for_bit() -> None:
    torch.manual_seed(3)
    z = torch.randn(3, 5, 301) * 6
    z[0, 0, :7] = float("-inf")  # some ids never possible
    z[1, 2] = float("-inf")  # a position with none: −inf, as torch gives
    scratch = torch.empty_like(z)
    assert torch.equal(log_normalisers(z, scratch), torch.logsumexp(z, dim=-1, keepdim=True))


def test_the_kept_probabilities_allow_one_backward_and_a_second_fails_loudly() -> None:
    torch.manual_seed(4)
    logits, hidden = (torch.randn(2, 5, 30) * 3).requires_grad_(True), torch.randn(2, 5, 4)
    out = delade_vectors(logits, hidden, torch.ones(2, 5), torch.nn.Linear(4, 1)).sum()
    out.backward(retain_graph=True)  # the backward turns the kept softmax into the logits' gradient, in place
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward()


def test_kl_distillation_by_hand() -> None:
    student, teacher = torch.tensor([[0.0, 0.0]]), torch.tensor([[torch.log(torch.tensor(3.0)), 0.0]])
    # p_t = (3/4, 1/4), p_s = (1/2, 1/2): KL = 3/4·log(3/2) + 1/4·log(1/2)
    expected = 0.75 * torch.log(torch.tensor(1.5)) + 0.25 * torch.log(torch.tensor(0.5))
    assert kl_distillation(student, teacher).item() == pytest.approx(expected.item())
    assert kl_distillation(teacher, teacher).item() == pytest.approx(0.0, abs=1e-7)
    with pytest.raises(ValueError, match="differ"):
        kl_distillation(student, teacher[:, :1])


def test_training_score_is_eq_13_and_losses_are_named() -> None:
    model = DeLADE(tiny_encoder(mlm_head=True), cls_dim=8, lambda_cls=4.0, kd_weight=0.5, kd_lexical_weight=1)
    assert model.needs == {"teacher_scores"}
    model.eval()  # no dropout: the two forward passes below must agree
    tokens = model.encoder.tokenize(["python library"], "query")
    lexical, cls = model.term_parts(*tokens)
    fused = model.encode_query(["python library"])
    assert fused.shape == (1, model.vocab_size + 8)
    assert (fused @ fused.T).item() == pytest.approx((lexical @ lexical.T + 4.0 * cls @ cls.T).item(), rel=1e-5)
    losses, diagnostics = model.train().losses(batch(teacher=True))
    assert set(losses) == {"nll", "kd", "kd_lexical"} and diagnostics["score/lexical_positive"].shape == (2,)
    assert not model.encoder.model.get_input_embeddings().weight.requires_grad  # frozen, as in the reference code


def test_lexical_only_model_has_no_cls_part() -> None:
    model = DeLADE(tiny_encoder(mlm_head=True), cls_dim=0)
    assert model.encode_doc(["a document"]).shape == (1, model.vocab_size)
    assert model.needs == frozenset()
    losses, _ = model.losses(batch())
    assert set(losses) == {"nll"}
    with pytest.raises(ValueError, match="cls_dim"):
        DeLADE(tiny_encoder(mlm_head=True), cls_dim=0, kd_semantic_weight=1.0)


def test_dhr_retrieval_scores_are_gip_and_parts_add_up(tiny, tiny_bm25) -> None:
    model = DeLADE(tiny_encoder(mlm_head=True, doc_max_length=24), cls_dim=8)
    retriever = Gip(slices=128, first_stage=None).build(model.eval(), tiny, tiny_bm25)
    assert retriever.nbytes == len(tiny.corpus) * (2 * (128 + 8) + 1 * 128)  # float16 values; uint8 DLR positions
    queries = dict(list(tiny.judged_queries("dev").items())[:5])
    fused = retriever.search(queries, 400)
    lexical, semantic = retriever.side("lexical", queries, 400), retriever.side("semantic", queries, 400)
    for qid, docs in fused.items():
        for docid in list(docs)[:20]:  # GIP over the DHR = GIP over the DLR + λ·[CLS] (Eq. 14)
            assert docs[docid] == pytest.approx(lexical[qid][docid] + semantic[qid][docid], abs=2e-3)
    retriever.first_stage, retriever.theta, retriever.candidates = "approximate_gip", -1e9, 50
    run = retriever.search(queries, 10)  # θ below every value: approximate GIP is exact, K′ = 50 holds the top 10
    assert {q: list(d) for q, d in run.items()} == {q: list(d)[:10] for q, d in fused.items()}


@pytest.mark.slow
def test_delade_cls_trains_and_evaluates_through_dhrs(tiny_dir, tmp_path) -> None:
    import json

    from tests.test_end_to_end import run_app, tiny_dataset

    out = tmp_path / "delade_cls"
    run_app(
        "train.py", "method=delade_cls", *tiny_dataset(tiny_dir), "backbone=tiny_random", "trainer=cpu",
        "trainer.max_epochs=1", "data.batch_size=8", "data.val_queries=10", "eval.k=100", "eval.explain=2",
        "index.slices=128", "method.encoder.doc_max_length=24", "index.candidates=100", "logger=csv",
        f"hydra.run.dir={out}",
    )  # fmt: skip
    results = json.loads((out / "results.json").read_text())
    assert set(results["metrics"]) == {"BM25", "delade_cls", "delade_cls (lexical)", "delade_cls (semantic)"}
    assert results["index_bytes"] > 0 and results["complementarity"]["U"] == 30
    assert len((out / "explain.dev.jsonl").read_text().splitlines()) == 6
    logged = (out / "csv" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"train/loss/nll", "train/accuracy", "train/score/lexical_positive/mean"} <= set(logged)
    from tests.test_ciff import export  # the trained run's term weights as CIFF, from its run directory alone

    export(f"run_dir={out}", f"out={tmp_path / 'ciff'}", "levels=1")  # 1 level: only the largest weights survive
    exported = json.loads((tmp_path / "ciff" / "export.json").read_text())
    documents = len((tiny_dir / "collection.tsv").read_text().splitlines())  # the run's collection, not the default
    identity = (exported["method"], exported["dataset"], exported["documents"])
    assert identity == ("delade_cls", "msmarco_passage", documents)
    queries = (tmp_path / "ciff" / "queries.dev.jsonl").read_text().splitlines()
    assert len(queries) == len((tiny_dir / "queries.dev.tsv").read_text().splitlines())
    from retrieval_zoo.trained import load_trained, trained_config
    from tests.test_export import export as export_folder

    export_folder(f"run_dir={out}", f"out={tmp_path / 'hf'}")  # DeLADE+[CLS] as a folder: its [CLS] layer beside
    exported = retrieval_zoo.load(tmp_path / "hf")  # its encoder, loaded with retrieval_zoo.load alone
    trained = load_trained(out, trained_config(out)).eval()
    texts = [line.split("\t", 1)[1] for line in (tiny_dir / "queries.dev.tsv").read_text().splitlines()]
    with torch.inference_mode():
        assert torch.equal(exported.encode_query(texts), trained.encode_query(texts))
    manifest = json.loads((tmp_path / "hf" / "retrieval_zoo.json").read_text())
    assert manifest["sentence_transformers"] is None  # Eq. 23's activation: no stock equivalent
