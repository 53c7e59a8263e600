"""A comparison's report: per metric, each variant's mean over seeds, its seed spread and 95% interval, and its
seed-paired difference to the base variant with a 95% interval ("no difference measured" where it holds 0); the
loss curves with seed bands; the extrapolation plot; the command, commit and machine. Written as ``compare.md``,
``compare.json``, ``compare-curves.png`` (``compare-extrapolation.png``) and ``README.md``, a dataset card without
local paths or secrets (what ``hf upload --repo-type dataset`` publishes as it is).
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from ..errors import HfVanillaError, sentence
from ..files.atomic import atomic_write_text
from ..publishing.public import without_local_paths
from ..publishing.secrets import refuse_secrets
from . import statistics as st
from .measures import LENGTH_FACTORS

DEFAULT_NAME = "compare"


@dataclass(frozen=True)
class Files:
    """The names of an experiment's files in its folder, from its name (``--name``; default ``compare``). The card is
    README.md in a folder of its own (the Hub reads it as the card), else NAME-card.md beside other experiments."""

    stem: str
    markdown: str
    data: str
    curves: str
    extrapolation: str
    plan: str
    card: str

    @classmethod
    def of(cls, stem: str = DEFAULT_NAME) -> Files:
        return cls(stem, f"{stem}.md", f"{stem}.json", f"{stem}-curves.png", f"{stem}-extrapolation.png",
                   f"{stem}-plan.json", "README.md" if stem == DEFAULT_NAME else f"{stem}-card.md")

    def report(self, extrapolation: bool) -> list[str]:
        """The report's files."""
        return [self.markdown, self.data, self.curves, self.card] + [self.extrapolation] * extrapolation


@dataclass(frozen=True)
class Metric:
    key: str
    title: str
    unit: str
    lower_is_better: bool
    read: Callable[[dict[str, Any]], float | None]
    factor: int | None = None  # a length-extrapolation metric's multiple of the training length


def _loss_at(factor: int) -> Callable[[dict[str, Any]], float | None]:
    return lambda found: ((found.get("extrapolation") or {}).get("losses") or {}).get(str(factor))


def metrics(measures: tuple[str, ...]) -> list[Metric]:
    """The metrics a plan's measures give, held-out loss first."""
    chosen = [Metric("loss", "Held-out loss", " nats/token", True, lambda found: found.get("loss"))]
    if "speed" in measures:
        chosen.append(Metric("tokens_per_s", "Training speed", " tokens/s", False,
                             lambda found: (found.get("speed") or {}).get("tokens_per_s")))
    if "extrapolation" in measures:
        chosen += [Metric(f"loss_at_{n}x", f"Held-out loss at {n}x the training length", " nats/token", True,
                          _loss_at(n), factor=n) for n in LENGTH_FACTORS]
    return chosen


# --------------------------------------------------------------------------------------------------
# The numbers


def machine() -> dict[str, Any]:
    """Which code ran where: the commit (and whether the tree had changes), the versions, the machine, its load."""
    # torch and transformers only to record their versions: the report's other work loads neither
    import torch
    import transformers

    repo = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return dict(commit=git("rev-parse", "HEAD") or None,
                uncommitted_changes=bool(git("status", "--porcelain", "--untracked-files=no")),
                hf_vanilla=__version__, torch=torch.__version__, transformers=transformers.__version__,
                machine=f"{platform.machine()} {platform.processor() or ''}".strip(), system=platform.platform(),
                cpus=os.cpu_count(), torch_threads=torch.get_num_threads(),
                load_average=[round(x, 2) for x in os.getloadavg()])


def provenance(plan: Any, at_start: dict[str, Any], *, workers: int, threads: int, wall_time_s: float,
               trained: int) -> dict[str, Any]:
    """The exact command, :func:`machine` as it was when this sitting started (the commit that ran), the workers, the
    load average at the start and the end, and how many runs this sitting trained or continued (the rest were read
    back from earlier sittings, whose commit and load their runs' own records hold, or not started)."""
    return dict(at_start, command=plan.command, workers=workers, threads_per_worker=threads, runs_trained=trained,
                load_average_at_start=at_start["load_average"],
                load_average_at_end=[round(x, 2) for x in os.getloadavg()], wall_time_s=round(wall_time_s, 1))


def by_seed(plan: Any, outcomes: dict[str, dict[str, Any]], metric: Metric) -> dict[str, dict[int, float]]:
    """Each variant's completed values of ``metric``, by seed."""
    table: dict[str, dict[int, float]] = {}
    for setting in plan.settings:
        table[setting.label] = {}
        for seed in range(plan.seeds):
            found = outcomes.get(f"{setting.folder}/seed-{seed}") or {}
            value = metric.read(found) if found.get("status") == "completed" else None
            if value is not None and math.isfinite(value):
                table[setting.label][seed] = float(value)
    return table


def compare_metric(plan: Any, outcomes: dict[str, dict[str, Any]], metric: Metric,
                   unscored: dict[str, dict[int, str]]) -> dict[str, Any]:
    """Per variant: its interval over seeds and its paired difference to the base (over the seeds both finished);
    a variant ``unscored`` names at this metric's length factor is "not measured", with why, whatever its runs hold."""
    values = by_seed(plan, outcomes, metric)
    not_measured = {label: why[metric.factor] for label, why in unscored.items() if metric.factor in why}
    for label in not_measured:
        values[label] = {}
    base = values[plan.base.label]
    rows = {}
    for setting in plan.settings:
        mine = values[setting.label]
        row: dict[str, Any] = dict(values=mine, interval=st.interval(list(mine.values())).as_dict() if mine else None)
        if setting.label in not_measured:
            row["not_measured"] = not_measured[setting.label]
        paired = sorted(set(mine) & set(base))
        if setting != plan.base and paired:
            difference = st.paired_difference([mine[s] for s in paired], [base[s] for s in paired])
            row.update(difference=difference.as_dict(), paired_seeds=paired,
                       verdict=st.verdict(difference, metric.unit, metric.lower_is_better),
                       detectable_at_80_percent=st.detectable_difference(difference.sd, difference.n)
                       if difference.sd else None)
        rows[setting.label] = row
    return dict(key=metric.key, title=metric.title, unit=metric.unit, lower_is_better=metric.lower_is_better,
                variants=rows)


def growth_from_1x(compared: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per variant and length factor past 1x: the loss there minus the same model's loss at 1x, seed by seed, with
    its interval and verdict (the extrapolation question itself: does a longer window cost this scheme anything?)."""
    by_key = {metric["key"]: metric["variants"] for metric in compared}
    if "loss_at_1x" not in by_key:
        return {}
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for label, at_1x in by_key["loss_at_1x"].items():
        found[label] = {}
        for n in (n for n in LENGTH_FACTORS if n != 1):
            at_n = by_key[f"loss_at_{n}x"][label]["values"]
            seeds = sorted(set(at_n) & set(at_1x["values"]))
            if seeds:
                change = st.paired_difference([at_n[s] for s in seeds], [at_1x["values"][s] for s in seeds])
                found[label][str(n)] = dict(change.as_dict(), seeds=seeds, verdict=st.verdict(change, " nats/token"))
    return found


def seed_band(curves: list[list[tuple[int, float]]]) -> dict[str, list[float]] | None:
    """Mean, lowest and highest loss over seeds at the steps every seed logged."""
    steps = sorted(set.intersection(*(set(step for step, _ in curve) for curve in curves))) if curves else []
    if not steps:
        return None
    grid = np.array([[dict(curve)[step] for step in steps] for curve in curves], dtype=float)
    return dict(steps=steps, mean=grid.mean(0).tolist(), low=grid.min(0).tolist(), high=grid.max(0).tolist(),
                seeds=len(curves))


def summarise(plan: Any, outcomes: dict[str, dict[str, Any]], where: dict[str, Any],
              unscored: dict[str, dict[int, str]]) -> dict[str, Any]:
    """Everything the report says, as JSON; ``unscored``: per variant, the length factors its model cannot be scored
    at, with why (:func:`hf_vanilla.experiments.compare.unscored_lengths`)."""
    curves = {setting.label: seed_band([outcomes[f"{setting.folder}/seed-{s}"]["curve"] for s in range(plan.seeds)
                                        if outcomes.get(f"{setting.folder}/seed-{s}", {}).get("status") == "completed"])
              for setting in plan.settings}
    runs = {name: {k: found.get(k) for k in ("status", "detail", "loss", "parameters", "wall_time_s", "run_dir")}
            for name, found in outcomes.items()}
    parameters = {setting.label: sorted({found["parameters"] for name, found in outcomes.items()
                                         if name.startswith(setting.folder + "/") and found.get("parameters")})
                  for setting in plan.settings}
    compared = [compare_metric(plan, outcomes, metric, unscored) for metric in metrics(plan.measures)]
    return dict(
        provenance=where, task=plan.task, base=plan.base.label, base_model=plan.base_config_source,
        varied={name: list(vals) for name, vals in plan.varied}, seeds=plan.seeds,
        budget=dict(steps=plan.options["max_steps"], tokens_per_run=plan.tokens_per_run,
                    same_for_every_variant_and_seed=True),
        held_out=sorted({found.get("held_out_split") for found in outcomes.values() if found.get("held_out_split")}),
        options=plan.options, measures=list(plan.measures), variants=[s.label for s in plan.settings],
        refused={setting.label: why for setting, why in plan.refused}, parameters=parameters,
        metrics=compared, growth_from_1x=growth_from_1x(compared),
        curves=curves, runs=runs)


# --------------------------------------------------------------------------------------------------
# In words


def _num(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}"


def _interval_text(interval: dict[str, Any] | None, transform: Callable[[float], float] = lambda x: x) -> str:
    if interval is None or interval["low"] is None:
        return "-"
    return f"{_num(transform(interval['low']))} .. {_num(transform(interval['high']))}"


def metric_table(metric: dict[str, Any], base: str) -> str:
    lines = [f"| variant | mean | seed sd | 95% interval | seeds | difference to {base} | 95% interval | verdict | "
             "80%-power size |", "|---|---|---|---|---|---|---|---|---|"]
    for label, row in metric["variants"].items():
        interval, difference = row["interval"], row.get("difference")
        cells = [label + (" (base)" if label == base else ""),
                 _num(interval["mean"]) if interval else "not measured" if row.get("not_measured") else
                 "no completed run", _num(interval and interval["sd"]),
                 _interval_text(interval), str(interval["n"]) if interval else "0",
                 _num(difference["mean"]) if difference else "-", _interval_text(difference),
                 row.get("not_measured") or row.get("verdict", "-"), _num(row.get("detectable_at_80_percent"))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def perplexity_table(loss: dict[str, Any], base: str) -> str:
    """Perplexity as exp of the loss's mean and interval (the geometric mean over seeds); a difference as a ratio."""
    lines = [f"| variant | perplexity | 95% interval | ratio to {base} | 95% interval | verdict |",
             "|---|---|---|---|---|---|"]
    for label, row in loss["variants"].items():
        interval, difference = row["interval"], row.get("difference")
        cells = [label + (" (base)" if label == base else ""), _num(math.exp(interval["mean"])) if interval else "-",
                 _interval_text(interval, math.exp), _num(math.exp(difference["mean"])) if difference else "-",
                 _interval_text(difference, math.exp), row.get("verdict", "-").replace(" nats/token", " nats/token (loss)")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def extrapolation_table(summary: dict[str, Any]) -> str:
    """Each variant's loss at every length factor; a length its model cannot be scored at reads "not measured", and
    why follows the table."""
    by_key = {metric["key"]: metric for metric in summary["metrics"]}
    lines = ["| variant | " + " | ".join(f"{n}x" for n in LENGTH_FACTORS) + " |", "|---" * (len(LENGTH_FACTORS) + 1) + "|"]
    reasons = {}
    for label in summary["variants"]:
        cells = []
        for n in LENGTH_FACTORS:
            row = by_key[f"loss_at_{n}x"]["variants"][label]
            interval, why = row["interval"], row.get("not_measured")
            if why:
                reasons.setdefault(label, (n, why))
            cells.append("not measured" if why else "no completed run" if interval is None else
                         f"{_num(interval['mean'])} ({_interval_text(interval)})")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    notes = [f"- {label}: not measured from {n}x: {why}" for label, (n, why) in reasons.items()]
    return "\n".join(lines) + "\n" + ("\n" + "\n".join(notes) + "\n" if notes else "")


def growth_table(summary: dict[str, Any]) -> str:
    """Each variant's loss at 2x-4x minus its own at 1x (seed-paired): mean, 95% interval, and whether it rises."""
    factors = [n for n in LENGTH_FACTORS if n != 1]
    words = {"worse": "rises", "better": "falls"}
    lines = ["| variant | " + " | ".join(f"{n}x - 1x" for n in factors) + " |", "|---" * (len(factors) + 1) + "|"]
    for label, changes in summary["growth_from_1x"].items():
        cells = []
        for n in factors:
            change = changes.get(str(n))
            if change is None:
                cells.append("not measured")
                continue
            said = words.get(change["verdict"].split()[0], change["verdict"].replace("difference", "change"))
            cells.append(f"{change['mean']:+.4g} ({_interval_text(change)}): {said}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def headline(summary: dict[str, Any]) -> str:
    """The answer first: each variant against the base on held-out loss."""
    loss, base = summary["metrics"][0], summary["base"]
    lines = []
    for label, row in loss["variants"].items():
        if label == base:
            continue
        difference = row.get("difference")
        if difference is None:
            lines.append(f"- {label} vs {base}: no completed pair of runs")
            continue
        lines.append(f"- {label} vs {base}: held-out loss {difference['mean']:+.4f} nats/token (95% interval "
                     f"{_interval_text(difference)}, {difference['n']} seed pairs): {row['verdict']}")
    return "\n".join(lines)


def markdown(summary: dict[str, Any]) -> str:
    where, budget, base = summary["provenance"], summary["budget"], summary["base"]
    varied = "; ".join(f"{name} = {', '.join(map(str, vals))}" for name, vals in summary["varied"].items())
    parts = [f"# Comparison: {varied}\n", headline(summary) + "\n",
             f"Base variant: {base} ({summary['base_model']}); {summary['seeds']} seeds per variant (0..{summary['seeds'] - 1}: "
             "the same weights' seed and data order for every variant, so each seed's runs are paired); budget "
             f"{budget['steps']} optimizer steps = {budget['tokens_per_run']:,} training tokens per run, the same for "
             f"every variant and seed. Held-out split: {', '.join(summary['held_out']) or '-'}. Intervals: Student t "
             "over seeds (a variant's mean) and over seed-paired differences (to the base); \"no difference measured\" "
             "where the interval holds 0 (these seeds cannot tell, not: equal); the 80%-power size is the true "
             "difference these seeds would find 4 times in 5, from the spread of the paired differences.\n"]
    if summary["parameters"]:
        parts.append("Parameters: " + "; ".join(f"{label} {', '.join(f'{n:,}' for n in counts) or '-'}"
                                                for label, counts in summary["parameters"].items()) + "\n")
    for metric in summary["metrics"]:
        if metric["key"].startswith("loss_at_"):
            continue
        parts.append(f"## {metric['title']} ({metric['unit'].strip()}, {'lower' if metric['lower_is_better'] else 'higher'} "
                     "is better)\n\n" + metric_table(metric, base))
        if metric["key"] == "loss":
            parts.append("## Held-out perplexity\n\n" + perplexity_table(metric, base))
    if "extrapolation" in summary["measures"]:
        parts.append("## Length extrapolation: held-out loss at 1x-4x the training length (mean, 95% interval)\n\n"
                     "Every length scores the same tokens (those whose offset is not a multiple of the training "
                     "length).\n\n" + extrapolation_table(summary))
        parts.append("### Change from 1x: each variant's loss at nx minus its own at 1x (seed-paired)\n\n"
                     "Whether a longer window costs the scheme anything (\"rises\": worse than at its training length; "
                     "\"no change measured\": the interval holds 0).\n\n" + growth_table(summary))
        for metric in summary["metrics"]:
            if metric["key"].startswith("loss_at_") and metric["key"] != "loss_at_1x":
                parts.append(f"### {metric['title']}\n\n" + metric_table(metric, base))
    if summary["refused"]:
        parts.append("## Refused before training\n\n" + "\n".join(f"- {label}: {why}" for label, why in
                                                                  summary["refused"].items()) + "\n")
    unfinished = {name: run for name, run in summary["runs"].items() if run["status"] != "completed"}
    if unfinished:
        parts.append("## Runs not in the figures\n\n" + "\n".join(f"- {name}: {run['status']}"
                                                                  + (f" ({run['detail']})" if run["detail"] else "")
                                                                  for name, run in unfinished.items()) + "\n")
    parts.append("## How it ran\n\n```\n" + where["command"] + "\n```\n\n"
                 f"commit {where['commit'] or 'unknown'}" + (" (with uncommitted changes)" if where["uncommitted_changes"]
                                                             else "")
                 + f"; hf_vanilla {where['hf_vanilla']}, torch {where['torch']}, transformers {where['transformers']}; "
                 f"{where['machine']}, {where['cpus']} CPUs, {where['workers']} workers x {where['threads_per_worker']} "
                 f"threads; load average {where['load_average_at_start']} at the start, {where['load_average_at_end']} "
                 f"at the end; {where['wall_time_s']} s; {where['runs_trained']} of its {len(summary['runs'])} runs "
                 "trained or continued in this sitting (the others read back from earlier ones or not started).\n")
    return "\n".join(parts)


def card(summary: dict[str, Any], files: Files) -> str:
    """The report as a Hub dataset card, local paths reduced to base names."""
    header = "---\ntags:\n- hf-vanilla\n- ablation\n- hf-vanilla-compare\n---\n\n"
    return header + without_local_paths(markdown(summary)) + (
        f"\n![loss curves]({files.curves})\n" + (f"\n![extrapolation]({files.extrapolation})\n"
                                                 if "extrapolation" in summary["measures"] else ""))


# --------------------------------------------------------------------------------------------------
# Pictures


def draw_curves(summary: dict[str, Any], path: Path) -> None:
    # matplotlib (the [viz] extra) only when a picture is drawn
    from ..tools.viz import Picture, _new_figure

    figure = _new_figure(7, 4.5)
    ax = figure.add_subplot(1, 1, 1)
    for label, band in summary["curves"].items():
        if band is None:
            continue
        (line,) = ax.plot(band["steps"], band["mean"], lw=1.5, label=f"{label} ({band['seeds']} seeds)")
        ax.fill_between(band["steps"], band["low"], band["high"], color=line.get_color(), alpha=0.2, lw=0)
    _finish(ax, "optimizer step", "training loss (nats per token)",
            "Training loss: mean over seeds, band from the lowest to the highest seed")
    Picture(figure).save(path)


def _finish(ax: Any, xlabel: str, ylabel: str, title: str) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


def draw_extrapolation(summary: dict[str, Any], path: Path) -> None:
    # matplotlib (the [viz] extra) only when a picture is drawn
    from ..tools.viz import Picture, _new_figure

    by_key = {metric["key"]: metric for metric in summary["metrics"]}
    figure = _new_figure(7, 4.5)
    ax = figure.add_subplot(1, 1, 1)
    for label in summary["variants"]:
        rows = [(n, by_key[f"loss_at_{n}x"]["variants"][label]) for n in LENGTH_FACTORS]
        points = [(n, row["interval"]) for n, row in rows if row["interval"] is not None]
        if not points:
            continue
        unmeasured = [n for n, row in rows if row.get("not_measured")]
        legend = f"{label} (not measured from {unmeasured[0]}x)" if unmeasured else label
        factors = [n for n, _ in points]
        means = [interval["mean"] for _, interval in points]
        errors = [[interval["mean"] - interval["low"] if interval["low"] is not None else 0 for _, interval in points],
                  [interval["high"] - interval["mean"] if interval["high"] is not None else 0 for _, interval in points]]
        ax.errorbar(factors, means, yerr=errors, marker="o", capsize=3, lw=1.5, label=legend)
    ax.set_xticks(list(LENGTH_FACTORS), [f"{n}x" for n in LENGTH_FACTORS])
    _finish(ax, "inference length (multiple of the training length)", "held-out loss, same tokens at every length",
            "Length extrapolation: mean over seeds, 95% interval")
    Picture(figure).save(path)


def write(folder: Any, summary: dict[str, Any], files: Files) -> list[str]:
    """The report into ``folder`` (an OutputFolder, locked): written in a work folder, the card scanned for secrets,
    then moved in and sealed through the folder's record."""
    work = folder.fresh(f"{files.stem}-report")
    readme = card(summary, files)
    atomic_write_text(work / files.markdown, markdown(summary))
    atomic_write_text(work / files.data, json.dumps(summary, indent=1, default=str) + "\n")
    atomic_write_text(work / files.card, readme)
    draw_curves(summary, work / files.curves)
    if "extrapolation" in summary["measures"]:
        draw_extrapolation(summary, work / files.extrapolation)
    try:
        refuse_secrets({files.card: readme})
    except HfVanillaError as error:  # the card is for publishing: left out, the rest of the report kept
        (work / files.card).unlink()
        print(f"hf-vanilla compare: {files.card} left out: {sentence(error)}", file=sys.stderr)
    return folder.publish(work)
