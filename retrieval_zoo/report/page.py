"""The report as one self-contained HTML page: no network, no server, every text from the data escaped.

Query and document texts come from the corpus, which is untrusted input: each one goes through :func:`text` (HTML
escaping, quotes included), so a document holding ``<script>`` or ``<img onerror=...>`` shows as text. The page's own
script only filters the query sections by the query text typed in its box (or given as ``#filter=...`` in the
address), reading ``data-text`` attributes.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

from retrieval_zoo.data.formats import ranked
from retrieval_zoo.evaluation.complementarity import first_relevant_rank
from retrieval_zoo.report.contents import MEASURES, Contents, RunDir

ALPHA = 0.05
SNIPPET = 240  # characters of a document shown under its id
STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}th{background:#f3f3f3}
.grid{display:flex;gap:.8em;overflow-x:auto}.col{min-width:260px;max-width:340px;flex:1}
.doc{border-left:4px solid #ddd;padding:.2em .4em;margin:.3em 0}.rel{border-left-color:#2a8a2a;background:#f2fbf2}
.snip{color:#555;font-size:12px}.meta{color:#777;font-size:12px}section.query{border-top:2px solid #eee;padding:.5em 0}
"""
SCRIPT = """
const box = document.getElementById('filter'), shown = document.getElementById('shown');
function filter() {
  const needle = box.value.toLowerCase(); let count = 0;
  for (const section of document.querySelectorAll('section.query')) {
    section.hidden = needle !== '' && !section.dataset.text.includes(needle);
    if (!section.hidden) count += 1;
  }
  shown.textContent = String(count);
}
box.addEventListener('input', filter);
const given = new URLSearchParams(location.hash.slice(1)).get('filter');  // report.html#filter=usb: a shared view
if (given !== null) { box.value = given; filter(); }
"""


def text(value: object) -> str:
    """``value`` as HTML text, escaped (quotes too, so it is safe in an attribute)."""
    return html.escape(str(value), quote=True)


def number(value: object) -> str:
    """A float to 4 significant digits, anything else as escaped text."""
    return f"{value:.4g}" if isinstance(value, float) else text(value)


def page(contents: Contents, max_queries: int) -> str:
    """The whole report."""
    qids = list(contents.queries)[:max_queries]
    body = [
        f"<h1>retrieval_zoo report: {text(contents.collection.name)} / {text(contents.split)}</h1>",
        "<p class='meta'>" + ", ".join(text(d.path) for d in contents.dirs) + "</p>",
        metrics_table(contents),
        *(fusion_section(run_dir) for run_dir in contents.dirs),
        *(moved_section(run_dir) for run_dir in contents.dirs),
        f"<h2>Queries</h2><p>Filter by query text: <input id='filter' type='search' size='40'> "
        f"<span id='shown'>{len(qids)}</span> of {len(qids)} shown ({len(contents.queries):,} judged queries; "
        f"the first {len(qids):,} by id; <code>--queries N</code> shows more)</p>",
        *(query_section(contents, qid) for qid in qids),
    ]
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>retrieval_zoo report</title>"
        f"<style>{STYLE}</style></head><body>{''.join(body)}<script>{SCRIPT}</script></body></html>"
    )


def metrics_table(contents: Contents) -> str:
    """Each system's measures; † where both paired tests put it apart from the first system at p < 0.05."""
    tested = {(c.system, c.measure): c for c in contents.comparisons}
    first = next(iter(contents.metrics))
    rows = []
    for system, values in contents.metrics.items():
        cells = []
        for measure in MEASURES:
            found = tested.get((system, measure))
            mark = " †" if found and found.t_p < ALPHA and found.permutation_p < ALPHA else ""
            delta = (
                f" <span class='meta'>({values[measure] - contents.metrics[first][measure]:+.4f})</span>"
                if found
                else ""
            )
            cells.append(f"<td>{values[measure]:.4f}{mark}{delta}</td>")
        rows.append(f"<tr><th>{text(system)}</th>{''.join(cells)}</tr>")
    head = "".join(f"<th>{m}</th>" for m in MEASURES)
    note = f"Δ against {text(first)}; † p &lt; {ALPHA} in the paired t-test and the permutation test (two-sided)."
    return f"<h2>Metrics</h2><table><tr><th>system</th>{head}</tr>{''.join(rows)}</table><p class='meta'>{note}</p>"


def fusion_section(run_dir: RunDir) -> str:
    """A fusion's complementarity (RoC Eq. 1) and its Venn figure, embedded; nothing for one part."""
    stats = run_dir.results.get("complementarity") or {}
    if not stats:
        return ""
    rows = "".join(f"<tr><th>{text(k)}</th><td>{number(v)}</td></tr>" for k, v in stats.items())
    figure = Path(run_dir.results.get("complementarity_figure") or run_dir.path / "missing")
    figure = figure if figure.exists() else run_dir.path / figure.name
    image = ""
    if figure.exists():
        data = base64.b64encode(figure.read_bytes()).decode("ascii")
        image = f"<img alt='complementarity of the parts' width='420' src='data:image/png;base64,{data}'>"
    return f"<h2>{text(run_dir.system)}: complementarity of its parts</h2><table>{rows}</table>{image}"


def moved_section(run_dir: RunDir) -> str:
    """The queries the method moved most against BM25 (CLEAR Tables 3–4)."""
    moved = run_dir.results.get("moved_queries") or []
    if not moved:
        return ""
    head = "".join(f"<th>{text(key)}</th>" for key in moved[0])
    rows = "".join("<tr>" + "".join(f"<td>{number(v)}</td>" for v in row.values()) + "</tr>" for row in moved)
    return f"<h2>{text(run_dir.system)}: queries moved most against BM25</h2><table><tr>{head}</tr>{rows}</table>"


def query_section(contents: Contents, qid: str) -> str:
    """One query: each system's top 10 side by side, judged documents marked, where else each document ranks."""
    judged = contents.qrels.get(qid, {})
    relevant = {d for d, grade in judged.items() if grade > 0}
    query = contents.queries[qid]
    systems, seen = [], set()
    for run_dir in contents.dirs:  # every directory's systems; BM25 once, as in the metrics table
        for name, run in run_dir.runs.items():
            if name not in seen:
                systems.append((run_dir, name, run))
                seen.add(name)
    firsts = "".join(f"<tr><th>{text(name)}</th><td>{first_relevant_rank(run.get(qid, {}), relevant) or '—'}</td></tr>"
                     for _, name, run in systems)  # fmt: skip
    rankings = {name: ranked(run.get(qid, {})) for _, name, run in systems}
    positions = {name: {docid: (rank, score) for rank, (docid, score) in enumerate(found, start=1)}
                 for name, found in rankings.items()}  # fmt: skip
    columns = []
    for run_dir, name, _ in systems:
        docs = "".join(document(contents, run_dir, qid, name, rank, docid, score, judged, positions)
                       for rank, (docid, score) in enumerate(rankings[name][:10], start=1))  # fmt: skip
        columns.append(f"<div class='col'><h4>{text(name)}</h4>{docs}</div>")
    return (f"<section class='query' data-text='{text(query.lower())}'><h3>{text(qid)}: {text(query)}</h3>"
            f"<table><tr><th>first relevant at</th><td>rank</td></tr>{firsts}</table>"
            f"<div class='grid'>{''.join(columns)}</div></section>")  # fmt: skip


def document(contents: Contents, run_dir: RunDir, qid: str, system: str, rank: int, docid: str, score: float,
             judged: dict[str, int], positions: dict[str, dict[str, tuple[int, float]]]) -> str:  # fmt: skip
    """One ranked document: rank, id, score, its judgement, where the other systems rank it, its matches, a snippet."""
    grade = judged.get(docid)
    label = "unjudged" if grade is None else f"judged {grade}"
    elsewhere = " · ".join(
        f"{text(other)} #{found[docid][0]} ({found[docid][1]:.4g})" if docid in found else f"{text(other)} —"
        for other, found in positions.items() if other != system
    )  # fmt: skip
    record = run_dir.explained.get((qid, docid)) if system == run_dir.system else None
    matches = ""
    if record is not None:
        shown = ", ".join(" ".join(f"{text(k)}={text(v)}" for k, v in match.items())
                          for match in record.get("matches", [])[:8])  # fmt: skip
        matches = f"<div class='meta'>matches: {shown}</div>"
    corpus = contents.collection.corpus
    snippet = corpus[docid][:SNIPPET] if docid in corpus else "(not in the corpus)"
    head = f"<b>#{rank}</b> {text(docid)} <span class='meta'>{score:.4f} · {label}</span>"
    return (f"<div class='doc{' rel' if grade else ''}'>{head}<div class='meta'>{elsewhere}</div>{matches}"
            f"<div class='snip'>{text(snippet)}</div></div>")  # fmt: skip
