"""Credentials about to be published: every text file a push uploads is scanned before anything is sent.

A token pasted into a card, a chat template or a tokenizer file would be public the moment the commit lands (and
a token on the Hub is revoked by the Hub's own scanner only after it leaked). The patterns are the documented
shapes of the common tokens; a scanner library (detect-secrets) was not used because its entropy detectors fire
on tokenizer vocabularies, and the shapes below are what its keyword-free plugins match too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
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

# One pass over each file: the kinds as named groups, never inside a longer word.
_SCAN = re.compile("|".join(
    rf"(?P<k{i}>(?<![A-Za-z0-9_]){pattern}(?![A-Za-z0-9_]))" for i, pattern in enumerate(SECRET_PATTERNS.values())
))
_KINDS = list(SECRET_PATTERNS)


class SecretInUploadError(HfVanillaError, ValueError):
    """A file about to be published holds what looks like a credential."""


def find_secrets(text: str) -> list[tuple[int, str]]:
    """(line number, kind) of each credential-shaped string in ``text``; the strings themselves are not kept."""
    return [(text.count("\n", 0, found.start()) + 1, _KINDS[int(found.lastgroup[1:])]) for found in _SCAN.finditer(text)]


def _text_of(source: Path | bytes | str) -> str | None:
    """The upload's content as text, or None for a binary file (weights, a PNG)."""
    data = source if isinstance(source, bytes | str) else Path(source).read_bytes()
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def refuse_secrets(uploads: Mapping[str, Path | bytes | str], binary: Iterable[str] = ()) -> None:
    """Refuse a push whose text files (``uploads``: path in the repo -> local file, bytes or text; names in
    ``binary`` are not read) hold a credential, naming each file, line and kind, never the secret itself."""
    skip = set(binary)
    hits = [f"{name} line {line} ({kind})"
            for name, source in sorted(uploads.items()) if name not in skip
            for line, kind in find_secrets(_text_of(source) or "")]
    if hits:
        raise SecretInUploadError(
            f"refusing to push: {'; '.join(hits[:5])}{f' and {len(hits) - 5} more' if len(hits) > 5 else ''} "
            f"look{'s' if len(hits) == 1 else ''} like a credential that would be published; remove "
            f"{'it' if len(hits) == 1 else 'them'} from the file (and revoke the credential if it was ever shared), "
            "then push again. Nothing was sent."
        )


__all__ = ["SECRET_PATTERNS", "SecretInUploadError", "find_secrets", "refuse_secrets"]
