"""Trainer callbacks of a run: the NaN guard, the step timer, the time limit, Ctrl-C and the tracker logs' seal."""

from __future__ import annotations

import logging
import math
import signal
import threading
import time

import torch
from transformers import TrainerCallback

from ..files.output_folder import OutputFolder

logger = logging.getLogger(__name__)


def _any_process(flag, device) -> bool:
    """True if ``flag`` (a bool or a boolean tensor) is true on any process, with one host sync."""
    value = torch.as_tensor(flag, dtype=torch.float32, device=device).reshape(1)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.MAX)
    return bool(value.item())


class NonFiniteLossGuard(TrainerCallback):
    """Stop at the first optimizer step whose gradients are NaN/inf, before it can do harm.

    A NaN/inf loss gives NaN gradients, so checking the (already clipped) gradients just before the
    optimizer step catches it. That update is skipped (the gradients are dropped, and the optimizer
    skips parameters without one), training stops, and no evaluation or checkpoint runs afterwards,
    so the newest checkpoint on disk is the last good one; the run then raises
    ``TrainingDivergedError``. In distributed runs the verdict is all-reduced. A NaN/inf training loss that
    left the gradients finite trips it at the next log (the first step is always logged).
    """

    def __init__(self) -> None:
        self.tripped_at: int | None = None

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        grads = [p.grad for p in model.parameters() if p.grad is not None] if model is not None else []
        # FSDP2 gradients are DTensors: check this process's shard; the all-reduce covers the rest.
        local = [g.to_local() if hasattr(g, "to_local") else g for g in grads]
        device = local[0].device if local else torch.device("cpu")
        # One flag and one host sync per step (not one per parameter, which would stall GPUs).
        bad = torch.stack([torch.isfinite(g).all().to(device) for g in local]).all().logical_not() if local else False
        if _any_process(bad, device):
            self.tripped_at = state.global_step + 1
            for p in model.parameters():
                p.grad = None
            control.should_training_stop = True
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        # A NaN loss can come with finite (zero) gradients, e.g. a batch with no target at all: the logged
        # training loss (already averaged over processes) catches what the gradients do not.
        loss = (logs or {}).get("loss")
        if self.tripped_at is None and loss is not None and not math.isfinite(loss):
            self.tripped_at = state.global_step
        return self._hold(control)

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
    """Stop training once ``minutes`` have passed (and say so); the run then evaluates and saves as usual."""

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
            if state.is_world_process_zero:
                logger.warning("time limit of %g minutes reached: training stops at step %d of %d",
                               self.seconds / 60, state.global_step, state.max_steps)
        return control


class StopOnInterrupt(TrainerCallback):
    """Ctrl-C (SIGINT) finishes the current step, saves a resumable checkpoint and stops training.

    A second Ctrl-C interrupts at once (Python's default). The verdict is all-reduced, so in a
    distributed run every process stops and saves at the same step.
    """

    def __init__(self) -> None:
        self.interrupted_at: int | None = None
        self._requested = False
        self._previous = None

    def _request(self, signum, frame) -> None:
        self._requested = True
        signal.signal(signal.SIGINT, self._previous or signal.default_int_handler)

    def on_train_begin(self, args, state, control, **kwargs):
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._request)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        device = next(model.parameters()).device if model is not None else "cpu"
        if _any_process(self._requested, device):
            self.interrupted_at = state.global_step
            control.should_training_stop = True
            control.should_save = True
            control.should_evaluate = False
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self.release()

    def release(self) -> None:
        """Give Ctrl-C back to the handler it had before training (also when training raised)."""
        if self._previous is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None



class SealTrackerLogs(TrainerCallback):
    """Seal the run's TensorBoard folder (``runs/``) each time TensorBoard has written to it: after its flush at each
    log, at each checkpoint and after it closes at the end (callbacks run in order; the reporting ones first). A file
    the user adds there afterwards then differs from the seal, and no later command of the run deletes it."""

    def __init__(self, folder: OutputFolder, name: str) -> None:
        self.folder, self.name = folder, name

    def seal(self) -> None:
        if (self.folder.path / self.name).is_dir():
            self.folder.seal([self.name])

    def on_log(self, args, state, control, **kwargs):
        self.seal()

    def on_save(self, args, state, control, **kwargs):
        self.seal()

    def on_train_end(self, args, state, control, **kwargs):
        self.seal()
