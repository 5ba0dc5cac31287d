"""Batches prepared ahead (``batching.prepared_batches``): in forked DataLoader workers, with equal results."""

import os

import pytest
import torch

from retrieval_zoo.encoding import batching
from retrieval_zoo.term_matrix import dense_rows
from tests.conftest import clear_encoder, tiny_encoder


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RETRIEVAL_ZOO_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


class ProcessLog:
    """Records, in a file (workers are other processes), which process tokenized texts and gathered cached tokens."""

    def __init__(self, path, monkeypatch) -> None:
        from retrieval_zoo.encoding.tokens import TextTokenizer, TokenCache

        self.path = path
        call, gather = TextTokenizer.__call__, TokenCache.tokens

        def logged_call(tokenizer, texts, side):
            self.write(f"tokenize {os.getpid()}")
            return call(tokenizer, texts, side)

        def logged_gather(cache, keys):
            self.write(f"gather {os.getpid()}")
            return gather(cache, keys)

        monkeypatch.setattr(TextTokenizer, "__call__", logged_call)
        monkeypatch.setattr(TokenCache, "tokens", logged_gather)

    def write(self, line: str) -> None:
        with self.path.open("a") as handle:
            handle.write(line + "\n")

    def processes(self, what: str) -> set[int]:
        """The processes that did ``what`` (``tokenize`` or ``gather``), since the last :meth:`clear`."""
        lines = self.path.read_text().split() if self.path.exists() else []
        return {int(pid) for kind, pid in zip(lines[::2], lines[1::2], strict=True) if kind == what}

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


def test_no_workers_without_cuda() -> None:
    assert not torch.cuda.is_initialized() and batching.prep_workers() == 0  # on CPUs the encoder keeps the cores


def test_batches_come_in_length_order_with_their_rows() -> None:
    texts = ["a", "a bb ccc", "a bb", "a bb ccc dddd", "a b"]
    got = list(batching.prepared_batches(texts, 2, prepare=lambda batch: [t.upper() for t in batch], workers=0))
    assert got == [([3, 1], ["A BB CCC DDDD", "A BB CCC"]), ([2, 4], ["A BB", "A B"]), ([0], ["A"])]


@pytest.mark.parametrize("workers", [0, 1])
def test_encoding_leaves_the_global_random_stream_alone(workers: int) -> None:
    """Validation encodes through these batches between training steps; it must not move training's dropout."""
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    list(batching.prepared_batches(["a", "b c", "d"], 2, workers=workers))
    assert torch.equal(torch.rand(3), expected)


def test_workers_tokenize_typed_queries_and_cached_tokens_are_gathered_in_process_with_equal_results(
    tiny, tiny_bm25, cache_dir, tmp_path, monkeypatch
) -> None:
    """With workers (as beside a GPU), typed queries come tokenized by the workers; cached tokens, which need only a
    gather, are gathered in the process (no workers forked for them); the results are equal either way."""
    from retrieval_zoo.index.terms.dhr_vectors import represent
    from retrieval_zoo.index.terms.dlr import Slicing
    from retrieval_zoo.index.vectors.faiss import Faiss
    from retrieval_zoo.methods.dense import DenseBiEncoder
    from retrieval_zoo.methods.dhr_fusion import DhrFusion

    dense = DenseBiEncoder(clear_encoder()).eval()
    fusion = DhrFusion(lexical="splade", encoder=tiny_encoder(mlm_head=True, doc_max_length=16), dense=dense)
    typed = list(tiny.queries["dev"].values())[:9]  # not in a query cache: tokenized where batches are prepared
    ids = list(tiny.corpus)[:40]
    log = ProcessLog(tmp_path / "processes.log", monkeypatch)

    def encode(workers: int) -> dict[str, torch.Tensor]:
        monkeypatch.setattr(batching, "prep_workers", lambda: workers)
        prep, terms = dense.query_prep(), fusion.term_encoder(tiny, tiny_bm25)
        fused = terms.encode_docs(ids)
        dhr_queries = represent(terms.encode_queries, typed, Slicing(fusion.encoder.vocab_size, 64), 1.0, 4,
                                prepare=terms.queries.prepare)[0]  # fmt: skip
        dense_queries = batching.encode_all(dense.encode_query, typed, 4, "q", None, prep.prepare)
        return {
            "dense queries": torch.from_numpy(dense_queries),
            "dense docs": Faiss().doc_encoder(dense, tiny, tiny_bm25)(ids)["vectors"],
            "fused lexical": dense_rows(fused["lexical"]),  # CSR: compared dense
            "fused cls": fused["cls"],
            "dhr queries": torch.from_numpy(dhr_queries.astype("float32")),
        }

    with torch.inference_mode():
        in_process = encode(workers=0)
        assert log.processes("tokenize") == {os.getpid()} and log.processes("gather") == {os.getpid()}
        log.clear()
        prepared = encode(workers=2)
    assert log.processes("tokenize") and os.getpid() not in log.processes("tokenize")  # the workers tokenized
    assert os.getpid() in log.processes("gather")  # cached tokens (the dense documents): gathered in the process
    for name, value in in_process.items():
        assert torch.equal(prepared[name], value), name
