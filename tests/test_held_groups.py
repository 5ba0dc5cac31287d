"""Encodings listed a group of batches at a time (batching.held_groups): the same payload as batch by batch."""

import pytest
import torch

from retrieval_zoo.encoding import batching
from retrieval_zoo.encoding.batching import encode_payload, held_groups
from retrieval_zoo.index.csurf.payload import encode_bags_payload
from retrieval_zoo.term_matrix import is_csr, parts
from tests.test_csurf import sparse_model


def test_batches_are_grouped_until_they_hold_the_budget() -> None:
    pieces = [([0, 1], 3), ([2], 3), ([3, 4], 3), ([5], 1)]
    groups = list(held_groups(iter(pieces), size=lambda held: held, budget=5))
    assert groups == [[([0, 1], 3), ([2], 3)], [([3, 4], 3), ([5], 1)]]  # 6 ≥ 5 closes the first; the rest at the end
    assert list(held_groups(iter(pieces), size=lambda held: held, budget=1)) == [[piece] for piece in pieces]
    assert list(held_groups(iter([]), size=lambda held: held, budget=1)) == []


def term_rows(texts: list[str]) -> dict[str, torch.Tensor]:
    """Mostly zero (n, 50) term weights and (n, 3) vectors that follow from each text alone."""
    seeds = [sum(map(ord, text)) for text in texts]
    weights = torch.stack([torch.rand(50, generator=torch.Generator().manual_seed(s)) for s in seeds])
    return {"lexical": torch.where(weights > 0.8, weights, 0.0), "cls": weights[:, :3] - 0.5}


@pytest.mark.parametrize("budget", [1, 2000, 2**40])  # each batch alone, a few batches, the whole call
def test_term_weights_listed_by_group_are_the_rows_in_input_order(monkeypatch, budget: int) -> None:
    texts = [f"text {i} " + "x" * (i % 7) for i in range(23)]
    monkeypatch.setattr(batching, "HELD_BYTES", budget)
    out = encode_payload(term_rows, texts, 4, "test", as_csr=frozenset({"lexical"}))
    expected = term_rows(texts)
    assert is_csr(out["lexical"]) and not is_csr(out["cls"])
    offsets, columns, values = parts(out["lexical"])  # the non-zero entries, row by row, in column order
    rows, expected_columns = expected["lexical"].nonzero(as_tuple=True)
    assert torch.equal(columns, expected_columns) and torch.equal(values, expected["lexical"][rows, expected_columns])
    assert torch.equal(offsets.diff(), torch.count_nonzero(expected["lexical"], dim=1))
    assert torch.equal(out["cls"], expected["cls"])


def test_csfs_listed_by_group_make_the_payload_of_each_batch_listed_alone(monkeypatch, tiny) -> None:
    model = sparse_model(vector_dim=8, doc_max_length=24)
    texts = [tiny.corpus[d] for d in list(tiny.corpus)[:30]]
    payloads = []
    for budget in (1, 3 * 2**20, 2**40):  # each batch a group (the listing batch by batch), a few batches, all
        monkeypatch.setattr(batching, "HELD_BYTES", budget)
        payloads.append(encode_bags_payload(model.doc_csfs, texts, 4))
    assert len(payloads[0]["text"]) > 0 and payloads[0]["vector"].shape[1] == 8
    for payload in payloads[1:]:  # bit for bit, in the same order
        assert payload.keys() == payloads[0].keys()
        assert all(torch.equal(payload[name], payloads[0][name]) for name in payload)
