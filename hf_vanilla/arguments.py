"""What every command line of ours refuses before anything heavy loads, and how it says so: one sentence.

:class:`OneSentenceParser` is argparse's parser with its error said in one line (the option, what is wrong, where
``--help`` is) instead of the whole usage first; the checks below read only the file system and the arguments, so a
missing folder, a file where a folder goes, a number out of range or a malformed Hub repo id is refused before
torch, transformers or datasets are imported (tests/test_cli.py checks each subcommand's refusals import none).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from .errors import REFUSED, HfVanillaError, sentence


class BadArgumentError(HfVanillaError, ValueError):
    """An argument the command cannot use; the message names it and the fix."""


class OneSentenceParser(argparse.ArgumentParser):
    """argparse's parser, refusing in one sentence that names the argument and points at ``--help`` (the usage of
    ``hf-vanilla train`` alone is 50 lines, which buried the sentence that mattered)."""

    def error(self, message: str) -> NoReturn:
        self.exit(REFUSED, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


def whole_number_from(low: int) -> Callable[[str], int]:
    """An argparse ``type``: a whole number of at least ``low``."""

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    return convert


def positive_number(text: str) -> float:
    """An argparse ``type``: a finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {text}")
    return value


def check_first(check: Callable[[argparse.Namespace], None],
                work: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A subcommand's ``func``: ``check(args)`` (stdlib only), then ``work``, which imports the heavy libraries; so a
    bad argument is refused before they load, in one sentence (a ``ValueError``, ``OSError`` or ``KeyError`` of the
    check's becomes :class:`BadArgumentError`)."""

    def run(args: argparse.Namespace) -> int:
        try:
            check(args)
        except (ValueError, OSError, KeyError) as error:
            if isinstance(error, HfVanillaError):
                raise
            raise BadArgumentError(sentence(error)) from error
        return work(args)

    return run


MODEL_FOLDER = "give a folder written by save_pretrained or a training run (local files only)"


def existing_folder(path: str | Path, argument: str, fix: str = MODEL_FOLDER) -> Path:
    """``path`` as a folder that exists, or :class:`BadArgumentError` naming ``argument`` and ``fix``."""
    folder = Path(path)
    if not folder.exists():
        raise BadArgumentError(f"{argument} {path}: no such folder; {fix}")
    if not folder.is_dir():
        raise BadArgumentError(f"{argument} {path} is a file, not a folder; {fix}")
    return folder


def model_folder(path: str | Path, argument: str, fix: str = MODEL_FOLDER) -> Path:
    """``path`` as a folder holding config.json, or :class:`BadArgumentError` naming ``argument`` and ``fix``."""
    folder = existing_folder(path, argument, fix)
    if not (folder / "config.json").is_file():
        raise BadArgumentError(f"{argument} {path} holds no config.json, so it is no saved model; {fix}")
    return folder


def writable_folder(path: str | Path, argument: str) -> None:
    """``path`` may become a folder: it is one already, or nothing is there (a file in the way is refused)."""
    if Path(path).exists() and not Path(path).is_dir():
        raise BadArgumentError(f"{argument} {path} is a file, not a folder; give a folder (new, or one to write into)")


def writable_file(path: str | Path, argument: str) -> None:
    """``path`` may become a file: its folder exists and it is not a folder itself."""
    target = Path(path)
    if target.is_dir():
        raise BadArgumentError(f"{argument} {path} is a folder; give the name of a file to write")
    if not target.parent.is_dir():
        raise BadArgumentError(f"{argument} {path}: the folder {target.parent} does not exist; create it first or "
                               "give a path in a folder that exists")


def at_least(low: float, args: argparse.Namespace, *names: str) -> None:
    """Each option of ``names`` that was given is at least ``low``."""
    for name in names:
        value: Any = getattr(args, name)
        if value is not None and not value >= low:
            raise BadArgumentError(f"--{name.replace('_', '-')} must be at least {low:g}, got {value!r}")


def above_zero(args: argparse.Namespace, *names: str) -> None:
    """Each option of ``names`` that was given is a finite number above 0."""
    for name in names:
        value: Any = getattr(args, name)
        if value is not None and not 0 < value < float("inf"):
            raise BadArgumentError(f"--{name.replace('_', '-')} must be a finite number above 0, got {value!r}")


def hub_repo_id(repo_id: str, argument: str = "REPO_ID") -> None:
    """``repo_id`` as the Hub spells one (NAME or OWNER/NAME), checked by huggingface_hub's own rule."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id  # the client only: no torch

    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        raise BadArgumentError(
            f"{argument} {repo_id!r} is not a Hub repo id: write NAME or OWNER/NAME (letters, digits, '-', '_', '.'; "
            "at most 96 characters, no '--' or '..')") from None


__all__ = ["BadArgumentError", "OneSentenceParser", "above_zero", "at_least", "check_first", "existing_folder", "hub_repo_id",
           "model_folder", "positive_number", "whole_number_from", "writable_file", "writable_folder"]
