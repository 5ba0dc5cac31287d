import csv
import json
from pathlib import Path

import pytest

from retrieval_zoo.evaluation.summary import group_key, main


def job(
    path: Path, overrides: list[str], mrr: float, roc: float | None = None, weight: float | None = None, size: int = 0
) -> Path:
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    results = {
        "system": "roc",
        "metrics": {"BM25": {"MRR@10": 0.5}, "roc": {"MRR@10": mrr}, "roc (lexical)": {"MRR@10": 0.25}},
        "complementarity": {"RoC": roc} if roc is not None else {},
        "tuning": {"value": weight} if weight is not None else None,
        **({"index_bytes": size} if size else {}),
    }
    (path / "results.json").write_text(json.dumps(results))
    return path


def test_seeds_of_one_configuration_form_one_row(tmp_path, capsys) -> None:
    job(tmp_path / "a" / "0", ["method=roc", "experiment=roc_e", "seed=1", "logger=csv"], 0.6, roc=0.3, weight=1.0)
    job(tmp_path / "b" / "0", ["method=roc", "seed=2", "experiment=roc_e"], 0.8, roc=0.0, weight=2.0)
    job(tmp_path / "a" / "1", ["method=roc", "experiment=roc_i", "seed=1"], 0.7, size=3 * 2**19)
    main([str(tmp_path / "a"), str(tmp_path / "b"), "--measures", "MRR@10", "--csv", str(tmp_path / "sweep.csv")])
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines()[2:]]
    table = list(csv.reader((tmp_path / "sweep.csv").open()))
    assert table[0][:4] == ["configuration", "system", "seeds", "MRR@10"] and len(table) == len(rows) + 1
    assert ["experiment=roc_e method=roc", "roc", "2", "0.7000 ± 0.1414", "0.150 ± 0.212", "1.50 ± 0.71", ""] in table
    by = {(r[0].lstrip("| "), r[1]): r[2:] for r in rows}
    # mean 0.7, sample std sqrt(((0.6-0.7)^2 + (0.8-0.7)^2) / 1) = 0.1414; RoC 0.15 ± 0.212; weight 1.5 ± 0.71
    assert by[("experiment=roc_e method=roc", "roc")] == ["2", "0.7000 ± 0.1414", "0.150 ± 0.212", "1.50 ± 0.71", " |"]
    assert by[("experiment=roc_e method=roc", "roc (lexical)")] == ["2", "0.2500 ± 0.0000", "", "", " |"]
    assert by[("experiment=roc_i method=roc", "roc")] == ["1", "0.7000", "", "", "1.5 |"]  # 1.5 MiB


def test_an_evaluate_job_takes_the_overrides_of_the_run_it_evaluated(tmp_path) -> None:
    trained = job(tmp_path / "train", ["method=roc", "experiment=roc_none", "seed=14"], 0.6)
    evaluated = job(tmp_path / "eval", [f"run_dir={trained}", "index=union"], 0.7)
    assert group_key(evaluated) == "experiment=roc_none index=union method=roc"
    with pytest.raises(FileNotFoundError, match="overrides.yaml"):
        group_key(tmp_path)


def test_csurf_runs_add_the_efficiency_columns_of_table_3(tmp_path, capsys) -> None:
    for number, (lam, csfs) in enumerate([(1e-3, 40.0), (1e-1, 10.0)]):
        path = job(tmp_path / str(number), ["experiment=csurf_flops_sweep", f"method.lambda_q={lam}"], 0.5 + lam)
        results = json.loads((path / "results.json").read_text())
        results["efficiency"] = {"csf_per_query": csfs, "csf_per_doc": 2 * csfs, "e_ops": csfs / 20}
        (path / "results.json").write_text(json.dumps(results))
    main([str(tmp_path), "--measures", "MRR@10"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("| |C^q| | |C^d| | E_OPS |")
    rows = {r.split(" | ")[0].lstrip("| "): r.split(" | ") for r in lines[2:] if " | roc | " in r}
    assert rows["experiment=csurf_flops_sweep method.lambda_q=0.1"][-3:] == ["10.00", "20.00", "0.50 |"]
