"""The benchmark scripts import what the package still has: a moved module or a renamed function fails here."""

import ast
import importlib
import importlib.util
import math
import re
from pathlib import Path

import pytest
import torch

BENCHMARKS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))


def project_imports(path: Path) -> list[tuple[int, str, str]]:
    """(line, module, name) of every ``from retrieval_zoo… / benchmarks… import name``, function bodies included."""
    found, ours = [], {"retrieval_zoo", "benchmarks"}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ours:
            found += [(node.lineno, node.module, alias.name) for alias in node.names]
    return found


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.stem)
def test_benchmark_imports_resolve(path: Path) -> None:
    for line, module, name in project_imports(path):
        imported = importlib.import_module(module)
        has = hasattr(imported, name) or importlib.util.find_spec(f"{module}.{name}") is not None
        assert has, f"{path.name}:{line}: {module} has no {name}"


@pytest.mark.slow
def test_gpu_throughput_measures_every_method_on_a_tiny_backbone(tiny, tiny_bm25, tmp_path, monkeypatch, capsys):
    """The benchmark runs each method's real step, encoding and search (a signature drift fails here, not on a GPU),
    in bf16 as on the GPU machine, with each trained method's fixed cost."""
    from benchmarks.gpu_throughput import METHODS, measure, parse_args

    monkeypatch.setenv("RETRIEVAL_ZOO_CACHE", str(tmp_path))
    args = parse_args(["--device", "cpu", "--backbone", "tiny_random", "--docs", "12", "--queries", "4",
                       "--batch-size", "4", "--repeat", "1", "--precision", "bf16", "--fixed-cost"])  # fmt: skip
    measure(args, tiny, tiny_bm25)
    tables = capsys.readouterr().out.split("## Fixed cost")
    rows, fixed = ({line.split("|")[1].strip(): line.split("|")[2:-1] for line in table.splitlines()
                    if line.startswith("| ") and not line.startswith("| method")} for table in tables)  # fmt: skip
    assert set(rows) == set(METHODS) and set(fixed) == set(METHODS) - {"dlr_splade", "dhr_bm25_dense"}
    assert all(float(cell) > 0 for cells in fixed.values() for cell in cells), fixed
    for method, cells in rows.items():
        trained = method not in ("dlr_splade", "dhr_bm25_dense")
        assert all(float(cell.replace(",", "")) > 0 for cell in (cells if trained else cells[3:])), (method, cells)


def test_datamodule_memory_runs_every_setup_step_on_a_small_synthetic_run(monkeypatch, capsys, tmp_path) -> None:
    from benchmarks import datamodule_memory

    argv = ["x", "--queries", "300", "--docs", "2000", "--depth", "50", "--epochs", "2", "--work", str(tmp_path)]
    monkeypatch.setattr("sys.argv", argv)
    datamodule_memory.main()
    out = capsys.readouterr().out
    steps = [line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ") and "GiB" in line]
    assert steps == ["synthetic run (written, memory-mapped)", "corpus id index (IdIndex)", "negative pool",
                     "groups of every epoch (pair keys)", "BM25 scores of the pairs, from the run"]  # fmt: skip
    pairs = int(re.search(r"^([\d,]+) pairs, ", out, re.MULTILINE).group(1).replace(",", ""))
    assert 300 < pairs <= 300 * (1 + 2 * 2)  # each query: its positive, then a negative an epoch (some repeat)


def test_corpus_memory_builds_opens_and_reads_a_small_synthetic_corpus(monkeypatch, capsys, tmp_path) -> None:
    from benchmarks import corpus_memory

    monkeypatch.setattr("sys.argv", ["x", "--docs", "3000", "--work", str(tmp_path)])
    corpus_memory.main()
    out = capsys.readouterr().out
    steps = [line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ") and "GiB" in line]
    assert steps == ["synthetic collection.tsv written", "store built (every line read and checked)", "store opened",
                     "100,000 random lookups", "one pass over every (id, text)",
                     "read into a dict instead (read_id_text_tsv)"]  # fmt: skip
    lines = (tmp_path / "collection.tsv").read_text().splitlines()
    assert len(lines) == 3000 and lines[7].startswith("7\t") and len(lines[7].split("\t")[1].split()) == 56


def test_run_reading_times_each_part_on_a_synthetic_run_read_back_whole(monkeypatch, capsys) -> None:
    from benchmarks import run_reading

    monkeypatch.setattr("sys.argv", ["x", "--queries", "20", "--depth", "50", "--docs", "2000"])
    run_reading.main()
    out = capsys.readouterr().out
    parts = [line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ") and "part" not in line]
    assert parts == ["split into fields", "ids, sorted keys (IdIndex.rows)", "ids, unsorted keys", "scores"]
    assert "One block of 1,000 lines" in out and "The whole run, 1,000 lines over 2,000 ids" in out


def test_pool_agreement_ranks_epochs_by_hand_and_refuses_runs_that_trained_differently(tmp_path, capsys) -> None:
    import sys

    from benchmarks import pool_agreement

    assert pool_agreement.kendall_tau([1, 2, 3], [10, 30, 20]) == pytest.approx(1 / 3)  # 2 concordant, 1 discordant
    assert pool_agreement.kendall_tau([1, 2], [5, 5]) == 0  # a tie counts neither way
    runs = (("full", ["0.5", "0.6"], "2.0"), ("pool", ["0.7", "0.65"], "2.0"), ("other", ["1", "1"], "9"))
    for name, mrr, loss in runs:
        (tmp_path / name / "csv").mkdir(parents=True)
        rows = ["epoch,step,train/loss,val/MRR@10,val/R@100", f"0,9,{loss},,", f"0,10,,{mrr[0]},0.9",
                f"1,20,,{mrr[1]},0.8"]  # fmt: skip
        (tmp_path / name / "csv" / "metrics.csv").write_text("\n".join(rows) + "\n")
    sys.argv = ["pool_agreement", str(tmp_path / "full"), str(tmp_path / "pool")]
    pool_agreement.main()
    printed = capsys.readouterr().out
    assert "full epoch 1, pool epoch 0" in printed and "by val/MRR@10: -1.000" in printed and "R@100: 1.000" in printed
    sys.argv = ["pool_agreement", str(tmp_path / "full"), str(tmp_path / "other")]
    with pytest.raises(ValueError, match="did not train the same"):
        pool_agreement.main()


def test_recipe_rates_stretches_each_text_with_its_own_tokens_and_composes_every_recipe() -> None:
    """Texts reach the recipe's max length by repeating their own tokens between [CLS] and [SEP]; each recipe
    composes with its random stand-in (distilbert's at 6 layers) and without its run files."""
    import torch

    from benchmarks.recipe_rates import RECIPES, recipe_config, stretched
    from retrieval_zoo.encoding.tokens import Tokens

    tokens = Tokens(
        torch.tensor([[101, 5, 6, 102, 0], [101, 7, 102, 0, 0]]), torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]])
    )
    out = stretched(tokens, 6)
    assert out.ids.tolist() == [[101, 5, 6, 5, 6, 102], [101, 7, 7, 7, 7, 102]]
    assert out.mask.tolist() == [[1] * 6] * 2
    for recipe in RECIPES:
        cfg, backbone = recipe_config(recipe)
        assert cfg.backbone.name == "bert_base_random"
        assert cfg.backbone.num_layers == (6 if backbone == "distilbert_base_uncased" else 12), recipe
        assert cfg.data.negatives_run is None and cfg.data.teacher_run is None, recipe


def test_flat_growth_builds_saves_and_loads_a_flat_index_at_each_size(tmp_path) -> None:
    from benchmarks.search_api import flat_growth

    rows = flat_growth([64, 512], tmp_path, dim=8)
    assert [row["size"] for row in rows] == [64, 512]
    assert all(row["build"] > 0 and row["load"] > 0 for row in rows)
    assert sorted(path.name for path in (tmp_path / "flat-512").iterdir()) == ["docids.npy", "faiss-00000.index"]


def test_step_ops_counts_each_step_on_the_meta_device_with_cuda_branches(tiny, tiny_bm25, monkeypatch, tmp_path):
    from benchmarks.step_ops import step_ops

    monkeypatch.setenv("RETRIEVAL_ZOO_CACHE", str(tmp_path))
    bare, dense = step_ops("dense", tiny, tiny_bm25)
    assert 0 < sum(bare.kernels.values()) < sum(dense.kernels.values()) and bare.views > 0
    assert "losses.py" in " ".join(dense.lines) and "bernoulli_" in dense.kernels  # the loss's ops, dropout's too
    _, csurf = step_ops("csurf", tiny, tiny_bm25)
    assert any(line.startswith("lexical/csf_fixed.py") for line in csurf.lines)  # CUDA's fixed shapes, not listed
    assert "nonzero" not in csurf.kernels  # the listed path's op, which the meta device could not run anyway


def test_the_stage_memory_table_gives_what_each_phase_adds_a_document_worked_by_hand(capsys) -> None:
    from benchmarks.stage_memory import table

    def measured(imports: int, index: int) -> dict:
        marks = [{"phase": "imports", "now": imports, "peak": imports},
                 {"phase": "build", "now": imports + index, "peak": imports + 2 * index}]  # fmt: skip
        return {"sparse": {"phases": marks, "index": index, "children": 0}}

    mib = 2**20
    table({100_000: measured(300 * mib, 100 * mib), 300_000: measured(300 * mib, 400 * mib)})
    rows = {line.split("|")[2].strip(): line for line in capsys.readouterr().out.splitlines()[2:]}
    assert rows["imports"].endswith("| 300 / 300 | 300 / 300 | 0.00 |")  # the same at both sizes
    per_doc = 300 * mib / 200_000 / 1024  # the build adds 300 MiB for 200,000 more documents
    assert rows["build"].endswith(f"| 400 / 500 | 700 / 1,100 | {per_doc:.2f} |")
    assert rows["nbytes"].endswith(f"| 100 | 400 | {per_doc:.2f} |")


def test_standin_shards_weigh_each_word_piece_by_log_one_plus_its_count_and_skip_the_low_ids() -> None:
    from benchmarks.standin_shards import standin_vectors

    vectors = standin_vectors([[1000, 5, 1000, 1002], [101, 999]], width=1003)  # 5 and 101: special ids, dropped
    assert vectors.layout == torch.sparse_csr and vectors.col_indices().dtype == torch.int32
    expected = torch.zeros(2, 1003)
    expected[0, 1000], expected[0, 1002], expected[1, 999] = math.log(3.0), math.log(2.0), math.log(2.0)
    torch.testing.assert_close(vectors.to_dense(), expected)  # float32 log1p: within its rounding


def test_the_byte_counter_adds_up_large_operands_read_and_written_worked_by_hand() -> None:
    from benchmarks.delade_softmax import LargeOperandBytes

    x, small = torch.empty(2, 3, device="meta"), torch.empty(2, 1, device="meta")  # 24 bytes; 8, under the limit
    with LargeOperandBytes(numel=6) as count:
        y = x.exp()  # 24 read + 24 written
        y.mul_(small)  # in place: 24 read + 24 written; the small operand not counted
        torch.empty_like(y)  # an allocation: nothing moved
        y.view(3, 2).t()  # views: nothing moved
        y.gather(1, torch.zeros(2, 1, dtype=torch.long, device="meta"))  # 2 elements of 4 bytes, read and written
    assert count.bytes == 24 + 24 + 24 + 24 + 2 * 2 * 4
