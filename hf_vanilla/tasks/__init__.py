"""The task registry: one :class:`Task` per training task; adding a task = adding a module here."""

from __future__ import annotations

from .base import Evaluation, Task
from .classification import Classification
from .clm import CausalLM
from .mlm import MaskedLM
from .translation import Translation

#: Every task by name, in the order the CLI lists them.
TASKS: dict[str, Task] = {task.name: task for task in (CausalLM(), MaskedLM(), Translation(), Classification())}


def get_task(name: str) -> Task:
    """The task called ``name``, or a clear error listing the tasks."""
    if name not in TASKS:
        raise ValueError(f"task must be one of {tuple(TASKS)}, got {name!r}")
    return TASKS[name]


__all__ = ["TASKS", "Evaluation", "Task", "get_task"]
