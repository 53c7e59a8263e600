"""Quoting text in a model card's Markdown so that it reads as text: a sample from the data or a user's prompt
holding a code fence, a backtick, ``<script>`` or ``# heading`` must not end the block it sits in or become markup on
the Hub page. The rules are CommonMark's (the Hub renders CommonMark)."""

from __future__ import annotations

import re

_MARKUP = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~&])")


def longest_run(text: str, char: str) -> int:
    """The length of the longest run of ``char`` in ``text``."""
    return max((len(run) for run in re.findall(f"{re.escape(char)}+", text)), default=0)


def code_block(text: str, info: str = "") -> str:
    """``text`` as a fenced code block whose fence is longer than any backtick run inside it, so nothing in
    ``text`` can close it."""
    fence = "`" * max(3, longest_run(text, "`") + 1)
    return f"{fence}{info}\n{text}\n{fence}"


def code_span(text: str) -> str:
    """``text`` as an inline code span: delimited by more backticks than any run inside it, padded with a space
    when it starts or ends with a backtick (CommonMark strips one such space). Line breaks become spaces."""
    text = " ".join(text.splitlines())
    ticks = "`" * (longest_run(text, "`") + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def plain(text: str) -> str:
    """``text`` as literal inline text: every punctuation character Markdown or HTML could read as markup is
    backslash-escaped (CommonMark allows it before any ASCII punctuation), line breaks become spaces."""
    return _MARKUP.sub(r"\\\1", " ".join(text.splitlines()))
