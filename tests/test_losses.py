import math

import numpy as np
import pytest
import torch

from retrieval_zoo.encoding.batching import encode_payload, length_sorted_batches
from retrieval_zoo.encoding.encoder import cls_pool, mean_pool
from retrieval_zoo.losses import group_targets, in_batch_accuracy, listwise_nll
from retrieval_zoo.methods.method import Optim
from tests.conftest import float32_rounding


def test_listwise_nll_by_hand() -> None:
    # Two queries, each with its own group of 2 (positive first): L = mean(−s⁺ + log Σ exp s).
    scores = torch.tensor([[2.0, 0.0], [1.0, 1.0]])
    expected = ((-2 + math.log(math.exp(2) + 1)) + (-1 + math.log(2 * math.e))) / 2
    assert listwise_nll(scores, group_targets(2, 2, in_batch=False, device=scores.device)).item() == pytest.approx(
        expected
    )


def test_in_batch_targets_point_at_each_querys_positive() -> None:
    assert group_targets(3, 4, in_batch=True, device=torch.device("cpu")).tolist() == [0, 4, 8]
    scores = torch.tensor([[5.0, 0, 0, 0], [0, 0, 5.0, 1.0]])
    assert in_batch_accuracy(scores, torch.tensor([0, 2])).item() == 1.0
    assert in_batch_accuracy(scores, torch.tensor([0, 3])).item() == 0.5


def test_mean_pool_ignores_padding() -> None:
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    mask = torch.tensor([[1, 1, 0]])
    assert mean_pool(hidden, mask).tolist() == [[2.0, 3.0]]
    assert cls_pool(hidden, mask).tolist() == [[1.0, 2.0]]


def test_length_sorted_batches_cover_every_index_once() -> None:
    texts = ["a", "ccc", "bb", "dddd", "e"]
    batches = length_sorted_batches(texts, 2)
    assert batches[0] == [3, 1] and sorted(i for b in batches for i in b) == list(range(5))


def test_ids_are_batched_by_the_length_of_the_texts_they_stand_for() -> None:
    corpus = {"d1": "a long text of many words", "d22": "short", "d333": "mid length text"}
    ids = list(corpus)
    seen: list[list[str]] = []

    def encode(batch: list[str]) -> dict[str, torch.Tensor]:
        seen.append(batch)
        return {"rows": torch.tensor([[float(ids.index(d))] for d in batch])}

    payload = encode_payload(encode, ids, 1, "docs", lengths=[len(corpus[d]) for d in ids])
    assert seen == [["d1"], ["d333"], ["d22"]]  # by text length; by id length it would be d333, d22, d1
    assert payload["rows"].flatten().tolist() == [0.0, 1.0, 2.0]  # rows back in input order
    with pytest.raises(ValueError, match="2 lengths for 3 items"):
        length_sorted_batches(ids, 1, lengths=[1, 2])


def test_schedule_is_a_pure_function_of_the_step() -> None:
    optim = Optim(lr=1.0, warmup_steps=4, decay="linear")
    assert [optim.factor(s, 12) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert optim.factor(8, 12) == pytest.approx(0.5) and optim.factor(12, 12) == 0.0
    assert Optim(warmup_steps=2, decay="constant").factor(100, 10) == 1.0
    # RoC's schedule: full rate for 3 epochs, then halved every epoch (10 steps per epoch here).
    halve = Optim(warmup_steps=0, decay="halve", halve_after_epochs=3)
    assert [halve.factor(s, 60, steps_per_epoch=10) for s in (0, 29, 30, 39, 40, 59)] == [1, 1, 0.5, 0.5, 0.25, 0.125]
    with pytest.raises(ValueError, match="steps per epoch"):
        halve.factor(5, 60)
    with pytest.raises(ValueError, match="optim.decay"):
        Optim(decay="cosine")


def test_fast_splade_vectors_equal_the_naive_loop() -> None:
    from retrieval_zoo.encoding.backbones import TinyRandomBackbone
    from retrieval_zoo.lexical.splade import splade_vectors, splade_vectors_naive

    backbone = TinyRandomBackbone(hidden_size=32)
    model, tokenizer = backbone.load_model(mlm_head=True).eval(), backbone.load_tokenizer()
    x = tokenizer(
        ["a short text", "a somewhat longer text with padding after it ends"], padding=True, return_tensors="pt"
    )
    with torch.inference_mode():
        naive = splade_vectors_naive(model, x["input_ids"], x["attention_mask"])
        fast = splade_vectors(model, x["input_ids"], x["attention_mask"], chunk=1000)
    assert fast.shape == (2, tokenizer.vocab_size) and (fast > 0).any()
    # the chunked projection sums the same 32 products per logit in another order
    assert torch.allclose(fast, naive, rtol=0, atol=float32_rounding(32) * float(naive.abs().max()))


def test_residual_margin_and_hinge_by_hand() -> None:
    from retrieval_zoo.losses import residual_hinge, residual_margin

    lex_pos = torch.tensor([12.0, 3.0])
    lex_neg = torch.tensor([[2.0, 14.0], [3.0, 1.0]])
    margin = residual_margin(lex_pos, lex_neg, xi=1.0, lambda_train=0.1)
    # Eq. 6: 1 − 0.1·(12 − 2) = 0, 1 − 0.1·(12 − 14) = 1.2, 1 − 0 = 1, 1 − 0.1·2 = 0.8
    assert torch.allclose(margin, torch.tensor([[0.0, 1.2], [1.0, 0.8]]))
    emb_pos = torch.tensor([5.0, 1.0], requires_grad=True)
    emb_neg = torch.tensor([[4.0, 4.5], [0.5, 2.0]], requires_grad=True)
    loss = residual_hinge(emb_pos, emb_neg, margin)
    # Eq. 7 per triplet: [0 − 5 + 4]₊ = 0, [1.2 − 5 + 4.5]₊ = 0.7, [1 − 1 + 0.5]₊ = 0.5, [0.8 − 1 + 2]₊ = 1.8
    assert loss.item() == pytest.approx((0 + 0.7 + 0.5 + 1.8) / 4)
    loss.backward()
    # The first triplet is inactive: its negative gets no gradient; active triplets push with ±1/4.
    assert emb_neg.grad.tolist() == [[0.0, 0.25], [0.25, 0.25]]
    assert emb_pos.grad.tolist() == [-0.25, -0.5]


def test_negative_residual_margin_gives_zero_gradient() -> None:
    from retrieval_zoo.losses import residual_hinge, residual_margin

    margin = residual_margin(torch.tensor([30.0]), torch.tensor([[5.0]]), xi=1.0, lambda_train=0.1)
    assert margin.item() == pytest.approx(-1.5)  # BM25 already separates the pair by a wide margin
    emb_pos = torch.tensor([0.2], requires_grad=True)
    emb_neg = torch.tensor([[0.4]], requires_grad=True)
    loss = residual_hinge(emb_pos, emb_neg, margin)  # [−1.5 − 0.2 + 0.4]₊ = 0
    loss.backward()
    assert loss.item() == 0.0 and emb_pos.grad.item() == 0.0 and emb_neg.grad.item() == 0.0


def test_pair_max_normalised_margin_by_hand() -> None:
    from retrieval_zoo.losses import residual_margin

    lex_pos = torch.tensor([12.0, 0.0])
    lex_neg = torch.tensor([[3.0, 16.0], [0.0, 4.0]])
    margin = residual_margin(lex_pos, lex_neg, xi=1.0, lambda_train=1.0, normalization="pair_max")
    # residual / max(s+, s−): (12 − 3)/12 = 0.75, (12 − 16)/16 = −0.25, 0/0 → 0, (0 − 4)/4 = −1
    assert torch.allclose(margin, torch.tensor([[0.25, 1.25], [1.0, 2.0]]))
    with pytest.raises(ValueError, match="pair_max"):
        residual_margin(lex_pos, lex_neg, xi=1.0, lambda_train=1.0, normalization="zscore")


def test_orthogonality_loss_by_hand() -> None:
    from retrieval_zoo.losses import orthogonality

    q_lex = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    q_sem = torch.tensor([[0.0, 2.0], [1.0, 0.0]])  # cos = 0 and 1/√2 → cos² = 0, 0.5 → mean 0.25
    d_lex = torch.tensor([[3.0, 0.0], [0.0, 0.0]])
    d_sem = torch.tensor([[-1.0, 0.0], [1.0, 1.0]])  # cos = −1 → 1; a zero lexical vector → 0 → mean 0.5
    assert orthogonality(q_lex, q_sem, d_lex, d_sem).item() == pytest.approx(0.25 + 0.5)


def test_masking_touches_only_exact_matches_in_the_configured_fraction() -> None:
    from retrieval_zoo.methods.masking import mask_exact_matches

    cls, sep, pad, mask = 101, 102, 0, 103
    query = torch.tensor([[cls, 7, 8, sep], [cls, 9, sep, pad]])
    # Query 0 owns documents 0-1, query 1 owns 2-3 (G = 2). Document 0 has 20 matches of 7/8 among other tokens.
    doc0 = [cls] + [7, 8, 50, 51] * 10 + [sep]
    docs = torch.tensor(
        [doc0, [cls, 9, 9, 60] + [pad] * 38, [cls, 9, 7, 9] + [sep] + [pad] * 37, [cls, 61, 62, sep] + [pad] * 38]
    )
    masked = mask_exact_matches(docs, query, fraction=0.15, mask_id=mask, special_ids=[cls, sep, pad, mask])
    changed = masked != docs
    assert changed[0].sum() == 3  # 15% of 20 exact-match positions
    assert set(docs[0][changed[0]].tolist()) <= {7, 8}  # only exact matches
    assert not changed[1].any()  # 9 is not in query 0
    assert (masked[changed] == mask).all() and not changed[3].any()
    everything = mask_exact_matches(docs, query, fraction=1.0, mask_id=mask, special_ids=[cls, sep, pad, mask])
    assert everything[2].tolist()[:5] == [cls, mask, 7, mask, sep]  # 7 belongs to query 0, not to query 1
    # Stochastic rounding: 15% of 2 positions masks one position 30% of the time, in expectation.
    g = torch.Generator().manual_seed(0)
    counts = [int((mask_exact_matches(docs, query, 0.15, mask, [cls, sep, pad, mask], g)[2] == mask).sum())
              for _ in range(2000)]  # fmt: skip
    assert sum(counts) / 2000 == pytest.approx(0.3, abs=0.04)


def masking_loop_reference(doc_ids, query_ids, fraction, mask_id, special_ids, generator) -> torch.Tensor:
    """mask_exact_matches as it was before issue 20: the matches, draws and writes row by row on the device."""
    group = doc_ids.shape[0] // query_ids.shape[0]
    owner = query_ids.repeat_interleave(group, dim=0)
    matches = (doc_ids.unsqueeze(2) == owner.unsqueeze(1)).any(dim=2) & ~torch.isin(doc_ids, torch.tensor(special_ids))
    masked = doc_ids.clone()
    for row in range(doc_ids.shape[0]):
        positions = matches[row].nonzero().flatten()
        exact = fraction * len(positions)
        count = int(exact) + int(torch.rand((), generator=generator) < exact - int(exact))
        if count:
            masked[row, positions[torch.randperm(len(positions), generator=generator)[:count]]] = mask_id
    return masked


def test_masking_draws_and_masks_exactly_as_the_row_loop_it_replaced() -> None:
    from retrieval_zoo.methods.masking import mask_exact_matches

    torch.manual_seed(0)
    query = torch.randint(1000, 1030, (8, 12))
    docs = torch.randint(1000, 1060, (16, 40))
    docs[3] = 0  # a document without matches
    special = [0, 101, 102, 103]
    new, old = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    for fraction in (0.15, 0.5, 1.0, 0.15):
        expected = masking_loop_reference(docs, query, fraction, 103, special, old)
        assert torch.equal(mask_exact_matches(docs, query, fraction, 103, special, new), expected)
    # Given the counts the host made from the tokens (a DataModule batch), the same draws and masks.
    counts = np.array([sum(t in set(query[i // 2].tolist()) for t in docs[i].tolist()) for i in range(16)])
    with_counts, old = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    for fraction in (0.15, 1.0):
        expected = masking_loop_reference(docs, query, fraction, 103, special, old)
        assert torch.equal(mask_exact_matches(docs, query, fraction, 103, special, with_counts, counts), expected)
    with pytest.raises(ValueError, match="counts of shape"):
        mask_exact_matches(docs, query, 0.15, 103, special, with_counts, counts[:3])


def test_kl_distillation_in_both_directions_by_hand() -> None:
    """Student scores (0, 0) give p_s = (1/2, 1/2); teacher scores (ln 3, 0) give p_t = (3/4, 1/4)."""
    from retrieval_zoo.losses import kl_distillation

    student, teacher = torch.tensor([[0.0, 0.0]]), torch.tensor([[math.log(3.0), 0.0]])
    teacher_student = 0.75 * math.log(0.75 / 0.5) + 0.25 * math.log(0.25 / 0.5)  # KL(p_t ‖ p_s) = 0.130812
    student_teacher = 0.5 * math.log(0.5 / 0.75) + 0.5 * math.log(0.5 / 0.25)  # KL(p_s ‖ p_t) = 0.143841
    assert kl_distillation(student, teacher).item() == pytest.approx(teacher_student, abs=1e-6)
    assert kl_distillation(student, teacher, "student_teacher").item() == pytest.approx(student_teacher, abs=1e-6)
    student.requires_grad_(True)
    kl_distillation(student, teacher, "student_teacher").backward()
    assert student.grad[0, 0] < 0 < student.grad[0, 1]  # pulls the student towards the teacher's first document
    with pytest.raises(ValueError, match="direction must be one of"):
        kl_distillation(student, teacher, "both")
