"""The run directory: checked before anything is written, locked while a run writes it, replaced only
when the new run has its first checkpoint, and its ``run.json`` status kept true."""

from __future__ import annotations

import contextlib
import errno
import fcntl
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
    """Hold an exclusive ``flock`` on the run directory for the block; a second writer gets a clear refusal."""
    if not enabled:
        yield
        return
    path = lock_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise RunDirectoryBusyError(f"{run_dir} is being written by another hf_vanilla process (pid {holder}); "
                                        "wait for it to finish or stop it, then try again") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing releases the lock


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
