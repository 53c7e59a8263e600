"""Credentials about to be published: every file a push uploads is scanned before anything is sent, binary included.

A token pasted into a card, a chat template or a tokenizer file would be public the moment the commit lands (and
a token on the Hub is revoked by the Hub's own scanner only after it leaked). The patterns are the documented
shapes of the common tokens, matched over each file's bytes, whatever it is: text, weights (the safetensors header
is JSON that ``metadata=`` fills with any string), a PNG (its ``tEXt`` chunks are plain bytes; ``zTXt`` and
compressed ``iTXt`` chunks are inflated and scanned too). A weights file is scanned through ``mmap``, never read
whole into memory; random tensor bytes do not form a token (a 30-character run of letters and digits after
``hf_`` is about 1 in 10^20 per position).

detect-secrets was weighed and not used: it reads files as text lines and passes binary files over, which is the
hole this closes; its entropy detectors fire on tokenizer vocabularies; and the shapes below are what its
keyword-free plugins match.
"""

from __future__ import annotations

import mmap
import re
import struct
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path

from ..errors import HfVanillaError

#: What each kind of secret looks like (the prefixes and lengths the issuers document).
SECRET_PATTERNS: dict[str, str] = {
    "a Hugging Face token (hf_...)": r"hf_[A-Za-z0-9]{30,}",
    "an AWS access key (AKIA...)": r"(?:AKIA|ASIA)[0-9A-Z]{16}",
    "a GitHub token (ghp_...)": r"gh[pousr]_[A-Za-z0-9]{36,}",
    "a GitHub token (github_pat_...)": r"github_pat_[A-Za-z0-9_]{22,}",
    "an OpenAI key (sk-...)": r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{32,}",
    "a Google API key (AIza...)": r"AIza[0-9A-Za-z_\-]{35}",
    "a Slack token (xox...)": r"xox[abposr]-[A-Za-z0-9\-]{10,}",
    "a private key (-----BEGIN ... PRIVATE KEY-----)": r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----",
}

# One pass over each file's bytes: the kinds as named groups, never inside a longer word (ASCII classes only: a
# token is ASCII whatever surrounds it).
_SCAN = re.compile("|".join(
    rf"(?P<k{i}>(?<![A-Za-z0-9_]){pattern}(?![A-Za-z0-9_]))" for i, pattern in enumerate(SECRET_PATTERNS.values())
).encode("ascii"))
_KINDS = list(SECRET_PATTERNS)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: The most bytes a PNG text chunk may inflate to here (a zip bomb in curves.png must not exhaust memory).
MAX_INFLATED = 16 * 2**20


class SecretInUploadError(HfVanillaError, ValueError):
    """A file about to be published holds what looks like a credential."""


def find_secrets(text: str | bytes) -> list[tuple[int, str]]:
    """(line number, kind) of each credential-shaped string in ``text``; the strings themselves are not kept."""
    data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
    return [(data.count(b"\n", 0, found.start()) + 1, _KINDS[int(found.lastgroup[1:])]) for found in _SCAN.finditer(data)]


def scan(source: Path | bytes | str) -> list[str]:
    """Where in one upload (a local file, or its bytes or text) a credential shows, as ``line N (kind)`` for text,
    ``byte N (kind)`` for a binary file, ``PNG zTXt chunk 'Comment' (kind)`` inside a compressed PNG text chunk."""
    if isinstance(source, str):
        return [f"line {line} ({kind})" for line, kind in find_secrets(source)]
    if isinstance(source, bytes):
        return _scan_bytes(source)
    with open(source, "rb") as handle:
        if handle.seek(0, 2) == 0:
            return []
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _scan_bytes(data)


def _scan_bytes(data: bytes | mmap.mmap) -> list[str]:
    if _is_text(data):
        return [f"line {line} ({kind})" for line, kind in find_secrets(bytes(data))]
    hits = [f"byte {found.start()} ({_KINDS[int(found.lastgroup[1:])]})" for found in _SCAN.finditer(data)]
    if data[:8] == PNG_SIGNATURE:
        for chunk, keyword, inflated in png_compressed_text(data):
            if inflated is None:
                hits.append(f"PNG {chunk} chunk {keyword!r} (it does not inflate within {MAX_INFLATED // 2**20} MiB, "
                            "so it cannot be checked)")
            else:
                hits += [f"PNG {chunk} chunk {keyword!r} ({kind})" for _, kind in find_secrets(inflated)]
    return hits


def _is_text(data: bytes | mmap.mmap) -> bool:
    head = bytes(data[:8192])
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as error:
        return error.start > len(head) - 4 and b"\0" not in head  # a character cut at the sample's end
    return b"\0" not in head


def png_compressed_text(data: bytes | mmap.mmap) -> Iterator[tuple[str, str, bytes | None]]:
    """(chunk type, keyword, inflated text) of each compressed text chunk of a PNG (``zTXt``, and ``iTXt`` with its
    compression flag set); ``tEXt`` and uncompressed ``iTXt`` are plain bytes the byte scan already reads. The text
    is None for a chunk that does not inflate (damaged, or larger than :data:`MAX_INFLATED`): nothing unread goes up."""
    at = len(PNG_SIGNATURE)
    while at + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        body = bytes(data[at + 8:at + 8 + length])
        at += 12 + length
        if kind not in (b"zTXt", b"iTXt"):
            continue
        keyword, _, rest = body.partition(b"\0")
        if kind == b"zTXt":
            compressed = rest[1:]  # the compression method, then the stream
        elif rest[:1] == b"\1":  # iTXt: flag, method, language tag \0, translated keyword \0, text
            compressed = rest[2:].split(b"\0", 2)[-1]
        else:
            continue
        yield kind.decode(), keyword.decode("latin-1"), _inflate(compressed)


def _inflate(compressed: bytes) -> bytes | None:
    """The zlib stream inflated, or None when it does not inflate within :data:`MAX_INFLATED` bytes."""
    inflater = zlib.decompressobj()
    try:
        inflated = inflater.decompress(compressed, MAX_INFLATED)
    except zlib.error:
        return None
    return None if inflater.unconsumed_tail else inflated


def refuse_secrets(uploads: Mapping[str, Path | bytes | str]) -> None:
    """Refuse a push whose files (``uploads``: path in the repo -> local file, bytes or text), binary ones included,
    hold a credential, naming each file and where in it, and the kind, never the secret itself."""
    hits = [f"{name} {where}" for name, source in sorted(uploads.items()) for where in scan(source)]
    if hits:
        raise SecretInUploadError(
            f"refusing to push: {'; '.join(hits[:5])}{f' and {len(hits) - 5} more' if len(hits) > 5 else ''} "
            f"look{'s' if len(hits) == 1 else ''} like a credential that would be published; remove "
            f"{'it' if len(hits) == 1 else 'them'} from the file (and revoke the credential if it was ever shared), "
            "then push again. Nothing was sent."
        )


__all__ = ["SECRET_PATTERNS", "SecretInUploadError", "find_secrets", "refuse_secrets", "scan"]
