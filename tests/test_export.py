"""``python -m retrieval_zoo.export``: a trained run as a self-contained folder, evaluated from it alone."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import retrieval_zoo
from retrieval_zoo.data.formats import read_run
from retrieval_zoo.export.exported import FORMAT, MANIFEST, manifest
from retrieval_zoo.export.folder import check_out, upload
from retrieval_zoo.export.model_card import citation, ecosystem_usage, model_card
from tests.conftest import float32_rounding

REPO = Path(__file__).resolve().parents[1]


def export(*overrides: str, ok: bool = True) -> str:
    done = subprocess.run([sys.executable, "-m", "retrieval_zoo.export", *overrides], cwd=REPO, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert (done.returncode == 0) == ok, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def test_out_must_be_empty_or_an_export_of_the_same_run(tmp_path: Path) -> None:
    run, other = tmp_path / "run", tmp_path / "other"
    check_out(tmp_path / "missing", str(run))
    (tmp_path / "empty").mkdir()
    check_out(tmp_path / "empty", str(run))
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="holds no export"):
        check_out(tmp_path / "busy", str(run))
    (tmp_path / "export").mkdir()
    (tmp_path / "export" / MANIFEST).write_text(json.dumps({"format": FORMAT, "source": str(run)}))
    check_out(tmp_path / "export", str(run))
    with pytest.raises(FileExistsError, match=rf"{MANIFEST}: .* holds the export of .*run, not of .*other"):
        check_out(tmp_path / "export", str(other))


def test_a_folder_of_another_format_or_none_is_refused_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=rf"{MANIFEST} not found"):
        manifest(tmp_path)
    (tmp_path / MANIFEST).write_text(json.dumps({"format": FORMAT + 1}))
    with pytest.raises(ValueError, match=rf"{MANIFEST}: format {FORMAT + 1}, this retrieval_zoo reads format"):
        manifest(tmp_path)


def test_push_to_hub_goes_as_far_as_the_upload_call(tmp_path: Path) -> None:
    calls = []

    class Hub:  # stands in for huggingface_hub.HfApi: the tests never upload
        def create_repo(self, repo_id: str, exist_ok: bool, private: bool) -> None:
            calls.append(("create_repo", repo_id, exist_ok, private))

        def upload_folder(self, folder_path: str, repo_id: str) -> str:
            calls.append(("upload_folder", folder_path, repo_id))
            return f"https://huggingface.co/{repo_id}"

    assert upload(tmp_path, "me/clear-tiny", Hub()) == "https://huggingface.co/me/clear-tiny"
    assert calls == [("create_repo", "me/clear-tiny", True, True), ("upload_folder", str(tmp_path), "me/clear-tiny")]


def test_the_model_card_has_front_matter_metrics_and_the_papers_citation() -> None:
    from omegaconf import OmegaConf

    run = OmegaConf.create({"method_name": "csurf", "dataset_name": "tiny", "backbone_name": "splade_tiny",
                            "index_name": "csf", "dataset": {"name": "tiny"}})  # fmt: skip
    results = {"metrics": {"BM25": {"MRR@10": 0.5, "R@1000": 0.9}, "csurf": {"MRR@10": 0.625, "R@1000": 0.95}},
               "split": "dev", "queries": 30, "k": 1000, "tuning": {}}  # fmt: skip
    card = model_card(run, results, {"encoder": "encoder"})
    assert card.startswith("---\nlibrary_name: retrieval_zoo\nlicense: apache-2.0\n")
    assert "| csurf | 0.6250 | 0.9500 |" in card and "| system | MRR@10 | R@1000 |" in card
    assert "CSurF: Sparse Lexical Retrieval through Contextualized Surface Forms. ICTIR 2023." in card
    assert "evaluate.py model_dir=" in card
    assert "Lin and Jimmy Lin" in citation("dlr_splade") and "Residual Embeddings" in citation("clear")
    assert "sentence_transformers" not in card  # no usage snippet of its own: the folder loads with retrieval_zoo
    card = model_card(run, results, {"encoder": "encoder"}, ecosystem_usage("SparseEncoder", csurf=True))
    assert 'SparseEncoder("<this folder>", trust_remote_code=True)' in card and "modeling_csurf.py" in card
    assert card.index("SparseEncoder") < card.index("## Citation")
    assert 'SparseEncoder("<this folder>")' in ecosystem_usage("SparseEncoder", csurf=False)
    assert 'SentenceTransformer("<this folder>")' in ecosystem_usage("SentenceTransformer", csurf=False)
    assert ecosystem_usage(None, csurf=False) == ""


@pytest.mark.slow
@pytest.mark.parametrize("method", ["clear", "roc"])
def test_an_exported_run_evaluates_from_its_folder_to_the_runs_own_trec_run(method, tiny_dir, tmp_path) -> None:
    from omegaconf import OmegaConf

    from retrieval_zoo.export.exported import load
    from tests.test_end_to_end import run_app, tiny_dataset

    run, out = tmp_path / "run", tmp_path / "export"
    common = ["backbone=tiny_random", "trainer=cpu", "trainer.max_steps=3", "data.batch_size=8", "data.val_queries=10",
              "eval.k=100", "logger=csv"]  # fmt: skip
    run_app("train.py", f"method={method}", *tiny_dataset(tiny_dir), *common, f"hydra.run.dir={run}")
    export(f"out={out}", f"run_dir={tmp_path / 'missing'}", ok=False)  # no checkpoint: refused, nothing written
    assert not out.exists()
    export(f"run_dir={run}", f"out={out}")
    found = json.loads((out / MANIFEST).read_text())
    assert found["method_name"] == method and (out / "encoder" / "model.safetensors").exists()
    assert found["method"]["_target_"].endswith(".CLEAR" if method == "clear" else ".RoC") and found["index_name"]
    assert (out / "encoder" / "tokenizer.json").exists() and (out / "README.md").exists()
    assert not any(out.glob("*.ckpt")) and not (out / "checkpoints").exists()
    assert found["sentence_transformers"] == "SentenceTransformer"  # CLEAR's embedding, RoC's [CLS]: pooled states
    same_vectors_in_sentence_transformers(out, tiny_dir)
    other = OmegaConf.load(out / "run_config.yaml")
    other.method_name = "dense"
    with pytest.raises(ValueError, match=rf"{MANIFEST} holds method={method}, not method=dense"):
        load(out, other)
    if method != "clear":  # the evaluation from the folder, once: CLEAR's fused index tunes and fuses BM25 too
        return
    run_app("evaluate.py", f"model_dir={out}", f"hydra.run.dir={tmp_path / 'from_folder'}")
    assert (tmp_path / "from_folder" / "run.dev.trec").read_text() == (run / "run.dev.trec").read_text()
    # search.py from the folder: the fused run and each part's, as the training run wrote them (its tuned weight)
    run_app("search.py", f"model_dir={out}", "queries=dev", f"hydra.run.dir={tmp_path / 'searched'}")
    parts = sorted(p.name for p in run.glob("run.dev.*.trec"))
    assert len(parts) == 3  # BM25's, and the union's two parts
    for name in ("run.dev.trec", *parts):
        assert (tmp_path / "searched" / name).read_bytes() == (run / name).read_bytes(), name
    # the Python retriever over the same folder: search.py's run; one query's hits with each part's score and text
    retriever = retrieval_zoo.Retriever.load(out)
    dev = dict(line.split("\t", 1) for line in (tiny_dir / "queries.dev.tsv").read_text().splitlines())
    assert retriever.search_batch(dev, k=100) == read_run(tmp_path / "searched" / "run.dev.trec")
    qid, text = next(iter(dev.items()))
    hits = retriever.search(text, k=10)
    alone = retriever.search_batch({qid: text}, k=10)[qid]
    assert [(h.docid, h.score) for h in hits] == sorted(alone.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    assert all(set(h.parts) == {"lexical", "semantic"} and h.text == retriever.collection.corpus[h.docid] for h in hits)
    assert any(h.parts["lexical"] is not None for h in hits)
    with pytest.raises(ValueError, match="empty query"):
        retriever.search("  ")
    # a saved index (index_dir): written by the first load, read by the second, the same runs
    saved = tmp_path / "saved-index"
    retrieval_zoo.Retriever.load(out, index=str(saved))
    assert (saved / "index.json").exists() and (saved / "checksum.sha256").exists()
    again = retrieval_zoo.Retriever.load(out, index=str(saved))
    assert again.search_batch(dev, k=100) == read_run(tmp_path / "searched" / "run.dev.trec")
    export(f"run_dir={run}", f"out={out}")  # the same run again: replaced
    other_run = tmp_path / "other"
    (other_run / "checkpoints").mkdir(parents=True)
    assert "holds the export of" in export(f"run_dir={other_run}", f"out={out}", ok=False)


def same_vectors_in_sentence_transformers(out: Path, tiny_dir: Path) -> None:
    """The folder as a ``SentenceTransformer`` gives the method's own query and document vectors, to 1e-5 (a
    document's text as a query too: sentence-transformers cuts it at the method's query length)."""
    import torch
    from sentence_transformers import SentenceTransformer

    import retrieval_zoo

    model = retrieval_zoo.load(out)  # the package's load, as the model card shows
    queries = [line.split("\t", 1)[1] for line in (tiny_dir / "queries.dev.tsv").read_text().splitlines()]
    docs = [line.split("\t", 1)[1] for line in (tiny_dir / "collection.tsv").read_text().splitlines()[:64]]
    st = SentenceTransformer(str(out), device="cpu")
    for side, texts in (("query", queries + docs[:4]), ("doc", docs)):
        with torch.inference_mode():
            ours = (model.encode_query if side == "query" else model.encode_doc)(texts)
        encode = st.encode_query if side == "query" else st.encode_document
        theirs = encode(texts, convert_to_tensor=True, batch_size=16)
        atol = float32_rounding(32 * 2) * float(ours.abs().max())  # batches of 16 against ours: other sum orders
        assert torch.allclose(theirs, ours, rtol=0, atol=atol), (side, float((theirs - ours).abs().max()))


@pytest.mark.slow
def test_splade_tinys_vectors_export_as_a_sparse_encoder(tiny_dir, tmp_path) -> None:
    import torch
    from sentence_transformers import SparseEncoder

    from retrieval_zoo.export.exported import load
    from retrieval_zoo.lexical.splade import splade_vectors
    from tests.test_end_to_end import run_app, tiny_dataset

    out = tmp_path / "splade"
    export("method=dlr_splade", *tiny_dataset(tiny_dir), f"out={out}")
    assert json.loads((out / MANIFEST).read_text())["sentence_transformers"] == "SparseEncoder"
    export("method=clear", f"out={tmp_path / 'untrained'}", ok=False)  # random weights: a run_dir is asked for
    model, st = load(out), SparseEncoder(str(out), device="cpu")
    queries = [line.split("\t", 1)[1] for line in (tiny_dir / "queries.dev.tsv").read_text().splitlines()]
    docs = [line.split("\t", 1)[1] for line in (tiny_dir / "collection.tsv").read_text().splitlines()[:32]]
    for side, texts in (("query", queries), ("doc", docs)):
        with torch.inference_mode():
            ours = splade_vectors(model.encoder.model, *model.encoder.tokenize(texts, side))
        encode = st.encode_query if side == "query" else st.encode_document
        theirs = encode(texts, convert_to_tensor=True, batch_size=16).to_dense()
        atol = float32_rounding(32 * 2) * float(ours.abs().max())  # batches of 16 against ours: other sum orders
        assert torch.allclose(theirs, ours, rtol=0, atol=atol), (side, float((theirs - ours).abs().max()))
    run_app("evaluate.py", f"model_dir={out}", f"hydra.run.dir={tmp_path / 'from_folder'}")
    run_app("evaluate.py", "method=dlr_splade", *tiny_dataset(tiny_dir), f"hydra.run.dir={tmp_path / 'method'}")
    assert (tmp_path / "from_folder" / "run.dev.trec").read_text() == (tmp_path / "method" / "run.dev.trec").read_text()
