"""Shared fixtures: an isolated artifact cache and a tiny real collection cut from the embedded one."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch

from retrieval_zoo.data.collections import Collection, embedded, msmarco_tsv
from retrieval_zoo.data.formats import write_id_text_tsv, write_qrels
from retrieval_zoo.encoding.backbones import TinyRandomBackbone
from retrieval_zoo.encoding.encoder import Encoder


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cache")
    os.environ["RETRIEVAL_ZOO_CACHE"] = str(path)
    os.environ.setdefault("WANDB_MODE", "disabled")
    return path


@pytest.fixture
def two_threads():
    """torch on 2 threads for the test (where parallel CPU kernels can reorder sums), restored afterwards."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 400-document slice of the embedded collection: 120 train and 30 dev queries, MS MARCO layout."""
    source = embedded("default")
    root = tmp_path_factory.mktemp("tiny")
    picked: dict[str, dict[str, dict[str, int]]] = {}
    docs: dict[str, str] = {}
    for split, limit in (("train", 120), ("dev", 30)):
        picked[split] = dict(list(source.qrels[split].items())[:limit])
        for judged in picked[split].values():
            docs.update({d: source.corpus[d] for d in judged})
    for docid in list(source.corpus)[: 400 - len(docs)]:
        docs.setdefault(docid, source.corpus[docid])
    write_id_text_tsv(root / "collection.tsv", docs)
    for split in ("train", "dev"):
        write_id_text_tsv(root / f"queries.{split}.tsv", {q: source.queries[split][q] for q in picked[split]})
        write_qrels(root / f"qrels.{split}.tsv", picked[split])
    return root


def load_tiny(root: Path) -> Collection:
    files = {s: f"queries.{s}.tsv" for s in ("train", "dev")}
    return msmarco_tsv("tiny", str(root), "collection.tsv", files, {s: f"qrels.{s}.tsv" for s in ("train", "dev")})


@pytest.fixture(scope="session")
def tiny(tiny_dir: Path) -> Collection:
    return load_tiny(tiny_dir)


@pytest.fixture(scope="session")
def tiny_bm25(tiny: Collection):
    from retrieval_zoo.lexical.lucene_bm25 import BM25

    return BM25(tiny, k1=0.9, b=0.4, threads=2)


def beir_layout(tiny_dir: Path, root: Path) -> Path:
    """Write the tiny slice as a BEIR directory (corpus.jsonl, queries.jsonl, qrels/test.tsv from its dev split)."""

    def jsonl(src: Path, dst: Path) -> None:
        rows = [line.split("\t", 1) for line in src.read_text().splitlines()]
        dst.write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in rows))

    (root / "qrels").mkdir(parents=True, exist_ok=True)
    jsonl(tiny_dir / "collection.tsv", root / "corpus.jsonl")
    jsonl(tiny_dir / "queries.dev.tsv", root / "queries.jsonl")
    lines = [line.split("\t") for line in (tiny_dir / "qrels.dev.tsv").read_text().splitlines()]
    body = "".join(f"{q}\t{d}\t{r}\n" for q, _, d, r in lines)
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + body)
    return root


def two_query_batch(teacher: bool = False):
    """A two-query training batch (one positive, one negative each), with teacher scores when asked."""
    import torch

    from retrieval_zoo.training.datamodule import TrainBatch

    return TrainBatch(
        qids=["q1", "q2"], queries=["python library", "debian tools"], docids=[["p1", "n1"], ["p2", "n2"]],
        docs=["a python library for data", "other text", "debian tools and more", "more text"],
        teacher_scores=torch.tensor([[3.0, 1.0], [2.0, 0.0]]) if teacher else None,
    )  # fmt: skip


CLEAR_MARKERS = {"query": "<QRY>", "doc": "<DOC>"}  # conf/method/clear.yaml's encoder markers (CLEAR §3.1)


def tiny_encoder(**kwargs: object) -> Encoder:
    """The shared encoder over a tiny random BERT (hidden size 32), with any :class:`Encoder` argument."""
    return Encoder(TinyRandomBackbone(hidden_size=32), **kwargs)


def clear_encoder() -> Encoder:
    """CLEAR's encoder: mean pooling, <QRY> / <DOC> markers."""
    return tiny_encoder(markers=CLEAR_MARKERS)


def float32_rounding(terms: int) -> float:
    """How far reordering a float32 sum of ``terms`` terms may move it, relative to their magnitude: 16·√n·eps.

    Two correct computations of one value (another reduction order, another CPU's kernels, two ranks) differ by
    about √n·eps of the terms' magnitude; a comparison's tolerance follows from this, never from one machine's luck.
    """
    return 16 * math.sqrt(terms) * torch.finfo(torch.float32).eps
