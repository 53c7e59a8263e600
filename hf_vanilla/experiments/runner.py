"""Many ordinary training runs in parallel workers, resumable: the runner under ``hf-vanilla compare`` and the
scaling sweep (which passes its own way to train and read back one run).

Each run (:class:`RunSpec`) is the ordinary train run (:func:`hf_vanilla.training.train`) into its own run folder,
with its journal, checkpoints and sealed record; beside the folder the runner writes ``NAME.json``, the run's
outcome (:mod:`.measures`), once the run finished or diverged, and ``NAME.log``, its output. Running the same
experiment again skips every run with an outcome, continues every other run folder from its newest checkpoint
(``resume``), and starts the rest: a killed or time-limited experiment goes on where it stopped.

Workers are processes (spawned, one torch thread pool of ``threads`` each) that train one run at a time; a worker
dies with the experiment (Linux: the parent-death signal), so a killed experiment leaves no orphan holding a run
folder's lock. One progress bar counts the optimizer steps of the whole experiment.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import multiprocessing
import os
import queue
import signal
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ..errors import sentence
from ..files.atomic import atomic_write_json
from . import measures

#: Outcomes that end a run for good (written beside its folder); any other is tried again by the next command.
FINAL = ("completed", "diverged")


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One training run of an experiment: ``options`` are :class:`hf_vanilla.training.options.TrainOptions` fields."""

    name: str
    run_dir: Path
    task: str
    options: dict[str, Any]
    measures: tuple[str, ...] = ()
    resume_command: str | None = None

    @property
    def outcome_path(self) -> Path:
        return self.run_dir.with_name(self.run_dir.name + ".json")

    @property
    def log_path(self) -> Path:
        return self.run_dir.with_name(self.run_dir.name + ".log")

    @property
    def steps(self) -> int:
        return int(self.options["max_steps"])


def recorded_outcome(spec: RunSpec) -> dict[str, Any] | None:
    """The run's final outcome when an earlier command wrote one for these very options, else None."""
    try:
        found = json.loads(spec.outcome_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict) or found.get("status") not in FINAL or found.get("options") != _as_json(spec.options):
        return None
    return found


def _as_json(value: Any) -> Any:
    return json.loads(json.dumps(value))


# --------------------------------------------------------------------------------------------------
# In a worker

_progress: Any = None  # the queue a worker reports (run name, optimizer step) to


def start_worker(threads: int, progress: Any) -> None:
    """A worker's set-up: its thread count, its progress queue, and death with its parent."""
    global _progress
    _progress = progress
    os.environ["OMP_NUM_THREADS"] = str(threads)
    # torch after OMP_NUM_THREADS is set: its thread pool reads the variable when it loads
    import torch

    torch.set_num_threads(threads)
    _die_with_parent()


def _die_with_parent() -> None:
    """Linux: the kernel sends this worker SIGTERM when the experiment's process dies (killed or not)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@contextlib.contextmanager
def output_to(path: Path) -> Iterator[None]:
    """The process's stdout and stderr (file descriptors: the libraries' handlers too) appended to ``path``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(path, "a", encoding="utf-8") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def report_step(name: str, step: int) -> None:
    """Tell the experiment's progress bar that run ``name`` reached optimizer step ``step`` (from a worker; in the
    experiment's own process there is no queue and nothing to tell)."""
    if _progress is not None:
        _progress.put((name, step))


def step_reporter(name: str) -> Any:
    """A TrainerCallback that reports each optimizer step of run ``name`` to the experiment's progress bar, and
    keeps the logged losses (a diverged run's curve)."""
    # transformers loads torch: in the worker that trains (the parent schedules runs without it)
    from transformers import TrainerCallback

    class StepReporter(TrainerCallback):
        def __init__(self) -> None:
            self.losses: list[tuple[int, float]] = []

        def on_step_end(self, args, state, control, **kwargs) -> None:
            report_step(name, state.global_step)

        def on_log(self, args, state, control, logs=None, **kwargs) -> None:
            if logs and "loss" in logs:
                self.losses.append((state.global_step, logs["loss"]))

    return StepReporter()


def execute(spec: RunSpec, deadline: float | None = None) -> dict[str, Any]:
    """Train (or continue, or read back) one run and return its outcome; a final one is written beside its folder.
    ``deadline`` (a ``time.time()``) limits the training of this sitting: a run it stops is continued next time."""
    if (found := recorded_outcome(spec)) is not None:
        return found
    left = None if deadline is None else (deadline - time.time()) / 60
    if left is not None and left < 0.25:
        return dict(status="not started", detail="the experiment's time limit was reached first")
    spec.run_dir.parent.mkdir(parents=True, exist_ok=True)
    with output_to(spec.log_path):
        found = _train_and_measure(spec, left)
    found = dict(found, options=_as_json(spec.options), run_dir=str(spec.run_dir), name=spec.name)
    if found["status"] in FINAL:
        atomic_write_json(spec.outcome_path, found)
    return found


def _train_and_measure(spec: RunSpec, minutes_left: float | None) -> dict[str, Any]:
    # the training stack loads in the worker that trains (the parent schedules runs without it)
    from ..training import TrainingDivergedError, train

    reporter = step_reporter(spec.name)
    options = dict(spec.options, resume=True if spec.run_dir.exists() else None, time_limit_minutes=minutes_left)
    start = time.perf_counter()
    try:
        result = train(spec.task, spec.run_dir, callbacks=[reporter], resume_command=spec.resume_command, **options)
        if result.completion.get("stopped_early"):
            return dict(status="stopped", detail=f"stopped at step {result.global_step} of {spec.steps} by the time "
                                                 "limit; the same command continues it")
        found = measures.collect(spec.task, spec.run_dir, spec.options, result, spec.measures)
    except TrainingDivergedError as error:
        return dict(status="diverged", detail=str(error).split(";")[0], curve=reporter.losses)
    except KeyboardInterrupt:
        return dict(status="interrupted", detail="interrupted; the same command continues it")
    except Exception as error:  # noqa: BLE001 -- one run's failure is reported; the experiment goes on
        print(f"{spec.name}: {type(error).__name__}: {error}", file=sys.stderr)
        return dict(status="failed", detail=sentence(error))
    return dict(found, wall_time_s=round(time.perf_counter() - start, 2))


# --------------------------------------------------------------------------------------------------
# In the experiment's process


def run_all(specs: list[RunSpec], workers: int, threads: int, *, deadline: float | None = None,
            show_progress: bool = True, on_outcome: Callable[[RunSpec, dict[str, Any]], None] | None = None,
            execute_run: Callable[[Any, float | None], dict[str, Any]] = execute,
            recorded: Callable[[Any], dict[str, Any] | None] = recorded_outcome) -> dict[str, dict[str, Any]]:
    """Every run's outcome by name: read back where recorded, else trained by ``workers`` processes of ``threads``
    torch threads each (0: in this process, one after another), in the order given, a progress bar over all the
    experiment's optimizer steps. ``on_outcome`` hears each run that ends now. ``execute_run`` (picklable: it goes
    to the workers) trains one run and ``recorded`` reads one back: by default the ordinary train run
    (:class:`RunSpec`); any spec with a ``name`` and ``steps`` and an outcome with a ``status`` will do."""
    outcomes = {spec.name: found for spec in specs if (found := recorded(spec)) is not None}
    todo = [spec for spec in specs if spec.name not in outcomes]
    reached = {spec.name: spec.steps for spec in specs if spec.name in outcomes}
    bar = tqdm(total=sum(spec.steps for spec in specs), initial=sum(reached.values()), unit="step",
               desc="experiment", disable=not show_progress or not todo, dynamic_ncols=True, file=sys.stderr)
    if not todo:
        return outcomes
    if workers == 0:  # in this process, one run after another (a debugger, the tests)
        with bar:
            for spec in todo:
                outcomes[spec.name] = execute_run(spec, deadline)
                bar.update(spec.steps if outcomes[spec.name]["status"] in FINAL else 0)
                if on_outcome is not None:
                    on_outcome(spec, outcomes[spec.name])
        return outcomes
    context = multiprocessing.get_context("spawn")
    progress = context.Queue()
    with bar, ProcessPoolExecutor(max_workers=max(1, min(workers, len(todo))), mp_context=context,
                                  initializer=start_worker, initargs=(threads, progress)) as pool:
        futures: dict[Future, RunSpec] = {pool.submit(execute_run, spec, deadline): spec for spec in todo}
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                _drain(progress, reached, bar)
                for future in done:
                    spec = futures[future]
                    outcomes[spec.name] = _result(future)
                    if outcomes[spec.name]["status"] in FINAL:
                        bar.update(spec.steps - reached.get(spec.name, 0))
                        reached[spec.name] = spec.steps
                    if on_outcome is not None:
                        on_outcome(spec, outcomes[spec.name])
        except KeyboardInterrupt:  # the workers had Ctrl-C too: each saves a checkpoint and reports interrupted
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return outcomes


def _drain(progress: Any, reached: dict[str, int], bar: Any) -> None:
    while True:
        try:
            name, step = progress.get_nowait()
        except queue.Empty:
            return
        if step > reached.get(name, 0):
            bar.update(step - reached.get(name, 0))
            reached[name] = step


def _result(future: Future) -> dict[str, Any]:
    try:
        return future.result()
    except Exception as error:  # noqa: BLE001 -- a worker that died (killed, out of memory) fails its run only
        return dict(status="failed", detail=f"its worker process ended: {type(error).__name__}: {error}")


def default_workers(cores: int | None = None, threads: int = 1) -> int:
    """One worker per ``threads`` cores this process may use, at least one."""
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, threads))
