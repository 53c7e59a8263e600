"""The errors of ours that a command turns into one sentence and exit status 2, and how it says them.

An error raised for the user (a refused folder, a model that cannot fit, a secret about to be published) derives
from :class:`HfVanillaError`; ``hf-vanilla`` catches it once, in its dispatcher (:func:`hf_vanilla.cli.main`), and
each command's own handler of library errors (a ``ValueError`` from transformers, an ``OSError``) says them the
same way through :func:`refuse`.
"""

from __future__ import annotations

import sys

#: The exit status of every refusal: argparse's for a bad argument, ours for a bad input or a busy folder.
REFUSED = 2


class HfVanillaError(Exception):
    """An error hf_vanilla raises for the user: its message says what is wrong and how to fix it."""


def sentence(error: BaseException) -> str:
    """``error``'s message on one line (a message spread over lines would read as several errors)."""
    text = " ".join(str(error).split()) or type(error).__name__
    if isinstance(error, KeyError) and error.args:  # str(KeyError('x')) is "'x'": say what was missing
        text = f"missing entry {error.args[0]!r}"
    return text


def refuse(command: str, error: BaseException) -> int:
    """Print ``hf-vanilla COMMAND: <error in one sentence>`` on stderr; the exit status, :data:`REFUSED`."""
    print(f"hf-vanilla{' ' if command else ''}{command}: {sentence(error)}", file=sys.stderr)
    return REFUSED


__all__ = ["REFUSED", "HfVanillaError", "refuse", "sentence"]
