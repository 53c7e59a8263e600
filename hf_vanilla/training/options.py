"""What a training run can be told: :class:`TrainOptions` (one field per ``hf-vanilla train`` flag).

The fields are typed so that :mod:`.cli` builds the command line from them, as transformers'
``HfArgumentParser`` would (``Literal`` gives choices, ``list[str]`` repeatable flags); ``None`` means "the task's default", and
:meth:`TrainOptions.resolved` fills those in from the task and the recipe. This module imports
neither torch nor transformers' models, so ``hf-vanilla --help`` stays fast.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..errors import HfVanillaError
from ..presets import PRESETS
from ..sizing import check_fits
from ..tasks.base import SampleBy, TokenizerKind

if TYPE_CHECKING:
    from ..tasks import Task

#: Size presets for training runs; the family comes from the task. VanillaConfig preset names
#: (``transformer-base``, ``gpt2``, ``bert-base``, ...) are accepted too.
SIZE_PRESETS: dict[str, dict[str, int]] = {
    "tiny": dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4),
    "small": dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4),
    "base": dict(hidden_size=512, intermediate_size=2048, num_hidden_layers=6, num_attention_heads=8),
}

#: (option, default recipe value, paper recipe value) for the optimiser settings left at ``None``.
RECIPES: tuple[tuple[str, Any, Any], ...] = (
    ("adam_beta1", 0.9, 0.9),
    ("adam_beta2", 0.999, 0.98),
    ("adam_epsilon", 1e-8, 1e-9),
    ("weight_decay", 0.01, 0.0),
    ("label_smoothing", 0.0, 0.1),
    ("lr_scheduler", "cosine", "inverse_sqrt"),
)


def _opt(help_text: str, **metadata: Any) -> dict[str, Any]:
    return {"help": help_text, **metadata}


@dataclass
class TrainOptions:
    """Everything a run can be told; ``None`` means "the task's default"."""

    # -- model
    preset: str = field(default="small", metadata=_opt(
        f"model size ({', '.join(SIZE_PRESETS)}) or a VanillaConfig preset name (transformer-base, gpt2, ...)"))
    config: dict[str, Any] | str | None = field(default=None, metadata=_opt(
        "a VanillaConfig override as KEY=VALUE (repeat the flag for more; in Python a dict). The clm task's "
        "model is pre-norm, which leaves the unigram plateau at small budgets; norm_position=post gives the "
        "paper's post-norm block", action="append",
        metavar="KEY=VALUE"))
    init_from: str | None = field(default=None, metadata=_opt("start from this saved model (and its tokenizer)"))
    attn_implementation: Literal["eager", "sdpa", "flex_attention"] | None = field(default=None, metadata=_opt(
        "attention kernel (unset: transformers picks, sdpa where available)"))
    dropout: float | None = field(default=None, metadata=_opt("residual/embedding dropout (unset: the preset's, 0.1)"))
    # -- data
    dataset: str | None = field(default=None, metadata=_opt("a `datasets` name to use instead of the default corpus"))
    dataset_config: str | None = field(default=None, metadata=_opt("the `datasets` configuration name"))
    data_files: list[str] = field(default_factory=list, metadata=_opt(
        "local .txt/.json/.jsonl/.csv files as PATH or SPLIT=PATH, SPLIT one of train, validation, test "
        "(repeatable)", action="extend", metavar="[SPLIT=]PATH"))
    text_column: str = field(default="text", metadata=_opt("text column (clm, mlm, classification)"))
    label_column: str = field(default="label", metadata=_opt("label column (classification)"))
    source_column: str = field(default="en", metadata=_opt("source-language column (translation)"))
    target_column: str = field(default="es", metadata=_opt("target-language column (translation)"))
    sample_by: SampleBy | None = field(default=None, metadata=_opt(
        "rows of text files (unset: whole works for clm on Shakespeare, paragraphs otherwise)"))
    validation_fraction: float = field(default=0.1, metadata=_opt(
        "fraction of train held out for validation when the data has no validation split"))
    max_train_samples: int | None = field(default=None, metadata=_opt("use at most this many training examples"))
    max_eval_samples: int | None = field(default=None, metadata=_opt("use at most this many validation examples"))
    max_test_samples: int | None = field(default=None, metadata=_opt("use at most this many test examples"))
    # -- tokenizer and sequence lengths
    tokenizer: TokenizerKind | None = field(default=None, metadata=_opt(
        "tokenizer trained on the training split (unset: bpe for clm and translation, wordpiece otherwise)"))
    vocab_size: int = field(default=8000, metadata=_opt("tokenizer vocabulary size"))
    lowercase: bool = field(default=False, metadata=_opt("lowercase the text before tokenising"))
    block_size: int = field(default=128, metadata=_opt("tokens per example (clm, mlm)"))
    max_source_length: int = field(default=128, metadata=_opt("source tokens kept per sentence (translation)"))
    max_target_length: int = field(default=128, metadata=_opt("target tokens kept per sentence (translation)"))
    max_length: int = field(default=256, metadata=_opt("tokens kept per article (classification)"))
    mlm_probability: float = field(default=0.15, metadata=_opt("fraction of tokens masked (mlm)"))
    # -- optimisation
    recipe: Literal["default", "paper"] | None = field(default=None, metadata=_opt(
        "paper: Adam(0.9, 0.98, 1e-9), inverse-sqrt warmup, label smoothing 0.1 (unset: paper for "
        "translation, default otherwise)"))
    max_steps: int = field(default=-1, metadata=_opt("optimizer steps; -1: train for --num-train-epochs"))
    num_train_epochs: float = field(default=1.0, metadata=_opt("epochs, when --max-steps is -1"))
    batch_size: int | None = field(default=None, metadata=_opt(
        "examples per process per micro-step (unset: 16 for classification, 32 otherwise)"))
    eval_batch_size: int | None = field(default=None, metadata=_opt("evaluation batch (unset: twice --batch-size)"))
    group_by_length: bool | None = field(default=None, metadata=_opt(
        "batch examples of similar length together, so less of each batch is padding (unset: on for "
        "translation, whose sentences vary in length; off otherwise)"))
    gradient_accumulation_steps: int = field(default=1, metadata=_opt("micro-batches per optimizer step"))
    learning_rate: float | None = field(default=None, metadata=_opt(
        "peak learning rate (unset: the task's; translation: the paper's d_model^-0.5 * 4000^-0.5)"))
    lr_scheduler: str | None = field(default=None, metadata=_opt(
        "transformers scheduler name: cosine, linear, inverse_sqrt, constant_with_warmup, ... "
        "(unset: cosine; paper: inverse_sqrt)"))
    warmup_steps: int | None = field(default=None, metadata=_opt(
        "linear warmup steps (unset: 5%% of the steps; paper: up to 4000)"))
    weight_decay: float | None = field(default=None, metadata=_opt("AdamW weight decay (unset: 0.01; paper: 0)"))
    adam_beta1: float | None = field(default=None, metadata=_opt("Adam beta1 (unset: 0.9)"))
    adam_beta2: float | None = field(default=None, metadata=_opt("Adam beta2 (unset: 0.999; paper: 0.98)"))
    adam_epsilon: float | None = field(default=None, metadata=_opt("Adam epsilon (unset: 1e-8; paper: 1e-9)"))
    label_smoothing: float | None = field(default=None, metadata=_opt("label smoothing (unset: 0; paper: 0.1)"))
    max_grad_norm: float = field(default=1.0, metadata=_opt("gradient clipping norm (0 turns it off)"))
    seed: int = field(default=0, metadata=_opt("seed for weights, data order, dropout and masking"))
    bf16: bool = field(default=False, metadata=_opt("bfloat16 autocast"))
    use_cpu: bool = field(default=False, metadata=_opt("train on the CPU even when a GPU is present"))
    time_limit_minutes: float | None = field(default=None, metadata=_opt(
        "stop training after this long, then evaluate and save as usual; a run cut short says STOPPED EARLY in "
        "its summary, metrics.json (stopped_early, stop_reason, how_to_finish) and its card, with the command "
        "that finishes it (that command has no limit)", aliases=["--time-limit"], metavar="MINUTES"))
    # -- evaluation, logging, checkpoints, outputs
    eval_steps: int | None = field(default=None, metadata=_opt("evaluate every N steps (unset: 8 times per run)"))
    save_steps: int | None = field(default=None, metadata=_opt("checkpoint every N steps (unset: --eval-steps)"))
    logging_steps: int | None = field(default=None, metadata=_opt(
        "log the training loss every N steps (unset: 100 times per run)"))
    save_total_limit: int | None = field(default=2, metadata=_opt("keep this many newest checkpoints"))
    average_checkpoints: int = field(default=0, metadata=_opt(
        "after training, average the weights of the N newest checkpoints (the paper: 5) and keep the average "
        "only if it scores better on the validation split (needs --save-total-limit >= N)"))
    num_beams: int = field(default=4, metadata=_opt("beam size of translation decoding (the paper's is 4)"))
    max_new_tokens: int = field(default=80, metadata=_opt("tokens generated per sample (clm)"))
    num_samples: int = field(default=3, metadata=_opt("sample outputs kept in metrics.json and the card"))
    prompts: list[str] = field(default_factory=list, metadata=_opt(
        "prompts of the sample generations (clm; repeatable)", action="extend", metavar="PROMPT"))
    license: str | None = field(default=None, metadata=_opt("model card licence (unset: chosen from the data)"))
    dataloader_num_workers: int = field(default=0, metadata=_opt("data-loading worker processes"))
    disable_tqdm: bool = field(default=False, metadata=_opt("hide progress bars"))
    report_to: str = field(default="none", metadata=_opt("experiment tracker: tensorboard, wandb, trackio, ... or none"))
    resume: str | None = field(default=None, metadata=_opt(
        "continue the run: from its newest good checkpoint (--resume) or from CHECKPOINT (--resume CHECKPOINT); "
        "in Python resume=True or a path", nargs="?", const="latest", metavar="CHECKPOINT"))
    overwrite: bool = field(default=False, metadata=_opt(
        "start the run in --output-dir again: replaces only the files the old run wrote (others stay), once the new "
        "run has checkpointed"))

    def resolved(self, task: Task) -> TrainOptions:
        """A copy with the task's defaults filled in, the recipe expanded and the config overrides as a dict."""
        opts = dataclasses.replace(self, config=parse_config(self.config), data_files=list(self.data_files),
                                   prompts=list(self.prompts), resume=_resume_value(self.resume))
        for key, value in task.defaults.items():
            if getattr(opts, key) is None:
                setattr(opts, key, value)
        paper = opts.recipe == "paper"
        for key, default, paper_value in RECIPES:
            if getattr(opts, key) is None:
                setattr(opts, key, paper_value if paper else default)
        if opts.eval_batch_size is None:
            opts.eval_batch_size = 2 * opts.batch_size
        check_choices(opts)
        check_ranges(opts)
        check_averaging(opts)
        check_model_size(opts, task)
        return opts


def _choices(hint: Any) -> tuple[Any, ...]:
    if typing.get_origin(hint) is Literal:
        return typing.get_args(hint)
    return tuple(choice for arg in typing.get_args(hint) for choice in _choices(arg))


def check_choices(opts: TrainOptions) -> None:
    """Refuse values outside a ``Literal`` field's choices (the CLI checks them; Python callers may not)."""
    hints = typing.get_type_hints(TrainOptions)
    for f in dataclasses.fields(TrainOptions):
        choices, value = _choices(hints[f.name]), getattr(opts, f.name)
        if choices and value is not None and value not in choices:
            raise ValueError(f"{f.name} must be one of {list(choices)}, got {value!r}")


def _positive(value: Any) -> bool:
    return math.isfinite(value) and value > 0


def _at_least(low: int) -> Callable[[Any], bool]:
    return lambda value: value >= low


#: The most sequences one batch may hold: past any machine's memory at any block size (a run.json edited to say
#: 10**9 would have the evaluation allocate for it).
MAX_BATCH = 65536

#: (option, test, allowed range): values outside these train NaN, a whole epoch instead of none, or crash late
#: (a ZeroDivisionError, a failed first evaluation); ``None`` ("the task's default") always passes.
RANGES: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("mlm_probability", lambda p: 0 < p <= 1, "in (0, 1]: with no token masked there is nothing to predict"),
    ("max_steps", lambda n: n == -1 or n >= 1, "-1 (train for --num-train-epochs) or at least 1"),
    ("num_train_epochs", _positive, "a finite number above 0"),
    ("time_limit_minutes", _positive, "a finite number above 0 (leave it unset for no limit)"),
    ("gradient_accumulation_steps", _at_least(1), "at least 1"),
    ("batch_size", lambda n: 1 <= n <= MAX_BATCH, f"at least 1 and at most {MAX_BATCH}"),
    ("eval_batch_size", lambda n: 1 <= n <= MAX_BATCH, f"at least 1 and at most {MAX_BATCH}"),
    ("block_size", _at_least(2), "at least 2 (a block needs a token to read and one to predict)"),
    ("max_source_length", _at_least(1), "at least 1"),
    ("max_target_length", _at_least(1), "at least 1"),
    ("max_length", _at_least(1), "at least 1"),
    ("num_beams", _at_least(1), "at least 1 (1: greedy decoding)"),
    ("max_new_tokens", _at_least(1), "at least 1"),
    ("num_samples", _at_least(0), "0 or more"),
    ("learning_rate", _positive, "a finite number above 0"),
    ("warmup_steps", _at_least(0), "0 or more"),
    ("eval_steps", _at_least(1), "at least 1"),
    ("save_steps", _at_least(1), "at least 1"),
    ("logging_steps", _at_least(1), "at least 1"),
    ("save_total_limit", _at_least(1), "at least 1"),
    ("validation_fraction", lambda f: 0 < f < 1, "above 0 and below 1"),
    ("dropout", lambda p: 0 <= p < 1, "at least 0 and below 1"),
    ("max_grad_norm", lambda n: math.isfinite(n) and n >= 0, "0 (no clipping) or a finite number above 0"),
    ("max_train_samples", _at_least(1), "at least 1"),
    ("max_eval_samples", _at_least(1), "at least 1"),
    ("max_test_samples", _at_least(1), "at least 1"),
    ("dataloader_num_workers", _at_least(0), "0 or more"),
)


def check_ranges(opts: TrainOptions) -> None:
    """Refuse values outside :data:`RANGES` and blank prompts, naming the option, before anything is loaded."""
    for name, allowed, text in RANGES:
        value = getattr(opts, name)
        if value is not None and not allowed(value):
            raise ValueError(f"{flag(name)} must be {text}, got {value!r}")
    blank = [i for i, prompt in enumerate(opts.prompts, 1) if not prompt.strip()]
    if blank:
        raise ValueError(f"{flag('prompts')}: prompt {blank[0]} is blank; give each prompt some text (or leave "
                         "--prompts out for the default prompts)")


def flag(name: str) -> str:
    """How the command line spells option ``name`` (Python callers pass ``name=``)."""
    return f"--{name.replace('_', '-')} ({name})"


def check_model_size(opts: TrainOptions, task: Task) -> None:
    """The model the options describe (the preset, or ``--init-from``'s config.json, under ``--config``) must fit
    this machine's memory (:func:`hf_vanilla.sizing.check_fits`), refused before anything is loaded or allocated."""
    overrides = f" with --config {' '.join(f'{k}={v}' for k, v in opts.config.items())}" if opts.config else ""
    if opts.init_from:
        try:
            fields = json.loads((Path(opts.init_from) / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return  # not a local folder (a Hub id), or no config: check_init_from says which
        if not isinstance(fields, dict):
            return
        source = f"--init-from {opts.init_from}{overrides}"
    else:
        fields, source = preset_model_fields(opts, task), f"--preset {opts.preset}{overrides}"
    check_fits({**fields, **opts.config}, source=source, purpose="train")


def preset_model_fields(opts: TrainOptions, task: Task) -> dict[str, Any]:
    """The VanillaConfig fields of the model ``--preset``, ``--vocab-size`` and ``--config`` describe for ``task``
    (``opts`` resolved), before any data or tokenizer exists: what its size and speed follow from."""
    preset = SIZE_PRESETS.get(opts.preset) or PRESETS.get(opts.preset)
    if preset is None:
        raise ValueError(f"--preset {opts.preset!r} is no size: choose {', '.join(SIZE_PRESETS)} or a VanillaConfig "
                         f"preset ({', '.join(sorted(PRESETS))})")
    return {**preset, **task.model_defaults, "architecture": task.family, "vocab_size": opts.vocab_size, **opts.config}


def check_attention_kernel(opts: TrainOptions, use_cpu: bool) -> None:
    """PyTorch's flex attention has no CPU backward: refuse it for a CPU run before anything loads."""
    if opts.attn_implementation == "flex_attention" and use_cpu:
        raise ValueError(f"{flag('attn_implementation')} flex_attention trains only on an accelerator (PyTorch's "
                         "flex attention cannot run its backward pass on the CPU); on the CPU use sdpa or eager")


def check_init_from(init_from: str | None) -> None:
    """``--init-from`` is a local folder holding an hf_vanilla model (a native one is converted first), or a Hub
    repo id, which ``from_pretrained`` resolves as it resolves any."""
    if init_from is None:
        return
    folder = Path(init_from)
    if not folder.is_dir():
        if looks_like_repo_id(init_from):
            return
        raise FileNotFoundError(f"--init-from {init_from}: no such folder; give a folder written by save_pretrained "
                                "or a training run (or a Hub repo id, NAME or OWNER/NAME)")
    try:
        model_type = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError) as error:
        raise ValueError(f"--init-from {init_from}: {folder / 'config.json'} is missing or unreadable ({error}); give "
                         "a folder written by save_pretrained or a training run") from None
    if model_type != "vanilla":
        raise ValueError(f"--init-from {init_from} holds a {model_type!r} model, not an hf_vanilla one: convert it "
                         f"first (hf-vanilla convert {init_from} CONVERTED_DIR), then --init-from CONVERTED_DIR")


def looks_like_repo_id(text: str) -> bool:
    """NAME or OWNER/NAME as the Hub spells them, and nothing a path would start with."""
    # huggingface_hub takes a fraction of a second to load: only to tell a Hub id from a path (start-up time)
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if text.startswith((".", "/", "~")) or "\\" in text:
        return False
    try:
        validate_repo_id(text)
    except HFValidationError:
        return False
    return True


def check_averaging(opts: TrainOptions) -> None:
    """Averaging N checkpoints needs N kept: refuse a plan that would find fewer, before anything trains."""
    count, kept = opts.average_checkpoints, opts.save_total_limit
    if count < 0 or count == 1:
        raise ValueError(f"average_checkpoints must be 0 (off) or at least 2, got {count}")
    if count and kept is not None and kept < count:
        raise ValueError(f"average_checkpoints={count} needs save_total_limit >= {count} (got {kept}): the "
                         "checkpoints to average must be kept. Pass --save-total-limit " + str(count) + ".")


def _resume_value(resume: bool | str | None) -> str | None:
    """``True``/``"latest"`` -> ``"latest"``; ``False``/``None`` -> ``None``; a path stays a path."""
    if resume is True or (isinstance(resume, str) and resume.lower() in ("latest", "true", "1")):
        return "latest"
    if resume in (False, None, "") or (isinstance(resume, str) and resume.lower() in ("false", "0")):
        return None
    return str(resume)


def parse_value(text: str) -> Any:
    """``"4"`` -> 4, ``"0.1"`` -> 0.1, ``"true"`` -> True, ``"none"`` -> None, else the string."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_config(entries: Mapping[str, Any] | Sequence[str] | str | None) -> dict[str, Any]:
    """VanillaConfig overrides: a mapping as it is, or ``"KEY=VALUE"`` entries with typed values."""
    if isinstance(entries, str):
        entries = [entries]
    if entries is None:
        return {}
    if isinstance(entries, Mapping):
        return dict(entries)
    out: dict[str, Any] = {}
    for entry in entries:
        key, sep, value = entry.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--config expects KEY=VALUE, got {entry!r}")
        out[key.strip()] = parse_value(value.strip())
    return out


class RecordOptionsError(HfVanillaError, ValueError):
    """A run.json's options are not what ``hf-vanilla train`` records: wrong shape, unknown keys, wrong types."""


def options_from_record(options: Any, source: str) -> TrainOptions:
    """The options a run record (``source``: its path, for the message) holds, checked as a schema before any is
    used: a JSON object of known option names, each value of its option's type, every data file a regular file (a
    FIFO would block the read forever). One sentence per error; the ranges are checked by
    :meth:`TrainOptions.resolved`."""
    if not isinstance(options, Mapping):
        raise RecordOptionsError(f"{source}: options must be a JSON object of option names and values, got a "
                                 f"{type(options).__name__}; restore the run.json the run wrote")
    hints = typing.get_type_hints(TrainOptions)
    errors = [f"{key!r} is not an option of hf-vanilla train" if key not in hints else
              f"{key}={value!r} is not of the type {_type_name(hints[key])}"
              for key, value in options.items() if key not in hints or not _is_of(hints[key], value)]
    if not errors:
        for entry in options.get("data_files") or []:
            path = Path(entry.partition("=")[2] if "=" in entry else entry).expanduser()
            if path.exists() and not path.is_file():
                errors.append(f"data file {str(path)!r} is not a regular file (a folder, FIFO or device)")
    if errors:
        raise RecordOptionsError(f"{source} does not hold the options hf-vanilla train records: {'; '.join(errors)}; "
                                 "restore the run.json the run wrote")
    return TrainOptions(**options)


def _is_of(hint: Any, value: Any) -> bool:
    """Whether a JSON ``value`` is of the annotation ``hint`` (a bool is not a number; an int is a float)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if origin is Literal:
        return value in args
    if origin in (typing.Union, types.UnionType):
        return any(_is_of(arg, value) for arg in args)
    if origin is list:
        return isinstance(value, list) and all(_is_of(args[0], item) for item in value)
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _type_name(hint: Any) -> str:
    return str(hint).replace("typing.", "") if not isinstance(hint, type) else hint.__name__


def make_options(options: Mapping[str, Any]) -> TrainOptions:
    """``TrainOptions(**options)`` with a clear error naming unknown options."""
    valid = {f.name for f in dataclasses.fields(TrainOptions)}
    unknown = sorted(set(options) - valid)
    if unknown:
        raise TypeError(f"unknown option(s) {unknown}; valid options: {sorted(valid)}")
    return TrainOptions(**options)
