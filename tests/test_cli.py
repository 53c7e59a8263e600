"""The `hf-vanilla` command line: every --help (and --version) answers without importing the heavy libraries,
and `train`'s parser, built from TrainOptions without transformers, is the one HfArgumentParser builds."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hf_vanilla.cli import COMMANDS

ROOT = Path(__file__).resolve().parent.parent
HEAVY = {"torch", "transformers", "matplotlib", "datasets"}


def _run_cli(*argv: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """``python -X importtime -m hf_vanilla.cli ARGV`` from the repository root: its output and every module it imported."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "hf_vanilla.cli", *argv], capture_output=True,
                          text=True, timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    return proc, imported


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_imports_no_heavy_library(command):
    """Issue 24: `attention --help` took minutes, `train --help` 28 s (torch, matplotlib, transformers imported)."""
    proc, imported = _run_cli(*([command] if command else []), "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {"hf_vanilla", "argparse"} <= imported  # the measurement saw the imports
    assert not {name.split(".")[0] for name in imported} & HEAVY, sorted(HEAVY & {n.split(".")[0] for n in imported})
    assert proc.stdout.startswith(f"usage: hf-vanilla {command or ''}".rstrip())


def test_top_level_help_lists_every_command():
    proc, _ = _run_cli("--help")
    assert all(name in proc.stdout for name in COMMANDS) and "--version" in proc.stdout


def test_version_prints_the_package_version_without_torch():
    from hf_vanilla import __version__

    proc, imported = _run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"hf-vanilla {__version__}"
    assert "torch" not in imported


def test_train_help_shows_examples_and_real_defaults():
    proc, _ = _run_cli("train", "--help")
    assert "examples:" in proc.stdout and "(default: small)" in " ".join(proc.stdout.split())


def test_train_help_spells_flags_as_the_docs_do_and_both_spellings_work():
    """--help (and its usage line) show --output-dir, as every doc writes it; --output_dir still parses."""
    from hf_vanilla.training.cli import build_parser, parse

    text = build_parser().format_help()
    assert "--output-dir OUTPUT_DIR" in text and "--max-steps MAX_STEPS" in text and "--max_steps" not in text
    assert "--output_dir" not in text and "--task {clm,mlm,translation,classification}" in text
    old, new = (parse(["--task", "clm", f"--output{sep}dir", "x", f"--max{sep}steps", "3"]) for sep in "_-")
    assert old == new and new[0].output_dir == "x" and new[1].max_steps == 3


def _described(parser: argparse.ArgumentParser) -> list[tuple]:
    """What a user sees and gets of each option (converters of bools and choices compared by what they return)."""
    rows = []
    for action in parser._actions:
        kind = action.type
        if action.choices and kind is not None:
            kind = tuple(kind(str(choice)) for choice in action.choices)
        elif callable(kind) and kind not in (str, int, float):
            kind = (kind("yes"), kind("0"))
        rows.append((tuple(action.option_strings), action.dest, action.default, action.required, action.nargs,
                     action.const, tuple(action.choices or ()), action.help, action.metavar, type(action).__name__,
                     kind))
    return rows


def test_train_parser_is_the_one_hf_argument_parser_builds():
    """The hand-built parser must not drift from transformers' reading of the same dataclasses."""
    from transformers import HfArgumentParser

    from hf_vanilla.training.cli import RunArguments, build_parser
    from hf_vanilla.training.options import TrainOptions

    reference = HfArgumentParser((RunArguments, TrainOptions), prog="hf-vanilla train")
    assert _described(build_parser()) == _described(reference)


def test_train_parser_reads_bools_as_hf_argument_parser_does():
    from hf_vanilla.training.cli import parse

    argv = ["--task", "clm", "--output-dir", "x"]
    assert parse([*argv, "--bf16"])[1].bf16 is True and parse([*argv, "--bf16", "false"])[1].bf16 is False
    assert parse([*argv, "--group-by-length", "no"])[1].group_by_length is False
    assert parse(argv)[1].group_by_length is None
    with pytest.raises(SystemExit):
        parse([*argv, "--bf16", "maybe"])
