"""A training run that is not finished: why (its run.json says so), and the command that finishes it.

The command is the run's own: the one its caller declared in run.json (``resume_command``: ``hf-vanilla train ...``
or ``bash scripts/main_job.sh ...`` with ``--resume``), else the one derived from the command line run.json records.
It never carries a time limit, so run as printed it trains on to the planned steps, evaluates and writes the
outputs. This module reads json and the folder's record only: ``hf-vanilla push`` refuses an unfinished run with it
before huggingface_hub and torch load.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..files.output_folder import OutputFolder
from ..files.schema import RunFile, read_json

#: Flags a finishing command leaves out (flag -> whether it always takes a value): ``--overwrite`` would start
#: again, a ``--resume CHECKPOINT`` would go back to an older checkpoint, and a time limit would stop it short again.
LEFT_OUT = {"--resume": False, "--overwrite": False, "--time-limit": True, "--time-limit-minutes": True,
            "--time_limit_minutes": True}

#: How a user runs what a run.json's recorded command line started (its ``sys.argv[0]``, and the subcommand).
PROGRAMS = {("main_job.py", None): "bash scripts/main_job.sh", ("hf-vanilla", "train"): "hf-vanilla train",
            ("hf-vanilla.exe", "train"): "hf-vanilla train", ("cli.py", "train"): "hf-vanilla train"}


def resume_command(program: str, argv: Sequence[str]) -> str:
    """The shell command that finishes the run ``program argv`` started: the same arguments with a bare --resume
    (the newest checkpoint), without --overwrite (which would start again) and without a time limit."""
    kept, rest = [], list(argv)
    while rest:
        word = rest.pop(0)
        flag = word.split("=", 1)[0]
        if flag in LEFT_OUT:
            if "=" not in word and rest and (LEFT_OUT[flag] or not rest[0].startswith("-")):
                rest.pop(0)  # the flag's own value
            continue
        kept.append(word)
    return shlex.join([*shlex.split(program), *kept, "--resume"])


def recorded_resume_command(run: dict[str, Any]) -> str | None:
    """The command that finishes the run ``run`` (a run.json) describes: the one its caller declared, else the one
    derived from its recorded command line when that is ``hf-vanilla train`` or the main job; None when unknown
    (a Python caller that named none, a launcher)."""
    if "resume_command" in run:
        return run["resume_command"]
    argv = [str(word) for word in run.get("command") or []]
    if not argv:
        return None
    name, rest = Path(argv[0]).name, argv[1:]
    for (script, subcommand), program in PROGRAMS.items():
        if name == script and (subcommand is None or rest[:1] == [subcommand]):
            return resume_command(program, rest if subcommand is None else rest[1:])
    return None


def how_to_resume(command: str | None) -> str:
    """What finishes a run: its own command when known, else the generic advice."""
    if command is None:
        return "run the same command with --resume (in Python: the same train() call with resume=True)"
    return f"run `{command}`"


# ----------------------------------------------------------------------------------------------
# What push refuses


#: Why a run whose run.json records one of these statuses is not pushed without ``allow_incomplete``.
UNFINISHED = {
    "running": "is still running, or its process was killed before it could record how it ended",
    "diverged": "diverged{at} (its loss became NaN/inf)",
    "interrupted": "was interrupted{at} before it finished",
}


def check_finished(run: dict[str, Any], folder: Path) -> None:
    """Refuse a run whose ``run.json`` does not say ``completed``: its weights and card are not those of the run
    that was asked for. The advice is the run's own command (:func:`recorded_resume_command`)."""
    status = run.get("status", "completed")
    if status == "completed":
        return
    step = run.get("diverged_at_step", run.get("interrupted_at_step"))
    why = UNFINISHED.get(status, f"has status {status!r}, not 'completed'")
    why = why.format(at=f" at step {step}" if step is not None else "")
    if status == "diverged":
        first = "Train it again with a lower learning rate or a longer warmup (its error says how)"
    else:
        first = f"Finish it first ({how_to_resume(recorded_resume_command(run))})"
    raise ValueError(f"refusing to push {folder}: run.json says the run {why}. {first}, or pass allow_incomplete=True "
                     "(--allow-incomplete) to publish it as it is.")


def check_model_saved(run: dict[str, Any], folder: Path) -> None:
    """Refuse a run folder without its final model (no config.json at its top), saying where the run stands."""
    planned = (run.get("effective") or {}).get("max_steps")
    step = run.get("interrupted_at_step")
    how = how_to_resume(recorded_resume_command(run))
    if step is not None and planned is not None and step >= planned:
        where = (f"training finished (step {step} of {planned}) but the run stopped before it saved the final "
                 f"model; to evaluate and save it without training further, {how}")
    else:
        where = "the run saves its final model once training finishes; to train on and finish it, " + how
    raise FileNotFoundError(f"{folder} is a training run without its final model yet: {where}, then push.")


def check_before_upload(folder: Path, allow_incomplete: bool) -> None:
    """What a push refuses from the folder alone, before anything heavy loads: no folder, a run its run.json says is
    unfinished (unless ``allow_incomplete``), a run without its final model."""
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a directory")
    run = own_run_record(folder)
    if run is None:
        return
    if not allow_incomplete:
        check_finished(run, folder)
    if not (folder / "config.json").is_file():
        check_model_saved(run, folder)


def own_run_record(folder: Path) -> dict[str, Any] | None:
    """The folder's run.json when hf_vanilla wrote it there (a run.json of the user's is not a run's record)."""
    if "run.json" not in {path.name for path in OutputFolder(folder).own_files()}:
        return None
    try:
        return read_json(folder / "run.json", RunFile)  # an invalid field is one sentence naming it
    except OSError:
        return None
