"""One training run, top to bottom: options -> data -> tokenizer -> model -> Trainer -> train ->
evaluate -> save. Every step is a function of the values before it.

``accelerate launch`` runs this unchanged on several processes (DDP, FSDP, DeepSpeed): every process
calls :func:`train`; only the main process writes the run directory.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import transformers
from accelerate import PartialState
from transformers import AutoTokenizer, Seq2SeqTrainingArguments, TrainingArguments, set_seed
from transformers.integrations.integration_utils import default_logdir
from transformers.trainer import TRAINER_STATE_NAME

from .. import modeling_vanilla
from ..checkpoint import ensure_code_files, shipped_auto_map, weight_files
from ..configuration_vanilla import VanillaConfig
from ..files.atomic import FileOperationError, clear_disk_errors
from ..files.output_folder import OutputFolder
from ..presets import PRESETS, preset_fields
from ..tasks import Task, get_task
from . import rundir
from .averaging import average_if_better
from .callbacks import NonFiniteLossGuard, SealTrackerLogs, StepTimer, StopOnInterrupt, TimeLimit
from .options import SIZE_PRESETS, TrainOptions, check_attention_kernel, check_init_from, make_options
from .outputs import (
    UNTIMED,
    completion,
    how_to_resume,
    read_outputs,
    run_record,
    stop_line,
    timing,
    training_time,
    write_outputs,
    write_run_record,
)
from .preflight import check_before_loading
from .sources import load_task_data
from .trainer import (
    checkpoint_step,
    find_resume_checkpoint,
    load_finished_checkpoint,
    recorded_checkpoints,
    rotate_recorded,
    trainer_classes,
)

if TYPE_CHECKING:
    from transformers import TrainerCallback

logger = logging.getLogger(__name__)


class TrainingDivergedError(RuntimeError):
    """The loss (or its gradients) became NaN/inf; the last good checkpoint is kept."""


class TrainingInterruptedError(KeyboardInterrupt):
    """Ctrl-C stopped the run; its message says how to go on. ``checkpoint`` is the one to resume from, or None
    when nothing was trained yet (the output directory is then as the run found it)."""

    def __init__(self, message: str, checkpoint: str | None) -> None:
        super().__init__(message)
        self.checkpoint = checkpoint


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
    #: planned_steps, completed_steps, stopped_early, stop_reason, how_to_finish (see :func:`.outputs.completion`)
    completion: dict[str, Any]
    #: True when the run was already finished and ``resume=True`` read this from its records (nothing ran)
    recorded: bool = False


def train(task: str, output_dir: str | os.PathLike[str], *, callbacks: Sequence[TrainerCallback] = (),
          resume_command: str | None = None, **options: Any) -> RunResult:
    """Train ``task`` (``clm``, ``mlm``, ``translation``, ``classification``) into ``output_dir``.

    ``options`` are the fields of :class:`TrainOptions` (``preset``, ``max_steps``, ``data_files``,
    ``config={"norm_position": "pre"}``, ``recipe="paper"``, ``resume=True``, ...); ``callbacks`` are
    extra ``TrainerCallback`` objects; ``resume_command`` is the shell command that continues this run (a command
    line gives its own with ``--resume``): a run cut short by its time limit or Ctrl-C names it as the way to finish.

    Raises:
        TrainingDivergedError: the loss became NaN/inf (the last good checkpoint is kept).
        TrainingInterruptedError: Ctrl-C, anywhere in the run. Before training: nothing is left half-written
            (a run --overwrite replaced is put back) and the same call starts again. During training: a
            resumable checkpoint is saved first. After training (final evaluation, samples, saving, card): the
            final checkpoint is kept. run.json then says ``interrupted`` and ``resume=True`` goes on (after
            training it evaluates and writes the outputs without training further).
        RunDirectoryBusyError: another process is writing ``output_dir``.
        FileExistsError: ``output_dir`` holds files hf_vanilla did not write (``--overwrite`` and ``--resume``
            touch only a run's own files: see :mod:`hf_vanilla.files.output_folder`).
        hf_vanilla.corpora.CorpusUnavailableError: the default corpus is neither cached nor fetchable.
    """
    task_ = get_task(task)
    return run(task_, Path(output_dir), make_options(options).resolved(task_), list(callbacks), resume_command)


def run(task: Task, run_dir: Path, opts: TrainOptions, extra_callbacks: list,
        resume_command: str | None = None) -> RunResult:
    """:func:`run_in_folder`; a file operation the system refused (a full disk, a permission) ends the run with
    one sentence: the step and file that failed first, and what the next command will do (:func:`after_failure`)."""
    folder = OutputFolder(run_dir, "run")
    try:
        return run_in_folder(task, folder, opts, extra_callbacks, resume_command)
    except FileOperationError as error:
        raise error.then(after_failure(folder, bool(opts.resume), resume_command)) from error


def after_failure(folder: OutputFolder, resumed: bool, resume_command: str | None) -> str:
    """What the next command does in the run's folder after the run failed: go on from the newest checkpoint once
    this run has one (or continued one), else start again where the folder was put back (or will be)."""
    committed = folder.committed or folder.write_is_complete()  # its first checkpoint in place, commit cut short
    last = newest_checkpoint(folder.path) if resumed or committed else None
    if last is not None:
        return f"{how_to_resume(resume_command)}: it continues from {Path(last).name}"
    return f"run the same command again: {folder.as_left(existed=not folder.created)}"


def run_in_folder(task: Task, folder: OutputFolder, opts: TrainOptions, extra_callbacks: list,
                  resume_command: str | None = None) -> RunResult:
    t_start, run_dir = time.perf_counter(), folder.path
    # The distributed state must exist before anything asks which process is main. Without an
    # accelerator it must be told cpu=True, or `accelerate launch` on a CPU machine gives N
    # unconnected single-process runs instead of one gloo DDP run.
    use_cpu = opts.use_cpu or not has_accelerator()
    check_attention_kernel(opts, use_cpu)
    check_init_from(opts.init_from)
    state = PartialState(cpu=use_cpu)
    is_main = state.is_main_process
    recorded = check_before_loading(task, run_dir, opts) if is_main else recorded_if_resuming(run_dir, opts)
    with folder.locked(enabled=is_main), contextlib.ExitStack() as undo:
        if is_main:
            for line in folder.recover():
                logger.warning("%s: %s", run_dir, line)
        if opts.resume == "latest" and (done := finished_run(task, run_dir, recorded, opts.max_steps)) is not None:
            return done  # nothing is missing: the run as it recorded itself, its files untouched
        resume_from = resume_checkpoint(run_dir, opts)
        with ctrl_c_ends_the_run(run_dir, is_main, BEFORE_TRAINING, resume_command, resumed_from=resume_from):
            with state.main_process_first():  # the main process trains the tokenizer and fills the caches

                raw, description = load_task_data(task, opts)
                tokenizer = obtain_tokenizer(task, raw, run_dir, opts, resume_from, is_main)
                set_seed(opts.seed)  # the same seed gives the same initial weights
                model = build_model(task, tokenizer, raw, opts)
                tokenizer.model_max_length = model.config.max_position_embeddings  # the model's reach, not a block's
                use_cache = model.config.use_cache  # the Trainer turns the cache off for training; the saved model keeps it
                if is_main:  # everything is checked: only now the output directory is touched
                    prepare_output_dir(folder, opts, undo)
                    with clear_disk_errors(run_dir):
                        folder.save(tokenizer)
                data = task.tokenize(raw, tokenizer, opts)
            description.update(examples={split: len(ds) for split, ds in data.items()},
                               example_unit=task.example_unit(opts))
            total_steps = plan_steps(len(data["train"]), opts, state.num_processes)
            args = training_arguments(task, run_dir, opts, total_steps, model.config.hidden_size, use_cpu)
            logs = claim_tracker_logs(folder, opts) if is_main else None
            callbacks = RunCallbacks.make(opts, extra_callbacks, SealTrackerLogs(folder, logs) if logs else None)
            trainer = make_trainer(task, model, args, tokenizer, data, opts, callbacks.all())
            trainer.output_folder = folder  # its checkpoints commit this run's write (after_failure asks it)
            distributed_type = str(trainer.accelerator.distributed_type.value)
            record = dict(description=description, tokenizer=tokenizer, model=model, args=args,
                          world=state.num_processes, distributed_type=distributed_type, resumed_from=resume_from,
                          resume_command=resume_command)
            if is_main:
                warn_if_fsdp_dropped(distributed_type)

                write_run_record(folder, run_record(task, opts, status="running", **record))
        with ctrl_c_ends_the_run(run_dir, is_main, DURING_TRAINING, resume_command):
            train_seconds = fit(trainer, resume_from, total_steps, callbacks.interrupt)
            if is_main:  # a run killed between placing its last checkpoint and rotating has no save left to rotate
                rotate_recorded(folder, trainer.args.save_total_limit, trainer.state.best_model_checkpoint)
            undo.pop_all()  # the new run has checkpointed (or finished): the old one is gone for good
            check_stopped(run_dir, trainer, callbacks, is_main, resume_command)
            trained = time_training(run_dir, is_main, train_seconds, callbacks.timer.durations, t_start, recorded)
        with ctrl_c_ends_the_run(run_dir, is_main, AFTER_TRAINING, resume_command, max_steps=total_steps):
            result = finish(task, folder, opts, trainer, raw, data, tokenizer, callbacks, record, t_start=t_start,
                            trained=trained, is_main=is_main, use_cache=use_cache, resume_command=resume_command)
    state.wait_for_everyone()
    return result


# --------------------------------------------------------------------------------------------------
# The steps of a run


def has_accelerator() -> bool:
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "is_available"):
        return bool(accelerator.is_available())
    return torch.cuda.is_available()


def recorded_if_resuming(run_dir: Path, opts: TrainOptions) -> dict[str, Any] | None:
    """The run's record when ``opts`` resumes one (what :func:`.preflight.check_before_loading` returns)."""
    return rundir.read_record(run_dir) if opts.resume and rundir.is_run_dir(run_dir) else None


def finished_run(task: Task, run_dir: Path, recorded: dict[str, Any] | None, max_steps: int) -> RunResult | None:
    """A run its records say is finished (completed, every planned step, evaluated), as they say it; else None (also
    when ``max_steps`` plans more steps than it ran: --resume then trains on)."""
    outputs = read_outputs(run_dir) if recorded is not None and recorded.get("status") == "completed" else None
    if outputs is None or outputs.get("stopped_early") or outputs.get("task") != task.name or \
            max_steps not in (-1, outputs.get("planned_steps")) or \
            not has_final_outputs(run_dir, outputs.get("completed_steps")):
        return None
    done = {key: outputs.get(key) for key in ("planned_steps", "completed_steps", "stopped_early", "stop_reason",
                                                "how_to_finish")}
    logger.warning("%s is finished (%s, evaluated, its outputs written): nothing to do, reporting it as recorded",
                   run_dir, stop_line(done))
    try:
        history = json.loads((run_dir / TRAINER_STATE_NAME).read_text(encoding="utf-8"))["log_history"]
    except (OSError, ValueError, KeyError):
        history = []
    timings = outputs.get("timing") or {}
    return RunResult(run_dir=run_dir, task=task.name, metrics=outputs["metrics"], baseline=outputs["baseline"],
                     samples=outputs.get("samples") or [], log_history=history, global_step=done["completed_steps"],
                     wall_time_s=timings.get("wall_time_s"), time_per_step_s=timings.get("time_per_step_s_median"),
                     completion=done, recorded=True)


def has_final_outputs(run_dir: Path, steps: int | None) -> bool:
    """Whether the run's final model (config and readable weights), card, curves and trainer state are all there,
    and its newest checkpoint is the one at its last step (what --resume would go on from)."""
    try:
        weights = weight_files(run_dir)
    except (OSError, ValueError):  # a torn or missing shard: --resume saves the model again
        return False
    newest = newest_checkpoint(run_dir)
    return bool(weights) and all((run_dir / name).is_file() for name in FINAL_FILES) and newest is not None \
        and checkpoint_step(Path(newest)) == steps


#: What a run writes after training besides its weights (and metrics.json): a run missing one is not finished.
FINAL_FILES = ("config.json", "README.md", "curves.png", TRAINER_STATE_NAME)


def resume_checkpoint(run_dir: Path, opts: TrainOptions) -> Path | None:
    """The checkpoint to continue from (the newest readable one), or None for a fresh start."""
    if not opts.resume or (opts.resume == "latest" and not run_dir.is_dir()):
        return None
    return find_resume_checkpoint(run_dir, opts.resume)


def obtain_tokenizer(task: Task, raw, run_dir: Path, opts: TrainOptions, resume_from: Path | None, is_main: bool):
    """The tokenizer of ``init_from`` or of the checkpoint resumed from; else trained on the training split
    (by the main process; the others read the one it saved, so every process tokenises alike)."""
    source = opts.init_from or resume_from or (None if is_main else run_dir)
    if source is not None:
        return AutoTokenizer.from_pretrained(source)
    return task.build_tokenizer(raw["train"], opts)


def build_model(task: Task, tokenizer, raw, opts: TrainOptions):
    """A fresh model of the task's head (size preset + vocabulary + overrides), or ``init_from``'s weights."""

    if opts.init_from:
        auto = getattr(transformers, task.auto_class)  # importing hf_vanilla registered our classes
        config = transformers.AutoConfig.from_pretrained(opts.init_from, **opts.config,
                                                         **task.config_fields(tokenizer, raw))
        config.auto_map = shipped_auto_map(config.architecture, getattr(config, "auto_map", None))  # our code only
        model = auto.from_pretrained(opts.init_from, config=config, attn_implementation=opts.attn_implementation)
    else:
        model_class = getattr(modeling_vanilla, task.model_class)
        config = build_config(task, tokenizer, raw, opts)
        model = model_class(config) if opts.attn_implementation is None else \
            model_class._from_config(config, attn_implementation=opts.attn_implementation)
    task.set_generation_defaults(model, tokenizer, opts)
    return model


def build_config(task: Task, tokenizer, raw, opts: TrainOptions):
    """Size preset, the task's family, vocabulary and special tokens from the tokenizer, then overrides."""
    if opts.preset not in SIZE_PRESETS and opts.preset not in PRESETS:
        raise ValueError(f"unknown preset {opts.preset!r}; choose one of {sorted({*SIZE_PRESETS, *PRESETS})}")
    if opts.preset in SIZE_PRESETS:  # sizes only: the task's model defaults; a named preset keeps its layout
        preset: dict[str, Any] = dict(SIZE_PRESETS[opts.preset], **task.model_defaults)
    else:
        preset = dict(PRESETS[opts.preset])
    fields: dict[str, Any] = dict(
        architecture=task.family,
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.cls_token_id,
        eos_token_id=tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id,
        max_position_embeddings=max(task.max_positions(opts), preset.get("max_position_embeddings", 0), 512),
        **task.config_fields(tokenizer, raw),
    )
    if opts.dropout is not None:
        fields["hidden_dropout"] = opts.dropout
    fields.update(opts.config)
    if opts.preset in SIZE_PRESETS:
        return VanillaConfig(**{**preset, **fields})
    return VanillaConfig(**preset_fields(opts.preset, fields))


def prepare_output_dir(folder: OutputFolder, opts: TrainOptions, undo: contextlib.ExitStack) -> None:
    """Claim the run folder. A new run that fails (or is interrupted) before its first checkpoint leaves the
    folder as it found it (``undo``): absent, empty, or holding the old run, whose own files --overwrite moved
    aside. Files hf_vanilla did not write stay where they are."""
    if opts.resume:  # the run's own folder: its checkpoints stay whatever happens
        folder.begin(overwrite=False)
        return
    undo.callback(folder.undo_after_failure)
    if folder.begin(overwrite=opts.overwrite):
        logger.warning("--overwrite: the old run is kept in %s until the new run saves its first checkpoint",
                       folder.replaced)
    kept = folder.foreign_files()
    if kept:
        logger.warning("%s: keeping %d file(s) hf_vanilla did not write: %s", folder.path, len(kept),
                       ", ".join(path.name for path in kept))


def plan_steps(n_train: int, opts: TrainOptions, world_size: int) -> int:
    if opts.max_steps > 0:
        return opts.max_steps
    per_step = opts.batch_size * opts.gradient_accumulation_steps * world_size
    return max(1, math.ceil(opts.num_train_epochs * math.ceil(n_train / per_step)))


def learning_rate(opts: TrainOptions, hidden_size: int) -> float:
    """The option, or the paper's peak d_model^-0.5 * 4000^-0.5 (7e-4 for d_model=512). With the paper's
    4000 warmup steps this is exactly its schedule; shorter runs warm up faster to the same peak rather
    than to a higher one (the formula with a 100-step warmup would peak at 0.006 and diverge)."""
    return opts.learning_rate if opts.learning_rate is not None else hidden_size**-0.5 * 4000**-0.5


def warmup_steps(opts: TrainOptions, total_steps: int) -> int:
    if opts.warmup_steps is not None:
        return opts.warmup_steps
    return min(4000, max(1, total_steps // 10)) if opts.recipe == "paper" else round(0.05 * total_steps)


def training_arguments(task: Task, run_dir: Path, opts: TrainOptions, total_steps: int, hidden_size: int,
                       use_cpu: bool):
    eval_steps = opts.eval_steps or max(1, total_steps // 8)
    return (Seq2SeqTrainingArguments if task.seq2seq else TrainingArguments)(
        output_dir=str(run_dir),
        max_steps=total_steps,
        per_device_train_batch_size=opts.batch_size,
        per_device_eval_batch_size=opts.eval_batch_size,
        gradient_accumulation_steps=opts.gradient_accumulation_steps,
        learning_rate=learning_rate(opts, hidden_size),
        lr_scheduler_type=opts.lr_scheduler,
        warmup_steps=warmup_steps(opts, total_steps),
        weight_decay=opts.weight_decay,
        adam_beta1=opts.adam_beta1,
        adam_beta2=opts.adam_beta2,
        adam_epsilon=opts.adam_epsilon,
        optim="adamw_torch",
        use_cpu=use_cpu,
        label_smoothing_factor=opts.label_smoothing,
        max_grad_norm=opts.max_grad_norm,
        seed=opts.seed,
        bf16=opts.bf16,
        eval_strategy="steps",
        eval_steps=eval_steps,
        save_strategy="steps",
        save_steps=opts.save_steps or eval_steps,
        save_total_limit=opts.save_total_limit,
        logging_strategy="steps",
        logging_steps=opts.logging_steps or max(1, total_steps // 100),
        logging_first_step=True,
        logging_nan_inf_filter=False,  # hiding NaN/inf (the default) would hide a diverging run
        report_to=opts.report_to,
        disable_tqdm=opts.disable_tqdm,
        dataloader_num_workers=opts.dataloader_num_workers,
        train_sampling_strategy="group_by_length" if opts.group_by_length else "random",
        remove_unused_columns=True,  # drops the raw text columns (kept in `data` for BLEU and samples)
        average_tokens_across_devices=True,  # exact loss over devices: divide by the global target count
        **task.evaluation_arguments(opts),
    )


@dataclass
class RunCallbacks:
    """The run's own callbacks (their outcomes are read after training) and the caller's."""

    guard: Any
    timer: Any
    interrupt: Any
    time_limit: Any | None
    extra: list
    seal_logs: Any | None = None

    @classmethod
    def make(cls, opts: TrainOptions, extra: list, seal_logs: Any | None = None) -> RunCallbacks:
        return cls(NonFiniteLossGuard(), StepTimer(), StopOnInterrupt(),
                   TimeLimit(opts.time_limit_minutes) if opts.time_limit_minutes else None, list(extra), seal_logs)

    def all(self) -> list:
        return [c for c in (self.guard, self.timer, self.interrupt, self.time_limit, *self.extra, self.seal_logs)
                if c is not None]


def claim_tracker_logs(folder: OutputFolder, opts: TrainOptions) -> str | None:
    """TensorBoard writes its event files under ``<output_dir>/runs/`` (transformers' default_logdir): the
    run's own, named before the Trainer creates it (refused if the user changed it since the run sealed it). Its
    name, to seal as TensorBoard writes (:class:`.callbacks.SealTrackerLogs`), or None without TensorBoard."""
    trackers = {name.strip() for name in str(opts.report_to).split(",")}
    if not trackers & {"tensorboard", "all"}:
        return None
    name = Path(default_logdir()).parts[0]
    folder.claim([name])
    return name


def make_trainer(task: Task, model, args, tokenizer, data, opts: TrainOptions, callbacks: list):
    plain, seq2seq = trainer_classes()
    preprocess, compute_metrics = task.metric_functions(tokenizer)
    return (seq2seq if task.seq2seq else plain)(
        model=model, args=args, data_collator=task.collator(tokenizer, model, opts),
        train_dataset=data["train"], eval_dataset=data["validation"], processing_class=tokenizer,
        compute_metrics=compute_metrics, preprocess_logits_for_metrics=preprocess, callbacks=callbacks)


def warn_if_fsdp_dropped(distributed_type: str) -> None:
    # accelerate 1.16 turns FSDP on only for multi-accelerator states (MULTI_GPU, XPU, NPU, ...); on CPU
    # (MULTI_CPU, gloo) it drops the request. Say so rather than pretend to shard.
    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true" and distributed_type != "FSDP":
        logger.warning("FSDP was requested but accelerate runs this job as %s (FSDP needs GPUs or other "
                       "accelerators); the model is replicated, not sharded.", distributed_type)


def fit(trainer, resume_from: Path | None, total_steps: int, interrupt) -> float | None:
    """Train (or continue) and return the seconds it took; a checkpoint already at the last step is loaded, not
    trained further (None: nothing trained). However training ends, Ctrl-C gets its handler back from ``interrupt``
    (StopOnInterrupt)."""
    if resume_from is not None and checkpoint_step(resume_from) >= total_steps:
        logger.warning("%s is at step %d of %d: nothing left to train; evaluating and saving it",
                       resume_from, checkpoint_step(resume_from), total_steps)
        load_finished_checkpoint(trainer, resume_from)
        return None
    start = time.perf_counter()
    try:
        trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    finally:
        interrupt.release()  # an exception out of the loop skips on_train_end
    return time.perf_counter() - start


def time_training(run_dir: Path, is_main: bool, train_seconds: float | None, durations: list[float], t_start: float,
                  recorded: dict[str, Any] | None) -> dict[str, Any]:
    """How long training took: measured now (and recorded in run.json, for a run resumed only to finish it), or,
    when nothing was trained now, what the run recorded when its training ended (unknown for older runs)."""
    if train_seconds is None:
        return dict(UNTIMED, **((recorded or {}).get("training_time") or {}))
    trained = training_time(train_time_s=train_seconds, durations=durations, wall_time_s=time.perf_counter() - t_start)
    if is_main:
        rundir.update_status(run_dir, "running", training_time=trained)
    return trained


def check_stopped(run_dir: Path, trainer, callbacks: RunCallbacks, is_main: bool, resume_command: str | None) -> None:
    """Raise (after recording it in run.json) if the NaN guard or Ctrl-C ended training."""
    last = newest_checkpoint(run_dir)
    if callbacks.guard.tripped_at is not None:
        step = callbacks.guard.tripped_at
        if is_main:
            rundir.update_status(run_dir, "diverged", diverged_at_step=step, last_good_checkpoint=last)
        raise TrainingDivergedError(
            f"training diverged: the loss (or its gradients) became NaN/inf at optimizer step {step}; that update "
            f"was skipped and training stopped. The last good checkpoint is {last or '(none was saved yet)'}. Start "
            "again (--overwrite) with a lower learning rate, a longer warmup, harder gradient clipping or "
            "norm_position='pre' (--resume goes on only with the run's own options; --init-from a checkpoint keeps "
            "what it learned).")
    if callbacks.interrupt.interrupted_at is not None:
        step = callbacks.interrupt.interrupted_at
        if is_main:
            rundir.update_status(run_dir, "interrupted", interrupted_at_step=step, last_checkpoint=last)
        raise TrainingInterruptedError(
            f"interrupted at step {step} of {trainer.state.max_steps}; checkpoint saved in {last}. To continue, "
            f"{how_to_resume(resume_command)}.", last)


def newest_checkpoint(run_dir: Path) -> str | None:
    """The run's newest recorded checkpoint (the one --resume goes on from), or None."""
    checkpoints = recorded_checkpoints(run_dir) if run_dir.is_dir() else []
    return str(checkpoints[-1]) if checkpoints else None


#: Where a bare Ctrl-C (one StopOnInterrupt did not turn into a stop at a step's end) can land, as messages say it.
BEFORE_TRAINING = "before training started"
DURING_TRAINING = "during training"
AFTER_TRAINING = "after training finished, while evaluating and writing the outputs"


@contextlib.contextmanager
def ctrl_c_ends_the_run(run_dir: Path, is_main: bool, stage: str, resume_command: str | None, *,
                        resumed_from: Path | None = None, max_steps: int | None = None) -> Iterator[None]:
    """Ctrl-C at ``stage`` ends the run as it does inside the training loop: with a checkpoint to go on from,
    run.json says interrupted; either way TrainingInterruptedError says in one line how to go on."""
    try:
        yield
    except TrainingInterruptedError:
        raise
    except KeyboardInterrupt:
        if stage == BEFORE_TRAINING:  # the directory may still hold the run --overwrite replaces: not ours
            last = str(resumed_from) if resumed_from is not None else None
        else:
            last = newest_checkpoint(run_dir)
        raise interrupted(run_dir, is_main, stage, last, max_steps, resume_command) from None


def interrupted(run_dir: Path, is_main: bool, stage: str, last: str | None, max_steps: int | None,
                resume_command: str | None) -> TrainingInterruptedError:
    """The error for Ctrl-C at ``stage`` (recorded in run.json when there is a checkpoint to go on from)."""
    if last is None:  # the run's undo puts the output directory back as the run found it
        return TrainingInterruptedError(f"interrupted {stage}: nothing was trained (no checkpoint was saved). To "
                                        "start again, run the same command.", None)
    step = checkpoint_step(Path(last))
    if is_main and rundir.is_run_dir(run_dir) and OutputFolder(run_dir, "run").is_ours():
        rundir.update_status(run_dir, "interrupted", interrupted_at_step=step, last_checkpoint=last)
    resume = how_to_resume(resume_command)
    if stage != AFTER_TRAINING:
        how = f"To continue, {resume}."
    elif max_steps is None or step >= max_steps:
        how = f"To finish (evaluate and write the outputs) without training further, {resume}."
    else:  # a time limit stopped training early; --resume trains on to max_steps, then finishes
        how = f"To train on to step {max_steps} and finish, {resume}."
    where = "the trained model" if stage == AFTER_TRAINING else "the newest checkpoint"
    return TrainingInterruptedError(f"interrupted {stage}; {where} is in {last} (step {step}). {how}", last)


def finish(task: Task, folder: OutputFolder, opts: TrainOptions, trainer, raw, data, tokenizer,
           callbacks: RunCallbacks, record: dict, *, t_start: float, trained: dict[str, Any], is_main: bool,
           use_cache: bool, resume_command: str | None) -> RunResult:
    """Evaluate, sample, save the model and write the run's records, curves and card."""
    finish_start, run_dir = time.perf_counter(), folder.path
    averaging = average_checkpoints(task, run_dir, opts, trainer, data)
    evaluation = task.evaluate(trainer, data, tokenizer, opts)
    if averaging is not None:
        evaluation.metrics["checkpoint_averaging"] = averaging
    model = trainer.accelerator.unwrap_model(trainer.model).eval()
    samples = []
    if is_main and opts.num_samples > 0:
        with torch.no_grad():
            samples = task.samples(model, tokenizer, raw, data, evaluation, opts)
    model.config.use_cache = use_cache
    save_final_model(trainer, folder, is_main)
    save_trainer_state(trainer, folder, is_main)
    stopped_at = callbacks.time_limit.stopped_at if callbacks.time_limit else None
    done = completion(planned_steps=trainer.args.max_steps, completed_steps=trainer.state.global_step,
                      time_limit_minutes=opts.time_limit_minutes, stopped_by_time_limit_at=stopped_at,
                      resume_command=resume_command)
    if done["stopped_early"] and is_main:
        logger.warning("%s; the run's figures are those of a shorter run than planned", stop_line(done))
    result = RunResult(run_dir=run_dir, task=task.name, metrics=evaluation.metrics, baseline=evaluation.baseline,
                       samples=samples, log_history=list(trainer.state.log_history),
                       global_step=trainer.state.global_step,
                       wall_time_s=time.perf_counter() - (t_start if trained["wall_time_s"] is None else finish_start)
                       + (trained["wall_time_s"] or 0.0),  # the run's: up to the end of its training, then this
                       time_per_step_s=trained["time_per_step_s_median"], completion=done)
    if is_main:
        timings = timing(task, opts, trained=trained, wall_time_s=result.wall_time_s, steps=result.global_step,
                         world=record["world"], stopped_by_time_limit_at=stopped_at)
        write_outputs(folder, task, metrics=result.metrics, baseline=result.baseline, samples=samples,
                      timings=timings, done=done, record=run_record(task, opts, status="completed", **record),
                      log_history=result.log_history)
    return result


def average_checkpoints(task: Task, run_dir: Path, opts: TrainOptions, trainer, data) -> dict | None:
    """``--average-checkpoints N``: the mean of the N newest checkpoints replaces the final weights if it scores
    better on validation (the report says which was kept), else None when not asked for."""
    if opts.average_checkpoints < 2:
        return None

    metric, higher_is_better = task.selection_metric
    return average_if_better(trainer, run_dir, opts.average_checkpoints, data["validation"], metric, higher_is_better)


def save_final_model(trainer, folder: OutputFolder, is_main: bool) -> None:
    """Save the trained model into a fresh folder, then move its files into the run folder (each atomically).
    Saving straight into the run folder would mix the save with the checkpoints and the user's files."""
    fresh = folder.fresh("final-model", create=is_main)
    trainer.accelerator.wait_for_everyone()
    with clear_disk_errors(fresh):
        trainer.save_model(str(fresh))  # every process: FSDP / DeepSpeed gather the weights collectively
    if is_main:
        ensure_code_files(fresh)
        folder.publish(fresh)
    trainer.accelerator.wait_for_everyone()


def save_trainer_state(trainer, folder: OutputFolder, is_main: bool) -> None:
    """The Trainer's trainer_state.json at the top of the run, written by the main process as every file of the run
    is (named first, new bytes renamed over the old name): ``Trainer.save_state`` would write it in place."""
    if is_main:
        with folder.writing(TRAINER_STATE_NAME) as path:
            trainer.state.save_to_json(str(path))
