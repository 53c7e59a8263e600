"""The run directory: checked before anything is written, locked while a run writes it, replaced only
when the new run has its first checkpoint, and its ``run.json`` status kept true."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..checkpoint import atomic_write_json

RUN_RECORD = "run.json"


class RunDirectoryBusyError(RuntimeError):
    """Another process is writing this run directory."""


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` is an hf_vanilla run directory (its run.json names a task)."""
    try:
        return "task" in json.loads((path / RUN_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        return False


def check_output_dir(run_dir: Path, resume: str | None, overwrite: bool) -> None:
    """Refuse an output directory the run may not write, before anything is read or written."""
    if run_dir.exists() and not run_dir.is_dir():
        raise FileExistsError(f"{run_dir} is a file; choose a directory for --output-dir")
    if resume or not run_dir.is_dir() or not any(run_dir.iterdir()):
        return
    if not overwrite:
        raise FileExistsError(f"{run_dir} exists and is not empty: pass resume=True (--resume) to continue it, or "
                              "overwrite=True (--overwrite) to start again")
    if not is_run_dir(run_dir):
        raise FileExistsError(f"{run_dir} is not an hf_vanilla run directory (it has no {RUN_RECORD} naming a task), "
                              "so --overwrite will not replace it: choose another --output-dir, or empty it yourself")


def lock_path(run_dir: Path) -> Path:
    """The lock sits beside the run directory, so replacing the directory never moves it."""
    run_dir = run_dir.resolve()
    return run_dir.parent / f".{run_dir.name}.lock"


@contextlib.contextmanager
def locked(run_dir: Path, enabled: bool = True) -> Iterator[None]:
    """Hold an exclusive lock on the run directory for the block (``filelock``: flock on POSIX, LockFileEx on
    Windows); a second writer gets a clear refusal. The system drops the lock of a process that dies, and the
    lock file goes when the block ends."""
    if not enabled:
        yield
        return
    from filelock import FileLock, Timeout

    path = lock_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path, blocking=False, on_acquired=_write_pid)
    try:
        lock.acquire()
    except Timeout:
        raise RunDirectoryBusyError(f"{run_dir} is being written by another hf_vanilla process (pid {_holder(path)}); "
                                    "wait for it to finish or stop it, then try again") from None
    try:
        yield
    finally:
        # Unlinked while still held: a process waiting on this file finds it gone and locks a fresh one
        # (filelock checks). Windows cannot unlink an open file; there filelock unlinks it on release.
        with contextlib.suppress(OSError):
            path.unlink()
        lock.release()


def _write_pid(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())


def _holder(path: Path) -> str:
    """The pid the lock's holder wrote, or "unknown" (Windows does not let a locked file be read)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip() or "unknown"
    except OSError:
        return "unknown"


def set_aside(run_dir: Path) -> Path | None:
    """Move an old run out of the way (nothing deleted yet); return where it went."""
    if not run_dir.is_dir() or not any(run_dir.iterdir()):
        return None
    aside = run_dir.parent / f".{run_dir.name}.replaced-{os.getpid()}"
    shutil.rmtree(aside, ignore_errors=True)
    os.replace(run_dir, aside)
    return aside


def restore(run_dir: Path, aside: Path | None, existed: bool) -> None:
    """Undo a new run that failed before its first checkpoint: put back the old run (moved ``aside``), or the
    directory as the run found it (empty, or absent). A run that has saved a checkpoint stays."""
    if any(run_dir.glob("checkpoint-*")):
        return
    shutil.rmtree(run_dir, ignore_errors=True)
    if aside is not None and aside.is_dir():
        os.replace(aside, run_dir)
    elif existed:
        run_dir.mkdir(parents=True, exist_ok=True)


def read_record(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / RUN_RECORD).read_text(encoding="utf-8"))


def update_status(run_dir: Path, status: str, **fields: Any) -> None:
    """Record how the run ended (``completed``, ``diverged``, ``interrupted``, ...) in run.json."""
    record = read_record(run_dir)
    record.update(status=status, **fields)
    atomic_write_json(run_dir / RUN_RECORD, record)
