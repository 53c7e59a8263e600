"""One comparison from its plan to its report: the experiment folder claimed, the plan kept, an estimate, the runs
(:mod:`.runner`), the report written through the folder's record (:mod:`.report`).

The experiment folder is an hf_vanilla output folder of kind ``experiments``: its files (``plan.json`` and the
report) are entered in its record before anything trains and sealed once written. A file of one of those names
that hf_vanilla did not write, or one it wrote and the user changed since (its size or sha256 differs from its
seal), is refused before anything trains, never replaced: the user keeps it by moving it out of the folder.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from ..files.output_folder import ChangedFileError, OutputFolder
from .compare import CompareError, Plan, Setting, variant_config
from .runner import FINAL, RunSpec, default_workers, run_all

PLAN = "plan.json"


def report_names(plan: Plan) -> list[str]:
    from .report import names

    return names("extrapolation" in plan.measures)


def specs(plan: Plan) -> list[RunSpec]:
    """Every (variant, seed) run, base first, seed by seed within each variant."""
    return [RunSpec(name=f"{setting.folder}/seed-{seed}", run_dir=plan.run_dir(setting, seed), task=plan.task,
                    options=plan.run_options(setting, seed), measures=plan.measures, resume_command=plan.command)
            for setting in plan.settings for seed in range(plan.seeds)]


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
    path = folder.path / PLAN
    if path.is_file() and PLAN in {p.name for p in folder.own_files()}:
        held = json.loads(path.read_text(encoding="utf-8"))
        mine = plan.as_record()
        differs = [key for key in mine if held.get(key) != mine[key]]
        if differs:
            raise CompareError(f"{folder.path} holds another experiment ({differs[0]} differs from its plan.json): run "
                               f"its own command ({held.get('command', 'see its plan.json')}) to go on with it, or "
                               "choose another --output-dir")
    folder.write_json(PLAN, dict(plan.as_record(), command=plan.command, seeds=plan.seeds))


def check_run_folders(plan: Plan) -> None:
    """Each run folder is absent or a run of hf_vanilla's (what --resume continues), before anything trains."""
    for spec in specs(plan):
        OutputFolder(spec.run_dir, "run").check(resume=True)


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
    import torch

    from .. import modeling_vanilla
    from ..tasks import get_task
    from ..training.options import TrainOptions

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
    from . import report

    workers = default_workers(threads=threads) if workers is None else workers
    folder = OutputFolder(plan.output_dir, "experiments")
    folder.check()
    check_run_folders(plan)
    print(describe(plan, workers, threads), file=sys.stderr)
    runs = specs(plan)
    if estimate_only:
        print(json.dumps(estimate(plan, workers, threads, runs), indent=1))
        return 0
    with folder.locked():
        names = report_names(plan)
        refuse_changed(folder, [*names, PLAN])
        folder.claim(names)  # recorded before anything trains: a user's file of these names was refused just now
        keep_plan(folder, plan)
        left = [spec for spec in runs if not _recorded(spec)]
        if left:
            guess = estimate(plan, workers, threads, left)
            print(f"compare: {len(left)} of {len(runs)} runs to train; estimate {_minutes(guess['training_seconds'])} "
                  f"of training ({guess['seconds_per_step']} s per step by a probe here) plus each run's start-up "
                  "and evaluations", file=sys.stderr)
        start, load = time.time(), os.getloadavg()
        deadline = None if time_limit_minutes is None else start + time_limit_minutes * 60
        outcomes = run_all(runs, workers, threads, deadline=deadline, show_progress=show_progress,
                           on_outcome=announcer(len(left), workers))
        where = report.provenance(plan, workers=workers, threads=threads, load_at_start=load,
                                  wall_time_s=time.time() - start)
        summary = report.summarise(plan, outcomes, where)
        refuse_changed(folder, names)
        report.write(folder, summary)
    unfinished = [name for name, found in outcomes.items() if found["status"] not in FINAL]
    print(report.headline(summary))
    print(f"compare: report in {plan.output_dir / 'compare.md'}" + (
        f"; {len(unfinished)} runs unfinished (the same command goes on with them)" if unfinished else ""),
        file=sys.stderr)
    failed = [name for name, found in outcomes.items() if found["status"] == "failed"]
    return 1 if failed else 0


def _recorded(spec: RunSpec) -> bool:
    from .runner import recorded_outcome

    return recorded_outcome(spec) is not None


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def announcer(total: int, workers: int) -> Any:
    """Prints each run's end; after the first, the experiment's time at that run's pace (its training and scoring,
    and the start-up its worker took before it)."""
    started, ended = time.time(), []

    def announce(spec: RunSpec, found: dict[str, Any]) -> None:
        from tqdm.auto import tqdm

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
