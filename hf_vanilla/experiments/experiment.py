"""One comparison from its plan to its report: the experiment folder claimed, the plan kept, an estimate, the runs
(:mod:`.runner`), the report written through the folder's record (:mod:`.report`).

The experiment folder is an hf_vanilla output folder of kind ``experiments``: its files (``plan.json`` and the
report) are entered in its record before anything trains and sealed once written. A file of one of those names
that hf_vanilla did not write, or one it wrote and the user changed since (its size or sha256 differs from its
seal), is refused before anything trains, never replaced: the user keeps it by moving it out of the folder.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ..files.output_folder import ChangedFileError, OutputFolder
from ..tasks import get_task
from ..training.options import TrainOptions
from . import report
from .compare import CompareError, Plan, Setting, unscored_lengths, variant_config
from .report import Files
from .runner import FINAL, RunSpec, default_workers, recorded_outcome, run_all


def files(plan: Plan) -> Files:
    return Files.of(plan.name)


def specs(plan: Plan) -> list[RunSpec]:
    """Every (variant, seed) run, seed after seed, each seed's variants base first: an experiment cut short by its
    time limit has whole pairs of runs to compare."""
    return [RunSpec(name=f"{setting.folder}/seed-{seed}", run_dir=plan.run_dir(setting, seed), task=plan.task,
                    options=plan.run_options(setting, seed), measures=plan.measures, resume_command=plan.command)
            for seed in range(plan.seeds) for setting in plan.settings]


def refuse_changed(folder: OutputFolder, names: list[str]) -> None:
    """Refuse (one sentence, before anything is replaced) when one of ``names`` is a file hf_vanilla wrote there
    and the user changed since: its bytes no longer match its seal."""
    if changed := folder.changed(names):
        raise ChangedFileError(
            f"{', '.join(str(folder.path / name) for name in changed)} changed since hf_vanilla wrote "
            f"{'it' if len(changed) == 1 else 'them'} (size or sha256 differs from the folder's record), so it may "
            "hold your edits and compare will not replace it: move it out of the folder to keep it (or choose "
            "another --output-dir), then run the same command again; nothing was changed")


def keep_plan(folder: OutputFolder, plan: Plan) -> None:
    """Write the plan, or check that this command continues the plan the folder holds (more seeds allowed)."""
    name = files(plan).plan
    path = folder.path / name
    if path.is_file() and name in {p.name for p in folder.own_files()}:
        held = json.loads(path.read_text(encoding="utf-8"))
        mine = plan.as_record()
        differs = [key for key in mine if held.get(key) != mine[key]]
        if differs:
            raise CompareError(f"{folder.path} holds another experiment named {plan.name} ({differs[0]} differs from "
                               f"its {name}): run its own command ({held.get('command', 'see ' + name)}) to go on "
                               "with it, or choose another --output-dir or --name")
    folder.write_json(name, dict(plan.as_record(), command=plan.command, seeds=plan.seeds))


def check_run_folders(run_dirs: Iterable[Path]) -> None:
    """Each run folder is absent or a run of hf_vanilla's (what --resume continues), before anything trains."""
    for run_dir in run_dirs:
        OutputFolder(run_dir, "run").check(resume=True)


@contextlib.contextmanager
def claimed(out: Path, names: list[str], run_dirs: Iterable[Path] = ()) -> Iterator[OutputFolder]:
    """The experiment folder ``out``, checked as train checks its folder (busy, another kind, the user's files
    without a record), each run folder checked, then locked for the block with ``names`` entered in its record: a
    file of those names that is the user's (not hf_vanilla's, or changed since hf_vanilla sealed it) is refused
    now, before anything trains, never replaced later."""
    folder = OutputFolder(out, "experiments")
    folder.check()
    check_run_folders(run_dirs)
    with folder.locked():
        refuse_changed(folder, names)
        folder.claim(names)
        yield folder


@contextlib.contextmanager
def claimed_outputs(out: Path, name: str, run_dirs: Iterable[Path] = ()) -> Iterator[tuple[Path, Path, Path]]:
    """``out/NAME.png``, ``NAME.md`` and ``NAME.json`` claimed (:func:`claimed`), yielded to write, then sealed;
    written again only while they are as sealed (the scaling sweep's outputs)."""
    names = [f"{name}.{suffix}" for suffix in ("png", "md", "json")]
    with claimed(out, names, [Path(d) for d in run_dirs]) as folder:
        yield tuple(folder.path / file for file in names)  # type: ignore[misc]
        refuse_changed(folder, names)
        folder.seal(file for file in names if (folder.path / file).exists())


def describe(plan: Plan, workers: int, threads: int) -> str:
    """The plan in a few lines: variants, the refused ones, seeds, the budget, the workers."""
    tokens = plan.tokens_per_run
    lines = [f"compare: {len(plan.settings)} variants x {plan.seeds} seeds = {len(plan.settings) * plan.seeds} runs "
             f"of {plan.options['max_steps']} steps ({tokens:,} tokens each, the same for every variant), base "
             f"{plan.base.label} ({plan.base_config_source}); {workers} workers x {threads} threads"]
    lines += [f"  {setting.label}" + ("  (base)" if setting == plan.base else "") for setting in plan.settings]
    lines += [f"  refused, skipped: {setting.label}: {why}" for setting, why in plan.refused]
    return "\n".join(lines)


def probe(plan: Plan, setting: Setting, threads: int, steps: int = 3) -> float:
    """Median seconds of one optimizer step of ``setting``'s model at the run's batch shape, on random tokens,
    with ``threads`` torch threads (what each worker has)."""
    # torch and the model only to time a step of each variant: the parent process trains nothing
    import torch

    from .. import modeling_vanilla

    task = get_task(plan.task)
    options = TrainOptions(**plan.run_options(setting, 0)).resolved(task)
    config = variant_config(plan, setting)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(0)
        model = getattr(modeling_vanilla, task.model_class)(config).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        ids = torch.randint(0, config.vocab_size, (options.batch_size, options.block_size))
        times = []
        for _ in range(steps + 1):  # the first step warms the allocator up
            start = time.perf_counter()
            model(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            times.append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(before)
    return sorted(times[1:])[len(times[1:]) // 2] * options.gradient_accumulation_steps


def estimate(plan: Plan, workers: int, threads: int, runs: list[RunSpec]) -> dict[str, Any]:
    """The experiment's training time from a short probe of each variant: optimizer steps only (start-up,
    tokenizer, evaluations come on top)."""
    per_step = {setting.folder: probe(plan, setting, threads) for setting in plan.settings}
    seconds = sum(per_step[spec.name.split("/")[0]] * spec.steps for spec in runs)
    lanes = max(1, min(workers, len(runs)))  # 0 workers: one lane, this process
    return dict(seconds_per_step={s.label: round(per_step[s.folder], 4) for s in plan.settings},
                training_seconds=round(seconds / lanes, 1), runs=len(runs), workers=lanes)


def run_plan(plan: Plan, *, workers: int | None, threads: int, estimate_only: bool = False,
             time_limit_minutes: float | None = None, show_progress: bool = True) -> int:
    """Run the experiment (or only estimate it) and write its report; the exit status."""
    workers = default_workers(threads=threads) if workers is None else workers
    runs, names = specs(plan), files(plan)
    if estimate_only:
        OutputFolder(plan.output_dir, "experiments").check()
        check_run_folders(spec.run_dir for spec in runs)
        print(describe(plan, workers, threads), file=sys.stderr)
        print(json.dumps(estimate(plan, workers, threads, runs), indent=1))
        return 0
    written = names.report("extrapolation" in plan.measures)
    with claimed(plan.output_dir, [*written, names.plan], (spec.run_dir for spec in runs)) as folder:
        keep_plan(folder, plan)
        print(describe(plan, workers, threads), file=sys.stderr)
        left = [spec for spec in runs if not _recorded(spec)]
        if left:
            guess = estimate(plan, workers, threads, left)
            print(f"compare: {len(left)} of {len(runs)} runs to train; estimate {_minutes(guess['training_seconds'])} "
                  f"of training ({guess['seconds_per_step']} s per step by a probe here) plus each run's start-up "
                  "and evaluations", file=sys.stderr)
        start, at_start = time.time(), report.machine()
        deadline = None if time_limit_minutes is None else start + time_limit_minutes * 60
        outcomes = run_all(runs, workers, threads, deadline=deadline, show_progress=show_progress,
                           on_outcome=announcer(len(left), workers))
        where = report.provenance(plan, at_start, workers=workers, threads=threads, wall_time_s=time.time() - start,
                                  trained=sum(outcomes[spec.name]["status"] != "not started" for spec in left))
        summary = report.summarise(plan, outcomes, where, unscored_lengths(plan))
        refuse_changed(folder, written)
        report.write(folder, summary, names)
    unfinished = [name for name, found in outcomes.items() if found["status"] not in FINAL]
    print(report.headline(summary))
    print(f"compare: report in {plan.output_dir / names.markdown}" + (
        f"; {len(unfinished)} runs unfinished (the same command goes on with them)" if unfinished else ""),
        file=sys.stderr)
    failed = [name for name, found in outcomes.items() if found["status"] == "failed"]
    return 1 if failed else 0


def _recorded(spec: RunSpec) -> bool:
    return recorded_outcome(spec) is not None


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def announcer(total: int, workers: int) -> Any:
    """Prints each run's end; after the first, the experiment's time at that run's pace (its training and scoring,
    and the start-up its worker took before it)."""
    started, ended = time.time(), []

    def announce(spec: RunSpec, found: dict[str, Any]) -> None:
        text = f"{spec.name}: {found['status']}"
        if found.get("loss") is not None:
            text += f", held-out loss {found['loss']:.4f}"
        if found.get("detail"):
            text += f" ({found['detail']})"
        if found.get("wall_time_s") is not None:
            ended.append(found["wall_time_s"])
            if len(ended) == 1 and total > 1:
                lanes = max(1, min(workers, total))
                start_up = max(0.0, time.time() - started - ended[0])
                text += (f"; at this pace the experiment takes about "
                         f"{_minutes(start_up + ended[0] * -(-total // lanes))} in all")
        tqdm.write(text, file=sys.stderr)

    return announce
