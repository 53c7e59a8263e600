"""A run's record, ``run.json``: what ran (task, options, data, environment) and how it ended (its status).

The run folder itself -- which files are the run's own, its lock, replacing an old run -- belongs to
:mod:`hf_vanilla.files.output_folder`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..files.output_folder import FolderBusyError, OutputFolder
from ..files.schema import RunFile, read_json

RUN_RECORD = "run.json"

#: Another process is writing this run folder (the name training has always raised).
RunDirectoryBusyError = FolderBusyError


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` holds a run record naming a task (whose files are hf_vanilla's: ``OutputFolder.is_ours``)."""
    try:
        record = read_json(path / RUN_RECORD)  # too large, too deep or not JSON: one sentence (InvalidFileError)
    except OSError:
        return False
    return isinstance(record, dict) and "task" in record


def read_record(run_dir: Path) -> dict[str, Any]:
    """run.json, checked against its declared schema (:class:`hf_vanilla.files.schema.RunFile`): an invalid value is
    one sentence naming the file and the field."""
    return read_json(run_dir / RUN_RECORD, RunFile)


def update_status(run_dir: Path, status: str, **fields: Any) -> None:
    """Record how the run ended (``completed``, ``diverged``, ``interrupted``, ...) in run.json."""
    record = read_record(run_dir)
    record.update(status=status, **fields)
    OutputFolder(run_dir, "run").write_json(RUN_RECORD, record)
