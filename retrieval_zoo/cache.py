"""Content-addressed, atomically written artifacts.

Expensive artifacts (BM25 indexes, runs, encoded corpora) live under a cache directory, in a folder named by a
hash of everything they depend on. They are written to a temporary sibling and renamed into place, so a crash
never leaves a partial artifact that a later run would trust.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from filelock import FileLock

_SWEPT: set[Path] = set()  # folders this process has cleaned of stale temporaries


def fingerprint(*parts: object) -> str:
    """A short stable hash of JSON-serialisable parts (strings, numbers, dicts, lists)."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def file_digest(path: str | Path) -> str:
    """SHA-256 of a file's bytes; remembered in this process while the file keeps its inode, size and time stamps.

    A 3 GB corpus takes seconds to hash, and the corpus store and the collection's fingerprint both ask.
    """
    stat = os.stat(path)
    return _file_digest(str(Path(path).resolve()), stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


@lru_cache(maxsize=256)
def _file_digest(path: str, inode: int, size: int, mtime_ns: int, ctime_ns: int) -> str:
    """:func:`file_digest` of the file as these stamps describe it."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cache_root() -> Path:
    """Where artifacts are cached: ``$RETRIEVAL_ZOO_CACHE`` or ``~/.cache/retrieval_zoo``, checked to be writable."""
    given = os.environ.get("RETRIEVAL_ZOO_CACHE")
    return writable_cache(str(given or Path.home() / ".cache" / "retrieval_zoo"), given is not None)


@lru_cache(maxsize=8)
def writable_cache(root: str, from_variable: bool) -> Path:
    """``root``, created if need be, and checked once a process to be writable.

    Where it cannot be written (a read-only mount, another user's folder) one error names the folder and where it came
    from, instead of a bare ``PermissionError`` deep in whichever writer came first.
    """
    path = Path(root)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as error:
        source = "RETRIEVAL_ZOO_CACHE" if from_variable else "the default cache (set RETRIEVAL_ZOO_CACHE to move it)"
        raise PermissionError(
            f"{path}: the artifact cache cannot be written ({error.strerror or error}); it comes "
            f"from {source}: point RETRIEVAL_ZOO_CACHE at a folder this user can write"
        ) from None
    return path


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success rename it over ``path`` (file or directory).

    The temporary keeps the target's suffixes, so writers that look at the name (``.gz``) behave the same, and is
    named after this host and process: the temporaries a killed process left of the same target are removed first
    (:func:`remove_stale_temporaries`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path.parent)
    prefix = f"{temporary_prefix(path)}{os.getpid()}-"
    fd, tmp_name = tempfile.mkstemp(prefix=prefix, suffix="".join(path.suffixes), dir=path.parent)
    os.close(fd)
    os.unlink(tmp_name)
    tmp = Path(tmp_name)
    try:
        yield tmp
        if path.is_dir():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()


def entry_lock(path: str | Path) -> FileLock:
    """An inter-process lock for building the cache entry ``path`` (a file ``<path>.lock`` beside it).

    Concurrent runs on one cache (a parallel sweep, array jobs on a shared home, two terminals) build an entry once:
    each takes the lock, looks again, and builds only what is still missing; the others wait and read it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path) + ".lock")


def host_marker() -> str:
    """What this host's temporaries carry after the entry's name; the writing process's id follows."""
    return f".tmp-{socket.gethostname()}-"


def temporary_prefix(path: Path) -> str:
    """The name with which this host's temporaries of ``path`` begin; the writing process's id follows."""
    return f".{path.name}{host_marker()}"


def remove_stale_temporaries(folder: Path) -> None:
    """Delete the temporaries in ``folder`` that processes of this host left when they were killed before renaming.

    Once per folder and process, so a folder of many shards is listed once, not at every write. Only processes of
    this host are judged (a shared cache may hold other hosts' work in progress), and only those that are gone: a
    live writer's temporary is never touched.
    """
    if folder in _SWEPT:
        return
    _SWEPT.add(folder)
    marker = host_marker()
    for tmp in folder.iterdir():
        if not tmp.name.startswith(".") or marker not in tmp.name:
            continue
        pid = tmp.name.split(marker, 1)[1].split("-", 1)[0]
        if not pid.isdigit() or process_exists(int(pid)):
            continue
        print(f"[cache] removing {tmp}: left by process {pid}, which is gone")
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)


def process_exists(pid: int) -> bool:
    """Whether a process with this id runs on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def write_json(path: str | Path, data: object) -> None:
    """Write JSON atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def seal(folder: Path, files: tuple[str, ...], **facts: object) -> None:
    """Write ``folder``'s ``ready.json``, last: ``facts`` and the sizes of ``files``, which :func:`sealed` checks."""
    write_json(folder / "ready.json", facts | {"sizes": {name: (folder / name).stat().st_size for name in files}})


def sealed(folder: Path, files: tuple[str, ...], label: str) -> bool:
    """Whether ``folder`` was sealed (:func:`seal`) with ``files`` of the sizes now found; a damaged one is removed.

    Damaged: ``ready.json`` missing from an existing folder or unreadable, or a file missing or resized. The message
    (``[label] <folder>: <problem>: building it again``) names the problem.
    """
    try:
        sizes = json.loads((folder / "ready.json").read_text())["sizes"]
        if all((folder / name).stat().st_size == sizes[name] for name in files):
            return True
        problem = "a file is not the size the build wrote"
    except FileNotFoundError:
        if not folder.exists():
            return False
        problem = "incomplete (no ready.json, or a file missing)"
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as error:
        problem = f"ready.json is damaged ({error})"
    print(f"[{label}] {folder}: {problem}: building it again")
    shutil.rmtree(folder)
    return False
