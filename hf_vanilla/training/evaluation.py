"""``hf-vanilla evaluate RUN``: the held-out metrics of a saved run, recomputed as the run computed them.

The run's ``run.json`` holds its task and every option (data, splits, lengths, seed); the data is loaded and
tokenised as the run did, the saved model and tokenizer are loaded, and the task's own final evaluation
(:meth:`Task.evaluate`) scores them: the figures of the run's ``metrics.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import transformers

from .. import register
from ..checkpoint import load_complete
from ..corpora import CorpusUnavailableError
from ..errors import HfVanillaError, refuse
from ..tasks import Evaluation
from .preflight import recorded_options
from .run import has_accelerator, make_trainer, training_arguments
from .sources import load_task_data


def evaluate_run(run_dir: str | os.PathLike[str], eval_batch_size: int | None = None) -> Evaluation:
    """The task's final evaluation (validation and test metrics, the baseline) of the model saved in ``run_dir``."""
    register()  # the Auto classes must know hf_vanilla's model type before they read the config
    task, opts = recorded_options(Path(run_dir), eval_batch_size)
    raw, _ = load_task_data(task, opts)
    tokenizer = transformers.AutoTokenizer.from_pretrained(run_dir)
    model = load_complete(getattr(transformers, task.auto_class), run_dir, exact=True,
                          attn_implementation=opts.attn_implementation)
    data = task.tokenize(raw, tokenizer, opts)
    with tempfile.TemporaryDirectory() as scratch:  # the Trainer's output_dir: nothing is written into the run
        args = training_arguments(task, Path(scratch), opts, 1, model.config.hidden_size, not has_accelerator())
        trainer = make_trainer(task, model, args, tokenizer, data, opts, [])
        trainer.remove_callback(transformers.PrinterCallback)  # stdout is for the result (--disable-tqdm prints logs)
        return task.evaluate(trainer, data, tokenizer, opts)


def run_evaluate(args: argparse.Namespace) -> int:
    """``hf-vanilla evaluate RUN`` (its arguments: :mod:`hf_vanilla.commands`): the metrics and baseline as JSON."""
    try:
        evaluation = evaluate_run(args.run_dir, args.batch_size)
    except (HfVanillaError, CorpusUnavailableError, ValueError, OSError, KeyError) as error:
        return refuse("evaluate", error)
    print(json.dumps(_summary(evaluation), indent=1))
    return 0


def _summary(evaluation: Evaluation) -> dict[str, Any]:
    return {"metrics": evaluation.metrics, "baseline": evaluation.baseline}


__all__ = ["evaluate_run", "run_evaluate"]
