"""Files written so that a crash never leaves half of one: atomic files, atomic folders, locks, clear disk errors.

Every writer in the package (training checkpoints and the final model, converted models, corpora caches, the
tokenizer, pushes) publishes through this module. It knows file names (what ``save_pretrained`` writes) but no
model: the lowest layer, importable with the standard library and ``filelock`` alone.

Publishing a folder: write everything into a staging folder beside the target, flush it to disk, then put it in
place in one step (Linux exchanges the two folders atomically; elsewhere two renames, the old folder kept until
the new one is in place). A process killed at any instant leaves either the old or the new folder at the target,
plus at most a hidden staging folder that the next publish removes.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import glob
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from ..errors import HfVanillaError

logger = logging.getLogger(__name__)

#: The configuration files ``save_pretrained`` writes beside the weights.
CONFIG_FILES = ("config.json", "generation_config.json")

#: The weights ``save_pretrained`` writes: one file, or an index naming shards.
SAFE_WEIGHTS, SAFE_WEIGHTS_INDEX = "model.safetensors", "model.safetensors.index.json"

STAGING_PREFIX = ".staging-"

#: The longest file name most filesystems allow, in bytes (ext4, XFS, APFS, NTFS in UTF-16 units).
NAME_MAX = 255


def sibling_stem(name: str, room: int) -> str:
    """``name``, shortened if needed so that a sibling name built from it with ``room`` more bytes (a prefix, a
    random part, a suffix) stays within :data:`NAME_MAX`: a valid long target name must not fail on its helpers'
    names. A shortened stem ends in a hash of the whole name, so two long names never share one."""
    encoded = name.encode("utf-8", "surrogateescape")
    if len(encoded) + room <= NAME_MAX:
        return name
    digest = hashlib.sha256(encoded).hexdigest()[:12]
    keep = encoded[:NAME_MAX - room - len(digest) - 1].decode("utf-8", "ignore")
    return f"{keep}~{digest}"


def is_weight_file(name: str) -> bool:
    """Safetensors weights, whole or sharded, and their index."""
    return name.startswith("model") and (name.endswith(".safetensors") or name == "model.safetensors.index.json")


def is_model_file(name: str) -> bool:
    """Files that ``save_pretrained`` writes or supersedes: stale shards of an older save must not survive a new one."""
    return name in CONFIG_FILES or is_weight_file(name) or name.startswith("pytorch_model")


# ----------------------------------------------------------------------------------------------
# Flushing, permissions and clear errors


def fsync_path(path: Path) -> None:
    """Flush one file or folder entry to disk; best effort (some filesystems refuse fsync on folders)."""
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if path.is_dir() else 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_tree(folder: str | os.PathLike[str]) -> None:
    """Flush every file and folder under ``folder``, deepest first, then ``folder`` itself."""
    folder = Path(folder)
    for path in sorted(folder.rglob("*"), reverse=True):
        fsync_path(path)
    fsync_path(folder)


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def make_shareable(path: str | os.PathLike[str]) -> None:
    """Give a published file or folder the modes any other file the user writes gets (0644 / 0755 less the umask);
    staging folders and temporary files come from ``tempfile`` with 0700 / 0600."""
    path = Path(path)
    mask = current_umask()
    for item in [path, *path.rglob("*")] if path.is_dir() else [path]:
        with contextlib.suppress(OSError):
            item.chmod((0o755 if item.is_dir() else 0o644) & ~mask)


#: What the system refuses that the user sets right outside hf_vanilla, as messages say it, and how.
SYSTEM_REFUSALS = {
    errno.ENOSPC: ("No space left on device", "free some space"),
    errno.EDQUOT: ("Disk quota exceeded", "free some space"),
    errno.EACCES: ("Permission denied", "make it writable"),
    errno.EPERM: ("Operation not permitted", "make it writable"),
    errno.EROFS: ("Read-only file system", "make it writable"),
}


class FileOperationError(HfVanillaError, OSError):
    """A file operation the system refused (a full disk, a permission): which step, which file, how to set it
    right and, once a command has said it (:meth:`then`), what the next command will do."""

    def __init__(self, code: int, what: str) -> None:
        super().__init__(code, what)
        self.what = what

    @property
    def fix(self) -> str:
        return SYSTEM_REFUSALS.get(self.errno, ("", "set that right"))[1]

    def then(self, next_command: str) -> FileOperationError:
        """This error with what the next command does (``"run the same command again: ..."``) after its fix."""
        return FileOperationError(self.errno, f"{self.what}; {self.fix}, then {next_command}")

    def __str__(self) -> str:
        return self.strerror


def refused_by_the_system(error: OSError, step: str, path: str | os.PathLike[str]) -> FileOperationError | None:
    """``error`` as one sentence naming ``step`` (``"writing"``, ``"renaming into place"``, ``"flushing"``) and
    ``path``, if the system refused it for a reason the user sets right (:data:`SYSTEM_REFUSALS`), else None."""
    if isinstance(error, FileOperationError):
        return error  # said by an inner step: the first failure is the one to say
    if error.errno not in SYSTEM_REFUSALS:
        return None
    target = Path(path)
    said = f"{SYSTEM_REFUSALS[error.errno][0]} while {step} {target}"
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        probe = next((p for p in (target, *target.parents) if p.exists()), Path("."))
        said += f" ({shutil.disk_usage(probe).free / 2**20:.1f} MiB free on that disk)"
    return FileOperationError(error.errno, said)


@contextlib.contextmanager
def file_step(step: str, path: str | os.PathLike[str]) -> Iterator[None]:
    """Say which step on which file failed when the system refuses an operation inside the block
    (:func:`refused_by_the_system`); other errors pass as they are."""
    try:
        yield
    except OSError as error:
        said = refused_by_the_system(error, step, path)
        if said is None or said is error:
            raise
        raise said from error


def disk_full_error(error: BaseException, path: str | os.PathLike[str]) -> OSError | None:
    """A clear :class:`FileOperationError` (ENOSPC) naming ``path`` if ``error`` means the disk filled up while
    writing it, else None (a permission refused while writing is said too).

    torch's writer reports a full disk as ``RuntimeError: [enforce fail at inline_container.cc] ...`` and
    safetensors as an I/O error string; both hide the cause.
    """
    named = getattr(error, "filename2", None) or getattr(error, "filename", None) or path  # a copy's: its destination
    if isinstance(error, OSError) and (said := refused_by_the_system(error, "writing", named)) is not None:
        return said
    text = str(error)
    if "No space left on device" in text or "file write failed" in text or "inline_container" in text:
        return refused_by_the_system(OSError(errno.ENOSPC, text), "writing", path)
    return None


@contextlib.contextmanager
def clear_disk_errors(path: str | os.PathLike[str]) -> Iterator[None]:
    """Re-raise a full-disk (or permission) failure inside the block as :func:`disk_full_error`'s clear message."""
    try:
        yield
    except Exception as error:
        clear = disk_full_error(error, path)
        if clear is None or clear is error:
            raise
        raise clear from error


# ----------------------------------------------------------------------------------------------
# Atomic files


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers (and a crash) see the old file or the whole new one."""
    path = Path(path)
    with file_step("creating the folder of", path):
        path.parent.mkdir(parents=True, exist_ok=True)
    with file_step("creating a temporary file beside", path):
        fd, temporary = tempfile.mkstemp(prefix=f".{sibling_stem(path.name, 14)}.", suffix=".tmp", dir=path.parent)
    try:
        with clear_disk_errors(path), os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            with file_step("flushing to disk", path):
                os.fsync(handle.fileno())
        make_shareable(temporary)
        with file_step("renaming into place", path):
            os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    fsync_path(path.parent)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], payload: Mapping[str, Any] | list) -> None:
    """JSON, indented and newline-terminated; values JSON cannot hold (paths, sets, numpy scalars) as text/lists."""
    atomic_write_text(path, json.dumps(payload, indent=2, sort_keys=False, default=_json_default) + "\n")


def _json_default(value: Any) -> Any:
    if isinstance(value, set | frozenset | tuple):
        return sorted(value) if isinstance(value, set | frozenset) else list(value)
    if hasattr(value, "item"):  # numpy / torch scalars
        return value.item()
    return str(value)


# ----------------------------------------------------------------------------------------------
# Atomic folders


def exchange(new: Path, target: Path) -> None:
    """Put ``new`` in place of the existing folder ``target``; afterwards ``new`` holds the old contents.

    Linux exchanges the two atomically (renameat2 RENAME_EXCHANGE): no instant exists without a complete folder
    at ``target``. Elsewhere two renames, with the old folder kept until the new one is in place.
    """
    rename_exchange, at_fdcwd = 2, -100
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is not None and renameat2(at_fdcwd, bytes(new), at_fdcwd, bytes(target), rename_exchange) == 0:
        return
    backup = new.with_name(new.name + ".old")
    os.replace(target, backup)
    os.replace(new, target)
    os.replace(backup, new)


def remove_stale_staging(parent: str | os.PathLike[str], name: str | None = None) -> None:
    """Delete staging folders that killed processes left in ``parent`` (all, or those staged for ``name``).

    A folder that a live process is still writing is locked (:func:`held_lock`) and left alone.
    """
    pattern = f"{STAGING_PREFIX}{glob.escape(staging_stem(name))}-*" if name else f"{STAGING_PREFIX}*"
    for stale in Path(parent).glob(pattern):
        folder = stale.with_name(stale.name.removesuffix(LOCK_SUFFIX))
        if folder != stale and folder.exists():
            continue  # a lock file beside its folder: handled with the folder
        try:
            with held_lock(folder):  # a lock file alone (its writer was killed) goes with the block
                shutil.rmtree(folder, ignore_errors=True)
        except BlockingIOError:
            continue


def staging_stem(name: str) -> str:
    """The part of a staging folder's name that names its target: prefix, stem, ``-``, 8 random characters and
    the lock file's suffix fit :data:`NAME_MAX`."""
    return sibling_stem(name, len(STAGING_PREFIX) + 1 + 8 + len(LOCK_SUFFIX))


#: A staging folder's lock file sits beside it (inside, it would be published with the folder).
LOCK_SUFFIX = ".lock"


@contextlib.contextmanager
def held_lock(folder: Path) -> Iterator[None]:
    """An exclusive lock on ``folder`` for the block (the file ``<folder>.lock`` beside it, through ``filelock``
    like every lock of the package, so it works on every platform); BlockingIOError if another process holds it.
    The system drops it when its holder dies, so a killed writer's folder is free to remove. The lock file goes
    with the block."""
    lock_file = folder.with_name(folder.name + LOCK_SUFFIX)
    lock = FileLock(lock_file, blocking=False)
    try:
        with file_step("locking", lock_file):  # a full disk or a permission refuses the lock file too
            lock.acquire()
    except Timeout:
        raise BlockingIOError(f"{folder} is being written by another process") from None
    try:
        yield
    finally:
        with contextlib.suppress(OSError):  # unlinked while held, as OutputFolder.locked does (Windows: on release)
            lock_file.unlink()
        lock.release()


def link_or_copy(source: Path, destination: Path) -> None:
    """Hard links make carrying large neighbours over (trainer checkpoints) cheap; copies where links cannot be made."""
    source, destination = Path(source), Path(destination)  # copytree passes strings
    if source.is_dir():
        shutil.copytree(source, destination, copy_function=link_or_copy)
        return
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)


@contextlib.contextmanager
def staged_folder(target: str | os.PathLike[str], keep: Callable[[str], bool] | None = None) -> Iterator[Path]:
    """Yield an empty folder beside ``target``; when the block succeeds, publish it in place of ``target`` at once.

    Files of an existing ``target`` that the block did not write and for which ``keep(name)`` is true are carried
    over (hard links). If the block raises, ``target`` is untouched and the staging folder is removed; a full disk
    is reported as such (:func:`disk_full_error`). ``target`` may be the working directory (or hold it): a process
    cannot swap away the folder it stands in, so then each file is replaced on its own (each atomically). A
    symlinked ``target`` stays a link: the folder it points to is the one replaced.
    """
    target = Path(target).absolute()
    if target.is_symlink():  # publish where the link points: the link itself is the user's and stays
        target = target.resolve()
    if target.exists() and not target.is_dir():
        raise NotADirectoryError(f"{target} is a file; a folder is needed here. Choose another path.")
    with file_step("creating a staging folder beside", target):
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_staging(target.parent, target.name)
        staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{staging_stem(target.name)}-", dir=target.parent))
    try:
        with held_lock(staging), clear_disk_errors(target):
            yield staging
            written = {path.name for path in staging.iterdir()}
            if target.exists() and keep is not None:
                for kept in target.iterdir():
                    if kept.name not in written and keep(kept.name) and not kept.name.startswith(STAGING_PREFIX):
                        link_or_copy(kept, staging / kept.name)
            make_shareable(staging)
            fsync_tree(staging)
            _publish(staging, target, written)
            fsync_path(target.parent)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _publish(staging: Path, target: Path, written: set[str]) -> None:
    if not target.exists():
        os.replace(staging, target)
    elif target.resolve() == Path.cwd().resolve() or target.resolve() in Path.cwd().resolve().parents:
        for item in staging.iterdir():
            if item.is_dir() and (target / item.name).is_dir():
                shutil.rmtree(target / item.name)
            os.replace(item, target / item.name)
        for stale in target.iterdir():
            if stale.name not in written and is_model_file(stale.name):
                stale.unlink()
    else:
        exchange(staging, target)


def save_pretrained_atomic(obj: Any, target: str | os.PathLike[str], **save_kwargs: Any) -> Path:
    """``obj.save_pretrained(target, **save_kwargs)`` (a model, tokenizer, config or generation config), published
    atomically: a save killed mid-way or failing on a full disk leaves the previous ``target`` intact. Other files
    already in ``target`` (a tokenizer beside a model, trainer checkpoints, run records) are kept; stale model files
    (an older save's shards) are not, when ``obj`` is a model: a tokenizer or config saved beside a model keeps it."""
    target = Path(target)
    saves_weights = callable(getattr(obj, "state_dict", None))
    with staged_folder(target, keep=lambda name: not (saves_weights and is_model_file(name))) as staging:
        obj.save_pretrained(staging, **save_kwargs)
    return target
