"""Faults a run must survive without leaving anything behind: a killed parent, stale temporaries."""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not count)."""
    status = Path(f"/proc/{pid}/status")
    try:
        return "State:\tZ" not in status.read_text()
    except FileNotFoundError:
        return False


def test_the_lucene_worker_exits_when_its_parent_is_killed(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent("""
        import os, time
        from retrieval_zoo.lexical.java import LuceneWorker
        if __name__ == "__main__":
            print(LuceneWorker.call(os.getpid), flush=True)
            time.sleep(120)
    """)
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    worker = int(parent.stdout.readline())
    assert alive(worker)
    parent.kill()  # SIGKILL: no atexit hook runs
    parent.wait()
    deadline = time.monotonic() + 10
    while alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(worker)


def test_the_lucene_worker_leaves_the_main_script_alone(tmp_path: Path) -> None:
    marker, script = tmp_path / "runs.txt", tmp_path / "main.py"
    script.write_text(
        textwrap.dedent(f"""
        import os
        from pathlib import Path
        from retrieval_zoo.lexical.java import LuceneWorker
        with Path({str(marker)!r}).open("a") as runs:
            runs.write(f"{{os.getpid()}}\\n")  # each process that runs this script, the worker's if it did
        def local() -> int:
            return 0
        print(LuceneWorker.call(os.getpid), flush=True)  # no __main__ guard: the worker never runs this
        try:
            LuceneWorker.call(local)
        except TypeError as error:
            print(error)
    """)
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    worker, refusal = done.stdout.splitlines()
    assert marker.read_text().split() != [worker] and len(marker.read_text().split()) == 1
    assert "cannot import a function of the main script" in refusal and "local" in refusal


def test_temporaries_of_killed_writers_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    import socket

    from retrieval_zoo.cache import temporary_prefix, write_json

    target = tmp_path / "index-abc"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    prefix = temporary_prefix(target)
    stale = tmp_path / f"{prefix}{int(gone.stdout)}-x1"  # a build killed between writing and renaming
    live = tmp_path / f"{prefix}{os.getpid()}-x2"  # another writer of this host, at work
    other_host = tmp_path / f".index-abc.tmp-not-{socket.gethostname()}-{int(gone.stdout)}-x3"
    for folder in (stale, live, other_host):
        folder.mkdir()
        (folder / "segment").write_text("partial")
    write_json(target, {"ok": True})
    assert not stale.exists() and live.exists() and other_host.exists() and target.exists()


@pytest.mark.slow
def test_concurrent_runs_on_one_fresh_cache_build_each_entry_once(tiny_dir: Path, tmp_path: Path) -> None:
    from tests.test_end_to_end import tiny_dataset

    env = {**os.environ, "RETRIEVAL_ZOO_CACHE": str(tmp_path / "cache"), "WANDB_MODE": "disabled",
           "HF_HUB_OFFLINE": "1"}  # fmt: skip
    # the training split's 120 queries: more than FEW_QUERIES, so BM25 searches them into a cached run file
    command = [sys.executable, "evaluate.py", "method=bm25", *tiny_dataset(tiny_dir), "eval.k=100", "eval.split=train"]
    runs = [
        subprocess.Popen(
            [*command, f"hydra.run.dir={tmp_path / str(i)}"],
            cwd=REPO,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        for i in range(4)
    ]
    outputs = [run.communicate(timeout=600)[0] for run in runs]
    assert [run.returncode for run in runs] == [0] * 4, "\n".join(o[-2000:] for o in outputs)
    logs = "\n".join(outputs)
    assert logs.count("[bm25] indexing") == 1  # one process built the index; the others waited and read it
    assert logs.count("[bm25] top-100 for 120 queries") == 1
    results = [(tmp_path / str(i) / "results.json").read_text() for i in range(4)]
    assert len({json.dumps(json.loads(r)["metrics"], sort_keys=True) for r in results}) == 1


def test_a_cache_that_cannot_be_written_is_named_with_the_variable_that_chose_it(tmp_path: Path, monkeypatch) -> None:
    from retrieval_zoo.cache import cache_root

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("RETRIEVAL_ZOO_CACHE", str(blocker / "cache"))  # a folder cannot be made under a file
    with pytest.raises(PermissionError, match=r"a-file/cache: the artifact cache cannot be written .*ZOO_CACHE"):
        cache_root()
    monkeypatch.setenv("RETRIEVAL_ZOO_CACHE", str(tmp_path / "fine"))
    assert cache_root() == tmp_path / "fine" and (tmp_path / "fine").is_dir()
