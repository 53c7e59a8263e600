"""The folders hf_vanilla writes (a training run, a converted model): one owner that knows which files are its own.

The rule: hf_vanilla removes or replaces only files it wrote itself; it never replaces a folder holding anything
else without an explicit word; it never follows a symlink out of the folder it was given, nor replaces the link.

How it holds:

- A record, ``.hf_vanilla.json`` in the folder, lists the top-level names hf_vanilla wrote there (a name is
  recorded *before* the file is moved in, so a kill never leaves one of ours unrecorded). :func:`own_files` reads
  it: ``--overwrite``, ``--resume`` and ``convert --overwrite`` go by this one list, and so should anything else
  that must tell hf_vanilla's files from the user's (a push). A folder without the record is the user's.
- The folder itself is never renamed, exchanged or deleted while it holds anything: files are staged in a hidden
  folder inside it and moved in one by one (each ``os.replace`` is atomic). So a symlinked ``--output-dir``
  stays a link and the files land in its target, and the user's files beside ours stay where they are.
- ``--overwrite`` moves the old own files into ``.hf_vanilla-replaced/`` inside the folder; the new run
  :meth:`~OutputFolder.commit`\\ s (renames it ``.hf_vanilla-discarded/``, then deletes it) once it has something
  to keep, or :meth:`~OutputFolder.undo`\\ es (puts the old files back). A process killed in between leaves one of
  those two folders, and the next writer (under the lock) finishes the job: :meth:`~OutputFolder.recover`.
- One writer at a time: an exclusive lock file inside the folder (``filelock``: the system drops the lock of a
  process that dies).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .checkpoint import atomic_write_json, fsync_path, make_shareable

RECORD = ".hf_vanilla.json"
LOCK = ".hf_vanilla.lock"
REPLACED = ".hf_vanilla-replaced"
DISCARDED = ".hf_vanilla-discarded"
FRESH_PREFIX = ".hf_vanilla-fresh-"

#: Every name a run of an hf_vanilla without records (before .hf_vanilla.json) wrote at the top of its folder.
OLDER_RUN_FILE = re.compile(
    r"run\.json|README\.md|metrics\.json|curves\.png|trainer_state\.json|training_args\.bin|config\.json"
    r"|generation_config\.json|model\.safetensors(\.index\.json)?|model-\d{5}-of-\d{5}\.safetensors"
    r"|tokenizer\.json|tokenizer_config\.json|special_tokens_map\.json|chat_template\.jinja"
    r"|(configuration|modeling)_vanilla\.py|positional\.py|checkpoint-\d+")

#: What each kind of folder is called in messages, and the option that writes it again.
KINDS = {"run": ("a training run", "hf-vanilla train"), "conversion": ("a converted model", "hf-vanilla convert")}


class FolderBusyError(RuntimeError):
    """Another process is writing this folder."""


def own_files(folder: str | os.PathLike[str]) -> list[Path]:
    """The files and folders at the top of ``folder`` that hf_vanilla wrote there (its record says so), sorted.

    Symlinks are never counted: a link sitting at a recorded name was put there by someone else. The record
    itself, the lock and hf_vanilla's hidden work folders are not listed. An empty list for a folder hf_vanilla
    did not write.
    """
    return OutputFolder(Path(folder)).own_files()


class OutputFolder:
    """A folder that hf_vanilla writes: ``kind`` is ``"run"`` (training) or ``"conversion"``."""

    def __init__(self, path: str | os.PathLike[str], kind: str = "run") -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown folder kind {kind!r}; one of {sorted(KINDS)}")
        self.path = Path(path)
        self.kind = kind
        self._created = False
        self._committed = False

    @property
    def replaced(self) -> Path:
        """Where ``--overwrite`` keeps the previous write's own files until :meth:`commit` or :meth:`undo`."""
        return self.path / REPLACED

    # ------------------------------------------------------------------------------------------
    # What is in it

    def record(self) -> dict[str, Any] | None:
        """The folder's record (None when hf_vanilla never wrote here, or the record is unreadable)."""
        try:
            record = json.loads((self.path / RECORD).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict) or not isinstance(record.get("files"), list):
            return None
        return record

    def is_ours(self) -> bool:
        """Whether hf_vanilla wrote this folder as this kind."""
        record = self.record()
        return record is not None and record.get("kind") == self.kind

    def own_files(self) -> list[Path]:
        """See the module's :func:`own_files`."""
        record = self.record() or {"files": []}
        names = {name for name in record["files"] if isinstance(name, str) and _plain_name(name)}
        return sorted(self.path / name for name in names
                      if (self.path / name).exists() and not (self.path / name).is_symlink())

    def foreign_files(self) -> list[Path]:
        """Everything at the top of the folder that hf_vanilla did not write (links included)."""
        own = set(self.own_files())
        return sorted(p for p in self.path.iterdir() if p not in own and not _is_ours_by_name(p.name))

    def is_empty(self) -> bool:
        return not any(p for p in self.path.iterdir() if p.name != LOCK)

    # ------------------------------------------------------------------------------------------
    # May we write it?

    def check(self, *, overwrite: bool = False, resume: bool = False) -> None:
        """Refuse, before anything is read or written, a folder this writer may not write: one that holds
        another kind of folder, or anything hf_vanilla did not write (``--overwrite`` replaces only a folder of
        its own kind, and then only its own files; ``--resume`` continues only a folder of its own kind)."""
        what = KINDS[self.kind][0]
        if self.path.is_symlink() and not self.path.exists():
            raise FileNotFoundError(f"{self.path} is a symbolic link to {os.readlink(self.path)}, which does not "
                                    "exist: create that folder, or choose another output folder")
        if self.path.exists() and not self.path.is_dir():
            raise FileExistsError(f"{self.path} is a file; choose a folder (new or empty) to write {what} into")
        if not self.path.exists() or self.is_empty():
            return
        record = self.record()
        if record is not None and record.get("kind") != self.kind:
            theirs = KINDS.get(record.get("kind"), ("another kind of folder",))[0]
            raise FileExistsError(f"{self.path} holds {theirs} written by hf_vanilla, not {what}: choose another "
                                  "folder (nothing was changed)")
        if record is None and resume and self.kind == "run" and (names := self._older_run_files()):
            self._write_record(names)  # adopted: every file in it is one an older hf_vanilla's run writes
            return
        if record is None:
            raise FileExistsError(self._not_ours_message(overwrite=overwrite, resume=resume))
        if not (overwrite or resume):
            how = "pass --resume to continue it, or --overwrite to start again" if self.kind == "run" else \
                "pass --overwrite to replace it"
            raise FileExistsError(f"{self.path} already holds {what}: {how} (files hf_vanilla did not write there "
                                  "are kept either way)")

    def _older_run_files(self) -> list[str] | None:
        """The files of a run an hf_vanilla without records wrote, when the folder holds nothing else: a run.json
        naming a task, a checkpoint to resume from, and only names such a run writes (no links). Else None."""
        entries = [p for p in self.path.iterdir() if p.name != LOCK]
        if any(p.is_symlink() or not OLDER_RUN_FILE.fullmatch(p.name) for p in entries):
            return None
        try:
            names_a_task = "task" in json.loads((self.path / "run.json").read_text(encoding="utf-8"))
        except (OSError, ValueError, TypeError):
            return None
        has_checkpoint = any(p.name.startswith("checkpoint-") and (p / "trainer_state.json").is_file() for p in entries)
        return sorted(p.name for p in entries) if names_a_task and has_checkpoint else None

    def _not_ours_message(self, *, overwrite: bool, resume: bool) -> str:
        what, command = KINDS[self.kind]
        entries = sorted(p.name + ("/" if p.is_dir() else "") for p in self.path.iterdir() if p.name != LOCK)
        listing = ", ".join(entries[:6]) + (f" and {len(entries) - 6} more" if len(entries) > 6 else "")
        why = (f"{self.path} is not {what} hf_vanilla wrote: it holds files hf_vanilla did not write ({listing}) "
               f"and no {RECORD}, the record of the files `{command}` writes")
        if (self.path / "run.json").is_file():
            why += " (its run.json alone does not make it one: an older hf_vanilla, or a copy made by hand)"
        if resume:
            return f"{why}, so --resume will not write into it. --resume continues a run hf_vanilla started there; " \
                   "choose another --output-dir to start a new one"
        if overwrite:
            return f"{why}, so --overwrite will not replace anything in it: choose another output folder, or " \
                   "empty it yourself"
        return f"{why}: choose a new or empty output folder"

    # ------------------------------------------------------------------------------------------
    # One writer at a time

    @contextlib.contextmanager
    def locked(self, enabled: bool = True) -> Iterator[OutputFolder]:
        """Hold the folder's lock for the block (created here when absent; removed again at the end if it was
        created and nothing was written). A second writer gets :class:`FolderBusyError` naming the holder."""
        if not enabled:
            yield self
            return
        from filelock import FileLock, Timeout

        self._created = not self.path.exists()
        self.path.mkdir(parents=True, exist_ok=True)
        lock_file = self.path / LOCK
        lock = FileLock(lock_file, blocking=False, on_acquired=_write_pid)
        try:
            lock.acquire()
        except Timeout:
            raise FolderBusyError(f"{self.path} is being written by another hf_vanilla process (pid "
                                  f"{_holder(lock_file)}); wait for it to finish or stop it, then try again") from None
        try:
            yield self
        finally:
            # Unlinked while still held: a process waiting on this file finds it gone and locks a fresh one
            # (filelock checks). Windows cannot unlink an open file; there filelock unlinks it on release.
            with contextlib.suppress(OSError):
                lock_file.unlink()
            lock.release()
            if self._created:
                with contextlib.suppress(OSError):  # not empty: something was written, and it stays
                    self.path.rmdir()

    # ------------------------------------------------------------------------------------------
    # Starting, finishing and undoing a write (call these holding the lock)

    def recover(self) -> list[str]:
        """Finish what a killed writer left half done: its committed replacement is deleted, an uncommitted one
        put back, its work folders removed. Returns what was done, in words (also for a log line)."""
        done = []
        if (self.path / DISCARDED).exists():
            _remove(self.path / DISCARDED)
            done.append(f"deleted {DISCARDED}/, the files an interrupted --overwrite had already replaced")
        if self.replaced.is_dir():
            self.undo()
            done.append(f"put back the files an interrupted --overwrite had moved into {REPLACED}/")
        self._remove_work()
        real = self.path.resolve()
        for old in sorted(real.parent.glob(f".{real.name}.replaced-*")):  # outside the folder: reported, not touched
            done.append(f"{old} holds the files of a run an interrupted --overwrite of an older hf_vanilla moved "
                        "aside; it is not this folder's and stays: move what you need back, then delete it")
        return done

    def begin(self, *, overwrite: bool) -> bool:
        """Claim the folder for a write. With ``overwrite``, hf_vanilla's own files of the previous write move
        aside (kept until :meth:`commit`, put back by :meth:`undo`); the user's stay in place. Returns whether
        a previous write was moved aside."""
        record = self.record()
        replacing = record is not None and overwrite
        if replacing:
            aside = self.replaced
            aside.mkdir()
            for path in self.own_files():
                os.replace(path, aside / path.name)
            os.replace(self.path / RECORD, aside / RECORD)
            fsync_path(self.path)
        if record is None or overwrite:
            self._write_record([])
        return replacing

    def commit(self) -> None:
        """The new write has something to keep: from now on it stays (:meth:`undo` does nothing), and the
        previous write's files go for good."""
        self._committed = True
        aside = self.replaced
        if aside.exists():
            os.replace(aside, self.path / DISCARDED)  # the point of no return, in one step
            _remove(self.path / DISCARDED)

    def undo(self) -> None:
        """Put the folder back as this write found it (unless it committed): its own new files go, the previous
        files come back."""
        if self._committed:
            return
        for path in self.own_files():
            _remove(path)
        self._remove_work()
        aside = self.replaced
        if not aside.is_dir():
            with contextlib.suppress(FileNotFoundError):
                (self.path / RECORD).unlink()
            return
        self._write_record([])  # the new files are gone: a kill from here on must not remove the old ones
        for path in sorted(aside.iterdir()):
            if path.name != RECORD:
                os.replace(path, self.path / path.name)
        os.replace(aside / RECORD, self.path / RECORD)  # last: until here, the old files are not ours to remove
        aside.rmdir()

    # ------------------------------------------------------------------------------------------
    # Writing into it

    def add(self, names: Iterable[str]) -> None:
        """Record ``names`` as files hf_vanilla writes here (before writing them: a kill never leaves one of ours
        unrecorded)."""
        record = self.record() or {"files": []}
        files = sorted(set(record["files"]) | {name for name in names if _plain_name(name)})
        if files != record["files"] or record.get("kind") != self.kind:
            self._write_record(files)

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Record every top-level entry the block creates or replaces (for writers whose file names are theirs
        to choose: the Trainer's state, the run's outputs)."""
        before = _entries(self.path)
        yield
        after = _entries(self.path)
        self.add(name for name, stamp in after.items() if before.get(name) != stamp and not _is_ours_by_name(name))

    def fresh(self, name: str, create: bool = True) -> Path:
        """An empty work folder inside this one (removed by :meth:`publish`, or by the next :meth:`recover`);
        ``create=False`` only names it (the other processes of a distributed run write into the main one's)."""
        work = self.path / f"{FRESH_PREFIX}{name}"
        if create:
            _remove(work)
            work.mkdir(parents=True)
        return work

    def publish(self, work: Path) -> list[str]:
        """Move everything in ``work`` (a :meth:`fresh` folder) into this folder, each entry atomically, recording
        the names first; then remove ``work``. A name taken by a file hf_vanilla did not write is refused
        before anything moves. Returns the names published."""
        names = sorted(p.name for p in work.iterdir())
        own = {p.name for p in self.own_files()}
        taken = [n for n in names if (os.path.lexists(self.path / n)) and n not in own]
        if taken:
            raise FileExistsError(f"{', '.join(taken)} in {self.path} {'is' if len(taken) == 1 else 'are'} not "
                                  "hf_vanilla's own (or a symbolic link), and hf_vanilla replaces only files it "
                                  "wrote: move them elsewhere, then run the same command again")
        self.add(names)
        make_shareable(work)
        for name in names:
            target = self.path / name
            if target.is_dir() and not target.is_symlink():
                _remove(target)
            os.replace(work / name, target)
        fsync_path(self.path)
        _remove(work)
        return names

    def save(self, obj: Any, **save_kwargs: Any) -> list[str]:
        """``obj.save_pretrained`` (a tokenizer, a model, a config) into this folder, through :meth:`fresh` and
        :meth:`publish`."""
        work = self.fresh(type(obj).__name__)
        obj.save_pretrained(work, **save_kwargs)
        return self.publish(work)

    @contextlib.contextmanager
    def replacing(self, *, overwrite: bool) -> Iterator[Path]:
        """Write the folder anew as one unit (``convert``): yields a work folder whose contents are published
        when the block succeeds, then the previous own files go; if the block fails they stay as they were."""
        with self.locked():
            self.recover()
            self.begin(overwrite=overwrite)
            try:
                work = self.fresh(self.kind)
                yield work
                self.publish(work)
            except BaseException:
                self.undo()
                raise
            self.commit()

    def _remove_work(self) -> None:
        for work in self.path.glob(f"{FRESH_PREFIX}*"):
            _remove(work)

    def _write_record(self, files: list[str]) -> None:
        atomic_write_json(self.path / RECORD, {"written_by": "hf_vanilla", "kind": self.kind, "files": files})


# ----------------------------------------------------------------------------------------------
# Small helpers


def _plain_name(name: str) -> bool:
    """A single path component (a record edited by hand must not point outside the folder)."""
    return bool(name) and name not in (".", "..") and "/" not in name and "\\" not in name and not _is_ours_by_name(name)


def _is_ours_by_name(name: str) -> bool:
    """The record, the lock and the work folders: hf_vanilla's bookkeeping, never a file of the user's."""
    return name in (RECORD, LOCK, REPLACED, DISCARDED) or name.startswith(FRESH_PREFIX)


def _entries(folder: Path) -> dict[str, tuple[int, int]]:
    stamps = {}
    for path in folder.iterdir():
        with contextlib.suppress(OSError):
            stat = path.lstat()
            stamps[path.name] = (stat.st_ino, stat.st_mtime_ns)
    return stamps


def _remove(path: Path) -> None:
    """Remove a file or a folder; a symlink is unlinked, never followed."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.is_dir():
        shutil.rmtree(path)


def _write_pid(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())


def _holder(path: Path) -> str:
    """The pid the lock's holder wrote, or "unknown" (Windows does not let a locked file be read)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip() or "unknown"
    except OSError:
        return "unknown"

