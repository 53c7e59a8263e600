"""``hf-vanilla train``: the command line, built from the fields of :class:`TrainOptions` (one flag each).

The parser is built here with argparse, the way transformers' ``HfArgumentParser`` would build it (both
``--max_steps`` and ``--max-steps``, ``--help`` showing the dashed one the docs use; ``Literal`` choices, ``list`` fields taking several values, ``--flag``
for a bool), but without importing transformers: ``hf-vanilla train --help`` imports no torch or transformers.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import sys
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..arguments import OneSentenceParser
from ..errors import HfVanillaError, refuse
from ..files.output_folder import FolderBusyError
from ..publishing.unfinished import resume_command
from ..tasks import TASKS, get_task
from .options import TrainOptions, check_ranges
from .preflight import check_before_loading
from .rundir import RunDirectoryBusyError

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
    """Shows a default once, and only a real one (an unset option's help says what unset means); shows each flag
    as the docs spell it (``--output-dir``), not its accepted underscore alias."""

    def add_usage(self, usage, actions, groups, prefix=None) -> None:
        super().add_usage(usage, [_as_documented(action) for action in actions], groups, prefix)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        return super()._format_action_invocation(_as_documented(action))


    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.required:
            return f"{action.help} (required)"
        if action.default in (None, [], False, argparse.SUPPRESS):
            return action.help
        return super()._get_help_string(action)


def _as_documented(action: argparse.Action) -> argparse.Action:
    """``action`` showing only its dashed flags (``--output-dir``) when it has any."""
    shown = copy.copy(action)
    shown.option_strings = [flag for flag in action.option_strings if "_" not in flag] or action.option_strings
    return shown


def build_parser(prog: str = "hf-vanilla train") -> argparse.ArgumentParser:
    parser = OneSentenceParser(prog=prog, description=DESCRIPTION, epilog=EPILOG, formatter_class=HelpFormatter)
    for options in (RunArguments, TrainOptions):
        add_dataclass_arguments(parser, options)
    return parser


def parse(argv: list[str]) -> tuple[RunArguments, TrainOptions]:
    """The run's place and options; a value out of its range is a usage error (exit 2) naming the option."""
    parser = build_parser()
    namespace = vars(parser.parse_args(argv))
    where, options = (kind(**{f.name: namespace[f.name] for f in dataclasses.fields(kind)})
                      for kind in (RunArguments, TrainOptions))
    try:
        check_ranges(options)
    except ValueError as error:
        parser.error(str(error))
    return where, options


def add_dataclass_arguments(parser: argparse.ArgumentParser, options: type) -> None:
    """One flag per field of the dataclass ``options``: ``--name`` and ``--na-me``, its type, default and choices
    from the annotation, and the field's metadata (help, action, metavar, ...) as ``add_argument`` keywords."""
    hints = typing.get_type_hints(options)
    for f in dataclasses.fields(options):
        flags = [f"--{f.name}"] + ([f"--{f.name.replace('_', '-')}"] if "_" in f.name else [])
        kwargs: dict[str, Any] = {**_type_arguments(hints[f.name], f.default), **f.metadata}
        aliases = kwargs.pop("aliases", [])  # as HfArgumentParser takes them: more flags for the same option
        flags += [aliases] if isinstance(aliases, str) else list(aliases)
        if f.default is not dataclasses.MISSING:
            kwargs["default"] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            kwargs["default"] = f.default_factory()
        else:
            kwargs["required"] = True
        parser.add_argument(*flags, **kwargs)


def _type_arguments(hint: Any, default: Any) -> dict[str, Any]:
    """argparse keywords for a field's annotation: ``X | None`` is ``X``; ``X | str`` is ``str``; a ``Literal``
    gives choices; a bool takes ``--flag`` or ``--flag false``; a ``list[X]`` takes several values."""
    args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = str if str in args else args[0]
        args = list(typing.get_args(hint))
    origin = typing.get_origin(hint)
    if origin is Literal:
        return {"type": type(args[0]), "choices": tuple(args)}
    if hint is bool:
        return {"type": _to_bool} if default is None else {"type": _to_bool, "nargs": "?", "const": True}
    if origin is list:
        return {"type": args[0], "nargs": "+"}
    return {"type": hint}


def _to_bool(text: str) -> bool:
    if text.lower() in ("yes", "true", "t", "y", "1"):
        return True
    if text.lower() in ("no", "false", "f", "n", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected one of yes/no, true/false, t/f, y/n, 1/0, got {text!r}")


def run_command(argv: list[str], before_run: Callable[[], None] | None = None) -> int:
    """``hf-vanilla train ARGS``: exit status 0 when done, 2 on a clear error (one sentence), 130 after Ctrl-C.
    ``before_run`` runs once the arguments parsed (the ``hf-vanilla`` command registers the Auto classes)."""
    where, options = parse(argv)
    try:  # what the folder and the arguments alone refuse, before torch loads
        check_before_loading(get_task(where.task), Path(where.output_dir), options.resolved(get_task(where.task)))
    except (HfVanillaError, FolderBusyError, FileExistsError, FileNotFoundError, ValueError) as error:
        return refuse("train", error)
    if before_run is not None:
        before_run()
    # datasets, torch and transformers load once the arguments and the folder pass (start-up time of the refusals)
    from ..corpora import CorpusUnavailableError
    from .run import TrainingDivergedError, TrainingInterruptedError, train

    # Under a launcher (torchrun, accelerate launch) the command that continues the run is the launcher's, not ours.
    command = None if "LOCAL_RANK" in os.environ else resume_command("hf-vanilla train", argv)
    try:
        result = train(where.task, where.output_dir, resume_command=command,
                       **{f.name: getattr(options, f.name) for f in dataclasses.fields(TrainOptions)})
    except TrainingInterruptedError as stop:
        print(f"hf-vanilla train: {stop}", file=sys.stderr)
        return 130
    except (HfVanillaError, CorpusUnavailableError, TrainingDivergedError, RunDirectoryBusyError, ValueError,
            OSError) as error:
        return refuse("train", error)
    # accelerate and the outputs load torch: only once the run is over (start-up time of the refusals)
    from accelerate import PartialState

    from .outputs import stop_line

    if PartialState().is_main_process:
        summary = {k: v for k, v in result.metrics.items() if isinstance(v, (int, float))}
        print(json.dumps({"run_dir": str(result.run_dir), "metrics": summary, "baseline": result.baseline,
                          "global_step": result.global_step, **result.completion,
                          "time_per_step_s": result.time_per_step_s, "wall_time_s": result.wall_time_s}, indent=1))
        print(f"hf-vanilla train: {stop_line(result.completion)}", file=sys.stderr)
    return 0
