"""The reproduction registry and command: cells read and compared by hand, a tiny registry end to end."""

import json
import re
from pathlib import Path

import pytest

from retrieval_zoo.reproduce.__main__ import main, planned
from retrieval_zoo.reproduce.cells import compare_table, tolerance
from retrieval_zoo.reproduce.registry import REGISTRY, Expected, docs_tables, load_registry, load_table
from retrieval_zoo.reproduce.runner import Runner
from tests.test_end_to_end import REPO, tiny_dataset

TOLERANCES = "lexical: 0.0\nmodel: 0.002\nseed_sd_factor: 2\n"


def write_registry(directory: Path, body: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tolerances.yaml").write_text(TOLERANCES)
    (directory / "tiny.yaml").write_text(body)
    return directory


TWO_CELLS = """
table: tiny
title: Two cells
reproduced: {commit: abc1234, machine: "a test"}
columns: {MRR@10: MRR@10, R@100: R@100, λ: tuning.value}
jobs:
  dense: {train: [backbone=tiny_random], seeds: [13]}
rows:
  - {name: dense, job: dense, system: dense, quick: true, cells: {MRR@10: "0.5000", R@100: "0.9000", λ: "0.3"}}
"""


def test_cells_are_read_as_the_readme_writes_them() -> None:
    assert Expected.parse("0.5585", "f").values == (0.5585,) and Expected.parse("0.5585", "f").decimals == 4
    mean_sd = Expected.parse("**0.7961 ± 0.0015**", "f")
    assert (mean_sd.kind, mean_sd.values, mean_sd.centre) == ("mean_sd", (0.7961, 0.0015), 0.7961)
    per_seed = Expected.parse("1.2, 1.0, 1.1", "f")
    assert per_seed.kind == "per_seed" and per_seed.centre == pytest.approx(1.1) and per_seed.decimals == 1
    assert Expected.parse("1,169 MiB", "f").values == (1169.0,) and Expected.parse("24.4 MiB", "f").values == (24.4,)
    with pytest.raises(ValueError, match=r"tiny.yaml: row 2, MRR@10: cannot read the cell 'n/a'"):
        Expected.parse("n/a", "tiny.yaml: row 2, MRR@10")


def test_tolerance_is_the_machine_spread_plus_seed_spread_when_fewer_seeds_ran(tmp_path) -> None:
    registry = load_table(write_registry(tmp_path, TWO_CELLS) / "tiny.yaml")
    row = registry.rows[0]
    tol = {"lexical": 0.0, "model": 0.002, "seed_sd_factor": 2.0}
    # 0.002 (machine) + 0.00005 (half the last decimal of "0.5000")
    assert tolerance(Expected.parse("0.5000", "f"), row, 1, 1, tol) == pytest.approx(0.00205)
    # one seed of a 3-seed mean ± sd: 0.002 + 2 * 0.0186 + 0.00005
    assert tolerance(Expected.parse("0.4483 ± 0.0186", "f"), row, 1, 3, tol) == pytest.approx(0.03925)
    # every seed ran: the sd does not widen it
    assert tolerance(Expected.parse("0.4483 ± 0.0186", "f"), row, 3, 3, tol) == pytest.approx(0.00205)


def test_one_cell_inside_and_one_outside_its_tolerance(tmp_path) -> None:
    table = load_table(write_registry(tmp_path, TWO_CELLS) / "tiny.yaml")
    results = {("dense", 13): {"metrics": {"dense": {"MRR@10": 0.5019, "R@100": 0.8970}}, "tuning": {"value": 0.5}}}
    tol = {"lexical": 0.0, "model": 0.002, "seed_sd_factor": 2.0}
    cells = {c.column: c for c in compare_table(table, results, {"dense": [13]}, tol)}
    assert (
        cells["MRR@10"].ok and cells["MRR@10"].delta == pytest.approx(0.0019) and cells["MRR@10"].measured == "0.5019"
    )
    assert not cells["R@100"].ok and cells["R@100"].delta == pytest.approx(-0.003)  # |Δ| 0.003 > 0.00205
    assert cells["λ"].ok and not cells["λ"].gated and cells["λ"].measured == "0.5"  # compared, reported, not gated


def test_quick_checks_a_mean_sd_cell_against_its_first_seed_value_when_the_registry_has_it(tmp_path) -> None:
    body = TWO_CELLS.replace("seeds: [13]}", "seeds: [13, 14, 15]}").replace('"0.5000"', '"0.5000 ± 0.0100"')
    tol = {"lexical": 0.0, "model": 0.002, "seed_sd_factor": 2.0}
    loose = load_table(write_registry(tmp_path / "a", body) / "tiny.yaml")
    tight = load_table(
        write_registry(tmp_path / "b", body.replace("quick: true,", 'quick: true, first_seed: {MRR@10: "0.4950"},'))
        / "tiny.yaml"
    )
    for measured, loose_ok, tight_ok in ((0.4950, True, True), (0.5150, True, False)):
        results = {("dense", 13): {"metrics": {"dense": {"MRR@10": measured, "R@100": 0.9}}, "tuning": {"value": 0.3}}}
        (a,) = [c for c in compare_table(loose, results, {"dense": [13]}, tol) if c.column == "MRR@10"]
        (b,) = [c for c in compare_table(tight, results, {"dense": [13]}, tol) if c.column == "MRR@10"]
        assert (a.ok, a.expected, a.tolerance) == (loose_ok, "0.5000 ± 0.0100", pytest.approx(0.02205))  # 2 sd
        assert (b.ok, b.expected, b.tolerance) == (tight_ok, "0.4950", pytest.approx(0.00205))  # the machine spread


def test_the_command_exits_1_and_writes_the_comparison_when_a_cell_is_outside(tmp_path, capsys) -> None:
    registry, cache, out = write_registry(tmp_path / "registry", TWO_CELLS), tmp_path / "cache", tmp_path / "out"
    table = load_table(registry / "tiny.yaml")
    job_dir = Runner(cache_dir=cache).directory(table.jobs["dense"], 13, None)
    job_dir.mkdir(parents=True)  # a finished job: the command reads it from the cache instead of training
    metrics = {"dense": {"MRR@10": 0.5019, "R@100": 0.8970}}
    (job_dir / "results.json").write_text(json.dumps({"metrics": metrics, "tuning": {"value": 0.3}}))
    argv = ["--registry", str(registry), "--cache-dir", str(cache), "--out", str(out)]
    assert main(argv) == 1
    printed = capsys.readouterr().out
    assert "cached" in printed and "OUTSIDE: tiny / dense / R@100: expected 0.9000, measured 0.8970" in printed
    report = json.loads((out / "reproduce.json").read_text())
    assert [(c["column"], c["status"]) for c in report["cells"]] == [
        ("MRR@10", "ok"),
        ("R@100", "OUTSIDE"),
        ("λ", "info"),
    ]
    assert "| dense | R@100 | 0.9000 | 0.8970 | -0.0030 | 0.0021 | 13 | OUTSIDE |" in (out / "reproduce.md").read_text()
    metrics["dense"]["R@100"] = 0.9004
    (job_dir / "results.json").write_text(json.dumps({"metrics": metrics, "tuning": {"value": 0.3}}))
    assert main(argv) == 0
    # --baseline: the refactor guard on one machine; every cell must come out as it did before, to the printed digit
    before = tmp_path / "before.json"
    (out / "reproduce.json").rename(before)
    assert main([*argv, "--baseline", str(before)]) == 0
    metrics["dense"]["MRR@10"] = 0.5021  # still within tolerance of the registry, but not what it was
    (job_dir / "results.json").write_text(json.dumps({"metrics": metrics, "tuning": {"value": 0.3}}))
    assert main([*argv, "--baseline", str(before)]) == 1
    assert f"CHANGED since {before}: tiny / dense / MRR@10: 0.5019 -> 0.5021" in capsys.readouterr().out


def test_quick_runs_the_first_seed_of_what_the_headline_rows_need_in_dependency_order(tmp_path) -> None:
    body = TWO_CELLS.replace("seeds: [13]}", "seeds: [13, 14]}\n  wide: {evaluate: [method=clear], of: dense}")
    body += '  - {name: wide, job: wide, system: clear, cells: {MRR@10: "0.5"}}\n'
    body += '  - {name: kd, job: kd, system: dense, quick: true, cells: {MRR@10: "0.5"}}\n'
    body = body.replace("jobs:\n", "jobs:\n  kd: {train: ['data.teacher_run={dir:wide}/run.train.trec'], seeds: [7]}\n")
    table = load_table(write_registry(tmp_path, body) / "tiny.yaml")
    assert planned(table, quick=True) == {"dense": [13], "wide": [13], "kd": [7]}
    assert planned(table, quick=False) == {"dense": [13, 14], "wide": [13, 14], "kd": [7]}


def test_dry_run_prints_each_command_with_the_directories_it_depends_on(tmp_path, capsys) -> None:
    body = TWO_CELLS.replace("jobs:\n", "jobs:\n  kd: {train: ['data.teacher_run={dir:wide}/run.train.trec']}\n")
    body = body.replace("seeds: [13]}", "seeds: [13]}\n  wide: {evaluate: [eval.split=train], of: dense}")
    body += '  - {name: kd, job: kd, system: dense, quick: true, cells: {MRR@10: "0.5"}}\n'
    registry = write_registry(tmp_path / "registry", body)
    assert main(["--registry", str(registry), "--cache-dir", str(tmp_path / "c"), "--dry-run", "--quick"]) == 0
    lines = [line.strip() for line in capsys.readouterr().out.splitlines() if line.strip().startswith("python ")]
    assert len(lines) == 3 and lines[0].startswith("python train.py backbone=tiny_random seed=13")
    train_dir = re.search(r"hydra\.run\.dir=(\S+)", lines[0]).group(1)
    assert f"run_dir={train_dir} eval.split=train" in lines[1]
    wide_dir = re.search(r"hydra\.run\.dir=(\S+)", lines[1]).group(1)
    assert f"data.teacher_run={wide_dir}/run.train.trec" in lines[2] and not list(tmp_path.glob("c/*"))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (TWO_CELLS.replace("job: dense,", "job: nope,"), r"tiny.yaml: row 1 \('dense'\): unknown job 'nope'"),
        (TWO_CELLS.replace('λ: "0.3"', 'MAP: "0.3"'), r"tiny.yaml: row 1 \('dense'\): cells \['MAP'\] are not"),
        (TWO_CELLS.replace("seeds: [13]}", "seeds: [13], of: x}"), r"tiny.yaml: job 'dense' evaluates 'x'"),
        (TWO_CELLS.replace("{train:", "{trian:"), r"tiny.yaml: job 'dense' takes one of train/evaluate"),
        (TWO_CELLS.replace("rows:", "rows: ["), r"tiny.yaml: not valid YAML"),
        (TWO_CELLS.replace("title: Two cells\n", ""), r"tiny.yaml: missing keys \['title'\]"),
        (
            TWO_CELLS.replace("quick: true,", "quick: true, first_seed: {MAP: '1'},"),
            r"first_seed values \['MAP'\] have no",
        ),
    ],
)
def test_a_broken_registry_file_is_named_with_its_problem(tmp_path, body, message) -> None:
    with pytest.raises(ValueError, match=message):
        load_table(write_registry(tmp_path, body) / "tiny.yaml")


def test_unknown_table_names_fail_with_the_registry_s_tables(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["nope"])
    assert "unknown tables ['nope']; the registry has" in capsys.readouterr().err


def test_every_registered_table_is_a_docs_page_s_table_and_says_where_it_was_reproduced() -> None:
    pages = docs_tables()
    registry = load_registry(REGISTRY)
    assert set(pages) == set(registry), "every results table has a registry file and a <!-- reproduce:NAME --> marker"
    assert "reproduce:" not in (REPO / "README.md").read_text(), "the README shows no registered table: the docs do"
    for name, table in registry.items():
        _, preamble, rows = pages[name]
        where = table.reproduced
        assert f"Last reproduced at commit {where['commit']} on {where['machine']}" in preamble.replace("\n", " "), name
        for row in table.rows:
            key_columns = row.name.count(" | ") + 1
            matches = [r for r in rows if " | ".join(list(r.values())[:key_columns]).replace("**", "") == row.name]
            assert len(matches) == 1, (name, row.name)
            for column, expected in row.cells.items():
                assert matches[0][column].replace("**", "") == expected.text, (name, row.name, column)


@pytest.mark.slow
def test_a_tiny_registry_end_to_end_trains_evaluates_caches_and_compares(tiny_dir: Path, tmp_path: Path, capsys):
    tiny = ", ".join(tiny_dataset(tiny_dir))
    body = f"""
table: tiny
title: A tiny run
reproduced: {{commit: abc1234, machine: "a test"}}
columns: {{MRR@10: MRR@10, R@100: R@100}}
jobs:
  dense:
    train: [{tiny}, backbone=tiny_random, trainer.max_steps=3, data.batch_size=8, data.val_queries=5, eval.k=100]
    seeds: [13]
  again: {{evaluate: [eval.k=100], of: dense}}
rows:
  - {{name: BM25, job: dense, system: BM25, lexical: true, quick: true, cells: {{MRR@10: "0.0"}}}}
  - {{name: dense, job: again, system: dense, quick: true, cells: {{MRR@10: "0.0"}}}}
"""
    registry, cache = write_registry(tmp_path / "registry", body), tmp_path / "cache"
    argv = ["--registry", str(registry), "--cache-dir", str(cache), "--out", str(tmp_path / "out"), "--quick"]
    assert main(argv) == 1  # the registered 0.0 is wrong for BM25
    first = json.loads((tmp_path / "out" / "reproduce.json").read_text())["cells"]
    trained = next(cache.glob("train-13-*"))
    measured = json.loads((trained / "results.json").read_text())["metrics"]
    assert first[0]["measured"] == f"{measured['BM25']['MRR@10']:.1f}" and first[0]["status"] == "OUTSIDE"
    evaluated = json.loads((next(cache.glob("evaluate-13-*")) / "results.json").read_text())["metrics"]
    assert evaluated["dense"]["MRR@10"] == pytest.approx(measured["dense"]["MRR@10"], abs=1e-6)  # same checkpoint
    capsys.readouterr()
    mtime = (trained / "results.json").stat().st_mtime
    assert main(argv) == 1 and (trained / "results.json").stat().st_mtime == mtime  # read from the cache
    assert capsys.readouterr().out.count("cached") == 2


def test_every_registered_command_composes_with_its_script_s_config(tmp_path) -> None:
    # Each job's command line as the runner builds it (seed, quiet flags, run_dir of the evaluated run) must be a
    # valid override list for train.yaml / evaluate.yaml: a standalone evaluate job once got train.py's logger=csv.
    from hydra import compose, initialize_config_dir

    runner = Runner(cache_dir=tmp_path, dry_run=True)
    with initialize_config_dir(config_dir=str(REPO / "retrieval_zoo" / "conf"), version_base="1.3"):
        for table in load_registry(REGISTRY).values():
            for job in table.jobs.values():
                evaluated = tmp_path / "evaluated" if job.of else None
                command = runner.command(job, job.seeds[0], evaluated)[2:]
                command = [re.sub(r"\{dir:\w+\}", str(tmp_path), part) for part in command]
                compose(config_name=job.script, overrides=command, return_hydra_config=True)


def test_each_tables_figures_are_drawn_from_its_registered_numbers() -> None:
    from PIL import Image

    from retrieval_zoo.reproduce.figures import digest, figure_path, registered_values
    from retrieval_zoo.reproduce.registry import DOCS

    drawn = 0
    for table in load_registry(REGISTRY).values():
        for figure in table.figures:
            path = figure_path(table, figure, DOCS / "figures")
            assert path.exists(), f"{path}: run python -m retrieval_zoo.reproduce --figures {table.name}"
            plotted = Image.open(path).info.get("Description")
            assert plotted == digest(figure, registered_values(table)), (
                f"{path} plots other numbers than {table.path.name}: run python -m retrieval_zoo.reproduce "
                f"--figures {table.name}"
            )
            drawn += 1
    assert drawn >= 3


def test_a_figure_of_a_column_the_table_lacks_is_refused(tmp_path: Path) -> None:
    body = TWO_CELLS + "figures:\n  - {name: f, x: nDCG@10, y: MRR@10, title: t}\n"
    with pytest.raises(ValueError, match=r"figure 'f' plots 'nDCG@10' against 'MRR@10', not both among the columns"):
        load_table(write_registry(tmp_path, body) / "tiny.yaml")


def test_a_run_draws_its_figures_from_what_it_measured(tmp_path: Path) -> None:
    from retrieval_zoo.reproduce.cells import Cell
    from retrieval_zoo.reproduce.figures import digest, draw, measured_values

    body = TWO_CELLS + "figures:\n  - {name: f, x: R@100, y: MRR@10, title: t}\n"
    table = load_table(write_registry(tmp_path / "registry", body) / "tiny.yaml")
    cells = [Cell("tiny", "dense", "MRR@10", "0.5000", "0.5123", 0.0123, 0.01, [13], True, False),
             Cell("tiny", "dense", "R@100", "0.9000", "0.9 ± 0.01", 0.0, 0.01, [13], True, True)]  # fmt: skip
    values = measured_values(cells)
    assert values == {"dense": {"MRR@10": 0.5123, "R@100": 0.9}}
    (path,) = draw(table, values, tmp_path / "figures")
    from PIL import Image

    assert Image.open(path).info["Description"] == digest(table.figures[0], values)


def test_figures_a_job_drew_are_copied_beside_the_run_and_an_unknown_job_is_refused(tmp_path: Path) -> None:
    body = TWO_CELLS + "drawn:\n  - {name: curve, job: dense, file: tuning.dev.png}\n"
    registry, cache, out = write_registry(tmp_path / "registry", body), tmp_path / "cache", tmp_path / "out"
    table = load_table(registry / "tiny.yaml")
    job_dir = Runner(cache_dir=cache).directory(table.jobs["dense"], 13, None)
    job_dir.mkdir(parents=True)  # a finished job, with the figure its evaluation drew
    metrics = {"dense": {"MRR@10": 0.5, "R@100": 0.9}}
    (job_dir / "results.json").write_text(json.dumps({"metrics": metrics, "tuning": {"value": 0.3}}))
    (job_dir / "tuning.dev.png").write_bytes(b"\x89PNG the job's own figure")
    assert main(["--registry", str(registry), "--cache-dir", str(cache), "--out", str(out)]) == 0
    assert (out / "figures" / "tiny-curve.png").read_bytes() == b"\x89PNG the job's own figure"
    (job_dir / "tuning.dev.png").unlink()
    with pytest.raises(FileNotFoundError, match="job 'dense' of tiny drew no tuning.dev.png"):
        main(["--registry", str(registry), "--cache-dir", str(cache), "--out", str(out)])
    wrong = TWO_CELLS + "drawn:\n  - {name: curve, job: nope, file: tuning.dev.png}\n"
    with pytest.raises(ValueError, match="drawn figure 'curve' comes from job 'nope', not among the jobs"):
        load_table(write_registry(tmp_path / "wrong", wrong) / "tiny.yaml")


def test_every_drawn_figure_a_registry_names_is_in_the_docs_and_shown_on_its_page() -> None:
    pages = docs_tables()
    for table in load_registry(REGISTRY).values():
        for figure in table.drawn:
            name = f"{table.name}-{figure.name}.png"
            assert (REPO / "docs" / "figures" / name).exists(), name
            assert f"../figures/{name}" in (REPO / "docs" / pages[table.name][0]).read_text(), name
