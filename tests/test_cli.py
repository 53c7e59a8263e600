"""The `hf-vanilla` command line: every --help (and --version) answers without importing the heavy libraries,
and `train`'s parser, built from TrainOptions without transformers, is the one HfArgumentParser builds."""

from __future__ import annotations

import argparse
import json
import os
import resource
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


# --------------------------------------------------------------------------------------------------
# Refusals that depend only on the folder and the arguments come before the heavy imports (issue 43: the main
# job's "already holds" / "in progress" took 58-127 s under load, push's 33-77 s).


def _recorded_run(folder: Path, **record) -> Path:
    """A run folder as hf_vanilla records it (run.json naming its task, in the folder's record)."""
    from hf_vanilla.files.output_folder import OutputFolder

    folder.mkdir(parents=True)
    OutputFolder(folder).add(["run.json"])
    (folder / "run.json").write_text(json.dumps({"task": "clm", **record}))
    return folder


def _timed(*argv: str) -> tuple[subprocess.CompletedProcess, float, set[str]]:
    """``python -X importtime ARGV`` from the repository root: its output, the smaller of two runs' CPU seconds
    (user + system: what the command costs, which other jobs on the machine barely move), and the modules it
    imported."""
    seconds = []
    for _ in range(2):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True,
                              timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        seconds.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    return proc, min(seconds), imported


def test_refusals_from_the_folder_and_arguments_alone_come_as_fast_as_help(tmp_path):
    from hf_vanilla.files.output_folder import OutputFolder

    finished = _recorded_run(tmp_path / "finished", status="completed",
                             options={"vocab_size": 4096, "seed": 0})
    interrupted = _recorded_run(tmp_path / "interrupted", status="interrupted", interrupted_at_step=50,
                                command=["scripts/main_job.py", "--output-dir", "runs/x"])
    busy = _recorded_run(tmp_path / "busy", status="running")
    _, help_s, _ = _timed("-m", "hf_vanilla.cli", "--help")
    refusals = {  # command -> (exit status, what its one line says)
        ("scripts/main_job.py", "--output-dir", str(finished)): (2, "already holds a training run"),
        ("scripts/main_job.py", "--output-dir", str(busy)): (2, "in progress"),
        ("scripts/main_job.py", "--output-dir", str(finished), "--resume", "--seed", "9"): (2, "--seed (seed) 0, not 9"),
        ("-m", "hf_vanilla.cli", "train", "--task", "clm", "--output-dir", str(finished)):
            (2, "already holds a training run"),
        ("-m", "hf_vanilla.cli", "train", "--task", "clm", "--output-dir", str(busy)): (2, "in progress"),
        ("-m", "hf_vanilla.cli", "train", "--task", "clm", "--output-dir", str(finished), "--resume"):
            (2, "--vocab-size (vocab_size) 4096, not 8000"),
        ("-m", "hf_vanilla.cli", "push", str(interrupted), "someone/run"):
            (2, "bash scripts/main_job.sh --output-dir runs/x --resume"),
    }
    ratios = {}
    with OutputFolder(busy).locked():
        for argv, (status, says) in refusals.items():
            proc, seconds, imported = _timed(*argv)
            assert proc.returncode == status and says in proc.stderr, (argv, proc.stderr[-2000:])
            assert not {name.split(".")[0] for name in imported} & HEAVY, (argv, HEAVY & imported)
            ratios[" ".join(argv)] = seconds / help_s
    # CPU time, not wall time (a wall-time ratio reached 12 at load 14): importing torch and transformers alone costs
    # 20x `--help` and more, so a bound of 10 tells one from the other.
    assert max(ratios.values()) < 10, ratios


def test_required_options_show_as_required_in_help():
    """Issue 43: `train --help` showed "(default: None)" for --task and --output-dir."""
    text = " ".join(_run_cli("train", "--help")[0].stdout.split())
    assert "(default: None)" not in text
    assert "what to train (required)" in text and "card) (required)" in text
