"""Stand-in SPLADE shards for a synthetic collection, where encoding it with SPLADE-tiny would take hours on a CPU.

Each document's vector holds its own word pieces (vocabulary ids from 999: no [unused*] or punctuation ids) weighted
log(1 + tf), written as ``encode_splade``'s shards (:mod:`benchmarks.scale_gpu`): the same folder, payload and CSR
layout, about 40% of SPLADE-tiny's terms a document. The memory and build benchmarks over SPLADE's shards
(:mod:`benchmarks.stage_memory`) then run at sizes a 2-core machine cannot encode. Shards already written are kept.

    python -m benchmarks.synthetic --documents 300000 --out /tmp/mem/n300000/collection
    python -m benchmarks.standin_shards /tmp/mem/n300000
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from benchmarks.common import composed
from benchmarks.scale_stages import SHARD_SIZE, load
from retrieval_zoo.data.corpus_store import corpus_ids
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.term_matrix import csr

FIRST_WORD_PIECE = 999  # BERT's ids below are [PAD], [unused*], [UNK], [CLS], [SEP], [MASK] and punctuation


def standin_vectors(token_ids: list[list[int]], width: int) -> torch.Tensor:
    """(n, width) CSR term weights log(1 + tf) of each text's word pieces (``token_ids``, one list a text)."""
    offsets, columns, values = [0], [], []
    for ids in token_ids:
        counts = torch.tensor([t for t in ids if t >= FIRST_WORD_PIECE], dtype=torch.int64).bincount()
        terms = counts.nonzero().flatten()
        columns.append(terms.to(torch.int32))
        values.append(torch.log1p(counts[terms].float()))
        offsets.append(offsets[-1] + len(terms))
    return csr(torch.tensor(offsets, dtype=torch.int32), torch.cat(columns), torch.cat(values), width)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("work", type=Path, help="a harness size's folder, holding collection/")
    args = parser.parse_args()
    collection = load(args.work / "collection")
    model = composed("method", "dlr_splade")
    tokenizer = model.encoder.tokenizer
    shards = CorpusShards(corpus_ids(collection.corpus), SHARD_SIZE, args.work / "encoded-dlr_splade" / "encoded")
    missing = shards.missing()
    for count, shard in enumerate(missing, 1):
        texts = [collection.corpus[docid] for docid in shards.shard_docids(shard)]
        token_ids = tokenizer(texts, add_special_tokens=False, truncation=True, max_length=256)["input_ids"]
        shards.write(shard, {"lexical": standin_vectors(token_ids, len(tokenizer))})
        print(f"[standin_shards] shard {shard} ({count} of {len(missing)}) written", flush=True)


if __name__ == "__main__":
    main()
