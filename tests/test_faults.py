"""Faults a run must survive without leaving anything behind: a killed parent, stale temporaries."""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

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
