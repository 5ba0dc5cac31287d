"""Every ``conf/method`` × ``conf/index`` pair, composed and instantiated by Hydra, on a tiny random backbone.

No hand-kept table: a pair is compatible when the index accepts a representation the method produces. A compatible
pair builds its retriever on the tiny collection and must return what brute force over the method's own encodings
gives; the same index built from the corpus cut into 11 shards (37 documents each) must return the one-shard run, and
an index that saves (``index_dir``) must load from its folder to the same runs.
An incompatible pair fails with a message naming both and the compatible indexes.

Each pair encodes the corpus twice, once whole and once in eleven shards: brute force scores the whole encoding the
index was built from (the masked-LM methods' |V|-wide encodings are most of the matrix's time). A trained method's
pair also indexes the validation pool (BM25's top 50 of the queries and their judged documents) and must return
brute force's top k among the pool's documents, each with the score the whole corpus gives it (a quantizing
engine's: at the pool's own scale, set by its largest weight).
"""

from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import get_class, instantiate
from omegaconf import OmegaConf

from benchmarks.common import shortened, small_bags
from retrieval_zoo.evaluation.pipeline import check_method_and_index
from retrieval_zoo.index.index import compatible
from retrieval_zoo.index.shards import CorpusShards
from retrieval_zoo.index.terms.bmp import BmpRetriever
from retrieval_zoo.index.terms.dhr import DhrRetriever
from retrieval_zoo.index.terms.impact import ImpactRetriever, quantize
from retrieval_zoo.index.terms.seismic import SeismicRetriever
from retrieval_zoo.methods.delade import DeLADE
from retrieval_zoo.term_matrix import dense_rows
from retrieval_zoo.training.validation_pool import candidate_pool

CONF = Path(__file__).resolve().parents[1] / "retrieval_zoo" / "conf"
METHODS = sorted(p.stem for p in (CONF / "method").glob("*.yaml"))
INDEXES = sorted(p.stem for p in (CONF / "index").glob("*.yaml"))
K = 10


def composed(method: str, index: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", [f"method={method}", f"index={index}", "backbone=tiny_random"])
    cfg.method_name, cfg.index_name = method, index  # Hydra's choices, which compose() leaves unresolvable
    shortened(cfg, 8)  # short texts: the tiny corpus encodes fast
    if "depth" in cfg.index:
        OmegaConf.update(cfg, "index.depth", 50)
    if index == "seismic":  # nothing pruned, whole summaries: then the engine is exact up to its float16 weights
        exact = {"n_postings": 1_000_000, "query_cut": 1_000_000, "heap_factor": 1.0, "summary_energy": 1.0}
        for name, value in exact.items():
            OmegaConf.update(cfg, f"index.{name}", value)
    if index == "bmp":  # BMP's own ranking, checked exactly; re-scoring it is tested by hand (tests/test_impact.py)
        OmegaConf.update(cfg, "index.rescore", False)
    return cfg


def pair_is_compatible(cfg) -> bool:
    return compatible(get_class(cfg.method._target_), get_class(cfg.index._target_))


def brute_force(model, index, retriever, tiny, bm25, queries, payload) -> dict[str, dict[str, float]]:
    """Each query's score for every document, from the corpus's encoding ``payload``, without the index."""
    docids, texts = list(tiny.corpus), list(queries.values())
    representation = index.representation(model)
    with torch.inference_mode():
        if representation == "bm25":  # BM25 as the inner product of IDF and TF-saturation vectors (RoC Eq. 3)
            bags = bm25.document_term_weights(docids, saturation_only=True)
            scores = [[sum(w * bag.get(t, 0.0) for t, w in q.items()) for bag in bags] for q in bm25.query_idf(texts)]
            scores = torch.tensor(scores)
        elif representation == "csf_bags":
            scores = model.score(model.encode_query(texts), model.encode_doc([tiny.corpus[d] for d in docids]))
        elif representation == "term_weights":
            return {qid: dict(zip(docids, row.tolist(), strict=True)) for qid, row in zip(
                queries, term_scores(model, retriever, tiny, bm25, texts, payload), strict=True)}  # fmt: skip
        else:  # vectors, or RoC's pair: q_lex·d_lex + λ·q_sem·d_sem (Eq. 11)
            semantic = model.encode_query(texts) @ payload["vectors"].T
            scores = semantic
            if representation == "lexical_semantic":
                project = model.projection.project
                q_lex = project(bm25.query_idf(texts))
                d_lex = project(bm25.document_term_weights(docids, saturation_only=True)) * (bm25.k1 + 1)  # Eq. 3
                scores = q_lex @ d_lex.T + index.weight * semantic
    return {qid: dict(zip(docids, row.tolist(), strict=True)) for qid, row in zip(queries, scores, strict=True)}


def term_scores(model, retriever, tiny, bm25, texts: list[str], payload) -> torch.Tensor:
    """Exact GIP of the query and document DLRs/DHRs (Eq. 11), or the exact sparse score, for every document."""
    encoder = model.term_encoder(tiny, bm25)
    q_lex, q_cls = encoder.encode_queries(texts)
    if isinstance(retriever, DhrRetriever):
        from retrieval_zoo.index.terms.dhr_vectors import densify_parts
        from retrieval_zoo.index.terms.dlr import gip

        lam = retriever.lam
        qv, qi, _ = densify_parts(q_lex, q_cls, retriever.slicing, lam)
        dv, di, _ = densify_parts(payload["lexical"], payload.get("cls"), retriever.slicing, lam)
        as_tensor = lambda a: torch.from_numpy(a.astype(np.float32))  # noqa: E731
        return gip(as_tensor(qv), as_tensor(qi), as_tensor(dv), as_tensor(di))
    q_lex, d_lex = dense_rows(q_lex).clone(), dense_rows(payload["lexical"]).clone()  # tiny: dense is fine
    q_lex[:, : encoder.discard], d_lex[:, : encoder.discard] = 0, 0
    if isinstance(retriever, SeismicRetriever):  # float16 document weights
        d_lex = d_lex.half().float()
    elif isinstance(retriever, ImpactRetriever):  # the engine holds quantized impacts, mapped back by their scales
        for row, weights in enumerate(q_lex[:, encoder.discard :]):
            impacts, scale = retriever.query_impacts(weights)
            q_lex[row, encoder.discard :] = impacts / scale
        d_lex = (quantize(d_lex, retriever.scale) / retriever.scale).float()
    scores = q_lex @ d_lex.T
    lexical_matches = scores > 0
    if q_cls is not None:
        scores += retriever.weight * (q_cls @ payload["cls"].T)
    if isinstance(retriever, ImpactRetriever):  # the engine returns the documents its impacts match (then fused)
        scores[~lexical_matches] = -torch.inf
    return scores


def assert_same_run(found: dict, expected: dict, atol: float) -> None:
    """The same documents with the same scores, up to the order of ties and round-off."""
    assert found.keys() == expected.keys()
    for qid, docs in expected.items():
        assert np.allclose(sorted(found[qid].values()), sorted(docs.values()), atol=atol), qid
        last = min(docs.values(), default=0.0)
        assert {d for d, s in docs.items() if s > last + atol} <= set(found[qid]), qid


def assert_engine_run(found: dict, expected: dict, every_score: dict) -> None:
    """BMP's run: each document it returns scored exactly (its quantized impacts), 95% of the top K found.

    bmp 0.2.8 never scores the last block its search queues (``retrieval_zoo/index/terms/bmp.py``): on these random,
    dense vectors, whose blocks have near-equal bounds, asking for twice k does not always keep that block out of
    the top k.
    """
    assert found.keys() == expected.keys()
    for qid, docs in found.items():
        assert all(abs(score - every_score[qid][docid]) < 1e-3 for docid, score in docs.items()), qid
    shared = sum(len(found[qid].keys() & docs.keys()) for qid, docs in expected.items())
    assert shared >= 0.95 * sum(len(docs) for docs in expected.values())


def top(scores: dict[str, dict[str, float]], k: int) -> dict[str, dict[str, float]]:
    found = {q: {d: s for d, s in docs.items() if s > -np.inf} for q, docs in scores.items()}  # -inf: not a candidate
    return {q: dict(sorted(docs.items(), key=lambda x: -x[1])[:k]) for q, docs in found.items()}


def sharpened(model) -> None:
    """A random MLM head's logits × 32 for DeLADE, whose softmax over them is otherwise near uniform.

    Unsharpened, nearly every one of a query's 29,500 terms is within half of its largest weight: its Lucene impact
    query has that many clauses (about 5 s for the 8 queries), and BMP indexes 29,500 impacts a document. × 32 leaves
    about 250 terms a document at 8-bit impacts, as many as a trained CSurF's bags (``small_bags``); every weight
    stays non-zero, so the vectors stay dense for densification, faiss and Seismic's limit.
    """
    if isinstance(model, DeLADE):
        model.encoder.model.get_output_embeddings().register_forward_hook(lambda _module, _inputs, out: out * 32)


def too_dense_for(index, corpus: dict) -> bool:
    """Whether ``index`` declares a limit on a document's terms (Seismic's) that the encoded corpus passes."""
    limit = getattr(index, "settings", {}).get("max_doc_terms")
    if limit is None:
        return False
    return int((dense_rows(corpus["lexical"]) != 0).sum(dim=1).max()) > limit


@pytest.fixture(scope="module")
def pool(tiny, tiny_bm25):
    """The validation pool of the matrix's queries: BM25's top 50 (the fusing indexes' depth here) and the judged."""
    return candidate_pool(tiny, tiny_bm25, "dev", list(tiny.judged_queries("dev"))[:8], depth=50)


@pytest.mark.parametrize("index_name", INDEXES)
@pytest.mark.parametrize("method_name", METHODS)
def test_method_index(method_name: str, index_name: str, tiny, tiny_bm25, pool, tmp_path) -> None:
    cfg = composed(method_name, index_name)
    if not pair_is_compatible(cfg):
        with pytest.raises(ValueError, match=f"index={index_name} cannot search method={method_name}.*indexes for"):
            check_method_and_index(cfg)
        return
    check_method_and_index(cfg)
    torch.manual_seed(0)
    model, index = instantiate(cfg.method).eval(), instantiate(cfg.index)
    small_bags(model, splade=True)  # CSurF's bags and the DLR fusions' SPLADE vectors as sparse as trained
    sharpened(model)
    queries = dict(list(tiny.judged_queries("dev").items())[:8])
    docids, encode = list(tiny.corpus), index.doc_encoder(model, tiny, tiny_bm25)
    with torch.inference_mode():
        lucene = index.representation(model) == "bm25"  # BM25 is the run's own Lucene index: nothing to encode
        corpus = {} if lucene else encode(docids)  # one shard, read by the index as built, and by brute force
        as_encoded = lambda ids: {name: value.clone() for name, value in corpus.items()}  # noqa: E731
        one_shard = CorpusShards.on_demand(docids, as_encoded, len(docids))
        if too_dense_for(index, corpus):  # the index's own declared limit, read from the vectors
            with pytest.raises(ValueError, match="max_doc_terms"):
                index.build(model, tiny, tiny_bm25, one_shard)
            return
        retriever = index.build(model, tiny, tiny_bm25, one_shard)
        run = retriever.search(queries, K)
        if index.saves:  # index_dir: what the index saves loads to the same runs, each part's too
            index.save(retriever, tmp_path)
            loaded = index.load(model, tiny, tiny_bm25, tmp_path)
            assert loaded.search(queries, K) == run
            for part in retriever.fused_parts:
                assert loaded.side(part, queries, K) == retriever.side(part, queries, K)
        # the Python retriever's one search for the fused run and each part's (one pass where the index has one)
        fused, sides = retriever.search_with_parts(queries, K, 2 * K)
        assert fused == run and sides.keys() == set(retriever.fused_parts)
        for part, side in sides.items():  # GIP's parts sum their own dimensions alone: the same to float32 rounding
            assert_same_run(side, retriever.side(part, queries, 2 * K), 1e-5)
    engine = isinstance(retriever, ImpactRetriever)  # it returns only documents its quantized impacts match
    assert all(0 < len(docs) <= K or engine and not docs for docs in run.values()) and any(run.values())
    expected = brute_force(model, index, retriever, tiny, tiny_bm25, queries, corpus)
    parts = retriever.fused_parts
    if parts and hasattr(retriever, "bm25"):  # a union: BM25's and the vectors' candidates, each scored by both
        lexical, semantic = retriever.runs(queries)
        assert_same_run(semantic, top(expected, retriever.depth), 1e-3)  # the vectors' side is brute force
        assert lexical == tiny_bm25.search(queries, retriever.depth)  # the lexical side is the run's BM25
        weights = (retriever.weight, 1.0) if retriever.weighted == "lexical" else (1.0, retriever.weight)
        union = [(qid, docid) for qid in queries for docid in sorted(lexical[qid].keys() | semantic[qid].keys())]
        bm25_everywhere = dict(zip(union, tiny_bm25.pair_scores(queries, union), strict=True))  # pyserini's own
        fused: dict[str, dict[str, float]] = {qid: {} for qid in queries}
        for qid, docid in union:  # Eq. 8 / the naive sum with both scores exact, brute force for the dense one
            fused[qid][docid] = weights[0] * float(bm25_everywhere[qid, docid]) + weights[1] * expected[qid][docid]
        assert_same_run(run, top(fused, K), 1e-3)
    elif isinstance(retriever, BmpRetriever):
        assert_engine_run(run, top(expected, K), expected)
    else:
        atol = 2e-2 if isinstance(retriever, DhrRetriever) or method_name == "bm25" else 1e-3  # float16; Lucene
        if isinstance(retriever, SeismicRetriever):  # float16 queries too: relative to the scores
            atol = 2e-3 * max(abs(s) for docs in expected.values() for s in docs.values() if s > -np.inf)
        assert_same_run(run, top(expected, K), atol)
    with torch.inference_mode():
        eleven = CorpusShards.on_demand(docids, encode, 37)
        assert len(eleven) == 11
        resharded = index.build(model, tiny, tiny_bm25, eleven).search(queries, K)
        if isinstance(retriever, BmpRetriever):
            assert_engine_run(resharded, top(expected, K), expected)
        else:
            assert_same_run(resharded, run, 2e-2)
    if not model.trainable:  # validation, the pool's use, is for what training changes
        return
    with torch.inference_mode():
        pooled_retriever = index.build(model, pool, tiny_bm25)
        pooled = pooled_retriever.search(queries, K)
        if engine:  # integer impacts at the pool's own scale (its largest weight): brute force at that scale
            pool_payload = encode(list(pool.corpus))
            expected = brute_force(model, index, pooled_retriever, pool, tiny_bm25, queries, pool_payload)
    in_pool = {qid: {d: s for d, s in docs.items() if d in pool.corpus} for qid, docs in expected.items()}
    assert all(set(docs) <= set(pool.corpus) for docs in pooled.values())
    if parts and hasattr(retriever, "bm25"):  # each document the union scores: BM25's exact score + brute force's
        scored = [(qid, docid) for qid, docs in pooled.items() for docid in docs]
        bm25_scores = dict(zip(scored, tiny_bm25.pair_scores(queries, scored), strict=True)) if scored else {}
        for (qid, docid), bm25_score in bm25_scores.items():
            fused = weights[0] * float(bm25_score) + weights[1] * expected[qid][docid]
            assert pooled[qid][docid] == pytest.approx(fused, abs=1e-3), (qid, docid)
    elif isinstance(retriever, BmpRetriever):
        assert_engine_run(pooled, top(in_pool, K), expected)
    else:
        assert_same_run(pooled, top(in_pool, K), 2e-2 if isinstance(retriever, DhrRetriever) else 1e-3)


def index_protocol(index_class: type):
    """The Protocol an index class is generic in (``Faiss(EncodingIndex[OffersVectors])`` → OffersVectors)."""
    from typing import get_args

    for klass in index_class.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            args = get_args(base)
            if args and not isinstance(args[0], TypeVar):
                return args[0]
    raise AssertionError(f"{index_class.__name__} is not generic in what it reads of a method")


@pytest.mark.parametrize("index", INDEXES)
def test_each_index_reads_methods_through_the_protocol_of_what_it_accepts(index: str) -> None:
    """An index's declared names and its type parameter say the same thing (issue 42 point 1)."""
    from retrieval_zoo.index.representations import PROTOCOLS

    index_class = get_class(composed("dense", index).index._target_)
    assert index_class.accepts, index
    assert {PROTOCOLS[name] for name in index_class.accepts} == {index_protocol(index_class)}, index


@pytest.mark.parametrize("method", METHODS)
def test_each_method_is_an_instance_of_the_protocol_of_each_representation_it_declares(method: str) -> None:
    """What a method declares by name it has as members (the runtime half of methods/offers.py's static check)."""
    from retrieval_zoo.index.representations import PROTOCOLS
    from retrieval_zoo.methods import offers

    model = instantiate(composed(method, "faiss").method)
    assert model.representations, method
    for name in model.representations:
        assert isinstance(model, PROTOCOLS[name]), (method, name)
    statically = Path(offers.__file__).read_text()
    for name in model.representations:  # each declared pair is stated for mypy
        assert f"type[{PROTOCOLS[name].__name__}] = {type(model).__name__}" in statically, (method, name)


def test_the_readmes_matrix_is_the_configs_and_contracts() -> None:
    """The README's method × index table: ✓ where the index accepts what the method produces, the method's default."""
    readme = (CONF.parents[1] / "README.md").read_text(encoding="utf-8")
    lines = readme.split("<!-- matrix -->\n", 1)[1].split("\n\n", 1)[0].splitlines()
    header = [cell.strip().strip("`") for cell in lines[0].strip("|").split("|")][1:]
    shown = {}
    for line in lines[2:]:
        method, *cells = (cell.strip() for cell in line.strip("|").split("|"))
        shown[method.strip("`")] = dict(zip(header, cells, strict=True))
    assert sorted(shown) == METHODS and header == INDEXES
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        defaults = {m: compose("train", [f"method={m}"], return_hydra_config=True).hydra.runtime.choices.index
                    for m in METHODS}  # fmt: skip
    for method in METHODS:
        for index in INDEXES:
            expected = "" if not pair_is_compatible(composed(method, index)) else "✓"
            expected = "**default**" if index == defaults[method] else expected
            assert shown[method][index] == expected, (method, index)
