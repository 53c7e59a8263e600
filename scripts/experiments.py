#!/usr/bin/env python
"""Two claims of the texts hf_vanilla implements, measured on Shakespeare (docs/experiments.md).

    python scripts/experiments.py extrapolation [--out docs/figures] [--runs runs/experiments] [--tiny]
    python scripts/experiments.py warmup        [--out docs/figures] [--runs runs/experiments] [--tiny]
    python scripts/experiments.py scaling       [--out docs/figures] [--runs runs/scaling] [--workers 2] [--tiny]
                                                [--plan cpu|gpu] [--estimate] [--reanalyse RECORD [--add-runs ...]]

``scaling`` is the IsoFLOP sweep of ``scripts/scaling.py`` (its docstring says what it does).

``extrapolation`` trains the same small pre-norm decoder once per positional scheme (sinusoidal,
learned, rope, alibi, relative, none) with the same budget and training length L, then scores the same
held-out tokens (Macbeth and Much Ado About Nothing, never trained on) with windows of L, 2L, 4L and 8L
tokens: the held-out token stream is cut into non-overlapping windows of each length (the ALiBi paper's
non-overlapping evaluation), and only tokens whose offset in the stream is not a multiple of L are
scored, so every length scores exactly the same tokens and only the context they see changes. Learned
positions stop at their table (``max_position_embeddings`` = L): beyond it the model refuses, recorded
as n/a. Writes ``extrapolation.png`` (perplexity against inference length, log-y), ``extrapolation.md``
(the table) and ``extrapolation.json`` (every number, the settings, the machine, wall times).

``warmup`` trains a deeper decoder with pre-norm and post-norm blocks, each with and without a linear
learning-rate warm-up, at two peak learning rates, with the same budget (a constant schedule after the
warm-up, so warm-up is the only difference). A run whose loss turns NaN/inf is stopped by the training
code's guard and recorded as diverged at that step; the experiment goes on. Writes ``warmup.png`` (the
training-loss curves), ``warmup.md`` and ``warmup.json``.

``--tiny`` runs the same code in seconds (a tiny model, a few steps, short lengths): the default test
suite runs it end to end. ``--data-files`` trains on local text instead of Shakespeare (as
``hf-vanilla train``), which is how the tests run it offline.

The outputs go into ``--out`` through hf_vanilla's output folder, claimed before anything is trained: the folder
is checked as ``hf-vanilla train`` checks its own (refused if another process writes it, if it is another kind of
hf_vanilla folder, or if it holds files and no record of hf_vanilla's), each name is entered in its record
(``.hf_vanilla.json``; docs/figures has one for the committed figures) and sealed once written, and a file of the
same name that the record does not list is yours: it is refused then, never replaced. Every training run folder
under ``--runs`` is checked then too, as ``train --overwrite`` checks it. A refusal is one sentence, exit 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

from hf_vanilla.errors import REFUSED, HfVanillaError, sentence  # noqa: E402
from hf_vanilla.files.atomic import atomic_write_text  # noqa: E402
from hf_vanilla.files.output_folder import OutputFolder  # noqa: E402
from hf_vanilla.training import TrainingDivergedError, get_task, train  # noqa: E402
from hf_vanilla.training.options import make_options  # noqa: E402
from hf_vanilla.training.sources import load_task_data  # noqa: E402
from hf_vanilla.variants import values  # noqa: E402

LENGTH_FACTORS = (1, 2, 4, 8)


@dataclass(frozen=True)
class Budget:
    """One experiment's model size and training budget (full, or the tiny one the tests run)."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    block_size: int  # the training length L
    batch_size: int
    max_steps: int
    vocab_size: int
    eval_samples: int  # validation blocks of the periodic and final evaluations (the scoring here is separate)


# Sized for about 25 minutes each on a 2-core CPU shared with other jobs (one thread: see --threads).
EXTRAPOLATION = Budget(hidden_size=128, intermediate_size=512, num_hidden_layers=3, num_attention_heads=4,
                       block_size=64, batch_size=16, max_steps=300, vocab_size=2048, eval_samples=32)
WARMUP = Budget(hidden_size=128, intermediate_size=512, num_hidden_layers=6, num_attention_heads=4,
                block_size=64, batch_size=8, max_steps=120, vocab_size=2048, eval_samples=32)
TINY = Budget(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
              block_size=8, batch_size=4, max_steps=4, vocab_size=300, eval_samples=4)

#: Warm-up grid: the two peak learning rates and the warm-up length as a fraction of the steps.
WARMUP_LEARNING_RATES = (1e-3, 3e-3)
WARMUP_FRACTION = 0.2


# --------------------------------------------------------------------------------------------------
# Training one run, whatever happens to it


class LossLog(TrainerCallback):
    """Every log entry with its step: the curve survives a run that diverges."""

    def __init__(self) -> None:
        self.history: list[dict[str, Any]] = []

    def on_log(self, args, state, control, logs=None, **kwargs) -> None:
        self.history.append(dict(logs or {}, step=state.global_step))


def train_options(budget: Budget, data_files: list[str], **config: Any) -> dict[str, Any]:
    """The options every run of an experiment shares; ``config`` adds VanillaConfig overrides."""
    sizes = {k: getattr(budget, k) for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                              "num_attention_heads")}
    return dict(preset="small", config={**sizes, **config}, vocab_size=budget.vocab_size,
                block_size=budget.block_size, batch_size=budget.batch_size, max_steps=budget.max_steps,
                dropout=0.0,  # a short run underfits: dropout would only blur the comparison
                eval_steps=budget.max_steps, save_steps=budget.max_steps, save_total_limit=1,
                logging_steps=max(1, budget.max_steps // 100), max_eval_samples=budget.eval_samples,
                max_test_samples=budget.eval_samples, num_samples=0, disable_tqdm=True, use_cpu=True,
                data_files=list(data_files), overwrite=True, seed=0)


def run_one(run_dir: Path, options: dict[str, Any]) -> dict[str, Any]:
    """Train; return the outcome (completed or diverged), the logged curve and the timing."""
    log = LossLog()
    start = time.perf_counter()
    try:
        result = train("clm", run_dir, callbacks=[log], **options)
    except TrainingDivergedError as error:
        status, metrics, baseline, detail = "diverged", {}, {}, str(error).split(";")[0]
    else:
        status, metrics, baseline, detail = "completed", result.metrics, result.baseline, ""
    losses = [(e["step"], e["loss"]) for e in log.history if "loss" in e]
    return dict(status=status, detail=detail, run_dir=str(run_dir), wall_time_s=round(time.perf_counter() - start, 1),
                train_losses=losses, validation_loss=metrics.get("validation_loss"),
                unigram_validation_perplexity=baseline.get("validation_perplexity"))


# --------------------------------------------------------------------------------------------------
# Extrapolation: held-out perplexity at L, 2L, 4L, 8L


def held_out_stream(tokenizer, options: dict[str, Any], span_multiple: int) -> torch.Tensor:
    """The test split as one token stream (documents joined by </s>, as in training), cut to a whole number
    of ``span_multiple``-token windows."""
    task = get_task("clm")
    opts = make_options(dict(options, block_size=span_multiple, max_test_samples=None)).resolved(task)
    raw, _ = load_task_data(task, opts)
    from datasets import DatasetDict

    blocks = task.tokenize(DatasetDict(test=raw["test"]), tokenizer, opts)["test"]["input_ids"]
    return torch.tensor([t for block in blocks for t in block])


@torch.no_grad()
def perplexity_at(model, stream: torch.Tensor, window: int, train_length: int, batch_tokens: int = 8192) -> float:
    """Perplexity over the stream cut into non-overlapping ``window``-token windows, scoring only tokens whose
    offset is not a multiple of ``train_length`` (the same tokens at every window that is a multiple of it).
    Windows go through the model ``batch_tokens`` tokens at a time."""
    batch = max(1, batch_tokens // window)
    windows = stream.view(-1, window)
    offsets = torch.arange(stream.numel()).view(-1, window)[:, 1:]  # targets: every token but each window's first
    scored = offsets % train_length != 0
    total, count = 0.0, 0
    for i in range(0, len(windows), batch):
        ids = windows[i : i + batch]
        logits = model(input_ids=ids).logits[:, :-1].float()
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
        keep = scored[i : i + batch]
        total += nll[keep].double().sum().item()
        count += int(keep.sum())
    return math.exp(total / count)


def extrapolation_runs(runs: Path, budget: Budget, schemes: tuple[str, ...] | None = None) -> dict[str, Path]:
    """Each positional scheme's run folder (``schemes``: every one of the table of variants unless narrowed)."""
    schemes = values("position_embedding_type") if schemes is None else schemes
    return {scheme: runs / f"extrapolation-{scheme}" for scheme in schemes}


def extrapolation(runs: Path, budget: Budget, data_files: list[str], schemes: tuple[str, ...] | None = None
                  ) -> dict[str, Any]:
    """``schemes``: every positional scheme of the table of variants unless narrowed."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    L, longest = budget.block_size, budget.block_size * LENGTH_FACTORS[-1]
    lengths = [L * f for f in LENGTH_FACTORS]
    rows, stream = {}, None
    for scheme, run_dir in extrapolation_runs(runs, budget, schemes).items():
        # Learned positions get exactly L table entries (a larger table would hold untrained rows); the others
        # are told the longest length, which sizes no parameter (sinusoidal, rope and alibi extend anyway).
        table = L if scheme == "learned" else longest
        options = dict(train_options(budget, data_files, position_embedding_type=scheme,
                                     max_position_embeddings=table), learning_rate=1e-3, lr_scheduler="cosine")
        outcome = run_one(run_dir, options)
        print(f"{scheme}: {outcome['status']} in {outcome['wall_time_s']} s", flush=True)
        if outcome["status"] != "completed":
            rows[scheme] = dict(outcome, perplexity={n: None for n in lengths})
            continue
        model = AutoModelForCausalLM.from_pretrained(outcome["run_dir"]).eval()
        tokenizer = AutoTokenizer.from_pretrained(outcome["run_dir"])
        if stream is None:  # every scheme's tokenizer is trained on the same text with the same settings
            stream = held_out_stream(tokenizer, options, longest)
        outcome["perplexity"] = {n: perplexity_at(model, stream, n, L) if n <= table else None for n in lengths}
        rows[scheme] = outcome
    scored = int((torch.arange(stream.numel()) % L != 0).sum()) if stream is not None else 0
    return dict(training_length=L, lengths=lengths, held_out_tokens=stream.numel() if stream is not None else 0,
                scored_tokens=scored, schemes=rows)


def extrapolation_table(result: dict[str, Any]) -> str:
    lengths = result["lengths"]
    head = "| scheme | " + " | ".join(f"{n} ({n // result['training_length']}L)" for n in lengths) + " |"
    lines = [head, "|---" * (len(lengths) + 1) + "|"]
    for scheme, row in result["schemes"].items():
        cells = [f"{row['perplexity'][n]:.1f}" if row["perplexity"][n] is not None else "n/a" for n in lengths]
        lines.append(f"| {scheme} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_extrapolation(result: dict[str, Any], path: Path) -> None:
    from hf_vanilla.tools.viz import Picture, _new_figure

    figure = _new_figure(7, 4.5)
    ax = figure.add_subplot(1, 1, 1)
    for scheme, row in result["schemes"].items():
        points = [(n, p) for n, p in row["perplexity"].items() if p is not None]
        if points:
            ax.plot(*zip(*points, strict=True), "o-", label=scheme, lw=1.5)
    L = result["training_length"]
    ax.axvline(L, color="grey", ls="--", lw=1, label=f"training length L={L}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(result["lengths"], [str(n) for n in result["lengths"]])
    ax.set_xlabel("inference length (tokens per window)")
    ax.set_ylabel("held-out perplexity (same tokens at every length)")
    ax.set_title("Extrapolation: trained at L, scored at L..8L (Macbeth, Much Ado)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    Picture(figure).save(path)


# --------------------------------------------------------------------------------------------------
# Warm-up: pre- vs post-norm, with and without warm-up, two learning rates


def warmup_runs(runs: Path, budget: Budget, learning_rates: tuple[float, ...] = WARMUP_LEARNING_RATES,
                norms: tuple[str, ...] = ("pre", "post")) -> dict[tuple[float, str, int], Path]:
    """Each (peak rate, norm position, warm-up steps) of the grid and its run folder, in the order they train."""
    warmup_steps = max(1, round(WARMUP_FRACTION * budget.max_steps))
    return {(lr, norm, steps): runs / f"warmup-{norm}-lr{lr:g}-w{steps}"
            for lr in learning_rates for norm in norms for steps in (warmup_steps, 0)}


def warmup(runs: Path, budget: Budget, data_files: list[str],
           learning_rates: tuple[float, ...] = WARMUP_LEARNING_RATES, norms: tuple[str, ...] = ("pre", "post")
           ) -> dict[str, Any]:
    warmup_steps = max(1, round(WARMUP_FRACTION * budget.max_steps))
    rows = {}
    for (lr, norm, steps), run_dir in warmup_runs(runs, budget, learning_rates, norms).items():
        name = f"{norm}-norm, lr {lr:g}, " + (f"warm-up {steps}" if steps else "no warm-up")
        options = dict(train_options(budget, data_files, norm_position=norm), learning_rate=lr,
                       lr_scheduler="constant_with_warmup", warmup_steps=steps)
        outcome = run_one(run_dir, options)
        print(f"{name}: {outcome['status']} in {outcome['wall_time_s']} s", flush=True)
        rows[name] = dict(outcome, norm=norm, learning_rate=lr, warmup_steps=steps)
    return dict(warmup_steps=warmup_steps, learning_rates=list(learning_rates), runs=rows)


def final_training_loss(losses: list[tuple[int, float]], last: int = 5) -> float | None:
    """The mean of the last few logged training losses (one logged loss is noisy)."""
    tail = [v for _, v in losses[-last:] if math.isfinite(v)]
    return sum(tail) / len(tail) if tail else None


def warmup_table(result: dict[str, Any]) -> str:
    lines = ["| norm | peak lr | warm-up steps | outcome | final training loss | validation loss | "
             "validation ppl | unigram ppl |", "|---|---|---|---|---|---|---|---|"]
    for row in result["runs"].values():
        final, val, unigram = (final_training_loss(row["train_losses"]), row["validation_loss"],
                               row["unigram_validation_perplexity"])
        outcome = "completed" if row["status"] == "completed" else row["detail"] or row["status"]
        cells = [row["norm"], f"{row['learning_rate']:g}", str(row["warmup_steps"]), outcome,
                 f"{final:.3f}" if final is not None else "-", f"{val:.3f}" if val is not None else "-",
                 f"{math.exp(val):.1f}" if val is not None else "-", f"{unigram:.1f}" if unigram else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_warmup(result: dict[str, Any], path: Path) -> None:
    from hf_vanilla.tools.viz import Picture, _new_figure

    rates = result["learning_rates"]
    figure = _new_figure(6 * len(rates), 4.5)
    styles = {("pre", True): ("tab:blue", "-"), ("pre", False): ("tab:blue", ":"),
              ("post", True): ("tab:red", "-"), ("post", False): ("tab:red", ":")}
    for i, lr in enumerate(rates):
        ax = figure.add_subplot(1, len(rates), i + 1)
        for name, row in result["runs"].items():
            if row["learning_rate"] != lr or not row["train_losses"]:
                continue
            color, style = styles[(row["norm"], row["warmup_steps"] > 0)]
            steps, losses = zip(*row["train_losses"], strict=True)
            label = name.replace(f", lr {lr:g}", "") + (" (diverged)" if row["status"] == "diverged" else "")
            ax.plot(steps, losses, ls=style, color=color, lw=1.3, label=label)
        if result["warmup_steps"]:
            ax.axvline(result["warmup_steps"], color="grey", lw=0.8, ls="--")
        ax.set_title(f"peak learning rate {lr:g}")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("training loss (nats per token)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    Picture(figure).save(path)


# --------------------------------------------------------------------------------------------------
# Command line


def provenance() -> dict[str, Any]:
    """Which code ran where: the commit (and whether the tree was clean), the machine and its load."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return dict(commit=git("rev-parse", "HEAD"), dirty=bool(git("status", "--porcelain", "--untracked-files=no")),
                machine=f"{platform.machine()} {platform.processor() or ''}".strip(), cpus=os.cpu_count(),
                torch_threads=torch.get_num_threads(), load_average_at_start=os.getloadavg(),
                torch=torch.__version__)


#: Each experiment: what it measures, its table, its figure, its budget and its run folders (``runs``, the
#: budget and the grid's keywords -> one folder per training run).
EXPERIMENTS = {
    "extrapolation": (extrapolation, extrapolation_table, plot_extrapolation, EXTRAPOLATION,
                      lambda runs, budget, **grid: list(extrapolation_runs(runs, budget, **grid).values())),
    "warmup": (warmup, warmup_table, plot_warmup, WARMUP,
               lambda runs, budget, **grid: list(warmup_runs(runs, budget, **grid).values())),
}


@contextlib.contextmanager
def claimed_outputs(out: Path, name: str, run_dirs: Iterable[Path] = ()) -> Iterator[tuple[Path, Path, Path]]:
    """``out/NAME.png``, ``NAME.md`` and ``NAME.json``, claimed through ``out``'s record before anything runs and
    written under its lock, held to the end of the block (a second experiment into ``out`` is refused). ``out``
    is checked first as train checks its folder (:meth:`OutputFolder.check`: busy, another kind, the user's files
    without a record), and each of ``run_dirs`` as ``train --overwrite`` checks it; a file of the user's of one of
    the names is refused then, not replaced later. The names are sealed when the block has written them."""
    folder = OutputFolder(out, "experiments")
    folder.check()
    for run_dir in run_dirs:
        OutputFolder(run_dir, "run").check(overwrite=True)
    with folder.locked():
        names = [f"{name}.{suffix}" for suffix in ("png", "md", "json")]
        folder.claim(names)
        figure, markdown, data = (folder.path / file for file in names)
        yield figure, markdown, data
        folder.seal(name for name in names if (folder.path / name).exists())


def run_experiment(name: str, out: Path, runs: Path, tiny: bool = False, data_files: tuple[str, ...] = (),
                   **grid: Any) -> dict[str, Any]:
    """Run one experiment; write ``out/NAME.png``, ``NAME.md`` and ``NAME.json``; return the record. ``grid``
    narrows the experiment (``schemes=`` for extrapolation, ``learning_rates=`` and ``norms=`` for warmup)."""
    measure, table, plot, budget, run_dirs = EXPERIMENTS[name]
    budget = TINY if tiny else budget
    with claimed_outputs(out, name, run_dirs(runs, budget, **grid)) as (figure, markdown, data):
        start, where = time.perf_counter(), provenance()
        result = measure(runs, budget, list(data_files), **grid)
        record = dict(experiment=name, tiny=tiny, budget=asdict(budget), **where, **result,
                      load_average_at_end=os.getloadavg(), wall_time_s=round(time.perf_counter() - start, 1),
                      data=list(data_files) or "Shakespeare (hf_vanilla.corpora; test = Macbeth, Much Ado)")
        plot(result, figure)
        atomic_write_text(markdown, table(result))
        atomic_write_text(data, json.dumps(record, indent=1) + "\n")
    print(table(result))
    print(f"{name}: {record['wall_time_s']} s; written to {out}/{name}.{{png,md,json}}")
    return record


def scaling_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    sys.path.insert(0, str(REPO / "scripts"))
    import scaling

    if args.add_runs and args.reanalyse is None:
        parser.error("--add-runs needs --reanalyse RECORD: it adds result files to a written record's runs")
    try:
        scaling.check_device(args.device, args.dtype)
        if args.reanalyse is not None:
            scaling.reanalyse(args.out, args.reanalyse, tuple(args.add_runs))
            return 0
    except ValueError as error:
        parser.error(str(error))
    plan = scaling.choose_plan(args.plan, args.device, args.tiny)
    if args.estimate:
        widths = sorted(scaling.home_budgets(plan, scaling.family(plan)))
        print(json.dumps(scaling.estimate(plan, scaling.step_seconds(plan, widths), args.workers), indent=1))
        return 0
    scaling.sweep(args.out, args.runs, plan, data_files=tuple(args.data_files), workers=args.workers,
                  device=args.device, dtype=args.dtype, train=not args.no_train)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment", choices=[*sorted(EXPERIMENTS), "scaling"])
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "experiments",
                        help="where the figure, table and JSON go (docs/figures for the committed ones)")
    parser.add_argument("--runs", type=Path, default=REPO / "runs" / "experiments",
                        help="where the training runs go (one run directory each)")
    parser.add_argument("--tiny", action="store_true", help="a tiny model for a few steps: seconds, for the tests")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: torch's); 1 runs several times faster on a crowded CPU")
    parser.add_argument("--data-files", nargs="*", default=[], metavar="[SPLIT=]PATH",
                        help="train and score on local text files instead of Shakespeare")
    parser.add_argument("--workers", type=int, default=1, help="scaling: runs trained at once (one thread each)")
    parser.add_argument("--device", default="cpu", help="scaling: where to train (cpu, cuda, cuda:1, ...)")
    parser.add_argument("--dtype", default="float32", help="scaling: float32, or bfloat16 (autocast)")
    parser.add_argument("--no-train", action="store_true",
                        help="scaling: train nothing; fit and draw the budgets whose runs have all finished")
    parser.add_argument("--plan", choices=["cpu", "gpu"], default=None,
                        help="scaling: which sweep (default: gpu on a CUDA device, cpu otherwise)")
    parser.add_argument("--estimate", action="store_true",
                        help="scaling: time a few steps of each width here and print the plan's wall time; train nothing")
    parser.add_argument("--reanalyse", type=Path, default=None, metavar="RECORD",
                        help="scaling: refit a written scaling.json's runs with the current analysis")
    parser.add_argument("--add-runs", type=Path, nargs="*", default=[], metavar="RESULT",
                        help="scaling, with --reanalyse: result.json files of more runs (e.g. more seeds) to fit too")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        if args.experiment == "scaling":
            sys.path.insert(0, str(REPO / "scripts"))
            return scaling_command(parser, args)
        run_experiment(args.experiment, args.out, args.runs, tiny=args.tiny, data_files=tuple(args.data_files))
    except (HfVanillaError, OSError) as error:  # a refused or busy folder, a full disk: one sentence
        print(f"experiments.py {args.experiment}: {sentence(error)}", file=sys.stderr)
        return REFUSED
    return 0


if __name__ == "__main__":
    sys.exit(main())
