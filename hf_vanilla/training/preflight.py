"""What a run refuses from its folder and its arguments alone, before torch, the data or a model loads.

A folder it may not write (another process is writing it, it holds someone else's files, or a run that neither
``--resume`` nor ``--overwrite`` was given for) and a ``--resume`` whose options contradict the ones the run
recorded in run.json. ``hf-vanilla train`` and the main job check this first, so they refuse within a second;
:func:`hf_vanilla.training.train` checks it too. Only the standard library, the run folder and the options load here.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..files.output_folder import OutputFolder
from ..publishing.unfinished import recorded_resume_command
from ..tasks import get_task
from . import rundir
from .options import check_init_from, check_ranges, flag, options_from_record

if TYPE_CHECKING:
    from ..tasks import Task
    from .options import TrainOptions

#: What ``--resume`` may change: how the run is watched and reported, where and how long this sitting trains, and
#: ``--max-steps`` (a run extended to more steps: its schedule is planned again for them). Every other option decides
#: what the run computes (data, tokenizer, model, optimiser, evaluation), and a checkpoint goes on only with the
#: values it was trained with.
MAY_CHANGE_ON_RESUME = frozenset({
    "resume", "overwrite", "time_limit_minutes", "max_steps", "use_cpu", "attn_implementation", "disable_tqdm", "report_to",
    "dataloader_num_workers", "logging_steps", "save_total_limit", "eval_batch_size", "license",
})


def check_before_loading(task: Task, run_dir: Path, opts: TrainOptions) -> dict[str, Any] | None:
    """Refuse a folder ``opts`` may not write, files it names that are not there (``--data-files``, ``--init-from``,
    ``--resume CHECKPOINT``), or a ``--resume`` that contradicts the run's record (``opts`` resolved for ``task``).
    Returns the run's record when resuming one, else None."""
    check_data_files(opts.data_files)
    check_init_from(opts.init_from)
    check_resume_checkpoint(opts.resume)
    OutputFolder(run_dir, "run").check(overwrite=opts.overwrite, resume=bool(opts.resume))
    if not opts.resume or not rundir.is_run_dir(run_dir):
        return None
    record = rundir.read_record(run_dir)
    check_same_run(record, task.name, opts, run_dir)
    return record


SPLITS = ("train", "validation", "test")


def parse_data_files(entries: Sequence[str]) -> dict[str, list[str]] | list[str]:
    """``["a.txt", "validation=b.txt"]`` -> ``{"train": ["a.txt"], "validation": ["b.txt"]}``.

    A prefix counts as a split name only if it is ``train``, ``validation`` or ``test`` (so paths with
    ``=`` in them still work); without any split prefix the result is a plain list (all ``train``).
    """
    splits: dict[str, list[str]] = {}
    plain: list[str] = []
    for entry in entries:
        split, sep, path = entry.partition("=")
        if sep and split in SPLITS:
            splits.setdefault(split, []).append(path)
        else:
            plain.append(entry)
    if not splits:
        return plain
    if plain:
        splits.setdefault("train", []).extend(plain)
    return splits


def all_files(files: Mapping[str, list[str]] | list[str]) -> list[str]:
    return [f for fs in files.values() for f in fs] if isinstance(files, Mapping) else list(files)


def check_data_files(entries: Sequence[str]) -> None:
    """Every ``--data-files`` path is a file (checked before the data libraries load, and before anything is written)."""
    for name in all_files(parse_data_files(entries)):
        if not Path(name).is_file():
            what = "is a folder, not a file" if Path(name).is_dir() else "does not exist"
            raise FileNotFoundError(f"--data-files {name} {what}; give .txt/.json/.jsonl/.csv files as PATH or "
                                    "SPLIT=PATH (SPLIT one of train, validation, test)")


def recorded_options(run_dir: Path, eval_batch_size: int | None = None) -> tuple[Task, TrainOptions]:
    """The task and the resolved options a run's run.json records (``eval_batch_size`` over its own), checked as a
    schema and against their ranges: what ``hf-vanilla evaluate`` refuses before anything loads."""
    if not (run_dir / rundir.RUN_RECORD).is_file():
        raise FileNotFoundError(f"{run_dir} has no {rundir.RUN_RECORD}: evaluate needs a folder written by "
                                "`hf-vanilla train`")
    record = rundir.read_record(run_dir)
    task = get_task(record["task"])
    opts = options_from_record(record.get("options"), str(run_dir / rundir.RUN_RECORD)).resolved(task)
    if eval_batch_size is not None:
        opts.eval_batch_size = eval_batch_size
        check_ranges(opts)
    return task, opts


def check_resume_checkpoint(resume: str | None) -> None:
    """``--resume CHECKPOINT`` names a folder (``--resume`` alone, "latest", finds the newest itself)."""
    if resume not in (None, "latest") and not Path(resume).is_dir():
        raise FileNotFoundError(f"--resume {resume}: no such checkpoint folder; give one of the run's checkpoint-N "
                                "folders, or --resume alone to continue from its newest")


def check_same_run(record: dict[str, Any], task: str, opts: TrainOptions, run_dir: Path) -> None:
    """``ValueError`` naming the first option whose value differs from the one ``record`` (run.json) holds."""
    recorded = record.get("options") or {}
    given = _as_recorded(dataclasses.asdict(opts))
    differs = [(flag(name), recorded[name], given[name]) for name in given
               if name not in MAY_CHANGE_ON_RESUME and name in recorded and recorded[name] != given[name]]
    if record.get("task", task) != task:
        differs.insert(0, ("--task", record["task"], task))
    if not differs:
        return
    option, then, now = differs[0]
    command = recorded_resume_command(record)
    how = f"run `{command}`" if command else "give the options the run recorded (its run.json: options)"
    raise ValueError(f"{run_dir} was trained with {option} {then!r}, not {now!r}, and --resume goes on only with the "
                     f"run's own options: {how}, or start a new run (--overwrite, or another --output-dir)")


def _as_recorded(options: dict[str, Any]) -> dict[str, Any]:
    """The options as run.json holds them (through JSON: tuples become lists)."""
    return json.loads(json.dumps(options))
