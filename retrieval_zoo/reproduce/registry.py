"""The reproduction registry: one YAML file per results table, each cell's command, committed value and tolerance.

A table file (``reproductions/<table>.yaml``) names the docs page's table it registers (the ``<!-- reproduce:<table>
-->`` marker above it, on any page under ``docs/``), where it was last reproduced, the jobs that make its numbers and
its rows::

    table: default
    title: The default run
    reproduced: {commit: 1a2b3c4, machine: "AMD EPYC (family 25, model 1; AVX2), 2 cores"}
    columns: {MRR@10: MRR@10, λ: tuning.value}       # the table's column -> results.json field
    jobs:
      dense: {train: [], seeds: [13]}                   # python train.py <train> seed=S
      naive: {evaluate: [method=roc], of: dense}        # python evaluate.py run_dir=<dense's run> <evaluate>
      kd: {train: ['data.teacher_run={dir:naive}/run.dev.trec']}  # {dir:<job>}: that job's (first seed's) directory
    rows:
      - {name: dense, job: dense, system: dense, quick: true, cells: {MRR@10: "0.5585", λ: "0.33 ± 0.06"}}

A cell is written as the page writes it: ``"0.5585"`` (one seed), ``"0.4483 ± 0.0186"`` (mean ± sample sd over the
job's seeds) or ``"1.2, 1.0, 1.1"`` (one value per seed); a unit (``"24.4 MiB"``) and ``**bold**`` are ignored. A row's
``first_seed`` gives a mean ± sd cell's value at the job's first seed alone, so that ``--quick`` checks it to the
machine tolerance instead of to the seed-to-seed spread.
Fields are a measure of :data:`~retrieval_zoo.evaluation.metrics.MEASURES` (of the row's ``system``) or a dotted path
into ``results.json`` (``tuning.value``, ``complementarity.RoC``, ``efficiency.e_ops``, ``index_MiB``). Measures are
gated by the tolerances of ``reproductions/tolerances.yaml``; the other fields are compared and reported, not gated.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from retrieval_zoo.evaluation.metrics import MEASURES

REGISTRY = Path(__file__).resolve().parents[2] / "reproductions"
DOCS = Path(__file__).resolve().parents[2] / "docs"  # the pages that show the tables
MIB = 2**20


@dataclass(frozen=True)
class Expected:
    """A registered cell: its text in the README, the values it states and how they were aggregated."""

    text: str
    values: tuple[float, ...]  # one value, (mean, sd), or one value per seed
    kind: str  # "value", "mean_sd" or "per_seed"
    decimals: int

    @classmethod
    def parse(cls, text: str, where: str) -> Expected:
        """Read ``"0.5585"``, ``"0.4483 ± 0.0186"``, ``"1.2, 1.0, 1.1"`` or ``"**24.4** MiB"``."""
        clean = re.sub(r"\s*MiB$", "", str(text).replace("*", "").strip())
        parts = [p.strip() for p in (clean.split(", ") if ", " in clean else clean.split("±"))]
        try:
            values = tuple(float(p.replace(",", "")) for p in parts)
        except ValueError:
            raise ValueError(f"{where}: cannot read the cell {text!r} (a number, 'mean ± sd' or 'a, b, c')") from None
        kind = "per_seed" if ", " in clean else "mean_sd" if len(values) == 2 else "value"
        if kind == "value" and len(values) != 1:
            raise ValueError(f"{where}: cannot read the cell {text!r}")
        decimals = len(parts[0].partition(".")[2])
        return cls(str(text), values, kind, decimals)

    @property
    def centre(self) -> float:
        """The value the measured number is compared with: the value, the mean, or the mean of the seeds."""
        return statistics.fmean(self.values) if self.kind == "per_seed" else self.values[0]


@dataclass(frozen=True)
class Job:
    """A ``train.py`` run per seed, or an ``evaluate.py`` run over another job's run (per seed) or of no run."""

    name: str
    script: str  # "train" or "evaluate"
    overrides: tuple[str, ...]
    seeds: tuple[int, ...]
    of: str | None = None  # the train job whose run directories an evaluate job evaluates

    @property
    def needs(self) -> set[str]:
        """The jobs that must run first: ``of`` and every ``{dir:<job>}`` an override names."""
        named = {m for o in self.overrides for m in re.findall(r"\{dir:(\w+)\}", o)}
        return named | ({self.of} if self.of else set())


@dataclass(frozen=True)
class Row:
    """A README row: the job and system whose results give its cells."""

    name: str
    job: str
    system: str
    cells: dict[str, Expected]
    quick: bool = False
    lexical: bool = False  # Lucene alone (BM25): exact on every machine
    first_seed: dict[str, Expected] = field(default_factory=dict)  # a mean ± sd cell's value at the first seed alone
    tolerance: float | None = None  # a row whose training is not deterministic: its measured run-to-run spread


@dataclass(frozen=True)
class Figure:
    """A figure of a table: one column against another, a point a row (:mod:`retrieval_zoo.reproduce.figures`)."""

    name: str
    x: str
    y: str
    title: str
    log_x: bool = False
    x_label: str = ""  # default: the column's name


@dataclass(frozen=True)
class Drawn:
    """A figure a job draws itself into its run directory (``tuning.dev.png``, ``roc.dev.png``): copied, not drawn."""

    name: str
    job: str
    file: str


@dataclass
class Table:
    """One results table's registry file."""

    name: str
    title: str
    path: Path
    reproduced: dict[str, str]
    columns: dict[str, str]
    jobs: dict[str, Job]
    rows: list[Row]
    figures: list[Figure] = field(default_factory=list)
    drawn: list[Drawn] = field(default_factory=list)

    def gated(self, column: str) -> bool:
        """Whether a column's cells decide the exit status: the trec_eval measures do."""
        return self.columns[column] in MEASURES


def _job(name: str, spec: dict, where: str) -> Job:
    unknown = set(spec) - {"train", "evaluate", "seeds", "of"}
    if unknown or ("train" in spec) == ("evaluate" in spec):
        raise ValueError(f"{where}: job {name!r} takes one of train/evaluate, and seeds, of; got {sorted(spec)}")
    script = "train" if "train" in spec else "evaluate"
    seeds = tuple(int(s) for s in spec.get("seeds", [13]))
    return Job(name, script, tuple(str(o) for o in spec[script] or ()), seeds, spec.get("of"))


def load_table(path: Path) -> Table:
    """Read and check one registry file; every problem names the file and the offending entry."""
    where = str(path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ValueError(f"{where}: not valid YAML: {error}") from None
    missing = {"table", "title", "reproduced", "columns", "jobs", "rows"} - set(data or {})  # figures, drawn: optional
    if missing:
        raise ValueError(f"{where}: missing keys {sorted(missing)}")
    jobs = {name: _job(name, spec, where) for name, spec in data["jobs"].items()}
    for job in jobs.values():
        if job.of is not None and (job.of not in jobs or jobs[job.of].script != "train"):
            raise ValueError(f"{where}: job {job.name!r} evaluates {job.of!r}, which is not a train job here")
        if job.needs - set(jobs):
            raise ValueError(f"{where}: job {job.name!r} names unknown jobs {sorted(job.needs - set(jobs))}")
        if job.of is not None:
            jobs[job.name] = Job(job.name, job.script, job.overrides, jobs[job.of].seeds, job.of)
    rows = []
    for i, spec in enumerate(data["rows"]):
        row_where = f"{where}: row {i + 1} ({spec.get('name')!r})"
        if spec.get("job") not in jobs:
            raise ValueError(f"{row_where}: unknown job {spec.get('job')!r}; jobs are {sorted(jobs)}")
        unknown = set(spec["cells"]) - set(data["columns"])
        if unknown:
            raise ValueError(f"{row_where}: cells {sorted(unknown)} are not among the columns {list(data['columns'])}")
        unknown = set(spec.get("first_seed", {})) - set(spec["cells"])
        if unknown:
            raise ValueError(f"{row_where}: first_seed values {sorted(unknown)} have no cell")
        cells, first = ({col: Expected.parse(text, f"{row_where}, {col}") for col, text in spec.get(key, {}).items()}
                        for key in ("cells", "first_seed"))  # fmt: skip
        rows.append(Row(spec["name"], spec["job"], spec["system"], cells, spec.get("quick", False),
                        spec.get("lexical", False), first, spec.get("tolerance")))  # fmt: skip
    figures = []
    for spec in data.get("figures", []):
        figure = Figure(**spec)
        if {figure.x, figure.y} - set(data["columns"]):
            raise ValueError(f"{where}: figure {figure.name!r} plots {figure.x!r} against {figure.y!r}, not both "
                             f"among the columns {list(data['columns'])}")  # fmt: skip
        figures.append(figure)
    drawn = [Drawn(**spec) for spec in data.get("drawn", [])]
    for figure in drawn:
        if figure.job not in jobs:
            raise ValueError(f"{where}: drawn figure {figure.name!r} comes from job {figure.job!r}, not among the jobs "
                             f"{list(jobs)}")  # fmt: skip
    return Table(data["table"], data["title"], path, data["reproduced"], data["columns"], jobs, rows, figures, drawn)


def load_registry(directory: Path = REGISTRY) -> dict[str, Table]:
    """Every table file of the registry, by table name (``tolerances.yaml`` aside)."""
    tables = [load_table(p) for p in sorted(directory.glob("*.yaml")) if p.name != "tolerances.yaml"]
    if not tables:
        raise FileNotFoundError(f"no registry files (*.yaml) in {directory}")
    return {t.name: t for t in tables}


def load_tolerances(directory: Path = REGISTRY) -> dict[str, float]:
    """The measured tolerances: ``lexical`` and ``model`` (|Δ| of a measure across machines), ``seed_sd_factor``."""
    path = directory / "tolerances.yaml"
    data = yaml.safe_load(path.read_text())
    missing = {"lexical", "model", "seed_sd_factor"} - set(data or {})
    if missing:
        raise ValueError(f"{path}: missing keys {sorted(missing)}")
    return {key: float(data[key]) for key in ("lexical", "model", "seed_sd_factor")}


def field_value(results: dict, system: str, field_name: str) -> float | None:
    """A cell's number in one ``results.json``: a measure of ``system``, ``index_MiB`` or a dotted path."""
    if field_name in MEASURES:
        return results["metrics"].get(system, {}).get(field_name)
    if field_name == "index_MiB":
        return results["index_bytes"] / MIB if results.get("index_bytes") else None
    value: object = results
    for key in field_name.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return float(value) if isinstance(value, int | float) else None


def marked_tables(text: str) -> dict[str, tuple[str, list[dict[str, str]]]]:
    """A page's registered tables: name → (the text between marker and table, rows as column → cell text)."""
    tables = {}
    for match in re.finditer(r"<!-- reproduce:(\w+) -->\n(.*?)(\n\|.*?)(?:\n\n|\Z)", text, re.S):
        lines = [[c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]] for line in match.group(3).split("\n")]
        tables[match.group(1)] = (match.group(2), [dict(zip(lines[1], line, strict=True)) for line in lines[3:]])
    return tables


def docs_tables(root: Path = DOCS) -> dict[str, tuple[str, str, list[dict[str, str]]]]:
    """Every registered table of the docs site: name → (its page, relative to ``root``; preamble; rows)."""
    found: dict[str, tuple[str, str, list[dict[str, str]]]] = {}
    for page in sorted(root.rglob("*.md")):
        for name, (preamble, rows) in marked_tables(page.read_text(encoding="utf-8")).items():
            if name in found:
                raise ValueError(f"table {name!r} is marked on two pages: {found[name][0]} and {page}")
            found[name] = (page.relative_to(root).as_posix(), preamble, rows)
    return found
