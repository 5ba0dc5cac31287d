"""The scale harness's corpus-encoding stages (:mod:`benchmarks.scale`): the corpus encoded on the model's device.

- ``encode_dense``: the dense method on a bert-base-size backbone (``backbone=bert_base_random``: bert-base's shapes,
  random weights, no download), into the shards of its faiss index;
- ``encode_splade``: ``method=dlr_splade`` (the embedded SPLADE-tiny's trained expansion), into the shards of its
  term-weight indexes;
- ``gip_splade``: ``encode_splade``'s shards densified into DLRs (``index=gip``, 768 stride slices) on the model's
  device, and the dev queries searched in two stages (Eq. 18, the corpus's K′ = 10,000), then exactly, for what the
  first stage loses (``recall_exact``, ``top10_overlap`` against exact GIP). It needs no Java, unlike the ``gip``
  stage over BM25's vectors, so it runs where Java does not (the GPU machine).

Each encodes as ``train.py`` encodes a trained model's corpus
(:func:`retrieval_zoo.encoding.corpus.predict_shards`: Lightning predict, one shard a step, each written as it is
done; an off-the-shelf SPLADE is otherwise encoded on demand, shard by shard, in the searching process) on one
device: CUDA in bf16 where there is one (``trainer=gpu``), else the CPU in float32, into a cache of its own emptied
first (its token cache too: tokenizing is part of the time), so nothing comes from an earlier run. Besides the
harness's figures a stage reports ``docs_per_s``, ``tokens`` (what the encoder read of the corpus, from its token
cache), ``tokens_per_s``, ``segments`` and, on CUDA, ``peak_gpu`` (the most memory torch held on the device).

Resumed (the harness's ``--resume``, which sets :data:`RESUME`), an encoding stopped part-way (a machine's command
limit, a kill) keeps the shards and token chunks it wrote and encodes the rest: its ``seconds`` are then the sum of
its ``segments`` (:func:`segment_seconds`), each from its encoding's start to its end or, for one that was stopped,
to the last file it wrote (what it did after that is done again by the next).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from functools import partial
from pathlib import Path

import lightning as L
import torch

from benchmarks.common import composed
from benchmarks.scale import RESUME
from retrieval_zoo.cache import write_json
from retrieval_zoo.data.collections import Collection
from retrieval_zoo.data.corpus_store import corpus_ids
from retrieval_zoo.encoding.corpus import predict_shards
from retrieval_zoo.encoding.tokens import CachedTexts
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.lexical.lucene_bm25 import BM25
from retrieval_zoo.methods.method import RetrievalMethod


def encoding(method: str, *overrides: str):
    """The stage encoding the corpus with ``conf/method/<method>.yaml`` (and ``overrides``)."""

    def stage(collection: Collection, work: Path) -> dict:
        from benchmarks.scale_stages import SHARD_SIZE, folder_bytes  # it imports this module's stages

        cache = work / f"encoded-{method}"
        log = cache / "segments.json"
        resumed = os.environ.get(RESUME) == "1" and log.exists()
        if not resumed:
            shutil.rmtree(cache, ignore_errors=True)
        segments = json.loads(log.read_text()) if resumed else []
        os.environ["RETRIEVAL_ZOO_CACHE"] = str(cache)  # this stage's process only
        model, index = composed("method", method, *overrides, also=("index",))
        cuda = torch.cuda.is_available()
        make_trainer = partial(L.Trainer, accelerator="gpu" if cuda else "cpu", devices=1, logger=False,
                               precision="bf16-mixed" if cuda else "32-true", enable_progress_bar=False)  # fmt: skip

        shards = CorpusShards(corpus_ids(collection.corpus), SHARD_SIZE, cache / "encoded")
        segments.append({"started": time.time()})
        write_json(log, segments)
        predict_shards(model, shards, index.doc_encoder(model, collection, BM25(collection)), make_trainer)
        segments[-1]["ended"] = time.time()
        write_json(log, segments)
        seconds, tokens = segment_seconds(segments, cache), corpus_tokens(model, collection, shards)
        figures = {
            "seconds": seconds,
            "docs_per_s": len(collection.corpus) / seconds,
            "tokens": tokens,
            "tokens_per_s": tokens / seconds,
            "disk": folder_bytes(cache / "encoded"),
            "segments": len(segments),
        }
        return figures | ({"peak_gpu": torch.cuda.max_memory_allocated()} if cuda else {})

    return stage


def corpus_tokens(model: RetrievalMethod, collection: Collection, shards: CorpusShards) -> int:
    """The tokens ``model``'s encoder read of the corpus (truncated, markers included), from its token cache.

    An encoder's work grows with its tokens, not its documents: the synthetic collections' copies are longer than
    the real documents before them (:mod:`benchmarks.synthetic`), so a larger corpus has more tokens a document.
    """
    texts = model.corpus_texts(collection)
    total = 0
    for shard in range(len(shards)):
        batch = texts(shards.shard_docids(shard))
        if not isinstance(batch, CachedTexts):
            raise TypeError(f"{type(model).__name__} encodes texts without a token cache: no tokens to count")
        total += sum(batch.lengths)
    return total


def segment_seconds(segments: list[dict[str, float]], cache: Path) -> float:
    """The wall seconds of an encoding's ``segments`` ({"started", "ended"} epoch times, "ended" absent if stopped).

    A stopped segment ends at the last modification of a file under ``cache`` before the next segment started (its
    last shard or token chunk); one that left no file counts 0 s.
    """
    times = [path.stat().st_mtime for path in cache.rglob("*") if path.is_file() and path.name != "segments.json"]
    total = 0.0
    for segment, following in zip(segments, [*segments[1:], None], strict=True):
        started = segment["started"]
        ended = segment.get("ended")
        if ended is None:
            until = following["started"] if following is not None else time.time()
            ended = max((t for t in times if started <= t < until), default=started)
        total += ended - started
    return total


def splade_shards(collection: Collection, work: Path) -> CorpusShards:
    """``encode_splade``'s shards of ``collection`` under ``work``, every one present; its cache becomes this process's.

    The stages that search them encode their queries into a token cache beside the corpus's.
    """
    from benchmarks.scale_stages import SHARD_SIZE

    cache = work / "encoded-dlr_splade"
    shards = CorpusShards(corpus_ids(collection.corpus), SHARD_SIZE, cache / "encoded")
    if shards.missing():
        raise FileNotFoundError(f"{cache / 'encoded'}: {len(shards.missing())} of {len(shards)} shards missing; run "
                                "the encode_splade stage at this size first")  # fmt: skip
    os.environ["RETRIEVAL_ZOO_CACHE"] = str(cache)
    return shards


def stage_gip_splade(collection: Collection, work: Path) -> dict:
    """``index=gip`` over ``encode_splade``'s shards: its build, two-stage search and agreement with exact GIP."""
    from benchmarks.scale_csf import agreement
    from benchmarks.scale_stages import K, timed

    shards = splade_shards(collection, work)
    model, index = composed("method", "dlr_splade", "index=gip", also=("index",))
    queries = collection.judged_queries("dev")
    with torch.inference_mode():
        retriever, seconds = timed(lambda: index.build(model, collection, BM25(collection), shards))
        run = retriever.search(queries, K)  # the queries encoded, the device warm
        searching = min(timed(lambda: retriever.search(queries, K))[1] for _ in range(2))
        retriever.first_stage = None
        exact = retriever.search(queries, K)
    figures = {"seconds": seconds, "disk": retriever.nbytes, "ms_per_query": 1000 * searching / len(queries)}
    figures |= agreement(run, exact)
    return figures | ({"peak_gpu": torch.cuda.max_memory_allocated()} if torch.cuda.is_available() else {})


STAGES = {"encode_dense": encoding("dense", "backbone=bert_base_random"), "encode_splade": encoding("dlr_splade"),
          "gip_splade": stage_gip_splade}  # fmt: skip
