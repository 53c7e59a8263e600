"""A run's record, ``run.json``: what ran (task, options, data, environment) and how it ended (its status).

The run folder itself -- which files are the run's own, its lock, replacing an old run -- belongs to
:mod:`hf_vanilla.files.output_folder`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..files.output_folder import FolderBusyError, OutputFolder

RUN_RECORD = "run.json"

#: Another process is writing this run folder (the name training has always raised).
RunDirectoryBusyError = FolderBusyError


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` holds a run record naming a task (whose files are hf_vanilla's: ``OutputFolder.is_ours``)."""
    try:
        return "task" in json.loads((path / RUN_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        return False


def read_record(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / RUN_RECORD).read_text(encoding="utf-8"))


def update_status(run_dir: Path, status: str, **fields: Any) -> None:
    """Record how the run ended (``completed``, ``diverged``, ``interrupted``, ...) in run.json."""
    record = read_record(run_dir)
    record.update(status=status, **fields)
    OutputFolder(run_dir, "run").write_json(RUN_RECORD, record)
