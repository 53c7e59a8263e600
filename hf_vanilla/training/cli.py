"""``hf-vanilla train``: the command line, built from :class:`TrainOptions` by transformers' ``HfArgumentParser``.

Importing this module (and building the parser) imports neither torch nor a model, so ``--help`` is quick.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from transformers import HfArgumentParser

from .options import TrainOptions
from .tasks import TASKS

DESCRIPTION = ("Train an hf_vanilla model with transformers' Trainer; run it under `accelerate launch` for DDP / "
               "FSDP / DeepSpeed. Writes the model, tokenizer, metrics, curves and a model card into --output-dir.")

EPILOG = """examples:
  hf-vanilla train --task clm --output-dir runs/shakespeare --max-steps 2000
  hf-vanilla train --task clm --output-dir runs/mine --data-files train=mine.txt validation=held-out.txt
  hf-vanilla train --task translation --output-dir runs/bible --preset base --recipe paper
  hf-vanilla train --task classification --output-dir runs/news --config norm_position=pre --config hidden_dropout=0.2
  hf-vanilla train --task clm --output-dir runs/shakespeare --resume      # continue after a stop or Ctrl-C
  hf-vanilla train --task clm --output-dir runs/paper-block --config norm_position=post   # the paper's block
  accelerate launch --multi_gpu --num_processes 2 -m hf_vanilla.cli train --task mlm --output-dir runs/mlm
      # 2 processes: on GPUs, or on a CPU-only machine joined by gloo (without --multi_gpu accelerate
      # starts ONE process there); see docs/training.md "Many processes, GPUs and machines"
"""


@dataclass
class RunArguments:
    """Which task to train, and where the run directory goes."""

    task: str = field(metadata={"help": "what to train", "choices": tuple(TASKS)})
    output_dir: str = field(metadata={"help": "the run directory (model, tokenizer, metrics, checkpoints, card)"})


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows a default once, and only a real one (an unset option's help says what unset means)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.required or action.default in (None, [], False, argparse.SUPPRESS):
            return action.help
        return super()._get_help_string(action)


def build_parser(prog: str = "hf-vanilla train") -> HfArgumentParser:
    return HfArgumentParser((RunArguments, TrainOptions), prog=prog, description=DESCRIPTION, epilog=EPILOG,
                            formatter_class=HelpFormatter)


def parse(argv: list[str]) -> tuple[RunArguments, TrainOptions]:
    where, options = build_parser().parse_args_into_dataclasses(args=argv)
    return where, options


def run_command(argv: list[str], before_run: Callable[[], None] | None = None) -> int:
    """``hf-vanilla train ARGS``: exit status 0 when done, 1 on a clear error, 130 after Ctrl-C.
    ``before_run`` runs once the arguments parsed (the ``hf-vanilla`` command registers the Auto classes)."""
    where, options = parse(argv)
    if before_run is not None:
        before_run()
    from ..corpora import CorpusUnavailableError
    from .run import TrainingDivergedError, TrainingInterruptedError, train
    from .rundir import RunDirectoryBusyError

    try:
        result = train(where.task, where.output_dir, **{f.name: getattr(options, f.name)
                                                         for f in dataclasses.fields(TrainOptions)})
    except TrainingInterruptedError as stop:
        print(f"hf-vanilla train: {stop}", file=sys.stderr)
        return 130
    except (CorpusUnavailableError, TrainingDivergedError, RunDirectoryBusyError, FileExistsError,
            FileNotFoundError, ValueError, OSError) as error:
        print(f"hf-vanilla train: {error}", file=sys.stderr)
        return 1
    from accelerate import PartialState

    from .outputs import stop_line

    if PartialState().is_main_process:
        summary = {k: v for k, v in result.metrics.items() if isinstance(v, (int, float))}
        print(json.dumps({"run_dir": str(result.run_dir), "metrics": summary, "baseline": result.baseline,
                          "global_step": result.global_step, **result.completion,
                          "time_per_step_s": result.time_per_step_s, "wall_time_s": result.wall_time_s}, indent=1))
        print(f"hf-vanilla train: {stop_line(result.completion)}", file=sys.stderr)
    return 0
