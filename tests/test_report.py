"""``python -m retrieval_zoo.report``: one self-contained page, hostile corpus text shown as text, in a real browser."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from retrieval_zoo.data.formats import write_id_text_tsv, write_qrels
from retrieval_zoo.report.__main__ import main
from tests.test_configs import composed

SCRIPT = "<script>document.title='pwned'</script>"
IMAGE = "<img src=x onerror=\"document.body.setAttribute('data-pwned','1')\">"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def hostile_run(tmp_path: Path) -> Path:
    """A CLEAR-like evaluated run (fused parts, moved queries, complementarity) over documents that carry markup."""
    data, run = tmp_path / "data", tmp_path / "run"
    data.mkdir()
    run.mkdir()
    docs = {"d1": f"mount a usb drive {SCRIPT} with udisks", "d2": f"{IMAGE} usb tools", "d3": "python imaging",
            "d4": "pillow: python imaging library", "d5": "unrelated text"}  # fmt: skip
    write_id_text_tsv(data / "collection.tsv", docs)
    for split, queries, qrels in (("dev", {"q1": "mount usb <b>drive</b>", "q2": "python imaging library"},
                                   {"q1": {"d1": 1}, "q2": {"d4": 1}}),
                                  ("train", {"t1": "usb"}, {"t1": {"d2": 1}})):  # fmt: skip
        write_id_text_tsv(data / f"queries.{split}.tsv", queries)
        write_qrels(data / f"qrels.{split}.tsv", qrels)
    cfg = composed(
        "dataset=msmarco_passage",
        f"dataset.root={data}",
        "dataset.name=hostile",
        "dataset.queries.dev=queries.dev.tsv",
        "dataset.qrels.dev=qrels.dev.tsv",
    )
    OmegaConf.save(OmegaConf.create({"dataset": OmegaConf.to_container(cfg.dataset, resolve=True)}),
                   run / "run_config.yaml")  # fmt: skip
    runs = {"": {"q1": ["d2", "d1", "d5"], "q2": ["d4", "d3"]}, ".bm25": {"q1": ["d1", "d2"], "q2": ["d3", "d4"]},
            ".lexical": {"q1": ["d1"], "q2": ["d3", "d4"]},
            ".semantic": {"q1": ["d2", "d5"], "q2": ["d4"]}}  # fmt: skip
    for suffix, ranking in runs.items():
        lines = [f"{q} Q0 {d} {r} {10 - r}.000000 x" for q, ds in ranking.items() for r, d in enumerate(ds, 1)]
        (run / f"run.dev{suffix}.trec").write_text("\n".join(lines) + "\n")
    moved = [{"direction": "up", "qid": "q2", "query": "python imaging library", "baseline_rank": 2, "system_rank": 1,
              "shift": 1}]  # fmt: skip
    results = {"system": "clear", "collection": "hostile", "split": "dev", "moved_queries": moved,
               "complementarity": {"k": 10, "RoC": 0.5, "U": 2},
               "complementarity_figure": str(run / "roc.dev.png")}  # fmt: skip
    (run / "results.json").write_text(json.dumps(results))
    return run


def test_the_page_shows_markup_in_documents_and_queries_as_text(tmp_path) -> None:
    page = main([str(hostile_run(tmp_path)), "--out", str(tmp_path / "report.html"), "--resamples", "100"])
    html = page.read_text(encoding="utf-8")
    assert SCRIPT not in html and "<img src=x" not in html and "<b>drive</b>" not in html
    assert (
        "&lt;script&gt;document.title=&#x27;pwned&#x27;&lt;/script&gt;" in html and "&lt;b&gt;drive&lt;/b&gt;" in html
    )
    for system in ("clear", "BM25", "clear (lexical)", "clear (semantic)"):
        assert f"<th>{system}</th>" in html
    assert "queries moved most against BM25" in html and "complementarity of its parts" in html
    assert "http://" not in html and "https://" not in html  # nothing fetched
    other = tmp_path / "run2"  # a second run of the same method: its rows and columns take its folder's name
    shutil.copytree(tmp_path / "run", other)
    both = main([str(tmp_path / "run"), str(other), "--out", str(tmp_path / "both.html"), "--resamples", "100"])
    html = both.read_text(encoding="utf-8")
    assert "<th>clear (run2)</th>" in html and "<h4>clear (run2)</h4>" in html and html.count("<h4>BM25</h4>") == 2
    with pytest.raises(FileNotFoundError, match=r"nowhere/results.json: not found"):
        main([str(tmp_path / "nowhere"), "--out", str(tmp_path / "other.html")])


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium: sudo apt-get install -y chromium (.ci/run installs it)")
def test_in_chromium_nothing_from_the_corpus_runs_and_the_filter_hides_other_queries(tmp_path) -> None:
    page = main([str(hostile_run(tmp_path)), "--out", str(tmp_path / "report.html"), "--resamples", "100"])

    def dom(fragment: str = "") -> str:
        address = f"{page.resolve().as_uri()}{fragment}"
        command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", address]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    loaded = dom()
    assert "<title>retrieval_zoo report</title>" in loaded and "pwned'" not in loaded.split("<body")[0]
    assert "data-pwned" not in loaded.split("<body")[1].split(">")[0]  # the <img onerror> never ran
    assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;" in loaded  # shown as text
    assert loaded.count('<section class="query"') == 2 and " hidden=" not in loaded
    filtered = dom("#filter=python")
    sections = filtered.split("<section")[1:]
    assert [(' hidden=""' in s.split(">")[0]) for s in sections] == [True, False]  # q1 hidden, q2 shown
    assert '<span id="shown">1</span>' in filtered
