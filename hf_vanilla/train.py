"""Train hf_vanilla models on real text: causal LM, masked LM, translation and classification.

One entry point, :func:`train` (and ``hf-vanilla train``), builds everything a run needs from a task
name and a few options, hands the loop to transformers' ``Trainer`` / ``Seq2SeqTrainer`` (so
``accelerate launch`` gives DDP / FSDP / DeepSpeed with no code change), and leaves a self-contained
run directory::

    run_dir/
      model.safetensors config.json generation_config.json  the model (+ its code, via auto_map)
      tokenizer.json tokenizer_config.json ...               trained on the training split only
      run.json        task, options, dataset description, environment
      metrics.json    final metrics, baseline, time per step, sample outputs
      trainer_state.json                                     the Trainer's log history
      curves.png      training / evaluation loss curves
      README.md       model card (hf_vanilla.card.build_model_card)
      checkpoint-N/   atomic Trainer checkpoints (resume with ``resume=True`` / ``--resume``)

Default corpora (``hf_vanilla.corpora``): Shakespeare with whole works held out (clm, mlm), the
English-Spanish Bible with whole books held out (translation), BBC News (classification). Local files
(``data_files``) or a ``datasets`` name (``dataset``) replace them.

Exactness guarantees the tests check: the loss is normalised by ``num_items_in_batch`` (gradient
accumulation and DDP match one big batch), the same seed gives bitwise-identical losses on CPU, a run
killed after a checkpoint and resumed logs the same losses as an uninterrupted one, and a non-finite
loss stops the run before it can overwrite the last good checkpoint.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import inspect
import json
import logging
import math
import os
import platform
import shutil
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

if TYPE_CHECKING:  # heavy imports stay inside functions so `hf-vanilla --help` stays fast
    import torch
    from datasets import Dataset, DatasetDict
    from transformers import EvalPrediction, PreTrainedTokenizerBase

    from .configuration_vanilla import VanillaConfig

logger = logging.getLogger(__name__)

TASKS = ("clm", "mlm", "translation", "classification")

#: The model family each task trains.
TASK_FAMILY = {"clm": "decoder", "mlm": "encoder", "translation": "encoder-decoder", "classification": "encoder"}

#: The head (AutoModel class name) each task trains.
TASK_AUTO_CLASS = {
    "clm": "AutoModelForCausalLM",
    "mlm": "AutoModelForMaskedLM",
    "translation": "AutoModelForSeq2SeqLM",
    "classification": "AutoModelForSequenceClassification",
}

#: The Hub pipeline each task's model serves.
TASK_PIPELINE = {
    "clm": "text-generation",
    "mlm": "fill-mask",
    "translation": "translation",
    "classification": "text-classification",
}

#: Size presets for training runs; the family comes from the task. Names of VanillaConfig presets
#: (``transformer-base``, ``gpt2``, ``bert-base``, ...) are accepted too.
SIZE_PRESETS: dict[str, dict[str, int]] = {
    "tiny": dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4),
    "small": dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4),
    "base": dict(hidden_size=512, intermediate_size=2048, num_hidden_layers=6, num_attention_heads=8),
}

#: Task-dependent defaults for options left at ``None``.
TASK_DEFAULTS: dict[str, dict[str, Any]] = {
    "clm": dict(tokenizer="bpe", learning_rate=1e-3, batch_size=32, recipe="default"),
    "mlm": dict(tokenizer="wordpiece", learning_rate=5e-4, batch_size=32, recipe="default"),
    "translation": dict(tokenizer="bpe", learning_rate=None, batch_size=32, recipe="paper"),
    "classification": dict(tokenizer="wordpiece", learning_rate=3e-4, batch_size=16, recipe="default"),
}

#: How Shakespeare is cut into rows when ``sample_by`` is not given: whole works for the causal LM (it
#: learns the layout of a play across speeches), speeches/stanzas for the masked LM. Local text files
#: default to paragraphs (blank-line separated), so a validation split can be cut from one file.
SHAKESPEARE_SAMPLE_BY = {"clm": "document", "mlm": "paragraph"}

#: Prompts for the sample generations of a causal LM trained on the default Shakespeare corpus
#: (Macbeth is a held-out test work, so its names test generalisation, not recall).
SHAKESPEARE_PROMPTS = ("MACBETH.\n", "LADY MACBETH.\nCome, ", "To be, or not to be, ")


class TrainingDivergedError(RuntimeError):
    """The loss (or its gradients) became NaN/inf; the last good checkpoint is kept."""


@dataclass
class TrainOptions:
    """Everything a run can be told; ``None`` means "the task's default" (see :data:`TASK_DEFAULTS`).

    Grouped as: model, data, tokenizer, optimisation, schedule of evaluation / saving, outputs.
    """

    # -- model
    preset: str = field(default="small", metadata={"help": f"size ({', '.join(SIZE_PRESETS)}) or a VanillaConfig preset"})
    config: dict[str, Any] = field(default_factory=dict, metadata={"help": "VanillaConfig overrides KEY=VALUE (repeat)"})
    init_from: str | None = field(default=None, metadata={"help": "start from this saved model (and its tokenizer)"})
    attn_implementation: str | None = field(default=None, metadata={"help": "eager, sdpa or flex_attention"})
    # -- data
    dataset: str | None = field(default=None, metadata={"help": "a `datasets` name to use instead of the default corpus"})
    dataset_config: str | None = field(default=None, metadata={"help": "its configuration name"})
    data_files: list[str] = field(default_factory=list, metadata={"help": "local .txt/.json/.jsonl/.csv files, PATH or SPLIT=PATH (repeat)"})
    text_column: str = field(default="text", metadata={"help": "text column (clm, mlm, classification)"})
    label_column: str = field(default="label", metadata={"help": "label column (classification)"})
    source_column: str = field(default="en", metadata={"help": "source column (translation)"})
    target_column: str = field(default="es", metadata={"help": "target column (translation)"})
    sample_by: str | None = field(default=None, metadata={"help": "rows of text files (default: whole works for clm, "
                                                             "paragraphs otherwise)",
                                                     "choices": ("line", "paragraph", "document")})
    validation_fraction: float = field(default=0.1, metadata={"help": "split this much of train off when no validation split is given"})
    max_train_samples: int | None = field(default=None, metadata={"help": "use at most this many training examples (after tokenisation)"})
    max_eval_samples: int | None = field(default=None, metadata={"help": "at most this many validation examples"})
    max_test_samples: int | None = field(default=None, metadata={"help": "at most this many test examples"})
    # -- tokenizer
    tokenizer: str | None = field(default=None, metadata={"help": "task default: bpe (clm, translation), "
                                                                      "wordpiece (mlm, classification)",
                                                              "choices": ("bpe", "wordpiece")})
    vocab_size: int = field(default=8000, metadata={"help": "tokenizer vocabulary size"})
    lowercase: bool = field(default=False, metadata={"help": "lowercase before tokenising"})
    # -- sequence lengths
    block_size: int = field(default=128, metadata={"help": "tokens per example (clm, mlm)"})
    max_source_length: int = field(default=128, metadata={"help": "source tokens (translation)"})
    max_target_length: int = field(default=128, metadata={"help": "target tokens (translation)"})
    max_length: int = field(default=256, metadata={"help": "tokens per article (classification)"})
    mlm_probability: float = field(default=0.15, metadata={"help": "masking rate (mlm)"})
    # -- optimisation
    recipe: str | None = field(default=None, metadata={"help": "paper: Adam(0.9,0.98,1e-9), inverse-sqrt warmup, label "
                                                                "smoothing 0.1 (default for translation)",
                                                        "choices": ("default", "paper")})
    max_steps: int = field(default=-1, metadata={"help": "optimizer steps (overrides epochs)"})
    num_train_epochs: float = field(default=1.0, metadata={"help": "epochs when max_steps is not set"})
    batch_size: int | None = field(default=None, metadata={"help": "global batch per process per micro-step"})
    eval_batch_size: int | None = field(default=None, metadata={"help": "evaluation batch (default: 2x batch size)"})
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "micro-batches per optimizer step"})
    learning_rate: float | None = field(default=None, metadata={"help": "peak learning rate"})
    lr_scheduler: str | None = field(default=None, metadata={"help": "cosine, linear, inverse_sqrt, constant_with_warmup, ..."})
    warmup_steps: int | None = field(default=None, metadata={"help": "linear warmup steps (default 5%% of steps; paper: 4000)"})
    weight_decay: float | None = field(default=None, metadata={"help": "AdamW weight decay (default 0.01; paper 0)"})
    adam_beta1: float | None = field(default=None, metadata={"help": "Adam beta1 (0.9)"})
    adam_beta2: float | None = field(default=None, metadata={"help": "Adam beta2 (0.999; paper 0.98)"})
    adam_epsilon: float | None = field(default=None, metadata={"help": "Adam epsilon (1e-8; paper 1e-9)"})
    label_smoothing: float | None = field(default=None, metadata={"help": "label smoothing (paper 0.1)"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping (0 = off)"})
    dropout: float | None = field(default=None, metadata={"help": "residual/embedding dropout (default: the preset's, 0.1)"})
    seed: int = field(default=0, metadata={"help": "seed for weights, data order, dropout and masking"})
    bf16: bool = field(default=False, metadata={"help": "bfloat16 autocast"})
    use_cpu: bool = field(default=False, metadata={"help": "train on the CPU even when a GPU is present"})
    time_limit_minutes: float | None = field(default=None, metadata={"help": "stop training (and evaluate, save) after this long"})
    # -- evaluation, logging, checkpoints
    eval_steps: int | None = field(default=None, metadata={"help": "evaluate every N steps (default: 8 times per run)"})
    save_steps: int | None = field(default=None, metadata={"help": "checkpoint every N steps (default: eval_steps)"})
    logging_steps: int | None = field(default=None, metadata={"help": "log the training loss every N steps"})
    save_total_limit: int | None = field(default=2, metadata={"help": "keep this many checkpoints"})
    num_beams: int = field(default=4, metadata={"help": "beam size for translation (paper: 4)"})
    max_new_tokens: int = field(default=80, metadata={"help": "tokens generated per sample (clm)"})
    num_samples: int = field(default=3, metadata={"help": "sample outputs kept in metrics.json"})
    prompts: list[str] = field(default_factory=list, metadata={"help": "prompts for the sample generations (clm, repeat)"})
    license: str | None = field(default=None, metadata={"help": "model card licence (default: chosen from the data)"})
    dataloader_num_workers: int = field(default=0, metadata={"help": "data-loading worker processes"})
    disable_tqdm: bool = field(default=False, metadata={"help": "hide progress bars"})
    report_to: str = field(default="none", metadata={"help": "tensorboard, wandb, trackio, ... or none"})
    resume: bool | str = field(default=False, metadata={"help": "continue from the last checkpoint (or this one)"})
    overwrite: bool = field(default=False, metadata={"help": "replace an existing run directory"})

    def resolved(self, task: str) -> TrainOptions:
        """A copy with the task's defaults filled in and the paper recipe expanded."""
        opts = dataclasses.replace(self, config=dict(self.config), data_files=list(self.data_files),
                                   prompts=list(self.prompts))
        for key, value in TASK_DEFAULTS[task].items():
            if getattr(opts, key) is None:
                setattr(opts, key, value)
        if opts.recipe not in ("default", "paper"):
            raise ValueError(f"recipe must be 'default' or 'paper', got {opts.recipe!r}")
        paper = opts.recipe == "paper"
        for key, default, paper_value in (
            ("adam_beta1", 0.9, 0.9),
            ("adam_beta2", 0.999, 0.98),
            ("adam_epsilon", 1e-8, 1e-9),
            ("weight_decay", 0.01, 0.0),
            ("label_smoothing", 0.0, 0.1),
            ("lr_scheduler", "cosine", "inverse_sqrt"),
        ):
            if getattr(opts, key) is None:
                setattr(opts, key, paper_value if paper else default)
        if opts.batch_size is None:
            opts.batch_size = 32
        if opts.eval_batch_size is None:
            opts.eval_batch_size = 2 * opts.batch_size
        if opts.tokenizer not in ("bpe", "wordpiece"):
            raise ValueError(f"tokenizer must be 'bpe' or 'wordpiece', got {opts.tokenizer!r}")
        return opts


@dataclass
class RunResult:
    """What :func:`train` returns (also written to ``run.json`` / ``metrics.json``)."""

    run_dir: Path
    task: str
    metrics: dict[str, Any]
    baseline: dict[str, Any]
    samples: list[dict[str, Any]]
    log_history: list[dict[str, Any]]
    global_step: int
    wall_time_s: float
    time_per_step_s: float | None


# --------------------------------------------------------------------------------------------------
# Callbacks and the Trainer with atomic checkpoints
# --------------------------------------------------------------------------------------------------


class NonFiniteLossGuard(TrainerCallback):
    """Stop at the first optimizer step whose gradients are NaN/inf, before it can do harm.

    A NaN/inf loss gives NaN gradients, so checking the (already clipped) gradients just before the
    optimizer step catches it. That update is skipped (the gradients are dropped, and the optimizer
    skips parameters without one), training stops, and no evaluation or checkpoint runs afterwards,
    so the newest checkpoint on disk is the last good one. :func:`train` then raises
    :class:`TrainingDivergedError`. In distributed runs the verdict is all-reduced, so every process
    stops at the same step.
    """

    def __init__(self) -> None:
        self.tripped_at: int | None = None

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        import torch

        grads = [p.grad for p in model.parameters() if p.grad is not None] if model is not None else []
        # FSDP2 gradients are DTensors: check this process's shard; the all-reduce below covers the rest.
        local = [g.to_local() if hasattr(g, "to_local") else g for g in grads]
        device = local[0].device if local else torch.device("cpu")
        # One flag tensor and one host sync per step (not one per parameter, which would stall GPUs).
        flag = (torch.stack([torch.isfinite(g).all().to(device) for g in local]).all().logical_not().float()
                if local else torch.zeros((), device=device)).reshape(1)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        bad = bool(flag.item())
        if bad:
            self.tripped_at = state.global_step + 1
            for p in model.parameters():
                p.grad = None
            control.should_training_stop = True
        return control

    def _hold(self, control):
        # Runs after DefaultFlowCallback (callbacks are called in order), so it has the last word.
        if self.tripped_at is not None:
            control.should_save = False
            control.should_evaluate = False
            control.should_training_stop = True
        return control

    def on_step_end(self, args, state, control, **kwargs):
        return self._hold(control)

    def on_epoch_end(self, args, state, control, **kwargs):
        return self._hold(control)


class StepTimer(TrainerCallback):
    """Wall time of each optimizer step (forward, backward, update; not evaluation or saving)."""

    def __init__(self) -> None:
        self.durations: list[float] = []
        self._start: float | None = None

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if self._start is not None:
            self.durations.append(time.perf_counter() - self._start)
            self._start = None


class TimeLimit(TrainerCallback):
    """Stop training once ``minutes`` have passed; the run then evaluates and saves as usual."""

    def __init__(self, minutes: float) -> None:
        self.seconds = 60.0 * minutes
        self.start = time.perf_counter()
        self.stopped_at: int | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if time.perf_counter() - self.start > self.seconds and not control.should_training_stop:
            control.should_training_stop = True
            control.should_save = args.save_strategy != "no"
            self.stopped_at = state.global_step
        return control


def code_files() -> list[Path]:
    """The package files a saved model needs for ``trust_remote_code`` loading (the model's module and
    everything it imports relatively: configuration, positional encodings)."""
    from transformers.dynamic_module_utils import get_relative_import_files

    from . import modeling_vanilla

    module = Path(inspect.getfile(modeling_vanilla))
    return [module, *sorted(Path(p) for p in get_relative_import_files(str(module)))]


def ensure_code_files(folder: str | os.PathLike[str]) -> list[str]:
    """Copy the model code next to a saved config whose ``auto_map`` needs it; return what was copied.

    ``save_pretrained`` normally does this (``register_for_auto_class``), but a model saved through a
    wrapper (FSDP, a plain state dict) can miss it, and then resuming or ``trust_remote_code`` loading
    fails (transformers#46455).
    """
    folder = Path(folder)
    config_file = folder / "config.json"
    if not config_file.is_file():
        return []
    if not json.loads(config_file.read_text(encoding="utf-8")).get("auto_map"):
        return []
    copied = []
    for src in code_files():
        dst = folder / src.name
        if not dst.exists():
            shutil.copyfile(src, dst)
            copied.append(src.name)
    return copied


def _fsync(path: Path) -> None:
    """Flush one file or folder entry to disk; best effort (some filesystems refuse fsync on folders)."""
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if path.is_dir() else 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_tree(folder: Path) -> None:
    """Flush every file (and the folder entries) to disk so a crash cannot publish a half-written file."""
    for path in sorted(folder.rglob("*"), reverse=True):
        _fsync(path)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def make_shareable(path: Path) -> None:
    """Give a published file or folder the usual permissions (0644 / 0755 less the umask).

    Staging folders come from ``tempfile`` (mode 0700, files 0600); published checkpoints and models
    should be readable like any other file the user writes.
    """
    mask = _umask()
    paths = [path, *path.rglob("*")] if path.is_dir() else [path]
    for p in paths:
        try:
            p.chmod((0o755 if p.is_dir() else 0o644) & ~mask)
        except OSError:
            pass


@functools.cache
def trainer_classes() -> tuple[type, type]:
    """``(VanillaTrainer, VanillaSeq2SeqTrainer)``: built on first use, so importing this module stays light."""
    from transformers import Seq2SeqTrainer, Trainer
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints

    class AtomicCheckpointMixin:
        """Trainer checkpoints that appear all at once, and always carry the model code.

        transformers writes ``checkpoint-N`` file by file in place, so a run killed while saving leaves
        a folder that ``resume_from_checkpoint`` picks (it is the newest) but cannot load. Here every
        process writes into ``.staging-checkpoint-N/checkpoint-N`` (a name the Trainer's checkpoint
        search ignores), the main process checks the code files are there, flushes everything to disk
        and publishes the folder with one ``os.replace``; a killed save leaves only a staging folder,
        which the next save or resume removes.
        """

        def _save_checkpoint(self, model, trial):  # type: ignore[override]
            run_dir = Path(self._get_output_dir(trial=trial))
            name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            staging_root = run_dir / f".staging-{name}"
            final = run_dir / name
            if self.args.should_save:
                shutil.rmtree(staging_root, ignore_errors=True)
                staging_root.mkdir(parents=True)
            self.accelerator.wait_for_everyone()
            real_output_dir = self.args.output_dir
            self.args.output_dir = str(staging_root)  # super() writes to <output_dir>/checkpoint-N
            try:
                super()._save_checkpoint(model, trial)
            finally:
                self.args.output_dir = real_output_dir
            staged = staging_root / name
            best = self.state.best_model_checkpoint
            if best is not None and Path(best).parent == staging_root:
                self.state.best_model_checkpoint = str(run_dir / Path(best).name)
            self.accelerator.wait_for_everyone()  # every rank's files (RNG states, shards) are written
            if self.args.should_save:
                ensure_code_files(staged)
                if best is not None:  # the state saved inside named the staging path
                    self.state.save_to_json(str(staged / "trainer_state.json"))
                make_shareable(staged)
                _fsync_tree(staged)
                if final.exists():  # same step saved before (e.g. a resumed run re-saving): replace it
                    shutil.rmtree(final)
                os.replace(staged, final)
                _fsync(run_dir)
                shutil.rmtree(staging_root, ignore_errors=True)
                rotate_checkpoints(
                    output_dir=str(run_dir),
                    save_total_limit=self.args.save_total_limit,
                    best_model_checkpoint=self.state.best_model_checkpoint,
                )
            self.accelerator.wait_for_everyone()

    class VanillaTrainer(AtomicCheckpointMixin, Trainer):
        """``Trainer`` with atomic, self-contained checkpoints."""

    class VanillaSeq2SeqTrainer(AtomicCheckpointMixin, Seq2SeqTrainer):
        """``Seq2SeqTrainer`` with atomic, self-contained checkpoints."""

    return VanillaTrainer, VanillaSeq2SeqTrainer


def remove_stale_staging(run_dir: str | os.PathLike[str]) -> None:
    """Delete ``.staging-checkpoint-*`` folders left by a process killed while saving."""
    for stale in Path(run_dir).glob(".staging-checkpoint-*"):
        shutil.rmtree(stale, ignore_errors=True)


# --------------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------------


def parse_data_files(entries: Sequence[str]) -> dict[str, list[str]] | list[str]:
    """``["a.txt", "validation=b.txt"]`` -> ``{"train": ["a.txt"], "validation": ["b.txt"]}``.

    A prefix counts as a split name only if it is ``train``, ``validation`` or ``test`` (so paths with
    ``=`` in them still work); without any split prefix the result is a plain list (all ``train``).
    """
    splits: dict[str, list[str]] = {}
    plain: list[str] = []
    for entry in entries:
        split, sep, path = entry.partition("=")
        if sep and split in ("train", "validation", "test"):
            splits.setdefault(split, []).append(path)
        else:
            plain.append(entry)
    if not splits:
        return plain
    if plain:
        splits.setdefault("train", []).extend(plain)
    return splits


def load_task_data(task: str, opts: TrainOptions) -> tuple[DatasetDict, dict[str, Any]]:
    """The raw splits for ``task`` and a description of where they came from (for run.json / card).

    Columns are normalised: ``text`` (clm, mlm), ``text`` + ``label`` (classification),
    ``source`` + ``target`` (translation). Without a validation split one is cut from train
    (``validation_fraction``); without a test split the final evaluation uses validation.
    """
    from datasets import DatasetDict

    from . import corpora as hv_data

    description: dict[str, Any] = {}
    if opts.data_files:
        files = parse_data_files(opts.data_files)
        keep_columns = task in ("translation", "classification")
        text_column = None if keep_columns else opts.text_column
        sample_by = opts.sample_by or "paragraph"
        # The loader cuts validation from train-only files itself: it knows to cut one paragraph by line.
        only_train = not isinstance(files, Mapping) or set(files) == {"train"}
        dsd = hv_data.load_local_files(files, text_column=text_column, seed=opts.seed, sample_by=sample_by,
                                       validation_fraction=opts.validation_fraction if only_train else 0.0)  # type: ignore[arg-type]
        description["sample_by"] = sample_by
        if only_train:
            description["validation_note"] = f"{opts.validation_fraction:.0%} of train, seeded split"
        description.update(source="local files", name="local:" + ",".join(Path(f).name for f in _all_files(files)),
                           files=[str(Path(f).resolve()) for f in _all_files(files)])
    elif opts.dataset:
        args = (opts.dataset_config,) if opts.dataset_config else ()
        dsd = hv_data.load_named_dataset(opts.dataset, *args)
        description.update(source="datasets", name=opts.dataset, config=opts.dataset_config)
    else:
        if task in ("clm", "mlm"):
            sample_by = opts.sample_by or SHAKESPEARE_SAMPLE_BY[task]
            dsd = hv_data.load_shakespeare(sample_by=sample_by)  # type: ignore[arg-type]
            description["sample_by"] = sample_by
            description.update(
                source="hf_vanilla.corpora", name="shakespeare", corpus=hv_data.CORPORA["shakespeare"].description,
                license=hv_data.CORPORA["shakespeare"].license,
                split_note=(f"whole works held out: validation = {', '.join(hv_data.SHAKESPEARE_VALIDATION_WORKS)}; "
                            f"test = {', '.join(hv_data.SHAKESPEARE_TEST_WORKS)}"),
            )
        elif task == "translation":
            dsd = hv_data.load_bible_pairs()
            description.update(
                source="hf_vanilla.corpora", name="bible-en-es", corpus=hv_data.CORPORA["bible-en-es"].description,
                license=hv_data.CORPORA["bible-en-es"].license,
                split_note=(f"whole books held out: validation = {', '.join(hv_data.BIBLE_VALIDATION_BOOKS)}; "
                            f"test = {', '.join(hv_data.BIBLE_TEST_BOOKS)}"),
            )
        else:
            dsd = hv_data.load_bbc_news(seed=opts.seed)
            description.update(
                source="hf_vanilla.corpora", name="bbc-news", corpus=hv_data.CORPORA["bbc-news"].description,
                license=hv_data.CORPORA["bbc-news"].license,
                split_note="stratified by class, 10% validation and 10% test, by a seeded hash of each article id",
            )
    dsd = DatasetDict(dict(dsd))
    if "train" not in dsd:
        raise ValueError(f"the data has no 'train' split (splits: {sorted(dsd)})")
    if "validation" not in dsd:
        if "test" in dsd and len(dsd) == 2:
            dsd["validation"] = dsd.pop("test")
        else:
            parts = dsd["train"].train_test_split(test_size=opts.validation_fraction, seed=opts.seed)
            dsd["train"], dsd["validation"] = parts["train"], parts["test"]
            description["validation_note"] = f"{opts.validation_fraction:.0%} of train, seeded split"
    dsd = _normalise_columns(task, dsd, opts)
    description["rows"] = {split: len(ds) for split, ds in dsd.items()}
    return dsd, description


def _all_files(files: Mapping[str, list[str]] | list[str]) -> list[str]:
    return [f for fs in files.values() for f in fs] if isinstance(files, Mapping) else list(files)


def _normalise_columns(task: str, dsd: DatasetDict, opts: TrainOptions) -> DatasetDict:
    from datasets import ClassLabel, DatasetDict

    def need(columns: Sequence[str]) -> None:
        for split, ds in dsd.items():
            missing = [c for c in columns if c not in ds.column_names]
            if missing:
                raise ValueError(f"split {split!r} lacks column(s) {missing}; it has {ds.column_names}. "
                                 "Name the right ones with --text-column / --label-column / --source-column / "
                                 "--target-column.")

    if task in ("clm", "mlm"):
        need([opts.text_column])
        out = {}
        for split, ds in dsd.items():
            if opts.text_column != "text":
                ds = ds.rename_column(opts.text_column, "text")
            out[split] = ds.select_columns(["text"]).filter(lambda t: bool(t and t.strip()), input_columns="text")
        return DatasetDict(out)
    if task == "translation":
        need([opts.source_column, opts.target_column])
        return DatasetDict({
            split: ds.select_columns([opts.source_column, opts.target_column])
            .rename_columns({opts.source_column: "source", opts.target_column: "target"})
            .filter(lambda s, t: bool(s and s.strip() and t and t.strip()), input_columns=["source", "target"])
            for split, ds in dsd.items()
        })
    need([opts.text_column, opts.label_column])
    train_feature = dsd["train"].features[opts.label_column]
    if isinstance(train_feature, ClassLabel):
        names = list(train_feature.names)
    else:  # strings or ints: the classes are the sorted set of training labels
        names = sorted({str(v) for v in dsd["train"][opts.label_column]})
    index = {name: i for i, name in enumerate(names)}
    out = {}
    for split, ds in dsd.items():
        feature = ds.features[opts.label_column]
        if isinstance(feature, ClassLabel):
            ds = ds.map(lambda v, _f=feature: {"label_id": index[_f.int2str(v)]}, input_columns=opts.label_column)
        else:
            unknown = sorted({str(v) for v in ds[opts.label_column]} - set(names))
            if unknown:
                raise ValueError(f"split {split!r} has labels not seen in train: {unknown[:10]}")
            ds = ds.map(lambda v: {"label_id": index[str(v)]}, input_columns=opts.label_column)
        ds = ds.select_columns([opts.text_column, "label_id"]).rename_columns(
            {opts.text_column: "text", "label_id": "label"})
        out[split] = ds.cast_column("label", ClassLabel(names=names))
    return DatasetDict(out)


def build_tokenizer(task: str, train_split: Dataset, opts: TrainOptions) -> PreTrainedTokenizerBase:
    """Train the task's tokenizer on the training split only (so no held-out text leaks into it).

    Causal LM: byte-level BPE without automatic special tokens (documents are joined with ``</s>``
    by :func:`tokenize_task`, and prompts must not end in ``</s>``), left padding for batched
    generation. Translation: one BPE over both languages (the paper's shared vocabulary), ``</s>``
    after each sentence. MLM / classification: WordPiece with ``[CLS] ... [SEP]``.
    """
    from .corpora import iter_texts, train_tokenizer

    columns = ("source", "target") if task == "translation" else ("text",)
    add_eos = task == "translation" or opts.tokenizer == "bpe" and task != "clm"
    tok = train_tokenizer(
        iter_texts(train_split, columns),
        kind=opts.tokenizer,  # type: ignore[arg-type]
        vocab_size=opts.vocab_size,
        lowercase=opts.lowercase,
        add_eos=add_eos,
        model_max_length=_max_positions(task, opts),
    )
    if task == "clm":
        tok.padding_side = "left"
    return tok


def _max_positions(task: str, opts: TrainOptions) -> int:
    return {
        "clm": opts.block_size,
        "mlm": opts.block_size,
        "translation": max(opts.max_source_length, opts.max_target_length),
        "classification": opts.max_length,
    }[task]


def tokenize_task(task: str, dsd: DatasetDict, tokenizer: PreTrainedTokenizerBase, opts: TrainOptions) -> DatasetDict:
    """Model-ready splits: fixed-length blocks (clm, mlm), token pairs (translation), truncated
    articles with labels (classification)."""
    from datasets import DatasetDict

    block = opts.block_size
    if task in ("clm", "mlm"):
        eos = tokenizer.eos_token_id if task == "clm" else None

        def group(batch: dict[str, list]) -> dict[str, list]:
            # Concatenate the texts (documents joined by </s> for clm; [CLS]/[SEP] already there for
            # mlm) and cut fixed blocks: no padding, every position is a real token.
            ids: list[int] = []
            for text in batch["text"]:
                ids.extend(tokenizer(text, verbose=False)["input_ids"])
                if eos is not None:
                    ids.append(eos)
            n = (len(ids) // block) * block or len(ids)  # a tiny split keeps one short block
            blocks = [ids[i : i + block] for i in range(0, n, block)]
            out: dict[str, list] = {"input_ids": blocks, "attention_mask": [[1] * len(b) for b in blocks]}
            if task == "clm":
                out["labels"] = [list(b) for b in blocks]
            return out

        # Batches of 1000 rows: each batch's remainder (< one block) is dropped, which is <0.1% of tokens.
        result = DatasetDict({
            split: ds.map(group, batched=True, batch_size=1000, remove_columns=ds.column_names,
                          desc=f"tokenising {split}")
            for split, ds in dsd.items()
        })
    elif task == "translation":

        def encode(batch: dict[str, list]) -> dict[str, list]:
            enc = tokenizer(batch["source"], max_length=opts.max_source_length, truncation=True)
            enc["labels"] = tokenizer(text_target=batch["target"], max_length=opts.max_target_length,
                                      truncation=True)["input_ids"]
            return enc

        result = DatasetDict({
            split: ds.map(encode, batched=True, remove_columns=[], desc=f"tokenising {split}")
            for split, ds in dsd.items()
        })
    else:

        def encode_cls(batch: dict[str, list]) -> dict[str, list]:
            return tokenizer(batch["text"], max_length=opts.max_length, truncation=True)

        result = DatasetDict({
            split: ds.map(encode_cls, batched=True, remove_columns=["text"], desc=f"tokenising {split}")
            for split, ds in dsd.items()
        })
    limits = {"train": opts.max_train_samples, "validation": opts.max_eval_samples, "test": opts.max_test_samples}
    for split, limit in limits.items():
        if limit is not None and split in result and len(result[split]) > limit:
            result[split] = result[split].select(range(limit))
    return result


class MLMCollator:
    """Random masking for training batches; evaluation batches arrive pre-masked (fixed, seeded masks,
    so every evaluation of a run, and of every run with that seed, scores the same positions)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, mlm_probability: float, seed: int | None = None) -> None:
        from transformers import DataCollatorForLanguageModeling, default_data_collator

        # seed=None: masking draws from torch's global RNG, which Trainer checkpoints restore, so a
        # resumed run masks exactly like an uninterrupted one.
        self.masker = DataCollatorForLanguageModeling(tokenizer, mlm_probability=mlm_probability, seed=seed)
        self.stack = default_data_collator

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        if "labels" in features[0]:
            return self.stack(features)
        return self.masker([{k: v for k, v in f.items() if k != "labels"} for f in features])


def premask(ds: Dataset, tokenizer: PreTrainedTokenizerBase, mlm_probability: float, seed: int) -> Dataset:
    """Mask an evaluation split once, reproducibly (``input_ids`` + ``labels`` columns)."""
    from transformers import DataCollatorForLanguageModeling

    masker = DataCollatorForLanguageModeling(tokenizer, mlm_probability=mlm_probability, seed=seed,
                                             return_tensors="np")

    def mask(batch: dict[str, list]) -> dict[str, list]:
        rows = [{"input_ids": ids} for ids in batch["input_ids"]]
        out = masker(rows)
        return {"input_ids": out["input_ids"].tolist(), "labels": out["labels"].tolist()}

    return ds.map(mask, batched=True, batch_size=256, desc="masking eval split")


# --------------------------------------------------------------------------------------------------
# Metrics and baselines
# --------------------------------------------------------------------------------------------------


def token_stats(logits: torch.Tensor | tuple[torch.Tensor, ...], labels: torch.Tensor, shift: bool) -> torch.Tensor:
    """Per-example ``[sum of target NLL, number of targets, correct argmax predictions]``.

    Used as ``preprocess_logits_for_metrics`` so the evaluation keeps 3 numbers per example instead of
    the (batch, length, vocab) logits, and the perplexity is exact (token-weighted) over the split.
    """
    import torch

    if isinstance(logits, (tuple, list)):
        logits = logits[0]
    if shift:
        logits, labels = logits[:, :-1], labels[:, 1:]
    mask = labels.ne(-100)
    safe = labels.clamp(min=0)
    logp = torch.log_softmax(logits.float(), dim=-1)
    nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    nll = (nll * mask).sum(-1)
    correct = ((logits.argmax(-1) == labels) & mask).sum(-1)
    return torch.stack([nll, mask.sum(-1).to(nll.dtype), correct.to(nll.dtype)], dim=-1)


def lm_metrics(eval_pred: EvalPrediction) -> dict[str, float]:
    """Perplexity and token accuracy from :func:`token_stats` rows."""
    import numpy as np

    stats = np.asarray(eval_pred.predictions, dtype=np.float64).reshape(-1, 3)
    nll, count, correct = stats.sum(0)
    count = max(count, 1.0)
    return {"perplexity": float(math.exp(nll / count)), "accuracy": float(correct / count),
            "nll": float(nll / count), "tokens": int(count)}


def classification_metrics(eval_pred: EvalPrediction) -> dict[str, float]:
    """Accuracy and macro-F1 (mean F1 over the classes present in the gold labels or predictions)."""
    import numpy as np

    preds = np.asarray(eval_pred.predictions).reshape(-1)
    gold = np.asarray(eval_pred.label_ids).reshape(-1)
    return {"accuracy": float((preds == gold).mean()), "macro_f1": macro_f1(gold.tolist(), preds.tolist())}


def macro_f1(gold: Sequence[int], pred: Sequence[int]) -> float:
    """Macro-averaged F1 as scikit-learn computes it (labels = union of gold and predicted)."""
    scores = []
    for c in sorted(set(gold) | set(pred)):
        tp = sum(1 for g, p in zip(gold, pred, strict=True) if g == c and p == c)
        fp = sum(1 for g, p in zip(gold, pred, strict=True) if g != c and p == c)
        fn = sum(1 for g, p in zip(gold, pred, strict=True) if g == c and p != c)
        scores.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
    return float(sum(scores) / len(scores)) if scores else 0.0


def unigram_counts(ds: Dataset, vocab_size: int) -> list[int]:
    """Token counts over a tokenised split's ``input_ids`` (the unigram model's training data)."""
    counts = [0] * vocab_size
    for start in range(0, len(ds), 1000):
        for row in ds[start : start + 1000]["input_ids"]:
            for t in row:
                counts[t] += 1
    return counts


def unigram_perplexity(counts: Sequence[int], targets: Sequence[Sequence[int]], shift: bool) -> float:
    """Held-out perplexity of an add-one-smoothed unigram model, ``p(t) = (c(t) + 1) / (N + V)``.

    ``targets`` are label rows; ``-100`` is ignored and with ``shift`` the first token of each row is
    skipped, so the unigram is scored on exactly the tokens the model predicts.
    """
    total = sum(counts) + len(counts)
    log_total = math.log(total)
    nll = 0.0
    n = 0
    for row in targets:
        for t in row[1:] if shift else row:
            if t == -100:
                continue
            nll += log_total - math.log(counts[t] + 1)
            n += 1
    return math.exp(nll / max(n, 1))


# --------------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------------


def build_config(task: str, opts: TrainOptions, tokenizer: PreTrainedTokenizerBase,
                 label_names: Sequence[str] | None = None) -> VanillaConfig:
    """The VanillaConfig of a fresh model for ``task``: size preset, family, vocabulary and special
    tokens from the tokenizer, then the user's ``config`` overrides."""
    from .configuration_vanilla import PRESETS, VanillaConfig

    fields: dict[str, Any]
    if opts.preset in SIZE_PRESETS:
        fields = dict(SIZE_PRESETS[opts.preset])
    elif opts.preset in PRESETS:
        fields = dict(PRESETS[opts.preset])
    else:
        raise ValueError(f"unknown preset {opts.preset!r}; choose one of {sorted({*SIZE_PRESETS, *PRESETS})}")
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.cls_token_id
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
    fields.update(
        architecture=TASK_FAMILY[task],
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=bos,
        eos_token_id=eos,
        decoder_start_token_id=bos if task == "translation" else None,
        max_position_embeddings=max(_max_positions(task, opts), fields.get("max_position_embeddings", 0), 512),
    )
    if opts.dropout is not None:
        fields["hidden_dropout"] = opts.dropout
    if task == "classification" and tokenizer.cls_token_id is None:
        fields["classifier_pooling"] = "mean"  # no [CLS] token to pool (a BPE tokenizer)
    if task == "classification":
        assert label_names is not None
        fields.update(num_labels=len(label_names), id2label=dict(enumerate(label_names)),
                      label2id={n: i for i, n in enumerate(label_names)})
    fields.update(opts.config)
    return VanillaConfig(**fields)


def _model_class(task: str):
    from . import modeling_vanilla as mv

    return {
        "clm": mv.VanillaForCausalLM,
        "mlm": mv.VanillaForMaskedLM,
        "translation": mv.VanillaForSeq2SeqLM,
        "classification": mv.VanillaForSequenceClassification,
    }[task]


def _set_generation_defaults(task: str, model, tokenizer, opts: TrainOptions) -> None:
    """Generation settings saved with the model (what pipelines and the Hub widget use)."""
    gc = getattr(model, "generation_config", None)
    if gc is None or task not in ("clm", "translation"):
        return
    gc.pad_token_id = tokenizer.pad_token_id
    gc.eos_token_id = model.config.eos_token_id
    gc.bos_token_id = model.config.bos_token_id
    if task == "clm":
        gc.do_sample, gc.top_k, gc.temperature, gc.max_new_tokens = True, 50, 0.8, opts.max_new_tokens
    elif task == "translation":
        # The paper decodes with beam 4 and length penalty 0.6 (GNMT's; transformers' differs slightly).
        gc.decoder_start_token_id = model.config.decoder_start_token_id
        gc.num_beams, gc.max_new_tokens = opts.num_beams, opts.max_target_length
        if opts.num_beams > 1:  # beam-only settings; transformers refuses to save them for greedy decoding
            gc.length_penalty, gc.early_stopping = 0.6, True


# --------------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------------


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item"):
        return obj.item()
    return str(obj)


def _write_json(path: Path, payload: Mapping[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1, default=_json_default) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _environment() -> dict[str, Any]:
    import accelerate
    import datasets
    import tokenizers
    import torch
    import transformers

    from . import __version__

    return {
        "hf_vanilla": __version__, "transformers": transformers.__version__, "torch": torch.__version__,
        "accelerate": accelerate.__version__, "datasets": datasets.__version__,
        "tokenizers": tokenizers.__version__, "python": platform.python_version(),
        "platform": platform.platform(), "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.is_available(),
    }


def _has_accelerator() -> bool:
    import torch

    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "is_available"):
        return bool(accelerator.is_available())
    return torch.cuda.is_available()


def _plan_steps(n_train: int, opts: TrainOptions, world_size: int) -> int:
    per_step = opts.batch_size * opts.gradient_accumulation_steps * world_size  # type: ignore[operator]
    if opts.max_steps > 0:
        return opts.max_steps
    return max(1, math.ceil(opts.num_train_epochs * math.ceil(n_train / per_step)))


def train(
    task: str,
    output_dir: str | os.PathLike[str],
    *,
    callbacks: Sequence[TrainerCallback] = (),
    **options: Any,
) -> RunResult:
    """Train ``task`` (``clm``, ``mlm``, ``translation``, ``classification``) into ``output_dir``.

    ``options`` are the fields of :class:`TrainOptions` (``preset``, ``max_steps``, ``data_files``,
    ``config={"norm_position": "pre"}``, ``recipe="paper"``, ``resume=True``, ...). ``callbacks`` are
    extra ``TrainerCallback`` objects. Works unchanged under ``accelerate launch`` (DDP, FSDP,
    DeepSpeed): every process calls this function; only the main process writes the run files.

    Raises:
        TrainingDivergedError: the loss became NaN/inf (the last good checkpoint is kept).
        hf_vanilla.corpora.CorpusUnavailableError: the default corpus is neither cached nor fetchable.
    """
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    valid = {f.name for f in dataclasses.fields(TrainOptions)}
    unknown = sorted(set(options) - valid)
    if unknown:
        raise TypeError(f"unknown option(s) {unknown}; valid options: {sorted(valid)}")
    opts = TrainOptions(**options).resolved(task)
    return _Run(task, Path(output_dir), opts, list(callbacks)).execute()


class _Run:
    """One training run, step by step; :meth:`execute` is the whole story."""

    def __init__(self, task: str, run_dir: Path, opts: TrainOptions, callbacks: list) -> None:
        self.task, self.run_dir, self.opts, self.extra_callbacks = task, run_dir, opts, callbacks

    # -- 1. arguments (this also starts the distributed state under `accelerate launch`)
    def _training_arguments(self, total_steps: int):
        from transformers import Seq2SeqTrainingArguments, TrainingArguments

        o = self.opts
        eval_steps = o.eval_steps or max(1, total_steps // 8)
        save_steps = o.save_steps or eval_steps
        warmup = o.warmup_steps if o.warmup_steps is not None else (
            min(4000, max(1, total_steps // 10)) if o.recipe == "paper" else round(0.05 * total_steps))
        lr = o.learning_rate
        if lr is None:
            # The paper's peak, d_model^-0.5 * 4000^-0.5 (7e-4 for d_model=512), reached after `warmup`
            # steps and then decayed as 1/sqrt(step). With the paper's 4000 warmup steps this is exactly
            # its schedule; shorter runs warm up faster to the same peak rather than to a higher one
            # (the formula with a 100-step warmup would peak at 0.006 and diverge).
            lr = self.config_hidden_size**-0.5 * 4000**-0.5
        self.learning_rate, self.warmup_steps = lr, warmup
        cls = Seq2SeqTrainingArguments if self.task == "translation" else TrainingArguments
        return cls(
            output_dir=str(self.run_dir),
            max_steps=total_steps,
            per_device_train_batch_size=o.batch_size,
            per_device_eval_batch_size=o.eval_batch_size,
            gradient_accumulation_steps=o.gradient_accumulation_steps,
            learning_rate=lr,
            lr_scheduler_type=o.lr_scheduler,
            warmup_steps=warmup,
            weight_decay=o.weight_decay,
            adam_beta1=o.adam_beta1,
            adam_beta2=o.adam_beta2,
            adam_epsilon=o.adam_epsilon,
            optim="adamw_torch",
            use_cpu=self.use_cpu,
            label_smoothing_factor=o.label_smoothing,
            max_grad_norm=o.max_grad_norm,
            seed=o.seed,
            bf16=o.bf16,
            eval_strategy="steps",
            eval_steps=eval_steps,
            save_strategy="steps",
            save_steps=save_steps,
            save_total_limit=o.save_total_limit,
            logging_strategy="steps",
            logging_steps=o.logging_steps or max(1, total_steps // 100),
            logging_first_step=True,
            # Leave NaN/inf in the logs: hiding them (the default) would hide a diverging run.
            logging_nan_inf_filter=False,
            report_to=o.report_to,
            disable_tqdm=o.disable_tqdm,
            dataloader_num_workers=o.dataloader_num_workers,
            remove_unused_columns=True,
            # Exact loss over devices: divide by the global target count, not a per-device mean.
            average_tokens_across_devices=True,
            **({"predict_with_generate": False} if self.task == "translation" else {}),
        )

    def _prepare_dir(self) -> str | None:
        """Check the run directory; return the checkpoint to resume from (if any)."""
        from transformers.trainer_utils import get_last_checkpoint

        o, run_dir = self.opts, self.run_dir
        if o.resume:
            if isinstance(o.resume, str) and o.resume not in ("true", "True", "1"):
                checkpoint = o.resume
                if not Path(checkpoint).is_dir():
                    raise FileNotFoundError(f"checkpoint {checkpoint} does not exist")
                return checkpoint
            if run_dir.is_dir():
                remove_stale_staging(run_dir)
                checkpoint = get_last_checkpoint(str(run_dir))
                if checkpoint is None:
                    logger.warning("resume: no checkpoint in %s, starting from scratch", run_dir)
                return checkpoint
            return None
        if run_dir.is_dir() and any(run_dir.iterdir()):
            if not o.overwrite:
                raise FileExistsError(
                    f"{run_dir} exists and is not empty: pass resume=True (--resume) to continue it, or "
                    "overwrite=True (--overwrite) to start again")
        return None

    def execute(self) -> RunResult:
        from transformers import AutoTokenizer, set_seed
        from transformers.trainer_utils import get_last_checkpoint

        o, task = self.opts, self.task
        t_start = time.perf_counter()
        # The distributed state must exist before anything checks which process is main. Without an
        # accelerator it must be told `cpu=True`, or `accelerate launch` on a CPU machine gives N
        # unconnected single-process runs instead of one gloo DDP run.
        from accelerate import PartialState

        self.use_cpu = o.use_cpu or not _has_accelerator()
        state = PartialState(cpu=self.use_cpu)
        is_main = state.is_main_process
        resume_from = None
        if is_main:
            resume_from = self._prepare_dir()
            if o.overwrite and not o.resume and self.run_dir.is_dir():
                shutil.rmtree(self.run_dir)
            self.run_dir.mkdir(parents=True, exist_ok=True)
        state.wait_for_everyone()
        if not is_main and o.resume:
            resume_from = (o.resume if isinstance(o.resume, str) and o.resume not in ("true", "True", "1")
                           else get_last_checkpoint(str(self.run_dir)))

        # -- data and tokenizer (main process first: it trains/saves the tokenizer, fills the caches)
        with state.main_process_first():
            raw, description = load_task_data(task, o)
            tok_dir = self.run_dir
            if o.init_from:
                tokenizer = AutoTokenizer.from_pretrained(o.init_from)
            elif (tok_dir / "tokenizer.json").is_file() and (o.resume or not is_main):
                tokenizer = AutoTokenizer.from_pretrained(tok_dir)
            else:
                tokenizer = build_tokenizer(task, raw["train"], o)
                if is_main:
                    tokenizer.save_pretrained(tok_dir)
            if task == "clm":
                tokenizer.padding_side = "left"
            data = tokenize_task(task, raw, tokenizer, o)
            if task == "mlm":
                for split in ("validation", "test"):
                    if split in data:
                        data[split] = premask(data[split], tokenizer, o.mlm_probability, o.seed + 1)

        # What the model actually sees per split (after tokenisation, blocking and --max-*-samples).
        description["examples"] = {split: len(ds) for split, ds in data.items()}
        description["example_unit"] = {"clm": f"blocks of {o.block_size} tokens",
                                       "mlm": f"blocks of {o.block_size} tokens",
                                       "translation": "sentence pairs", "classification": "articles"}[task]
        label_names = raw["train"].features["label"].names if task == "classification" else None
        # -- model (seeded so the same seed gives the same initial weights)
        set_seed(o.seed)
        if o.init_from:
            import transformers
            from transformers import AutoConfig

            auto = getattr(transformers, TASK_AUTO_CLASS[task])  # hf_vanilla's import registered our classes
            extra = {}
            if task == "classification":
                extra = dict(num_labels=len(label_names), id2label=dict(enumerate(label_names)),
                             label2id={n: i for i, n in enumerate(label_names)})
            cfg = AutoConfig.from_pretrained(o.init_from, **o.config, **extra)
            model = auto.from_pretrained(o.init_from, config=cfg, attn_implementation=o.attn_implementation)
        else:
            config = build_config(task, o, tokenizer, label_names)
            model = _model_class(task)(config) if o.attn_implementation is None else \
                _model_class(task)._from_config(config, attn_implementation=o.attn_implementation)
        self.config_hidden_size = model.config.hidden_size
        _set_generation_defaults(task, model, tokenizer, o)

        world = state.num_processes
        total_steps = _plan_steps(len(data["train"]), o, world)
        args = self._training_arguments(total_steps)

        # -- collator, metrics
        from transformers import DataCollatorForSeq2Seq, DataCollatorWithPadding, default_data_collator

        if task == "clm":
            collator = default_data_collator
            preprocess = lambda logits, labels: token_stats(logits, labels, shift=True)  # noqa: E731
            compute_metrics = lm_metrics
        elif task == "mlm":
            collator = MLMCollator(tokenizer, o.mlm_probability)
            preprocess = lambda logits, labels: token_stats(logits, labels, shift=False)  # noqa: E731
            compute_metrics = lm_metrics
        elif task == "translation":
            collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)
            preprocess, compute_metrics = None, None
        else:
            collator = DataCollatorWithPadding(tokenizer)
            preprocess = lambda logits, labels: (logits[0] if isinstance(logits, tuple) else logits).argmax(-1)  # noqa: E731
            compute_metrics = classification_metrics

        guard, timer = NonFiniteLossGuard(), StepTimer()
        callbacks: list = [guard, timer, *self.extra_callbacks]
        time_limit = TimeLimit(o.time_limit_minutes) if o.time_limit_minutes else None
        if time_limit is not None:
            callbacks.append(time_limit)
        VanillaTrainer, VanillaSeq2SeqTrainer = trainer_classes()
        trainer_cls = VanillaSeq2SeqTrainer if task == "translation" else VanillaTrainer
        # remove_unused_columns drops the raw text columns (kept in `data` for BLEU and samples).
        trainer = trainer_cls(
            model=model,
            args=args,
            data_collator=collator,
            train_dataset=data["train"],
            eval_dataset=data["validation"],
            processing_class=tokenizer,
            compute_metrics=compute_metrics,
            preprocess_logits_for_metrics=preprocess,
            callbacks=callbacks,
        )

        self.distributed_type = str(trainer.accelerator.distributed_type.value)
        fsdp_requested = os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
        if is_main and fsdp_requested and self.distributed_type != "FSDP":
            # accelerate 1.15 turns FSDP on only for multi-accelerator states (MULTI_GPU, XPU, NPU, ...);
            # on CPU (MULTI_CPU, gloo) it drops the request. Say so rather than pretend to shard.
            logger.warning("FSDP was requested but accelerate runs this job as %s (FSDP needs GPUs or other "
                           "accelerators); the model is replicated, not sharded.", self.distributed_type)
        if is_main:
            _write_json(self.run_dir / "run.json", self._run_record(description, tokenizer, model, args, world,
                                                                    status="running", resumed_from=resume_from))
        # -- train
        t_train = time.perf_counter()
        trainer.train(resume_from_checkpoint=resume_from)
        train_seconds = time.perf_counter() - t_train
        if guard.tripped_at is not None:
            last = get_last_checkpoint(str(self.run_dir)) if self.run_dir.is_dir() else None
            msg = (f"training diverged: the loss (or its gradients) became NaN/inf at optimizer step "
                   f"{guard.tripped_at}; that update was skipped and training stopped. The last good "
                   f"checkpoint is {last or '(none was saved yet)'}. Lower the learning rate, raise the warmup, "
                   "clip gradients harder or use norm_position='pre'; resume with --resume from that checkpoint.")
            if is_main:
                record = json.loads((self.run_dir / "run.json").read_text(encoding="utf-8"))
                record.update(status="diverged", diverged_at_step=guard.tripped_at, last_good_checkpoint=last)
                _write_json(self.run_dir / "run.json", record)
            raise TrainingDivergedError(msg)

        # -- evaluate, baseline, samples
        metrics, baseline = self._evaluate(trainer, data, tokenizer)
        samples = self._samples(trainer, raw, data, tokenizer) if is_main else []

        # -- save model, state, run files, picture, card
        self._save_final_model(trainer, is_main)
        trainer.save_state()
        result = RunResult(
            run_dir=self.run_dir, task=task, metrics=metrics, baseline=baseline, samples=samples,
            log_history=list(trainer.state.log_history), global_step=trainer.state.global_step,
            wall_time_s=time.perf_counter() - t_start,
            time_per_step_s=_median(timer.durations[1:] or timer.durations),
        )
        if is_main:
            ensure_code_files(self.run_dir)
            per_step_tokens = None
            if task in ("clm", "mlm"):
                per_step_tokens = o.block_size * o.batch_size * o.gradient_accumulation_steps * world
            timing = {
                "wall_time_s": result.wall_time_s,
                "train_time_s": train_seconds,
                "steps": trainer.state.global_step,
                "time_per_step_s_median": result.time_per_step_s,
                "time_per_step_s_mean": (sum(timer.durations) / len(timer.durations)) if timer.durations else None,
                "tokens_per_step": per_step_tokens,
                "tokens_per_s": (per_step_tokens / result.time_per_step_s)
                if per_step_tokens and result.time_per_step_s else None,
                "stopped_by_time_limit_at": time_limit.stopped_at if time_limit else None,
            }
            _write_json(self.run_dir / "metrics.json", {
                "task": task, "metrics": metrics, "baseline": baseline, "timing": timing, "samples": samples,
            })
            record = self._run_record(description, tokenizer, model, args, world, status="completed",
                                      resumed_from=resume_from)
            _write_json(self.run_dir / "run.json", record)
            plot_curves(trainer.state.log_history, self.run_dir / "curves.png", task=task, baseline=baseline)
            from .card import build_model_card

            build_model_card(self.run_dir).save(str(self.run_dir / "README.md"))
        state.wait_for_everyone()
        return result

    def _save_final_model(self, trainer, is_main: bool) -> None:
        """Save the trained model into a fresh folder, then move its files into the run directory.

        Saving straight into the run directory would make ``save_pretrained`` carry every neighbour
        (checkpoints included) through its staging folder; a fresh folder avoids that, and each file
        still lands atomically (``os.replace``).
        """
        fresh = self.run_dir / ".final-model"
        if is_main:
            shutil.rmtree(fresh, ignore_errors=True)
        trainer.accelerator.wait_for_everyone()
        trainer.save_model(str(fresh))  # every process: FSDP / DeepSpeed gather the weights collectively
        if is_main:
            make_shareable(fresh)
            for path in fresh.iterdir():
                target = self.run_dir / path.name
                if target.is_dir():
                    shutil.rmtree(target)
                os.replace(path, target)
            shutil.rmtree(fresh, ignore_errors=True)
        trainer.accelerator.wait_for_everyone()

    def _run_record(self, description, tokenizer, model, args, world, *, status: str, resumed_from) -> dict:
        o = self.opts
        n_params = sum(p.numel() for p in model.parameters())
        return {
            "task": self.task,
            "status": status,
            "model_class": type(model).__name__,
            "auto_class": TASK_AUTO_CLASS[self.task],
            "pipeline_tag": TASK_PIPELINE[self.task],
            "options": dataclasses.asdict(o),
            "effective": {
                "learning_rate": self.learning_rate, "warmup_steps": self.warmup_steps,
                "max_steps": args.max_steps, "eval_steps": args.eval_steps, "save_steps": args.save_steps,
                "logging_steps": args.logging_steps, "world_size": world,
                "distributed_type": getattr(self, "distributed_type", None),
                "global_batch_size": o.batch_size * o.gradient_accumulation_steps * world,
            },
            "dataset": description,
            "tokenizer": {"kind": o.tokenizer, "vocab_size": len(tokenizer),
                          "trained_on": "training split only" if not o.init_from else f"from {o.init_from}"},
            "parameters": n_params,
            "config": model.config.to_diff_dict() if hasattr(model.config, "to_diff_dict") else {},
            "resumed_from": resumed_from,
            "command": sys.argv,
            "environment": _environment(),
        }

    def _evaluate(self, trainer, data, tokenizer) -> tuple[dict[str, Any], dict[str, Any]]:
        """Final metrics on validation and test (test = validation when there is no test split)."""
        task = self.task
        test_name = "test" if "test" in data else "validation"
        metrics: dict[str, Any] = {"test_split": test_name}
        baseline: dict[str, Any] = {}
        if task in ("clm", "mlm", "classification"):
            for split in dict.fromkeys(("validation", test_name)):
                ds = data[split]
                out = trainer.evaluate(ds, metric_key_prefix=split)
                metrics.update({k: v for k, v in out.items() if not k.endswith(_TIMING_KEYS)})
        if task in ("clm", "mlm"):
            # For mlm the unigram guesses each masked-out token from training-text frequencies.
            counts = unigram_counts(data["train"], len(tokenizer))
            if task == "mlm":  # [CLS]/[SEP] are never masked, so the unigram should not spend mass on them
                for special in tokenizer.all_special_ids:
                    counts[special] = 0
            baseline["name"] = "unigram, add-one smoothing, same tokenization, trained on the training split"
            top = max(range(len(counts)), key=counts.__getitem__)  # the unigram's only guess
            for split in dict.fromkeys(("validation", test_name)):
                labels = data[split]["labels"]
                baseline[f"{split}_perplexity"] = unigram_perplexity(counts, labels, shift=task == "clm")
                targets = [t for row in labels for t in (row[1:] if task == "clm" else row) if t != -100]
                baseline[f"{split}_accuracy"] = sum(t == top for t in targets) / max(1, len(targets))
        elif task == "classification":
            labels = data["train"]["label"]
            majority = Counter(labels).most_common(1)[0][0]
            gold = data[test_name]["label"]
            baseline.update(name=f"majority class ({trainer.model.config.id2label[majority]})",
                            **{f"{test_name}_accuracy": sum(g == majority for g in gold) / max(1, len(gold)),
                               f"{test_name}_macro_f1": macro_f1(gold, [majority] * len(gold))})
        else:
            metrics.update(self._translation_scores(trainer, data, tokenizer, test_name))
            out = trainer.evaluate(data["validation"], metric_key_prefix="validation")
            metrics.update({k: v for k, v in out.items() if not k.endswith(_TIMING_KEYS)})
            import sacrebleu

            sources, refs = data[test_name]["source"], data[test_name]["target"]
            baseline.update(name="copy the source sentence",
                            **{f"{test_name}_bleu": sacrebleu.corpus_bleu(sources, [refs]).score,
                               f"{test_name}_chrf": sacrebleu.corpus_chrf(sources, [refs]).score})
        return metrics, baseline

    def _translation_scores(self, trainer, data, tokenizer, split: str) -> dict[str, Any]:
        """BLEU and chrF (sacrebleu) of beam-search translations of the held-out books."""
        import numpy as np
        import sacrebleu

        ds = data[split]
        trainer.args.predict_with_generate = True
        try:
            out = trainer.predict(ds, metric_key_prefix=split,
                                  num_beams=self.opts.num_beams, max_new_tokens=self.opts.max_target_length)
        finally:
            trainer.args.predict_with_generate = False
        # Distributed prediction pads the last round with repeated examples and, with generation, the
        # gather does not always drop them; the order is preserved, so the first len(ds) rows are ours.
        preds = np.where(out.predictions == -100, tokenizer.pad_token_id, out.predictions)[: len(ds)]
        hyps = [h.strip() for h in tokenizer.batch_decode(preds, skip_special_tokens=True)]
        refs = list(ds["target"])
        self._translations = list(zip(ds["source"], refs, hyps, strict=True))
        bleu, chrf = sacrebleu.BLEU(), sacrebleu.CHRF()
        return {
            f"{split}_bleu": bleu.corpus_score(hyps, [refs]).score,
            f"{split}_chrf": chrf.corpus_score(hyps, [refs]).score,
            f"{split}_bleu_signature": str(bleu.get_signature()),
            f"{split}_chrf_signature": str(chrf.get_signature()),
            f"{split}_sentences": len(hyps),
            f"{split}_loss": out.metrics.get(f"{split}_loss"),
        }

    def _samples(self, trainer, raw, data, tokenizer) -> list[dict[str, Any]]:
        """A few outputs to look at: generations, fill-ins, translations, predicted labels."""
        import torch

        task, o = self.task, self.opts
        model = trainer.accelerator.unwrap_model(trainer.model)
        model.eval()
        test_name = "test" if "test" in raw else "validation"
        n = o.num_samples
        samples: list[dict[str, Any]] = []
        if n <= 0:
            return samples
        generator_seed = o.seed
        with torch.no_grad():
            if task == "clm":
                prompts = list(o.prompts) or (list(SHAKESPEARE_PROMPTS) if not (o.data_files or o.dataset) else
                                              [" ".join(t.split()[:6]) for t in raw[test_name]["text"][:n]])
                for prompt in prompts[: max(n, len(o.prompts))]:
                    enc = tokenizer(prompt, return_tensors="pt").to(model.device)
                    torch.manual_seed(generator_seed)
                    out = model.generate(**enc, max_new_tokens=o.max_new_tokens, do_sample=True, top_k=50,
                                         temperature=0.8, pad_token_id=tokenizer.pad_token_id)
                    greedy = model.generate(**enc, max_new_tokens=o.max_new_tokens, do_sample=False,
                                            pad_token_id=tokenizer.pad_token_id)
                    cut = enc["input_ids"].shape[1]
                    samples.append({"prompt": prompt,
                                    "sampled": tokenizer.decode(out[0, cut:], skip_special_tokens=True),
                                    "greedy": tokenizer.decode(greedy[0, cut:], skip_special_tokens=True)})
            elif task == "mlm":
                rows = data[test_name].select(range(min(n, len(data[test_name]))))
                for row in rows:
                    ids = torch.tensor([row["input_ids"]], device=model.device)
                    labels = torch.tensor(row["labels"])
                    logits = model(input_ids=ids).logits[0]
                    positions = labels.ne(-100).nonzero().flatten()[:5].tolist()
                    samples.append({
                        "masked_text": tokenizer.decode(row["input_ids"], skip_special_tokens=False)[:400],
                        "fills": [{"position": p, "answer": tokenizer.convert_ids_to_tokens(int(labels[p])),
                                   "top5": tokenizer.convert_ids_to_tokens(logits[p].topk(5).indices.tolist())}
                                  for p in positions],
                    })
            elif task == "translation":
                for source, ref, hyp in getattr(self, "_translations", [])[:n]:
                    samples.append({"source": source, "reference": ref, "translation": hyp})
            else:
                rows = data[test_name].select(range(min(n, len(data[test_name]))))
                texts = raw[test_name]["text"][: len(rows)]
                names = model.config.id2label
                for row, text in zip(rows, texts, strict=True):
                    ids = torch.tensor([row["input_ids"]], device=model.device)
                    probs = model(input_ids=ids).logits[0].softmax(-1)
                    samples.append({"text": text[:200], "label": names[row["label"]],
                                    "predicted": names[int(probs.argmax())],
                                    "confidence": float(probs.max())})
        return samples


# Evaluation outputs that describe speed or progress, not quality (kept out of metrics.json's "metrics").
_TIMING_KEYS = ("_runtime", "_per_second", "epoch")


def _median(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


# --------------------------------------------------------------------------------------------------
# Pictures
# --------------------------------------------------------------------------------------------------


def plot_curves(log_history: Sequence[Mapping[str, Any]], path: str | os.PathLike[str], *, task: str = "",
                baseline: Mapping[str, Any] | None = None) -> Path:
    """Training and evaluation loss against optimizer step (matplotlib, Agg backend, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [(e["step"], e["loss"]) for e in log_history if "loss" in e and "step" in e]
    evals = [(e["step"], e["eval_loss"]) for e in log_history if "eval_loss" in e and "step" in e]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    if train:
        ax.plot(*zip(*train, strict=True), label="training loss", color="tab:blue", linewidth=1.2)
    if evals:
        ax.plot(*zip(*evals, strict=True), "o-", label="validation loss", color="tab:orange", linewidth=1.5)
    ppl = (baseline or {}).get("validation_perplexity")
    if ppl:
        ax.axhline(math.log(ppl), color="gray", linestyle="--", linewidth=1,
                   label=f"unigram baseline (ppl {ppl:.0f})")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy (nats per token)" if task in ("clm", "mlm", "translation") else "loss")
    ax.set_title(f"hf_vanilla {task}: loss curves" if task else "loss curves")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out)
    plt.close(fig)
    return out


# --------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------


def _parse_value(text: str) -> Any:
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


def _parse_config(entries: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for entry in entries:
        key, sep, value = entry.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"--config expects KEY=VALUE, got {entry!r}")
        out[key.strip()] = _parse_value(value.strip())
    return out


def add_cli(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``hf-vanilla train`` (one flag per :class:`TrainOptions` field)."""
    parser = subparsers.add_parser(
        "train",
        help="train a model on real text (clm, mlm, translation, classification)",
        description="Train an hf_vanilla model with transformers' Trainer; run it under `accelerate launch` "
        "for DDP / FSDP / DeepSpeed. Writes the model, tokenizer, metrics, curves and a model card.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--task", required=True, choices=TASKS)
    parser.add_argument("--output-dir", required=True, help="the run directory")
    hints = _type_hints()
    for f in dataclasses.fields(TrainOptions):
        flag = "--" + f.name.replace("_", "-")
        help_text = f.metadata.get("help", "")
        kind = hints[f.name]
        if f.name == "resume":
            parser.add_argument(flag, nargs="?", const=True, default=False, help=help_text + " (optional CHECKPOINT)")
        elif f.name == "config":
            parser.add_argument(flag, action="append", default=[], metavar="KEY=VALUE", help=help_text)
        elif kind == "bool":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default, help=help_text)
        elif kind.startswith("list"):
            parser.add_argument(flag, action="append", default=[], help=help_text)
        else:
            cast = int if kind.startswith("int") else float if kind.startswith("float") else str
            default = None if f.default is dataclasses.MISSING else f.default
            parser.add_argument(flag, type=cast, default=default, help=help_text, choices=f.metadata.get("choices"))
    parser.set_defaults(func=_run_cli)
    return parser


def _type_hints() -> dict[str, str]:
    return {f.name: str(f.type).replace(" ", "") for f in dataclasses.fields(TrainOptions)}


def _run_cli(args: argparse.Namespace) -> int:
    from .corpora import CorpusUnavailableError

    options = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainOptions)}
    options["config"] = _parse_config(options["config"])
    try:
        result = train(args.task, args.output_dir, **options)
    except (CorpusUnavailableError, TrainingDivergedError, FileExistsError) as error:
        print(f"hf-vanilla train: {error}", file=sys.stderr)
        return 1
    from accelerate import PartialState

    if PartialState().is_main_process:
        summary = {k: v for k, v in result.metrics.items() if isinstance(v, (int, float))}
        print(json.dumps({"run_dir": str(result.run_dir), "metrics": summary, "baseline": result.baseline,
                          "time_per_step_s": result.time_per_step_s, "wall_time_s": result.wall_time_s}, indent=1))
    return 0
