"""A method's learned sparse term weights exported as CIFF, with its queries' impacts, for the field's engines.

python -m retrieval_zoo.export.ciff run_dir=outputs/<date>/<time>_delade out=exports/delade   # a trained run
python -m retrieval_zoo.export.ciff method=dlr_splade out=exports/splade_tiny                  # an untrained method

Any method whose representation is ``term_weights`` (SPLADE-tiny's, DeLADE's Eq. 23 bag of words, the DLR/DHR
fusions' BM25 or SPLADE source vectors, CSurF's bags read with |v| = 0). Writes into ``out``:

- ``index.ciff`` (``gzip=true``: ``index.ciff.gz``): the corpus's lexical vectors as integer impacts, 0 to
  ``levels`` by one scale for the corpus (:mod:`retrieval_zoo.index.terms.impact`), terms named by the vocabulary's
  strings, documents by the collection's ids (:mod:`retrieval_zoo.index.terms.ciff_format`). BMP's ``ciff2bmp``, PISA's
  ``ciff2pisa`` and ``lucene-ciff`` read it.
- ``queries.<split>.jsonl``: each query of the evaluation split as ``{"id": ..., "vector": {term: impact}}``, 0 to
  ``query_levels`` by the query's own scale (which changes no ranking), as Anserini's impact searcher takes them.
- ``export.json``: the method, the run, the scales and the counts. A [CLS] part (DeLADE+[CLS]) is not exported.
"""

from __future__ import annotations

import json
import tempfile
from functools import partial
from pathlib import Path

import hydra
import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from retrieval_zoo.config_check import check_config
from retrieval_zoo.data.corpus_store import corpus_ids
from retrieval_zoo.encoding.precision import encoding_precision, trainer_precision
from retrieval_zoo.evaluation.pipeline import build_collection_and_bm25, encode_for_index
from retrieval_zoo.index.representations import TermEncoder
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.index.terms.ciff_format import spill, term_lists, write_ciff
from retrieval_zoo.index.terms.impact import quantize, scan
from retrieval_zoo.index.terms.sparse import Sparse
from retrieval_zoo.methods.method import RetrievalMethod
from retrieval_zoo.term_matrix import columns_from, each_row
from retrieval_zoo.trained import load_trained, trained_config


def query_vectors(encoder: TermEncoder, queries: dict[str, str], levels: int) -> list[dict]:
    """Each query as ``{"id", "vector": {term: impact}}``, its largest weight at ``levels``; zeros left out."""
    texts = list(queries.values())
    encode = lambda batch: {"lexical": encoder.encode_queries(batch)[0]}  # noqa: E731
    lexical = encoder.queries.encoded(encode, texts, encoder.batch_size, "encode queries (CIFF)")["lexical"]
    vectors = []
    for qid, weights in zip(queries, each_row(columns_from(lexical, encoder.discard)), strict=True):
        weights = weights.double()
        largest = float(weights.max())
        impacts = quantize(weights, levels / largest) if largest > 0 else torch.zeros_like(weights, dtype=torch.int64)
        ids = torch.nonzero(impacts > 0).flatten()
        terms = encoder.terms((ids + encoder.discard).tolist())
        vectors.append({"id": qid, "vector": dict(zip(terms, impacts[ids].tolist(), strict=True))})
    return vectors


def export(cfg: DictConfig, model: RetrievalMethod, out: Path) -> dict:
    """Encode the corpus as ``index=sparse`` does, and write the CIFF file, the queries and ``export.json``."""
    if "term_weights" not in model.representations:
        raise ValueError(f"method={cfg.method_name} has no term weights to export (representations: "
                         f"{', '.join(model.representations)}); CIFF holds term weights")  # fmt: skip
    index, (collection, bm25) = Sparse(), build_collection_and_bm25(cfg)
    make_trainer = partial(instantiate(cfg.trainer, _partial_=True), default_root_dir=str(out))
    shards, _ = encode_for_index(model, index, collection, bm25, make_trainer, cfg.encode)
    precision = trainer_precision(make_trainer)  # what follows encodes as the corpus's predict did
    encoder = model.term_encoder(collection, bm25)
    name = "index.ciff.gz" if cfg.gzip else "index.ciff"
    with tempfile.TemporaryDirectory(prefix="retrieval_zoo-ciff-", dir=out) as work:
        if shards is None:  # an off-the-shelf method, encoded on demand: once, into the work folder, not per pass
            shards = CorpusShards(corpus_ids(collection.corpus), cfg.encode.shard_size, Path(work) / "shards")
            with encoding_precision(precision, model):
                shards.encode_into(encoder.encode_docs, range(len(shards)))
        scale, _, _ = scan(shards, encoder.discard, cfg.levels)
        spilled = spill(shards, encoder.discard, scale, Path(work) / "impacts")
        count, lists = term_lists(spilled, encoder.terms)
        description = (f"retrieval_zoo: method={cfg.method_name} on dataset={cfg.dataset_name}, term weights as "
                       f"impacts 0..{cfg.levels} (weight x {scale:.6g}, rounded)")  # fmt: skip
        write_ciff(out / name, lists, count, shards.docids, spilled.doc_lengths, description)
    split = cfg.split or collection.eval_split
    queries = collection.queries[split]
    with encoding_precision(precision, model):
        vectors = query_vectors(encoder, queries, cfg.query_levels)
    with open(out / f"queries.{split}.jsonl", "w", encoding="utf-8") as lines:
        lines.writelines(json.dumps(vector, ensure_ascii=False) + "\n" for vector in vectors)
    summary = {"method": str(cfg.method_name), "dataset": str(cfg.dataset_name), "run_dir": cfg.run_dir,
               "ciff": name, "documents": len(shards.docids), "terms": count, "postings": int(spilled.df.sum()),
               "levels": cfg.levels, "document_scale": scale, "queries": f"queries.{split}.jsonl",
               "query_levels": cfg.query_levels, "description": description}  # fmt: skip
    (out / "export.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


@hydra.main(config_path="pkg://retrieval_zoo.conf", config_name="export_ciff", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    """Export ``run_dir``'s best checkpoint (its config, with the command line's ``dataset``), or ``method``."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.run_dir:
        trained = trained_config(Path(cfg.run_dir))
        given = {o.split("=")[0].lstrip("+~").split(".")[0] for o in HydraConfig.get().overrides.task}
        groups = ("method", "bm25") if "dataset" in given else ("method", "bm25", "dataset")
        for group in groups:  # the run's method and collection, unless the command line names another collection
            OmegaConf.update(cfg, group, trained[group], merge=False)
            if f"{group}_name" in trained:
                OmegaConf.update(cfg, f"{group}_name", trained[f"{group}_name"], merge=False)
        check_config(cfg)
        model = load_trained(Path(cfg.run_dir), cfg)
    else:
        check_config(cfg)
        L.seed_everything(cfg.seed)
        model = instantiate(cfg.method)
    summary = export(cfg, model.eval(), out)
    print(f"[export_ciff] {summary['documents']:,} documents, {summary['terms']:,} terms, {summary['postings']:,} "
          f"postings → {out / summary['ciff']}; queries → {out / summary['queries']}")  # fmt: skip
    return summary


if __name__ == "__main__":
    main()
