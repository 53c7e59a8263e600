"""What a finished run leaves besides the model: run.json, metrics.json, curves.png and the card."""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import statistics
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import accelerate
import datasets
import tokenizers
import torch
import transformers

from .. import __version__
from ..publishing.card import build_model_card, time_limit_reason
from ..publishing.unfinished import how_to_resume
from ..tools.viz import plot_training_curves
from .rundir import RUN_RECORD

if TYPE_CHECKING:
    from ..files.output_folder import OutputFolder
    from ..tasks import Task
    from .options import TrainOptions


def environment() -> dict[str, Any]:
    return {
        "hf_vanilla": __version__, "transformers": transformers.__version__, "torch": torch.__version__,
        "accelerate": accelerate.__version__, "datasets": datasets.__version__,
        "tokenizers": tokenizers.__version__, "python": platform.python_version(),
        "platform": platform.platform(), "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.is_available(),
    }


def run_record(task: Task, opts: TrainOptions, *, description: dict[str, Any], tokenizer: Any, model: Any,
               args: Any, world: int, distributed_type: str, status: str, resumed_from: Path | None,
               resume_command: str | None) -> dict[str, Any]:
    """run.json: the task, every option, the values actually used, the data, the environment, and the command that
    finishes the run (``resume_command``, None when the caller named none: messages then give the generic advice)."""
    return {
        "task": task.name,
        "status": status,
        "model_class": type(model).__name__,
        "auto_class": task.auto_class,
        "pipeline_tag": task.pipeline_tag,
        "options": dataclasses.asdict(opts),
        "effective": {
            "learning_rate": args.learning_rate, "warmup_steps": args.warmup_steps,
            "max_steps": args.max_steps, "eval_steps": args.eval_steps, "save_steps": args.save_steps,
            "logging_steps": args.logging_steps, "world_size": world, "distributed_type": distributed_type,
            "global_batch_size": opts.batch_size * opts.gradient_accumulation_steps * world,
        },
        "dataset": description,
        "tokenizer": {"kind": opts.tokenizer, "vocab_size": len(tokenizer),
                      "trained_on": "training split only" if not opts.init_from else f"from {opts.init_from}"},
        "parameters": sum(p.numel() for p in model.parameters()),
        "config": model.config.to_diff_dict(),
        "resumed_from": str(resumed_from) if resumed_from else None,
        "command": sys.argv,
        "resume_command": resume_command,
        "environment": environment(),
    }


def write_run_record(folder: OutputFolder, record: dict[str, Any]) -> None:
    folder.write_json(RUN_RECORD, record)


# ----------------------------------------------------------------------------------------------
# What of the record a push publishes

def median_step_time(durations: list[float]) -> float | None:
    """The median optimizer-step time, leaving out the first (warm-up) step when there are others."""
    steps = durations[1:] or durations
    return statistics.median(steps) if steps else None


#: The timing of a run whose training time is not known (resumed only to finish, recorded before it was kept).
UNTIMED = dict.fromkeys(("train_time_s", "time_per_step_s_median", "time_per_step_s_mean", "wall_time_s"))


def training_time(*, train_time_s: float, durations: list[float], wall_time_s: float) -> dict[str, Any]:
    """How long training took (and the run until then), recorded in run.json when training ends: a run resumed only
    to finish (evaluate, write the outputs) reports these, not its own seconds of loading the checkpoint."""
    return {"train_time_s": train_time_s, "time_per_step_s_median": median_step_time(durations),
            "time_per_step_s_mean": sum(durations) / len(durations) if durations else None, "wall_time_s": wall_time_s}


def timing(task: Task, opts: TrainOptions, *, trained: dict[str, Any], wall_time_s: float, steps: int, world: int,
           stopped_by_time_limit_at: int | None) -> dict[str, Any]:
    """metrics.json's timing: ``trained`` (:func:`training_time`) and the tokens a step and a second."""
    tokens = task.tokens_per_example(opts)
    per_step_tokens = tokens * opts.batch_size * opts.gradient_accumulation_steps * world if tokens else None
    per_step = trained["time_per_step_s_median"]
    return {
        "wall_time_s": wall_time_s,
        "train_time_s": trained["train_time_s"],
        "steps": steps,
        "time_per_step_s_median": per_step,
        "time_per_step_s_mean": trained["time_per_step_s_mean"],
        "tokens_per_step": per_step_tokens,
        "tokens_per_s": per_step_tokens / per_step if per_step_tokens and per_step else None,
        "stopped_by_time_limit_at": stopped_by_time_limit_at,
    }


def completion(*, planned_steps: int, completed_steps: int, time_limit_minutes: float | None,
               stopped_by_time_limit_at: int | None, resume_command: str | None = None) -> dict[str, Any]:
    """Whether training ran every planned step and, if not, what cut it short and (``resume_command``) the command
    that trains on to the planned steps: metrics.json, the card and the summary lines all say it, since a run cut
    short reports figures of a shorter run than asked for."""
    how_to_finish = None
    if stopped_by_time_limit_at is not None:
        reason = time_limit_reason(time_limit_minutes, stopped_by_time_limit_at, planned_steps)
        how_to_finish = how_to_resume(resume_command)
    elif completed_steps < planned_steps:  # a caller's callback set control.should_training_stop
        reason = f"a callback stopped training at step {completed_steps} of {planned_steps}"
    else:
        reason = None
    return {"planned_steps": planned_steps, "completed_steps": completed_steps, "stopped_early": reason is not None,
            "stop_reason": reason, "how_to_finish": how_to_finish}


def stop_line(done: dict[str, Any]) -> str:
    """One line for a summary: the steps run, and loudly why they are fewer than planned and how to finish."""
    steps = f"{done['completed_steps']} of {done['planned_steps']} planned steps"
    if not done["stopped_early"]:
        return f"completed all {steps}"
    finish = f"; to finish it, {done['how_to_finish']}" if done.get("how_to_finish") else ""
    return f"STOPPED EARLY: {done['stop_reason']} ({steps}){finish}"


def read_outputs(run_dir: Path) -> dict[str, Any] | None:
    """metrics.json as :func:`write_outputs` wrote it, or None when the run has not written it."""
    try:
        return json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write_outputs(folder: OutputFolder, task: Task, *, metrics: dict, baseline: dict, samples: list, timings: dict,
                  done: dict, record: dict, log_history: list) -> None:
    """metrics.json, curves.png, the model card README.md and last run.json (completed), each named in the run's
    record before it is written. run.json says completed only once every other output is this run's: a run that
    fails before (a full disk) is finished by --resume, never taken as finished beside an older run's card."""
    folder.write_json("metrics.json", {"task": task.name, **done, "metrics": metrics, "baseline": baseline,
                                       "timing": timings, "samples": samples})
    with folder.writing("curves.png") as path:
        plot_training_curves(log_history, task=task.name, baseline=baseline, path=path)
    folder.write_text("README.md", build_model_card(folder.path).content)
    write_run_record(folder, record)
