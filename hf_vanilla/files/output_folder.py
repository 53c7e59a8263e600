"""The folders hf_vanilla writes (a training run, a converted model): one owner that knows which files are its own.

The rule: hf_vanilla removes or replaces only files it wrote itself; it never replaces a folder holding anything
else without an explicit word; it never follows a symlink out of the folder it was given, nor replaces the link.

How it holds:

- Declared, not observed. A record, ``.hf_vanilla.json`` in the folder, lists the top-level names hf_vanilla
  writes there, each entered by the code that creates it *before* it exists (:meth:`OutputFolder.add`,
  :meth:`OutputFolder.declare`, :meth:`OutputFolder.publish`), and sealed with its size and sha256 by the same
  code once written (:meth:`OutputFolder.writing`, :meth:`~OutputFolder.publish`, :meth:`~OutputFolder.place`).
  Nothing is recorded because the folder changed. ``--overwrite``, ``--resume``, checkpoint rotation and
  ``convert --overwrite`` go by this one list (:func:`own_files`). A folder without the record is the user's.
- Trusted only for what hf_vanilla could have written. A record (or a journal) that is a link or not JSON, or
  names anything but a name its kind of folder declares (:data:`DECLARED_NAMES`: the checkpoint pattern, the
  files a run writes), a name that is a link now, or an entry without a valid size and sha256 is refused
  (:class:`UntrustedRecordError`), never trusted nor rewritten, and nothing is deleted. A recorded file whose
  content no longer matches its seal was changed after hf_vanilla wrote it: nothing replaces, moves or deletes it
  (:class:`ChangedFileError`), and a push refuses to publish it unless told to (``--allow-changed``). A record of
  an hf_vanilla before seals (a plain list of names), and a run such an hf_vanilla wrote that ``--resume`` adopts,
  name files nothing can vouch for: they stay listed under ``older`` until this hf_vanilla writes and seals them,
  and are the user's unless proven the run's. One that a write replaces is kept first, moved aside to a name the
  warning prints (:meth:`OutputFolder.claim`); deleting one (``--overwrite``, rotation) is refused naming the
  ``mv`` that keeps it. An unsealed entry outside ``older`` is this hf_vanilla's own write in flight, or cut short.
- The folder itself is never renamed, exchanged or deleted while it holds anything: files are staged in a hidden
  folder inside it and moved in one by one (each ``os.replace`` is atomic). So a symlinked ``--output-dir``
  stays a link and the files land in its target, and the user's files beside ours stay where they are.
- A new write keeps a journal, ``.hf_vanilla-journal.json``, from its start to its first checkpoint: written
  before anything moves, it holds the previous write's record and the names ``--overwrite`` moves into
  ``.hf_vanilla-replaced/``, and a phase. Every step after it can be repeated, so :meth:`~OutputFolder.recover`
  finishes what a killed writer left at any point, by the phase alone:

  ``aside``      the previous write's files are moving out or back, nothing new exists: put them all back.
  ``new``        the new write is writing (its files are the record's): remove them, then as ``aside``; unless
                 the entry it was putting in place to commit (``committing_by``, its first checkpoint) is there:
                 that one rename committed it, so on as ``discarding``.
  ``discarding`` the new write has committed: delete what was moved aside.

  Either the previous write or the new one is complete afterwards, never less; the returned lines say which.
- One writer at a time: an exclusive lock file inside the folder (``filelock``: the system drops the lock of a
  process that dies).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shlex
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from ..errors import HfVanillaError, sentence
from .atomic import (
    NAME_MAX,
    atomic_write_json,
    atomic_write_text,
    clear_disk_errors,
    file_step,
    fsync_path,
    make_shareable,
)
from .schema import InvalidFileError, JournalFile, RecordFile, RunFile, parse_json, read_json

logger = logging.getLogger(__name__)

RECORD = ".hf_vanilla.json"
JOURNAL = ".hf_vanilla-journal.json"
LOCK = ".hf_vanilla.lock"
REPLACED = ".hf_vanilla-replaced"
DISCARDED = ".hf_vanilla-discarded"  # an older hf_vanilla's committed --overwrite; recover() deletes it
FRESH_PREFIX = ".hf_vanilla-fresh-"
TEMPORARY = re.compile(r"\.\.hf_vanilla.*\.tmp")  # a bookkeeping file's atomic write, killed before its rename

#: The journal's phases (see the module's docstring).
ASIDE, NEW, DISCARDING = "aside", "new", "discarding"

#: Every name a run of an hf_vanilla without records (before .hf_vanilla.json) wrote at the top of its folder.
OLDER_RUN_FILE = re.compile(
    r"run\.json|README\.md|metrics\.json|curves\.png|trainer_state\.json|training_args\.bin|config\.json"
    r"|generation_config\.json|model\.safetensors(\.index\.json)?|model-\d{5}-of-\d{5}\.safetensors"
    r"|tokenizer\.json|tokenizer_config\.json|special_tokens_map\.json|chat_template\.jinja"
    r"|(configuration|modeling)_vanilla\.py|positional\.py|checkpoint-\d+", re.ASCII)

#: What each kind of folder is called in messages, and the option that writes it again.
KINDS = {"run": ("a training run", "hf-vanilla train"), "conversion": ("a converted model", "hf-vanilla convert"),
         "experiments": ("experiment outputs", "scripts/experiments.py")}

#: The code files that travel with a model (:func:`hf_vanilla.checkpoint.code_files`; tests/test_train.py keeps
#: the two equal: this layer cannot import the model).
CODE_FILE = r"(configuration_vanilla|engines|modeling_vanilla|positional|rules|transformers_releases|variants)\.py"

#: The names each kind of folder's writers put at its top: a recorded name outside its kind's is not one
#: hf_vanilla wrote. A run: the model (save_pretrained's files, the tokenizer's, the code), the run files, the
#: Trainer's, TensorBoard's ``runs/``, scripts/main_job.py's summary and ``checkpoint-N`` (tests/test_train.py keeps
#: this equal to what a run writes). A conversion: the model's files and whatever side files ``convert`` copies
#: from SRC_DIR (any name that is not hidden), so there its seals alone tell. Experiments: NAME.png/.md/.json.
DECLARED_NAMES = {
    "run": re.compile(
        r"run\.json|README\.md|metrics\.json|curves\.png|trainer_state\.json|training_args\.bin|main_job\.json|runs"
        r"|config\.json|generation_config\.json|model\.safetensors(\.index\.json)?|model-\d{5}-of-\d{5}\.safetensors"
        r"|tokenizer\.json|tokenizer_config\.json|special_tokens_map\.json|added_tokens\.json|chat_template\.jinja"
        r"|tokenizer\.model|vocab\.json|vocab\.txt|merges\.txt|checkpoint-\d+|" + CODE_FILE, re.ASCII),
    "conversion": re.compile(r"[^.].*", re.DOTALL),
    "experiments": re.compile(r"[\w-]+\.(png|md|json)"),
}

#: Kinds whose unsealed entries this hf_vanilla declared are trusted by name (a write in flight, or killed before
#: its seal): their names are a fixed set (a conversion's are not). An older hf_vanilla's entries never are.
NAMED_KINDS = ("run", "experiments")

#: Kinds each write adds its own names to (one experiment's figure beside another's): writing one of these folders
#: again needs no --overwrite, and replaces only the names that write claims (:meth:`OutputFolder.claim`).
ADDED_TO = ("experiments",)

_SHA256 = re.compile(r"[0-9a-f]{64}")

#: An atomic write's temporary file beside its target, as ``tempfile.mkstemp`` names it (:func:`.atomic.atomic_write_bytes`).
_OLDER_TEMPORARY = re.compile(r"\.(.+)\.[a-z0-9_]{8}\.tmp", re.ASCII | re.DOTALL)

#: A Trainer checkpoint's name: ASCII digits only (``checkpoint-٣`` is not one; ``int()`` would read it as 3).
CHECKPOINT = re.compile(r"checkpoint-[0-9]+", re.ASCII)


class UntrustedRecordError(HfVanillaError, ValueError):
    """The folder's record (or journal) is not one hf_vanilla wrote: a link, not JSON, or naming paths."""


class ChangedFileError(HfVanillaError, FileExistsError):
    """A file hf_vanilla wrote was changed since (its size or sha256 differs from its record)."""


class OutputPathError(HfVanillaError, ValueError):
    """An output folder's path that no filesystem takes (a name longer than :data:`.atomic.NAME_MAX` bytes)."""


class FolderBusyError(HfVanillaError, RuntimeError):
    """Another process is writing this folder."""


def check_name_lengths(path: Path) -> None:
    """Refuse, in one sentence, a folder path with a name longer than a file name may be (the system would say
    "File name too long" from deep inside the first call that touches it)."""
    for part in path.parts:
        if (size := len(os.fsencode(part))) > NAME_MAX:
            raise OutputPathError(f"{path}: the name {part[:24]}... is {size} bytes long, more than the {NAME_MAX} a "
                                  "file name may have: choose a shorter name for the output folder")


def own_files(folder: str | os.PathLike[str]) -> list[Path]:
    """The files and folders at the top of ``folder`` that hf_vanilla wrote there (its record says so), sorted.

    Symlinks are never counted: a link sitting at a recorded name was put there by someone else. The record
    itself, the lock and hf_vanilla's hidden work folders are not listed. An empty list for a folder hf_vanilla
    did not write; :class:`UntrustedRecordError` for a record hf_vanilla did not write.
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
    def committed(self) -> bool:
        """Whether this write has committed (its first checkpoint is in place: it stays, whatever happens)."""
        return self._committed

    @property
    def created(self) -> bool:
        """Whether this write created the folder (it did not exist when :meth:`locked` began)."""
        return self._created

    @property
    def replaced(self) -> Path:
        """Where ``--overwrite`` keeps the previous write's own files until :meth:`commit` or :meth:`undo`."""
        return self.path / REPLACED

    # ------------------------------------------------------------------------------------------
    # What is in it

    def record(self) -> dict[str, Any] | None:
        """The folder's record (None when hf_vanilla never wrote here), its ``files`` a dict: name -> its seal
        (``{"size", "sha256"}``) or None (declared, not yet written; or recorded by an hf_vanilla before seals).
        A record hf_vanilla cannot have written is :class:`UntrustedRecordError` (see the module's docstring)."""
        record = _read_own_json(self.path / RECORD, RecordFile)
        if record is None:
            return None
        problem, record = _validated(record)
        if problem is None and (links := [name for name in record["files"] if (self.path / name).is_symlink()]):
            problem = f"names {links} that {'is' if len(links) == 1 else 'are'} a symbolic link now"
        if problem is not None:
            raise UntrustedRecordError(f"{self.path / RECORD} holds {problem}; hf_vanilla did not write it and will "
                                       "neither trust nor rewrite it: restore it, or move it out of the folder "
                                       "(the folder is then yours, and nothing in it hf_vanilla's)")
        return record

    def changed(self, names: Iterable[str] | None = None) -> list[str]:
        """The recorded names (all, or those of ``names``) whose file no longer matches the size and sha256 it
        was sealed with: changed since hf_vanilla wrote it. Unsealed and missing ones are not counted."""
        files = (self.record() or {"files": {}})["files"]
        wanted = files if names is None else [name for name in names if name in files]
        return sorted(name for name in wanted if files[name] is not None and os.path.lexists(self.path / name)
                      and digest(self.path / name) != files[name])

    def unsealed(self, names: Iterable[str] | None = None) -> list[str]:
        """The recorded names (all, or those of ``names``) that exist without a seal (written by an hf_vanilla
        before seals, or by a writer killed before it sealed them): nothing tells whether they changed."""
        files = (self.record() or {"files": {}})["files"]
        wanted = files if names is None else [name for name in names if name in files]
        return sorted(name for name in wanted if files[name] is None and os.path.lexists(self.path / name))

    def older(self, names: Iterable[str] | None = None) -> list[str]:
        """The recorded names (all, or those of ``names``) that exist as an older hf_vanilla wrote them, unsealed
        (its record's plain list, or a run adopted by --resume): the user's unless proven the run's."""
        older = (self.record() or {"older": []})["older"]
        wanted = older if names is None else [name for name in names if name in older]
        return sorted(name for name in wanted if os.path.lexists(self.path / name))

    def _refuse_changed(self, names: Iterable[str], doing: str, *, older: bool = True) -> None:
        """Refuse to ``doing`` (replace, move aside, delete) any of ``names`` that changed since hf_vanilla
        wrote it, or that it cannot tell it wrote: an older hf_vanilla's (unless ``older`` is False: the caller
        keeps those aside), or any unsealed one in a folder whose names are not a fixed set."""
        names = list(names)
        changed = self.changed(names)
        unknown = self.unsealed(names) if self.kind not in NAMED_KINDS else self.older(names) if older else []
        if not changed and not unknown:
            return
        said = [f"{', '.join(changed)} changed since hf_vanilla wrote {'it' if len(changed) == 1 else 'them'} "
                "(size or sha256 differs from its record)"] * bool(changed) + [
            f"{', '.join(unknown)} carr{'ies' if len(unknown) == 1 else 'y'} no seal in its record (an older "
            "hf_vanilla's)"] * bool(unknown)
        kept = [shlex.quote(str(self.path / name)) for name in changed + unknown]
        keep = " && ".join(f"mv {path} {path}.mine" for path in kept)
        it, is_ = ("it", "it is") if len(kept) == 1 else ("them", "they are")
        raise ChangedFileError(f"{self.path}: {' and '.join(said)}, so {it} may hold your edits and hf_vanilla will "
                               f"not {doing} {it}: keep {it} under another name (`{keep}`: {is_} then yours and "
                               "stays) or put back what hf_vanilla wrote, then run the same command again; nothing "
                               "was changed")

    def check_unchanged(self, names: Iterable[str], doing: str = "replace") -> None:
        """Refuse (:class:`ChangedFileError`, one sentence naming the file and the ``mv`` that keeps it) before any
        of ``names`` that is recorded here is replaced or deleted while its bytes differ from its seal: the user
        changed it since hf_vanilla wrote it. Every writer into a folder of ours calls this (through :meth:`claim`,
        :meth:`remove`, :meth:`begin`) before it replaces or deletes a recorded file; a writer of its own (a script
        writing an output again) calls it too."""
        self._refuse_changed(names, doing)

    def is_ours(self) -> bool:
        """Whether hf_vanilla wrote this folder as this kind."""
        record = self.record()
        return record is not None and record.get("kind") == self.kind

    def own_files(self) -> list[Path]:
        """See the module's :func:`own_files`."""
        record = self.record() or {"files": {}}
        return sorted(self.path / name for name in record["files"] if (self.path / name).exists())

    def foreign_files(self) -> list[Path]:
        """Everything at the top of the folder that hf_vanilla did not write (links included)."""
        own = set(self.own_files())
        return sorted(p for p in self.path.iterdir() if p not in own and not _is_ours_by_name(p.name))

    def is_empty(self) -> bool:
        return not any(p for p in self.path.iterdir() if p.name != LOCK)

    # ------------------------------------------------------------------------------------------
    # May we write it?

    def check(self, *, overwrite: bool = False, resume: bool = False) -> None:
        """Refuse, before anything of the write is read or written, a folder this writer may not write: one
        another process is writing, one that holds another kind of folder, or anything hf_vanilla did not write
        (``--overwrite`` replaces only a folder of its own kind, and then only its own files; ``--resume``
        continues only a folder of its own kind). What a killed writer left half done is recovered first
        (:meth:`recover`, under the lock), so the folder is judged as it stands, never by our own journal."""
        what = KINDS[self.kind][0]
        check_name_lengths(self.path)
        if self.path.is_symlink() and not self.path.exists():
            raise FileNotFoundError(f"{self.path} is a symbolic link to {os.readlink(self.path)}, which does not "
                                    "exist: create that folder, or choose another output folder")
        if self.path.exists() and not self.path.is_dir():
            raise FileExistsError(f"{self.path} is a file; choose a folder (new or empty) to write {what} into")
        if not self.path.exists() or self.is_empty():
            return
        if (holder := self._busy_holder()) is not None:
            raise FolderBusyError(self._busy_message(holder))
        if self._left_by_a_killed_writer():
            with self.locked():
                for line in self.recover():
                    logger.warning("%s: %s", self.path, line)
            if self.is_empty():
                return
        record = self.record()
        if record is not None and record.get("kind") != self.kind:
            theirs = KINDS.get(record.get("kind"), ("another kind of folder",))[0]
            raise FileExistsError(f"{self.path} holds {theirs} written by hf_vanilla, not {what}: choose another "
                                  "folder (nothing was changed)")
        if record is not None and self.kind in ADDED_TO:
            return  # each write claims its own names; a user's file of the same name is refused then
        if record is None and resume and self.kind == "run" and (names := self._older_run_files()):
            # adopted: every file in it is one an older hf_vanilla's run writes; none is sealed, so each that the
            # resumed run writes again is kept under a printed name first (claim)
            self._write_record(dict.fromkeys(names), older=names)
            return
        if record is None:
            raise FileExistsError(self._not_ours_message(overwrite=overwrite, resume=resume))
        if overwrite and not resume:  # said now, before anything is loaded; begin() says it again under the lock
            self._refuse_changed([path.name for path in self.own_files()], "replace")
        if resume:  # a resumed run writes its model, tokenizer, records and card again; its checkpoints it only adds
            self._refuse_changed([path.name for path in self.own_files() if not CHECKPOINT.fullmatch(path.name)],
                                 "replace", older=False)  # an older hf_vanilla's are kept aside as they are replaced
        if not (overwrite or resume):
            how = "pass --resume to continue it, or --overwrite to start again" if self.kind == "run" else \
                "pass --overwrite to replace it"
            raise FileExistsError(f"{self.path} already holds {what}: {how} (files hf_vanilla did not write there "
                                  "are kept either way)")

    def _left_by_a_killed_writer(self) -> bool:
        """Whether the folder holds hf_vanilla's bookkeeping that only a write cut short leaves (a journal, a
        folder of moved-aside files, a work folder, a temporary file, a lock file that nobody holds: the caller
        asked first, and a finished write unlinks its lock file)."""
        return any(_is_ours_by_name(p.name) and p.name != RECORD for p in self.path.iterdir()) \
            or bool(self._stray_temporaries())

    def _stray_temporaries(self) -> list[Path]:
        """The temporary files an hf_vanilla before work folders left beside a recorded name when it was killed
        in an atomic write (``.run.json.k3x9q_2a.tmp``: ``tempfile``'s 8 random characters): only ever its own."""
        try:
            recorded = set((self.record() or {"files": {}})["files"])
        except UntrustedRecordError:
            return []
        found = (_OLDER_TEMPORARY.fullmatch(p.name) for p in self.path.glob(".*.tmp"))
        return sorted(self.path / match.group(0) for match in found if match and match.group(1) in recorded)

    def _older_run_files(self) -> list[str] | None:
        """The files of a run an hf_vanilla without records wrote, when the folder holds nothing else: a run.json
        naming a task, a checkpoint to resume from, and only names such a run writes (no links). Else None."""
        entries = [p for p in self.path.iterdir() if p.name != LOCK]
        if any(p.is_symlink() or not OLDER_RUN_FILE.fullmatch(p.name) for p in entries):
            return None
        try:
            names_a_task = "task" in read_json(self.path / "run.json", RunFile)
        except (OSError, ValueError):
            return None
        has_checkpoint = any(p.name.startswith("checkpoint-") and (p / "trainer_state.json").is_file() for p in entries)
        return sorted(p.name for p in entries) if names_a_task and has_checkpoint else None

    #: How many of a refused folder's names its sentence gives: a folder save_pretrained wrote holds 10 (7 of them
    #: code files), so a file of the user's beside them is still named.
    NAMED = 12

    def _not_ours_message(self, *, overwrite: bool, resume: bool) -> str:
        what, command = KINDS[self.kind]
        entries = sorted(p.name + ("/" if p.is_dir() else "") for p in self.path.iterdir() if p.name != LOCK)
        more = len(entries) - self.NAMED
        listing = ", ".join(entries[:self.NAMED]) + (f" and {more} more" if more > 0 else "")
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
        self._created = not self.path.exists()
        with file_step("creating", self.path):
            self.path.mkdir(parents=True, exist_ok=True)
        lock_file = self.path / LOCK
        lock = _file_lock(lock_file)
        try:
            acquired = _try_acquire(lock)
        except OSError:  # the system refused the lock file (a full disk, a permission): nothing was written
            self._remove_if_created()
            raise
        if not acquired:
            raise FolderBusyError(self._busy_message(_holder(lock_file)))
        try:
            yield self
        finally:
            # Unlinked while still held: a process waiting on this file finds it gone and locks a fresh one
            # (filelock checks). Windows cannot unlink an open file; there filelock unlinks it on release.
            with contextlib.suppress(OSError):
                lock_file.unlink()
            lock.release()
            self._remove_if_created()

    def _remove_if_created(self) -> None:
        if self._created:
            with contextlib.suppress(OSError):  # not empty: something was written, and it stays
                self.path.rmdir()

    def as_left(self, existed: bool) -> str:
        """What the folder is after a write into it failed and undid what it could, said truly (the end of the
        sentence that names the next command): put back by its journal first, as found, not created, or as found
        but for bookkeeping of ours the system would not let the write remove (the next command clears it)."""
        if self.write_is_complete():
            return (f"{self.path} holds this command's complete write, and that command first deletes what it "
                    f"replaced (kept in {REPLACED}/; its journal says so)")
        if (self.path / JOURNAL).exists():  # the undo failed too: the next command's recovery finishes it first
            return f"it first puts {self.path} back as this command found it (its journal says how)"
        if not existed and not os.path.lexists(self.path):
            return f"{self.path} was not created"
        left = self._left_behind()
        why = "(hf_vanilla's bookkeeping, which the system would not let it remove: that command clears it)"
        if not existed:
            return f"{self.path} was created and holds only {', '.join(left) or 'nothing'} {why}"
        return f"{self.path} is as this command found it" + (f" but for {', '.join(left)} {why}" if left else "")

    def write_is_complete(self) -> bool:
        """Whether the journal left here says its write had committed: only deleting what it replaced is left."""
        journal = self._journal()
        return journal is not None and (journal["phase"] == DISCARDING or self._committed_by_rename(journal))

    def _left_behind(self) -> list[str]:
        """hf_vanilla's bookkeeping at the folder's top besides its record: its lock, work folders, temporary files."""
        return sorted({p.name for p in self.path.iterdir() if _is_ours_by_name(p.name) and p.name != RECORD}
                      | {p.name for p in self._stray_temporaries()})

    def _busy_holder(self) -> str | None:
        """The pid of the process holding this folder's lock now, or None when nobody does."""
        lock_file = self.path / LOCK
        if not lock_file.is_file():
            return None
        lock = _file_lock(lock_file)
        if _try_acquire(lock):
            lock.release()
            return None
        return _holder(lock_file)

    def _busy_message(self, holder: str) -> str:
        what = KINDS[self.kind][0]
        stop = f"stop it (kill {holder})" if holder.isdigit() else "stop it"
        return (f"{self.path}: {what} is in progress there (an hf_vanilla process, pid {holder}, is writing it); "
                f"wait for it to finish, or {stop}, then run the command again")

    # ------------------------------------------------------------------------------------------
    # Starting, finishing and undoing a write (call these holding the lock): the journal

    def recover(self) -> list[str]:
        """Finish what a killed writer left half done, by its journal (see the module's docstring); remove its
        work folders. Returns what was done, in words (also for a log line)."""
        done = []
        strays = self._stray_temporaries()  # named by the record, which the journal's ending may replace
        if (self.path / DISCARDED).exists():
            _remove(self.path / DISCARDED)
            done.append(f"deleted {DISCARDED}/, the files an interrupted --overwrite had already replaced")
        journal = self._journal() or self._older_journal()
        if journal is not None:
            said = self._recovered(journal)
            self._finish(journal)
            done.append(said)
        self._remove_work()
        for stray in strays:
            _remove(stray)
        real = self.path.resolve()
        for old in sorted(real.parent.glob(f".{real.name}.replaced-*")):  # outside the folder: reported, not touched
            done.append(f"{old} holds the files of a run an interrupted --overwrite of an older hf_vanilla moved "
                        "aside; it is not this folder's and stays: move what you need back, then delete it")
        return done

    def begin(self, *, overwrite: bool) -> bool:
        """Claim the folder for a write. With ``overwrite``, hf_vanilla's own files of the previous write move
        aside (kept until :meth:`commit`, put back by :meth:`undo`); the user's stay in place. Returns whether
        a previous write was moved aside. A folder that holds a write of ours and no ``overwrite`` is resumed:
        no journal, its files stay whatever happens."""
        if self._journal() is not None:
            raise RuntimeError(f"{self.path / JOURNAL} is left from an interrupted write: recover() first")
        previous = (self.path / RECORD).read_text(encoding="utf-8") if self.record() is not None else None
        if previous is not None and not overwrite:
            return False
        names = [path.name for path in self.own_files()] if previous is not None else []
        self._refuse_changed(names, "replace")
        self._write_journal(ASIDE, names, previous)  # the intent, durably, before anything moves
        if names:
            with file_step("creating", self.replaced):
                self.replaced.mkdir(exist_ok=True)
        for name in names:
            with file_step("moving aside", self.path / name):
                os.replace(self.path / name, self.replaced / name)
        fsync_path(self.path)
        self._write_record({})
        self._write_journal(NEW, names, previous)
        return bool(names)

    def commit(self) -> None:
        """The new write has something to keep: from now on it stays (:meth:`undo` does nothing), and the
        previous write's files go for good."""
        self._committed = True
        journal = self._journal()
        if journal is None:
            return
        if journal["phase"] == NEW:
            journal = self._write_journal(DISCARDING, journal["names"], journal["record"])  # the point of no return
        self._finish(journal)

    def undo(self) -> None:
        """Put the folder back as this write found it (unless it committed): its own new files go, the previous
        files come back."""
        if self._committed:
            return
        journal = self._journal()
        if journal is not None:
            self._finish(journal)

    def undo_after_failure(self) -> bool:
        """:meth:`undo` on the way out of a write that failed: if it fails too (on the same full disk), the failure
        that ended the write stays the one said, and the next command's recovery finishes the undo (the journal
        holds what to do). Returns whether the folder is back as the write found it."""
        try:
            self.undo()
        except OSError as error:
            logger.warning("%s: putting the folder back failed too (%s); the next command in it does that first",
                           self.path, sentence(error))
            return False
        return True

    def _finish(self, journal: dict[str, Any]) -> None:
        """Carry the journal's phase through to its end; every step can be repeated after a kill."""
        names, previous = journal["names"], journal["record"]
        if self._committed_by_rename(journal):
            journal = self._write_journal(DISCARDING, names, previous)
        if journal["phase"] == DISCARDING:  # said step by step: a committed write's failure here names what is left
            with file_step("deleting what it replaced, in", self.replaced):
                _remove(self.replaced)
            with file_step("deleting its journal", self.path / JOURNAL):
                (self.path / JOURNAL).unlink(missing_ok=True)
            return
        if journal["phase"] == NEW:
            for path in self.own_files():
                if self._keep_if_changed(path.name) is None:  # one the user changed since is kept, under a printed name
                    _remove(self._move_away(path.name))
            self._remove_work()
            self._write_journal(ASIDE, names, previous)  # the new files are gone: from here on, only put back
        for name in names:
            if os.path.lexists(self.replaced / name):
                os.replace(self.replaced / name, self.path / name)
        if previous is None:
            (self.path / RECORD).unlink(missing_ok=True)
        else:
            atomic_write_text(self.path / RECORD, previous)
        _remove(self.replaced)
        (self.path / JOURNAL).unlink(missing_ok=True)

    def _committed_by_rename(self, journal: dict[str, Any]) -> bool:
        """Whether the entry whose rename commits the new write (:meth:`place`) is in place: it arrived whole."""
        name = journal.get("committing_by")
        return journal["phase"] == NEW and name is not None and (self.path / name).is_dir() \
            and not (self.path / name).is_symlink()

    def _recovered(self, journal: dict[str, Any]) -> str:
        phase, had_old = journal["phase"], journal["record"] is not None
        if self._committed_by_rename(journal):
            return (f"an interrupted write had put {journal['committing_by']} in place: it stays, with the write "
                    f"it belongs to" + (f" (the files it replaced, in {REPLACED}/, were deleted)" if had_old else "")
                    + "; --resume continues from it")
        if phase == DISCARDING:
            return (f"an interrupted --overwrite had committed: the new write stays, complete, and the files it "
                    f"replaced (in {REPLACED}/) were deleted")
        if had_old:
            return (f"an interrupted --overwrite had not committed: what it replaced is back, complete (put back "
                    f"from {REPLACED}/), and the interrupted write's own files were removed")
        return ("an interrupted write had not committed (no checkpoint yet): its files were removed and the folder "
                "is as it found it")

    def _journal(self) -> dict[str, Any] | None:
        journal = _read_own_json(self.path / JOURNAL, JournalFile)
        if journal is None:
            return None
        names = journal.get("names") if isinstance(journal, dict) else None
        previous = journal.get("record") if isinstance(journal, dict) else None
        declared = DECLARED_NAMES[self.kind]
        valid = (isinstance(names, list) and all(_plain_name(name) and declared.fullmatch(name) for name in names)
                 and journal.get("phase") in (ASIDE, NEW, DISCARDING)
                 and (previous is None or (isinstance(previous, str) and _record_text_is_valid(previous, self.kind)))
                 and (journal.get("committing_by") is None or _plain_name(journal.get("committing_by"))))
        if not valid or self.replaced.is_symlink():  # a link would move files in from where it points
            raise UntrustedRecordError(f"{self.path / JOURNAL} is not a journal hf_vanilla wrote (or {REPLACED} is "
                                       "a link); it will not act on it: restore it, or move it out of the folder")
        return journal

    def _older_journal(self) -> dict[str, Any] | None:
        """The journal an hf_vanilla without journals implied by its ``.hf_vanilla-replaced/`` (it moved the
        record last: with the record there the new write had begun; without, the move was cut short)."""
        if not self.replaced.is_dir() or self.replaced.is_symlink():
            return None
        names = sorted(p.name for p in self.replaced.iterdir() if _plain_name(p.name))
        aside_record = self.replaced / RECORD
        if aside_record.is_file() and not aside_record.is_symlink():
            return self._write_journal(NEW, names, aside_record.read_text(encoding="utf-8"))
        current = self.path / RECORD
        previous = current.read_text(encoding="utf-8") if self.record() is not None else None
        return self._write_journal(ASIDE, names, previous)

    def _write_journal(self, phase: str, names: list[str], record: str | None,
                       committing_by: str | None = None) -> dict[str, Any]:
        journal = {"written_by": "hf_vanilla", "phase": phase, "names": sorted(names), "record": record}
        if committing_by is not None:
            journal["committing_by"] = committing_by
        atomic_write_json(self.path / JOURNAL, journal)
        return journal

    # ------------------------------------------------------------------------------------------
    # Writing into it

    def add(self, names: Iterable[str], settled: Iterable[str] = ()) -> None:
        """Record ``names`` as files hf_vanilla writes here (before writing them: a kill never leaves one of ours
        unrecorded); those of ``settled`` are no longer an older hf_vanilla's (kept aside: the name is this
        write's)."""
        names = set(names)
        if strays := sorted(name for name in names if not _plain_name(name)):
            raise ValueError(f"cannot record {strays} in {self.path}: only plain names of files in it")
        record = self.record() or {"files": {}}
        files = {**record["files"], **dict.fromkeys(names)}  # sealed once written (seal)
        older = set(record.get("older", ())) - set(settled)
        if files != record["files"] or record.get("kind") != self.kind or older != set(record.get("older", ())):
            self._write_record(files, older)

    def claim(self, names: Iterable[str]) -> None:
        """Record ``names`` as files hf_vanilla is about to write here, refusing (before anything is recorded or
        written) a name taken by a file hf_vanilla did not write: that file is the user's."""
        names = sorted(set(names))
        own = {p.name for p in self.own_files()}
        taken = [name for name in names if os.path.lexists(self.path / name) and name not in own]
        if taken:
            raise FileExistsError(f"{', '.join(taken)} in {self.path} {'is' if len(taken) == 1 else 'are'} not "
                                  "hf_vanilla's own (or a symbolic link), and hf_vanilla replaces only files it "
                                  "wrote: move them elsewhere, then run the same command again")
        self._refuse_changed([name for name in names if os.path.lexists(self.path / name)], "replace", older=False)
        older = self.older(names)  # nothing vouches for them: kept, never replaced
        for name in older:
            kept = self._keep_aside(name, "older")
            logger.warning("%s was recorded by an older hf_vanilla without a seal, so nothing tells it is the run's "
                           "and not yours: kept as %s, yours now; a new %s takes its name", self.path / name, kept,
                           name)
        self.add(names, settled=older)  # a name of ours written again (a resumed run re-saving a torn file) is this write's

    def seal(self, names: Iterable[str]) -> None:
        """Record the size and sha256 of ``names`` as they are now: called by the code that has just written them
        (:meth:`writing`, :meth:`publish`, :meth:`place`), never on what is merely found in the folder."""
        record = self.record() or {"files": {}}
        files = dict(record["files"])
        for name in names:
            if name not in files:
                raise ValueError(f"{name} is not recorded in {self.path / RECORD}: declare it before writing it")
            files[name] = digest(self.path / name)
        self._write_record(files, record.get("older", ()))

    @contextlib.contextmanager
    def writing(self, name: str) -> Iterator[Path]:
        """:meth:`declare` ``name`` (refused if it is the user's or changed since), yield a path in a work folder
        to write it to, then put it in place with one rename and :meth:`seal` it (:meth:`publish`): the one way a
        file of ours is written at the folder's top by a caller. Never in place: the old file's bytes stay with
        any other name it has (a hard-link backup), and a kill leaves only the work folder, which
        :meth:`recover` removes."""
        self.declare(name)
        work = self.fresh(f"writing-{name}")
        with clear_disk_errors(work / name):  # the caller's own writer (the Trainer's JSON, matplotlib) is said too
            yield work / name
        self.publish(work)

    def write_text(self, name: str, text: str) -> Path:
        """``text`` as ``name``, atomically, declared and sealed (:meth:`writing`)."""
        with self.writing(name) as path:
            atomic_write_text(path, text)
        return path

    def write_json(self, name: str, payload: Any) -> Path:
        """``payload`` as JSON in ``name``, atomically, declared and sealed (:meth:`writing`)."""
        with self.writing(name) as path:
            atomic_write_json(path, payload)
        return path

    def declare(self, name: str) -> Path:
        """:meth:`claim` one name; its path, to write."""
        self.claim([name])
        return self.path / name

    def place(self, source: Path, name: str, *, commits: bool = False) -> Path:
        """Put ``source`` (complete and flushed) in place as ``name`` with one ``os.replace``, its name recorded
        first. With ``commits`` that rename is the new write's commit (a checkpoint: the run has something to
        keep): the journal names the entry beforehand, so a kill right after the rename is recovered by keeping
        the write, never by deleting what is visibly in place; then the commit runs (:meth:`commit`)."""
        self._keep_if_changed(name)
        final = self.declare(name)
        journal = self._journal()
        if commits and journal is not None and journal["phase"] == NEW:
            self._write_journal(NEW, journal["names"], journal["record"], committing_by=name)
        if final.is_dir() and not final.is_symlink():  # the same name saved again (a resumed run): replaced
            self.remove(name)
            self.add([name])
        with file_step("moving into place", final):
            os.replace(source, final)
        fsync_path(self.path)
        self.seal([name])
        if commits:
            self.commit()
        return final

    def _keep_if_changed(self, name: str) -> Path | None:
        """Move a recorded entry that changed since hf_vanilla wrote it (a checkpoint skipped as damaged, then saved
        again by the resumed run) aside to a free name of its own, said in a warning, before a new one takes its
        name: it is the user's from then on (unrecorded), nothing of it is lost. Returns where it went, or None."""
        if not self.changed([name]):
            return None
        kept = self._keep_aside(name, "changed")
        logger.warning("%s changed since hf_vanilla wrote it (its seal no longer matches): kept as %s, which is yours "
                       "now; a new %s takes its name", self.path / name, kept, name)
        return kept

    def _keep_aside(self, name: str, why: str) -> Path:
        """Move ``name`` to the first free ``<name>.<why>-N`` beside it (one rename); where it went."""
        kept = next(self.path / f"{name}.{why}-{n}" for n in range(1, 10_000)
                    if not os.path.lexists(self.path / f"{name}.{why}-{n}"))
        with file_step("moving aside", self.path / name):
            os.replace(self.path / name, kept)
        return kept

    def remove(self, name: str) -> None:
        """Delete one of hf_vanilla's own files or folders here: first renamed into a work folder (one atomic
        step, so no half-deleted entry is ever left at its name), dropped from the record, then deleted. A kill
        leaves at most a recorded name whose file is gone (harmless) and a work folder the next :meth:`recover`
        removes."""
        path = self.path / name
        if path not in self.own_files():
            raise FileNotFoundError(f"{path} is not one of hf_vanilla's own files; it is left alone")
        self._refuse_changed([name], "delete")
        doomed = self._move_away(name)
        record = self.record() or {"files": {}}
        self._write_record({key: seal for key, seal in record["files"].items() if key != name}, record.get("older", ()))
        _remove(doomed)

    def _move_away(self, name: str) -> Path:
        """Rename ``name`` into a work folder to delete it there (one atomic step: never half deleted at its name,
        where a half-deleted entry would differ from its seal); the work folder, which :meth:`recover` removes."""
        doomed = self.fresh(f"removing-{name}", create=False)
        _remove(doomed)
        with file_step("moving away to delete", self.path / name):
            os.replace(self.path / name, doomed)
        return doomed

    def fresh(self, name: str, create: bool = True) -> Path:
        """An empty work folder inside this one (removed by :meth:`publish`, or by the next :meth:`recover`);
        ``create=False`` only names it (the other processes of a distributed run write into the main one's)."""
        work = self.path / f"{FRESH_PREFIX}{name}"
        if create:
            _remove(work)
            with file_step("creating the work folder", work):
                work.mkdir(parents=True)
        return work

    def publish(self, work: Path) -> list[str]:
        """Move everything in ``work`` (a :meth:`fresh` folder) into this folder, each entry atomically, recording
        the names first; then remove ``work``. A name taken by a file hf_vanilla did not write is refused
        before anything moves. Returns the names published."""
        names = sorted(p.name for p in work.iterdir())
        self.claim(names)
        make_shareable(work)
        for name in names:
            target = self.path / name
            if target.is_dir() and not target.is_symlink():
                _remove(target)
            with file_step("moving into place", target):
                os.replace(work / name, target)
        fsync_path(self.path)
        self.seal(names)
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
                with clear_disk_errors(self.path):  # a full disk in any writer of the block is said as such
                    work = self.fresh(self.kind)
                    yield work
                    self.publish(work)
            except BaseException:
                self.undo_after_failure()
                raise
            self.commit()

    def _remove_work(self) -> None:
        for work in self.path.glob(f"{FRESH_PREFIX}*"):
            _remove(work)
        for temporary in self.path.glob("..hf_vanilla*.tmp"):
            if TEMPORARY.fullmatch(temporary.name):
                _remove(temporary)

    def _write_record(self, files: dict[str, dict[str, Any] | None], older: Iterable[str] = ()) -> None:
        """The record: ``files`` and, of ``older`` (an older hf_vanilla's names), those still unsealed."""
        record: dict[str, Any] = {"written_by": "hf_vanilla", "kind": self.kind, "files": dict(sorted(files.items()))}
        if still := sorted(name for name in set(older) if name in files and files[name] is None):
            record["older"] = still
        atomic_write_json(self.path / RECORD, record)


# ----------------------------------------------------------------------------------------------
# Small helpers


def _read_own_json(path: Path, schema: type) -> Any:
    """The JSON in one of hf_vanilla's bookkeeping files, None when absent; refused when it cannot be ours (a link,
    too large or deep, not JSON, a field not of ``schema``'s type: :func:`.schema.read_json`)."""
    if path.is_symlink():
        raise UntrustedRecordError(f"{path} is a symbolic link (to {os.readlink(path)}); hf_vanilla writes its "
                                   "record as a plain file and will neither trust nor rewrite a link: remove the "
                                   "link (the folder is then yours, and nothing in it hf_vanilla's)")
    try:
        return read_json(path, schema)
    except FileNotFoundError:
        return None
    except InvalidFileError as error:
        raise UntrustedRecordError(str(error)) from None
    except OSError as error:
        raise UntrustedRecordError(f"{path} cannot be read ({error}); hf_vanilla did not write it and will "
                                   "neither trust nor rewrite it: restore it, or move it out of the folder") from None


def _validated(record: Any) -> tuple[str | None, dict[str, Any]]:
    """(what is wrong with a record read from disk, or None; the record with ``files`` as a dict of seals)."""
    if not isinstance(record, dict):
        return "no list of files", {}
    files, older = record.get("files"), record.get("older", [])
    if isinstance(files, list) and all(isinstance(name, str) for name in files):
        files, older = dict.fromkeys(files), files  # an hf_vanilla before seals: names alone
    if not isinstance(files, dict):
        return "no list of files", record
    if not isinstance(older, list) or any(not isinstance(name, str) or files.get(name, 0) is not None
                                          for name in older):
        return "an \"older\" list naming other than its unsealed entries", record
    if strays := sorted(name for name in files if not _plain_name(name)):
        return f"names {strays} that are not files in the folder", record
    kind = record.get("kind")
    if kind not in DECLARED_NAMES:
        return f"an unknown kind of folder ({kind!r})", record
    if undeclared := sorted(name for name in files if not DECLARED_NAMES[kind].fullmatch(name)):
        return f"names {undeclared} that {KINDS[kind][0]} never holds", record
    if unsealed := sorted(name for name, seal in files.items() if seal is not None and not _is_seal(seal)):
        return f"entries {unsealed} without a valid size and sha256", record
    return None, {**record, "files": files, "older": sorted(older)}


def _record_text_is_valid(text: str, kind: str) -> bool:
    """Whether a record kept as text (in the journal) is one hf_vanilla can have written, of ``kind``."""
    try:
        record = parse_json(text, RECORD, RecordFile)
    except InvalidFileError:
        return False
    problem, record = _validated(record)
    return problem is None and record.get("kind") == kind


def _is_seal(seal: Any) -> bool:
    return (isinstance(seal, dict) and set(seal) == {"size", "sha256"} and type(seal["size"]) is int
            and seal["size"] >= 0 and isinstance(seal["sha256"], str) and bool(_SHA256.fullmatch(seal["sha256"])))


def digest(path: Path) -> dict[str, Any]:
    """The seal of a file, or of a folder (every entry under it by relative path, each file's size and sha256, a
    link's target unfollowed): its size in bytes and sha256."""
    if not path.is_dir() or path.is_symlink():
        return dict(zip(("size", "sha256"), _file_digest(path), strict=True))
    total, whole = 0, hashlib.sha256()
    for item in sorted(path.rglob("*")):
        name = os.fsencode(item.relative_to(path).as_posix())
        if item.is_symlink():
            whole.update(name + b"\0link\0" + os.fsencode(os.readlink(item)) + b"\n")
        elif item.is_file():
            size, sha = _file_digest(item)
            total += size
            whole.update(name + f"\0{size}\0{sha}\n".encode())
        else:
            whole.update(name + b"/\n")
    return {"size": total, "sha256": whole.hexdigest()}


def _file_digest(path: Path) -> tuple[int, str]:
    if path.is_symlink():
        target = os.fsencode(os.readlink(path))
        return len(target), hashlib.sha256(target).hexdigest()
    with open(path, "rb") as handle:
        return os.fstat(handle.fileno()).st_size, hashlib.file_digest(handle, "sha256").hexdigest()


def _plain_name(name: Any) -> bool:
    """A single path component that is not bookkeeping (a record edited by hand must not point outside)."""
    return (isinstance(name, str) and bool(name) and name not in (".", "..") and "/" not in name
            and "\\" not in name and "\0" not in name and not _is_ours_by_name(name))


def _is_ours_by_name(name: str) -> bool:
    """The record, the journal, the lock and the work folders: hf_vanilla's bookkeeping, never a user's file."""
    return (name in (RECORD, JOURNAL, LOCK, REPLACED, DISCARDED) or name.startswith(FRESH_PREFIX)
            or bool(TEMPORARY.fullmatch(name)))


def _remove(path: Path) -> None:
    """Remove a file or a folder; a symlink is unlinked, never followed. A refusal of the system is said as a step
    (a read-only folder refuses the removal of a work folder whose files were already published)."""
    with file_step("deleting", path):
        if path.is_symlink() or path.is_file():
            path.unlink(missing_ok=True)
        elif path.is_dir():
            shutil.rmtree(path)


def _file_lock(path: Path) -> Any:
    return FileLock(path, blocking=False, on_acquired=_write_pid)


def _try_acquire(lock: Any) -> bool:
    try:
        with file_step("locking the folder with", lock.lock_file):
            lock.acquire()
    except Timeout:
        return False
    return True


def _write_pid(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())


def _holder(path: Path) -> str:
    """The pid the lock's holder wrote, or "unknown" (Windows does not let a locked file be read)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip() or "unknown"
    except OSError:
        return "unknown"
