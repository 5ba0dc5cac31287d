import gzip
from pathlib import Path

import pytest

from retrieval_zoo.data import run_columns
from retrieval_zoo.data.formats import FormatError, read_run, write_run
from retrieval_zoo.data.run_columns import columns_path, read_run_with_columns

RUN = {"q1": {"d1": 2.5, "dé2": 1.0 / 3, "d3": -4e-7}, "q-2": {"d1": 7.0}, "q3": {f"x{i}": i / 7 for i in range(50)}}


def written(path: Path, run: dict) -> Path:
    write_run(path, run)
    return path


def without_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(path: object) -> None:
        raise AssertionError(f"parsed {path} again")

    monkeypatch.setattr(run_columns, "read_run", fail)


def test_columns_give_back_the_parsed_run_bit_for_bit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = written(tmp_path / "run.trec.gz", RUN)
    parsed = read_run(path)
    first = read_run_with_columns(path)
    assert first == parsed and columns_path(path).exists()
    without_parsing(monkeypatch)
    again = read_run_with_columns(path)
    assert again == parsed and list(again) == list(parsed)  # the file's query order too
    assert all(list(again[q].items()) == list(parsed[q].items()) for q in parsed)  # each query's document order


def test_columns_of_another_version_of_the_file_are_not_used(tmp_path: Path) -> None:
    path = written(tmp_path / "run.trec", RUN)
    read_run_with_columns(path)
    changed = {"q1": {"d9": 1.0}}
    written(path, changed)
    assert read_run_with_columns(path) == changed
    assert read_run_with_columns(path) == changed  # from the columns written again


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_damaged_columns_are_read_again_from_the_run_file(tmp_path: Path, damage: str, capsys) -> None:
    path = written(tmp_path / "run.trec", RUN)
    read_run_with_columns(path)
    columns = columns_path(path)
    data = columns.read_bytes()
    columns.write_bytes({"truncate": data[: len(data) // 2], "garbage": b"not an npz", "empty": b""}[damage])
    assert read_run_with_columns(path) == read_run(path)
    assert f"{columns} is damaged" in capsys.readouterr().out
    assert columns.stat().st_size == len(data)  # written again, whole


def test_a_malformed_run_file_still_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "run.trec.gz"
    with gzip.open(path, "wt") as f:
        f.write("q Q0 a 1 1.0 t\nq Q0 b 2 nan t\n")
    with pytest.raises(FormatError, match=r"run.trec.gz:2: score 'nan' is not finite"):
        read_run_with_columns(path)
    assert not columns_path(path).exists()


def test_columns_that_cannot_be_written_leave_the_run_read(tmp_path: Path, monkeypatch, capsys) -> None:
    path = written(tmp_path / "run.trec", RUN)

    def full_disk(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(run_columns, "_write_columns", full_disk)
    assert read_run_with_columns(path) == read_run(path)
    assert "could not keep the columns" in capsys.readouterr().out and not columns_path(path).exists()
