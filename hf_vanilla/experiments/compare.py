"""``hf-vanilla compare``: rows of the table of variants compared on the user's data, with seeds and intervals.

    hf-vanilla compare --output-dir runs/positions --vary position_embedding_type=sinusoidal,rope,alibi \\
        --preset tiny --max-steps 200 --seeds 3 --measure extrapolation

The base model is a size preset (``--preset``) with ``--config KEY=VALUE`` overrides, or ``--base FOLDER`` (a saved
model's config.json: its architecture, trained from scratch). Each ``--vary OPTION=V1,V2,...`` names an option of
the table of variants (hf_vanilla/variants.py) or a training setting (:data:`TRAINING_SETTINGS`); several ``--vary``
give their product. The first value of each is the base variant, to which every other is compared. The data, the
tokenizer and the optimiser are ``hf-vanilla train``'s options (the same flags); the budget is ``--max-steps`` or
``--tokens``, the same for every variant and seed. Seeds 0..N-1 each fix the weights and the data order, the same
across variants, so a seed's runs are paired.

Variants whose config a row's rules refuse are named and skipped before anything trains. Each (variant, seed) run
is the ordinary train run into ``OUTPUT_DIR/runs/VARIANT/seed-S`` (:mod:`.runner`); the report (:mod:`.report`) goes
into ``OUTPUT_DIR`` as ``compare.md``, ``compare.json``, ``compare-curves.png`` (and ``compare-extrapolation.png``)
and a card, ``README.md``. The same command again goes on where a killed or time-limited experiment stopped; with
more ``--seeds`` it adds seeds to a finished one.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import HfVanillaError
from ..presets import PRESETS, preset_fields
from ..tasks import get_task
from ..training.cli import HelpFormatter, add_dataclass_arguments
from ..training.options import SIZE_PRESETS, TrainOptions, check_ranges, parse_config, parse_value
from ..variants import NON_DEFAULT, rows, values
from ..variants import options as table_options
from .measures import LENGTH_FACTORS, OPTIONAL, reach
from .recipes import STUDIES

#: Training settings ``--vary`` takes besides the table's options (fields of TrainOptions that leave the budget
#: in tokens and the data the same).
TRAINING_SETTINGS = ("learning_rate", "lr_scheduler", "warmup_steps", "weight_decay", "adam_beta1", "adam_beta2",
                     "adam_epsilon", "label_smoothing", "max_grad_norm", "dropout", "recipe")

#: TrainOptions fields compare decides itself, with what to give instead.
OWN_OPTIONS = {
    "seed": "compare trains seeds 0..N-1 of every variant: give --seeds N",
    "resume": "compare goes on by itself: run the same command again",
    "overwrite": "compare keeps every run; choose another --output-dir to start a new experiment",
    "init_from": "compare trains every variant from scratch: --base FOLDER takes a saved model's configuration",
}

#: TrainOptions defaults that differ for an experiment's runs: no sample generations, no per-run progress bars (the
#: experiment has one), one checkpoint kept (enough to resume).
RUN_DEFAULTS = dict(num_samples=0, disable_tqdm=True, save_total_limit=1)

#: config.json keys of a saved model that are not its architecture (the vocabulary comes from the data).
NOT_ARCHITECTURE = re.compile(r"architectures|auto_map|model_type|transformers_version|dtype|torch_dtype|vocab_size|"
                              r".*_token_id|_name_or_path|id2label|label2id|problem_type|use_cache")

TASKS_MEASURED = ("clm", "mlm")  # tasks whose held-out loss is a per-token loss


class CompareError(HfVanillaError, ValueError):
    """A compare command that cannot run as given: one sentence naming the input and the fix."""


@dataclass(frozen=True)
class Setting:
    """One variant: its values of the varied options, split into config fields and training options."""

    values: tuple[tuple[str, Any], ...]

    @property
    def label(self) -> str:
        return ", ".join(f"{value}" for _, value in self.values)

    @property
    def folder(self) -> str:
        return re.sub(r"[^\w.=+-]+", "_", "-".join(f"{value}" for _, value in self.values))

    def split(self) -> tuple[dict[str, Any], dict[str, Any]]:
        config = {k: v for k, v in self.values if k not in TRAINING_SETTINGS}
        training = {k: v for k, v in self.values if k in TRAINING_SETTINGS}
        return config, training


@dataclass
class Plan:
    """What an experiment trains: its settings (the base first), the refused ones, the seeds and each run's options."""

    task: str
    output_dir: Path
    varied: list[tuple[str, tuple[Any, ...]]]
    settings: list[Setting]
    refused: list[tuple[Setting, str]]
    seeds: int
    options: dict[str, Any]  # the TrainOptions every run shares (before a setting's own values)
    measures: tuple[str, ...]
    command: str
    tokens_per_run: int = 0
    base_config_source: str = ""
    name: str = "compare"  # the stem of the report's files
    runs_dir: Path | None = None  # where the run folders go (default: OUTPUT_DIR/runs)

    @property
    def base(self) -> Setting:
        return self.settings[0]

    def run_options(self, setting: Setting, seed: int) -> dict[str, Any]:
        config, training = setting.split()
        options = dict(self.options, **training, seed=seed, resume=None, overwrite=False, time_limit_minutes=None)
        options["config"] = {**(self.options.get("config") or {}), **config}
        return options

    def run_dir(self, setting: Setting, seed: int) -> Path:
        return (self.runs_dir or self.output_dir / "runs") / setting.folder / f"seed-{seed}"

    def as_record(self) -> dict[str, Any]:
        """What must match for a later command to go on with this experiment (the seeds may grow)."""
        return json.loads(json.dumps(dict(task=self.task, varied=[[name, list(vals)] for name, vals in self.varied],
                                          options=self.options, measures=list(self.measures))))


# --------------------------------------------------------------------------------------------------
# The command line


def build_parser(prog: str = "hf-vanilla compare") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=(__doc__ or "").split("\n\n")[0],
                                     formatter_class=HelpFormatter, epilog=EPILOG)
    own = parser.add_argument_group("the experiment")
    own.add_argument("--output-dir", "--output_dir", required=True, help="the experiment folder (runs and report)")
    own.add_argument("--vary", action="append", default=[], metavar="OPTION=V1,V2",
                     help="an option of the table of variants, or a training setting, and the values to compare "
                          "(the first is the base); repeat for the product of several")
    own.add_argument("--seeds", type=int, default=3, help="seeds per variant (0..N-1), the same for every variant")
    own.add_argument("--tokens", type=int, default=None,
                     help="the training budget in tokens per run (instead of --max-steps): steps = tokens / "
                          "(batch size x block size x accumulation)")
    own.add_argument("--measure", nargs="*", default=[], choices=sorted(OPTIONAL),
                     help="besides the held-out loss and perplexity: extrapolation (loss at 1x-4x the training "
                          "length), speed (training tokens per second)")
    own.add_argument("--name", default="compare", type=report_name,
                     help="the report's file names: NAME.md, NAME.json, NAME-curves.png, ... (several experiments in "
                          "one folder)")
    own.add_argument("--runs", default=None, metavar="DIR",
                     help="where the run folders go (default: OUTPUT_DIR/runs)")
    own.add_argument("--base", default=None, metavar="FOLDER",
                     help="the base model's architecture from a saved model's config.json (trained from scratch)")
    own.add_argument("--task", default="clm", choices=TASKS_MEASURED, help="what every run trains")
    own.add_argument("--workers", type=int, default=None,
                     help="runs trained at once, each in its own process (default: one per --threads cores; 0: "
                          "one after another in this process)")
    own.add_argument("--threads", type=int, default=1, help="torch threads of each worker")
    own.add_argument("--estimate", action="store_true",
                     help="time a few steps of each variant, print the experiment's estimate, train nothing")
    own.add_argument("--study", default=None, choices=sorted(STUDIES),
                     help="a documented experiment (docs/compare.md): its flags, before the ones given here")
    train = parser.add_argument_group("the model, data and optimiser (hf-vanilla train's options)")
    add_dataclass_arguments(train, TrainOptions)
    for action in parser._actions:  # what compare decides itself stays accepted (and refused), not advertised
        if action.dest in OWN_OPTIONS:
            action.help = argparse.SUPPRESS
    parser.set_defaults(**RUN_DEFAULTS)
    return parser


EPILOG = """examples:
  hf-vanilla compare --output-dir runs/positions --preset tiny --max-steps 200 --seeds 3 \\
      --vary position_embedding_type=sinusoidal,rope,alibi --measure extrapolation
  hf-vanilla compare --output-dir runs/norms --data-files train=mine.txt test=held-out.txt --tokens 2000000 \\
      --vary norm_position=pre,post --vary warmup_steps=100,0
  hf-vanilla compare --study extrapolation --output-dir runs/extrapolation    # docs/compare.md's recipes
"""


def report_name(text: str) -> str:
    if not re.fullmatch(r"[\w-]+", text):
        raise argparse.ArgumentTypeError(f"{text!r}: a name of letters, digits, '_' and '-'")
    return text


def with_study(argv: list[str]) -> list[str]:
    """``--study NAME``'s flags put before the command's own: a flag given again wins (argparse keeps the last), and
    a ``--vary`` given replaces all the study's ``--vary``."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--study", default=None)
    parser.add_argument("--vary", action="append", default=[])
    known, _ = parser.parse_known_args(argv)
    if known.study is None or known.study not in STUDIES:
        return list(argv)  # an unknown name is refused by the full parser, naming the choices
    flags = list(STUDIES[known.study].argv)
    if known.vary:
        flags = [flag for i, flag in enumerate(flags) if flag != "--vary" and (i == 0 or flags[i - 1] != "--vary")]
    return [*flags, *argv]


# --------------------------------------------------------------------------------------------------
# The plan


def make_plan(args: argparse.Namespace, command: str) -> Plan:
    """Everything the experiment will train, checked before anything loads: owned options, the budget, the varied
    options and their values, each variant's config (refused ones named and left out)."""
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainOptions)}
    defaults = {f.name: (f.default if f.default is not dataclasses.MISSING else f.default_factory())
                for f in dataclasses.fields(TrainOptions)}
    for name, instead in OWN_OPTIONS.items():
        if given[name] != defaults[name]:
            raise CompareError(f"--{name.replace('_', '-')}: {instead}")
    if args.seeds < 1:
        raise CompareError(f"--seeds must be at least 1, got {args.seeds}")
    if (args.workers is not None and args.workers < 0) or args.threads < 1:
        raise CompareError("--workers must be 0 or more and --threads at least 1")
    options = {name: value for name, value in given.items() if name not in OWN_OPTIONS}
    options["config"] = parse_config(options["config"])
    options["data_files"] = [absolute_data_file(entry) for entry in options["data_files"]]
    options.pop("time_limit_minutes")
    source = "--preset " + options["preset"]
    if args.base is not None:
        options["config"], source = {**base_config(Path(args.base), args.task), **options["config"]}, f"--base {args.base}"
    check_ranges(TrainOptions(**options))
    tokens = budget(options, args.tokens, args.task)
    varied = [parse_vary(entry) for entry in args.vary]
    if not varied:
        raise CompareError("give at least one --vary OPTION=V1,V2 (the options and values to compare)")
    names = [name for name, _ in varied]
    if len(set(names)) != len(names):
        raise CompareError(f"--vary names {sorted({n for n in names if names.count(n) > 1})} more than once: give "
                           "each option's values in one --vary")
    overlapping = [name for name in names if name in options["config"] or
                   (name in TRAINING_SETTINGS and options.get(name) not in (None, defaults[name]))]
    if overlapping:
        raise CompareError(f"{overlapping[0]} is both fixed (--config or its own flag) and varied (--vary): give it in "
                           "one place")
    if "extrapolation" in args.measure and args.task != "clm":
        raise CompareError("--measure extrapolation scores a causal language model: use it with --task clm")
    settings = [Setting(tuple(zip(names, combination, strict=True)))
                for combination in itertools.product(*(vals for _, vals in varied))]
    plan = Plan(task=args.task, output_dir=Path(args.output_dir), varied=varied, settings=[], refused=[],
                seeds=args.seeds, options=options, measures=tuple(args.measure), command=command,
                tokens_per_run=tokens, base_config_source=source, name=args.name,
                runs_dir=Path(args.runs) if args.runs else None)
    for setting in settings:
        problem = config_problem(plan, setting)
        if problem is None:
            plan.settings.append(setting)
        elif setting == settings[0]:
            raise CompareError(f"the base variant ({setting.label}) is refused: {problem}; put a value the rows "
                               "accept first in --vary, or change --config")
        else:
            plan.refused.append((setting, problem))
    if len(plan.settings) < 2:
        raise CompareError("only the base variant is left to train once the refused ones are skipped "
                           f"({'; '.join(f'{s.label}: {why}' for s, why in plan.refused)}): nothing to compare")
    return plan


def absolute_data_file(entry: str) -> str:
    """``[SPLIT=]PATH`` with PATH made absolute: the runs read it from wherever the command runs again."""
    split, sep, path = entry.partition("=")
    if sep and split in ("train", "validation", "test"):
        return f"{split}={Path(path).expanduser().resolve()}"
    return str(Path(entry).expanduser().resolve())


def budget(options: dict[str, Any], tokens: int | None, task: str) -> int:
    """Set ``options["max_steps"]`` from ``--tokens`` (or check ``--max-steps``); the tokens each run trains on."""
    resolved = TrainOptions(**{**options, "max_steps": max(1, options["max_steps"])}).resolved(get_task(task))
    per_step = resolved.batch_size * resolved.block_size * resolved.gradient_accumulation_steps
    if tokens is not None and options["max_steps"] != -1:
        raise CompareError("give the budget once: --tokens or --max-steps")
    if tokens is not None:
        if tokens < per_step:
            raise CompareError(f"--tokens {tokens} is less than one step ({per_step} tokens: batch size x block size "
                               "x accumulation)")
        options["max_steps"] = math.ceil(tokens / per_step)
    elif options["max_steps"] == -1:
        raise CompareError("give the budget of every run: --max-steps N or --tokens T (the same for every variant)")
    return options["max_steps"] * per_step


def parse_vary(entry: str) -> tuple[str, tuple[Any, ...]]:
    """``OPTION=V1,V2`` -> the option and its typed values, each checked against the table (or a setting)."""
    name, sep, text = entry.partition("=")
    name = name.strip().replace("-", "_")
    choices = [*table_options(), *TRAINING_SETTINGS]
    if not sep or name not in choices:
        raise CompareError(f"--vary {entry!r}: give OPTION=V1,V2 with OPTION one of the table's options "
                           f"({', '.join(table_options())}) or a training setting ({', '.join(TRAINING_SETTINGS)})")
    if name == "architecture":
        raise CompareError("--vary architecture: the task decides the architecture (--task clm trains a decoder, mlm "
                           "an encoder); compare variants of one architecture")
    vals = tuple(typed_value(name, v.strip()) for v in text.split(",") if v.strip())
    if len(vals) < 2 or len(set(map(repr, vals))) != len(vals):
        raise CompareError(f"--vary {entry!r}: give at least two different values, separated by commas")
    allowed = values(name) if name in table_options() else ()
    if allowed and not any(r.value == NON_DEFAULT for r in rows(name)):
        wrong = [v for v in vals if v not in allowed]
        if wrong:
            raise CompareError(f"--vary {name}: {wrong[0]!r} is not in the table of variants; its values are "
                               f"{', '.join(map(str, allowed))}")
    return name, vals


def typed_value(option: str, text: str) -> Any:
    """A value as the table spells it (``none`` is the scheme, not None), else as ``--config`` parses it."""
    known = [value for value in values(option) if str(value).lower() == text.lower()] if option in table_options() else []
    return known[0] if known else parse_value(text)


def base_config(folder: Path, task: str) -> dict[str, Any]:
    """A saved model's architecture (its config.json without vocabulary, token ids and bookkeeping)."""
    try:
        saved = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CompareError(f"--base {folder}: cannot read {folder / 'config.json'} ({error}); give a folder written by "
                           "save_pretrained or a training run") from None
    if not isinstance(saved, dict) or saved.get("model_type") != "vanilla":
        raise CompareError(f"--base {folder} does not hold an hf_vanilla config.json (model_type 'vanilla'): convert "
                           "it first (hf-vanilla convert)")
    family = get_task(task).family
    if saved.get("architecture", family) != family:
        raise CompareError(f"--base {folder} is an {saved['architecture']} model and --task {task} trains a {family}: "
                           "choose a base of that architecture or another --task")
    return {k: v for k, v in saved.items() if not NOT_ARCHITECTURE.fullmatch(k) and k != "architecture"}


def variant_config(plan: Plan, setting: Setting) -> Any:
    """The VanillaConfig a variant's runs build (vocabulary as ``--vocab-size`` asks), checked by its rows."""
    # the config class loads transformers and torch (seconds): only where a variant's config is built
    from ..configuration_vanilla import VanillaConfig

    task, options = get_task(plan.task), plan.run_options(setting, 0)
    fields = {"architecture": task.family, "vocab_size": options["vocab_size"],
              "max_position_embeddings": max(task.max_positions(TrainOptions(**options).resolved(task)), 512),
              **options["config"]}
    if options["preset"] in SIZE_PRESETS:
        return VanillaConfig(**{**SIZE_PRESETS[options["preset"]], **task.model_defaults, **fields})
    if options["preset"] in PRESETS:
        return VanillaConfig(**preset_fields(options["preset"], fields))
    raise ValueError(f"unknown preset {options['preset']!r}; choose one of {sorted({*SIZE_PRESETS, *PRESETS})}")


def config_problem(plan: Plan, setting: Setting) -> str | None:
    """Why the rows refuse this variant's config (VanillaConfig's own validation), or None when it builds."""
    try:
        variant_config(plan, setting)
    except (ValueError, TypeError) as error:
        return " ".join(str(error).split())
    return None


def unscored_lengths(plan: Plan) -> dict[str, dict[int, str]]:
    """Per variant, the length factors the extrapolation measure does not score, each with why (its config's
    :func:`~.measures.reach`): the report states these from the plan, whatever a run's record holds."""
    length = plan.options["block_size"]
    found = {}
    for setting in plan.settings:
        longest, why = reach(variant_config(plan, setting), length)
        found[setting.label] = {n: why for n in LENGTH_FACTORS if n * length > longest}
    return found
