"""Checkpoints on disk: what a checkpoint is made of, and writing one so that a crash never leaves half of it.

Every writer in the package (training checkpoints and the final model, converted models, corpora caches, the
tokenizer, pushes) uses this module, so there is one list of checkpoint files and one way to publish a file or a
folder atomically. The model code itself saves with transformers' plain ``save_pretrained``: a model folder is an
ordinary folder; the guarantee lives here, on the package side.

Publishing a folder: write everything into a staging folder beside the target, flush it to disk, then put it in
place in one step (Linux exchanges the two folders atomically; elsewhere two renames, the old folder kept until
the new one is in place). A process killed at any instant leaves either the old or the new folder at the target,
plus at most a hidden staging folder that the next publish removes.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import inspect
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

# ----------------------------------------------------------------------------------------------
# What a checkpoint is

#: Pickled files are never needed to load a model (optimizer and RNG states, training_args.bin) and the Hub
#: flags them as unsafe to open: nothing in the package uploads or reads them as weights.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")

#: The files a saved tokenizer may consist of (fast tokenizers write the first two; the rest are legacy formats).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
)

#: The configuration files ``save_pretrained`` writes beside the weights.
CONFIG_FILES = ("config.json", "generation_config.json")

#: The weights ``save_pretrained`` writes: one file, or an index naming shards.
SAFE_WEIGHTS, SAFE_WEIGHTS_INDEX = "model.safetensors", "model.safetensors.index.json"

STAGING_PREFIX = ".staging-"


def code_files() -> list[Path]:
    """The model code that travels with a checkpoint: the modeling module and everything it imports relatively."""
    from transformers.dynamic_module_utils import get_relative_import_files

    from . import modeling_vanilla

    module = Path(inspect.getfile(modeling_vanilla))
    return [module, *sorted({Path(p) for p in get_relative_import_files(str(module))})]  # the walk repeats shared imports


def is_weight_file(name: str) -> bool:
    """Safetensors weights, whole or sharded, and their index."""
    return name.startswith("model") and (name.endswith(".safetensors") or name == "model.safetensors.index.json")


def is_model_file(name: str) -> bool:
    """Files that ``save_pretrained`` writes or supersedes: stale shards of an older save must not survive a new one."""
    return name in CONFIG_FILES or is_weight_file(name) or name.startswith("pytorch_model")


def loading_files(folder: str | os.PathLike[str]) -> dict[str, Path]:
    """What the model in ``folder`` is made of, by file name: the configs, the weights loading reads
    (:func:`weight_files`), the code files its ``config.json`` names in ``auto_map`` and the files its tokenizer
    consists of (:func:`tokenizer_files`). Decided by the folder's contents, not by names alone: a ``vocab.txt`` the
    tokenizer does not use or a shard no index names is not part of the checkpoint. Only files that exist."""
    folder = Path(folder)
    present = {path.name: path for path in sorted(folder.iterdir()) if path.is_file()}
    wanted = {*CONFIG_FILES, *auto_map_modules(folder / "config.json"), *weight_files(folder), *tokenizer_files(folder)}
    return {name: path for name, path in present.items() if name in wanted}


def weight_files(folder: str | os.PathLike[str]) -> list[str]:
    """The safetensors files ``from_pretrained`` reads from ``folder``: ``model.safetensors`` when there is one
    (transformers prefers it to an index), else the index and exactly the shards its ``weight_map`` names. Each
    must open as safetensors; an index naming a shard that is missing, outside the folder or not safetensors is
    an error that names it."""
    folder = Path(folder)
    if (folder / SAFE_WEIGHTS).is_file():
        check_weight_files(folder, [SAFE_WEIGHTS])
        return [SAFE_WEIGHTS]
    index = folder / SAFE_WEIGHTS_INDEX
    if not index.is_file():
        return []
    try:
        shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"{index} is not a safetensors index (a JSON object with a weight_map): {error}") from error
    strays = [shard for shard in shards if not isinstance(shard, str) or Path(shard).name != shard]
    if strays:
        raise ValueError(f"{index} names shards that are not files beside it: {strays}")
    missing = [shard for shard in shards if not (folder / shard).is_file()]
    if missing:
        raise FileNotFoundError(f"{index} names shards that are missing: {missing}; save the model again")
    check_weight_files(folder, shards)
    return [SAFE_WEIGHTS_INDEX, *shards]


def tokenizer_files(folder: str | os.PathLike[str]) -> list[str]:
    """The files the tokenizer saved in ``folder`` consists of: those it writes when loaded and saved again (a
    ``tokenizer.json`` tokenizer writes no ``vocab.txt`` or ``special_tokens_map.json``, so such files beside it are
    not part of it). Empty when the folder holds no tokenizer files; an error when they do not load."""
    folder = Path(folder)
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        return []
    from transformers import AutoTokenizer

    try:  # no remote code: a tokenizer that needs it is not one this package saved
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    except Exception as error:
        found = [name for name in TOKENIZER_FILES if (folder / name).is_file()]
        raise ValueError(
            f"the tokenizer files in {folder} ({', '.join(found)}) do not load as a tokenizer ({error}); fix them, "
            "or move the files that are not the tokenizer's out of the folder"
        ) from error
    with tempfile.TemporaryDirectory() as scratch:
        return sorted(Path(path).name for path in tokenizer.save_pretrained(scratch))


def shipped_auto_map(architecture: str, incoming: Mapping[str, Any] | None) -> dict[str, str]:
    """The ``auto_map`` a saved hf_vanilla config carries: :func:`~hf_vanilla.configuration_vanilla.auto_map_for`
    its family, naming exactly the code files that travel with it. Every other entry of ``incoming`` (another
    repository's ``repo--module.Class``, a module hf_vanilla did not write) is dropped with a warning naming it:
    ``trust_remote_code=True`` would fetch and run that code."""
    ours, foreign = _split_auto_map(architecture, incoming)
    if foreign:
        logger.warning("dropping auto_map entries that are not hf_vanilla's own code (loading with "
                       "trust_remote_code=True would run them): %s",
                       ", ".join(f"{key}={value!r}" for key, value in foreign.items()))
    return ours


def _split_auto_map(architecture: str, incoming: Mapping[str, Any] | None) -> tuple[dict[str, str], dict[str, Any]]:
    """(hf_vanilla's own ``auto_map`` for ``architecture``, the entries of ``incoming`` that differ from it)."""
    from .configuration_vanilla import auto_map_for

    ours = auto_map_for(architecture)
    return ours, {key: value for key, value in (incoming or {}).items() if ours.get(key) != value}


def auto_map_modules(config_file: Path) -> list[str]:
    """The Python files a config's ``auto_map`` loads hf_vanilla's code from (``module.py``), with the files those
    import relatively when they are present beside the config (hf_vanilla's modeling file imports its siblings).
    Entries that are not hf_vanilla's own (:func:`shipped_auto_map`) name no file: their code never travels."""
    from transformers.dynamic_module_utils import get_relative_import_files

    from .configuration_vanilla import VanillaConfig

    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
        auto_map = config.get("auto_map") or {}
        architecture = config.get("architecture", VanillaConfig.architecture)
        ours, foreign = _split_auto_map(architecture, auto_map)
    except (OSError, ValueError, AttributeError, TypeError):
        return []
    references = [ours[key] for key in auto_map if key not in foreign]
    names = {ref.rsplit(".", 1)[0] + ".py" for ref in references}
    for name in list(names):
        module = config_file.parent / name
        if module.is_file():
            names.update(Path(path).name for path in get_relative_import_files(str(module)))
    return sorted(names)


def ensure_code_files(folder: str | os.PathLike[str]) -> list[str]:
    """Copy the model code next to a saved config whose ``auto_map`` needs it; return the names copied.

    ``save_pretrained`` does this (``register_for_auto_class``), but a model saved through a wrapper (FSDP, a
    plain state dict) can miss it, and then resuming or ``trust_remote_code`` loading fails (transformers#46455).
    Code already in the folder is the code the weights were saved with: it is kept.
    """
    folder = Path(folder)
    if not auto_map_modules(folder / "config.json"):
        return []
    copied = []
    for source in code_files():
        destination = folder / source.name
        if not destination.exists():
            atomic_write_bytes(destination, source.read_bytes())
            copied.append(source.name)
    return copied


# ----------------------------------------------------------------------------------------------
# Loading, where the package's own tools need more than transformers' warnings


def check_weight_files(folder: str | os.PathLike[str], names: Iterable[str] | None = None) -> None:
    """Open the header of every safetensors file in ``folder`` (or of those ``names``); a truncated or corrupted one
    is an error that names the file (safetensors' own message, which ``from_pretrained`` passes on, does not say
    which file it read)."""
    from safetensors import SafetensorError, safe_open

    paths = sorted(Path(folder).glob("*.safetensors")) if names is None else [Path(folder) / n for n in names]
    for path in paths:
        try:
            with safe_open(str(path), "pt"):
                pass
        except SafetensorError as error:
            raise OSError(
                f"Cannot read the weights in {path}: {error}. The file is truncated or corrupted (an interrupted "
                "download or copy?); fetch or save the checkpoint again."
            ) from error


def load_complete(model_class: Any, folder: str | os.PathLike[str], *, exact: bool = False, **kwargs: Any) -> Any:
    """``model_class.from_pretrained(folder, **kwargs)``, refusing a checkpoint that lacks weights the model needs
    (and, with ``exact``, one holding weights the model does not use).

    transformers initialises missing weights at random and logs a warning, which is right for a new task head;
    a tool that converts or inspects a checkpoint (convert, viz) would hand on random weights as trained ones.
    ``exact`` is for the commands that use the saved model as it is (attention, generate, evaluate): an unexpected
    weight means the checkpoint is not the model its config describes.
    """
    check_weight_files(folder)
    model, info = model_class.from_pretrained(folder, output_loading_info=True, **kwargs)
    missing = sorted(info["missing_keys"])
    unexpected = sorted(info["unexpected_keys"]) if exact else []
    if missing or unexpected:
        found = [f"lacks weights {type(model).__name__} needs: {_some(missing)}"] * bool(missing) + [
            f"holds weights {type(model).__name__} does not use: {_some(unexpected)}"] * bool(unexpected)
        raise ValueError(
            f"The checkpoint in {folder} {' and '.join(found)}. It was saved by another architecture, or its "
            "config.json or weights were edited; loading it would leave weights random."
        )
    return model


def _some(names: list[str]) -> str:
    return f"{names[:8]}{' ...' if len(names) > 8 else ''}"


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


def disk_full_error(error: BaseException, path: str | os.PathLike[str]) -> OSError | None:
    """A clear ``OSError(ENOSPC)`` naming ``path`` if ``error`` means the disk filled up, else None.

    torch's writer reports a full disk as ``RuntimeError: [enforce fail at inline_container.cc] ...`` and
    safetensors as an I/O error string; both hide the cause.
    """
    text = str(error)
    full = isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)
    full = full or "No space left on device" in text or "file write failed" in text or "inline_container" in text
    if not full:
        return None
    target = Path(path)
    probe = next((p for p in (target, *target.parents) if p.exists()), Path("."))
    free = shutil.disk_usage(probe).free
    return OSError(
        errno.ENOSPC,
        f"No space left on device while writing {target} ({free / 2**20:.1f} MiB free on that disk): free some space "
        f"or write elsewhere; the previous version of {target.name}, if any, is untouched",
    )


@contextlib.contextmanager
def clear_disk_errors(path: str | os.PathLike[str]) -> Iterator[None]:
    """Re-raise a full-disk failure inside the block as :func:`disk_full_error`'s clear message."""
    try:
        yield
    except Exception as error:
        clear = disk_full_error(error, path)
        if clear is None:
            raise
        raise clear from error


# ----------------------------------------------------------------------------------------------
# Atomic files


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers (and a crash) see the old file or the whole new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with clear_disk_errors(path), os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        make_shareable(temporary)
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
    pattern = f"{STAGING_PREFIX}{name}-*" if name else f"{STAGING_PREFIX}*"
    for stale in Path(parent).glob(pattern):
        folder = stale.with_name(stale.name.removesuffix(LOCK_SUFFIX))
        if folder != stale and folder.exists():
            continue  # a lock file beside its folder: handled with the folder
        try:
            with held_lock(folder):  # a lock file alone (its writer was killed) goes with the block
                shutil.rmtree(folder, ignore_errors=True)
        except BlockingIOError:
            continue


#: A staging folder's lock file sits beside it (inside, it would be published with the folder).
LOCK_SUFFIX = ".lock"


@contextlib.contextmanager
def held_lock(folder: Path) -> Iterator[None]:
    """An exclusive lock on ``folder`` for the block (the file ``<folder>.lock`` beside it, through ``filelock``
    like every lock of the package, so it works on every platform); BlockingIOError if another process holds it.
    The system drops it when its holder dies, so a killed writer's folder is free to remove. The lock file goes
    with the block."""
    from filelock import FileLock, Timeout

    lock_file = folder.with_name(folder.name + LOCK_SUFFIX)
    lock = FileLock(lock_file, blocking=False)
    try:
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
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(target.parent, target.name)
    staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{target.name}-", dir=target.parent))
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
    (an older save's shards) are not."""
    target = Path(target)
    with staged_folder(target, keep=lambda name: not is_model_file(name)) as staging:
        obj.save_pretrained(staging, **save_kwargs)
    return target
