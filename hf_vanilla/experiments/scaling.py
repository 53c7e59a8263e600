"""The IsoFLOP sweep (Chinchilla's approach 2) on the project's English corpora (docs/experiments.md).

    python scripts/experiments.py scaling [--out docs/figures] [--runs runs/scaling] [--workers 2] [--tiny]
                                          [--device cpu|cuda] [--dtype float32|bfloat16] [--plan cpu|gpu]
                                          [--estimate] [--no-train]
                                          [--reanalyse RECORD [--add-runs FILE ...] [--rerun --runs FOLDER]]

A plan (``SweepPlan``) names compute budgets C, counted as C = (6 N + 12 L d T) D (scaling_fits.py says
why), and a family of decoders (width d and depth round(d/20) grown together, 8-dimensional heads, d_ff = 4d).
It is trained in two stages:

1. the learning rate: each width the sweep uses is trained at each of ``learning_rates`` at its home budget
   (of the budgets the frontier is fitted on, never one it predicts, the one using the width whose grid is
   centred nearest it; the nearest-centred fitted budget for a width only the predicted budgets use), one
   seed, and keeps the rate with the lowest loss on validation blocks held back from the training stream
   (never the held-out test text); a width whose best rate is the highest (lowest) it was tried at is tried
   at twice (half) that, ``rate_extensions`` times at most, so that the rate it keeps is bracketed;
2. the IsoFLOP runs: per budget, ``sizes_per_budget`` widths spread over ``size_span`` around the size at
   which D/N is ``tokens_per_parameter`` (the grid is centred where the first sweep's optima fell), each at
   its own learning rate, each with every seed; D = C / (6 N + 12 L d T) tokens, a cosine schedule ending at D.

A seed sets the initialisation and the order in which a run reads the training blocks. Each run's result
(``RUN/result.json``) is written atomically when it finishes and never re-trained, so a sweep stopped at any
point resumes where it stopped; ``--workers`` trains that many runs at once (one thread each) in compare's
runner (hf_vanilla/experiments/runner.py: its workers die with the sweep, one progress bar counts every
step); a run's held-out loss is compare's ``loss_at``, and a mean over seeds and a paired difference are
compare's statistics (hf_vanilla/experiments/statistics.py). ``--estimate``
times a few steps of every width here and prints the plan's wall time; ``--tiny`` is the same plan at dry-run
size (seconds: the test suite runs it); ``--reanalyse`` refits a committed record's runs with the current
analysis (``--add-runs`` adds result files, e.g. more seeds; ``--rerun`` first trains, resumably, the IsoFLOP
runs the record names as not yet rerun at their width's chosen rate). scripts/experiments.py is the command's door:
it calls :func:`sweep` and :func:`reanalyse`, which claim the output folder before anything trains.
"""

from __future__ import annotations

import json
import math
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hf_vanilla.configuration_vanilla import VanillaConfig
from hf_vanilla.errors import sentence
from hf_vanilla.experiments.experiment import claimed_outputs
from hf_vanilla.experiments.measures import loss_at
from hf_vanilla.experiments.report import machine
from hf_vanilla.experiments.runner import report_step, run_all
from hf_vanilla.experiments.scaling_fits import BASES, HELD_OUT, REFERENCE_EXPONENTS, analyse
from hf_vanilla.experiments.statistics import paired_difference
from hf_vanilla.files.atomic import atomic_write_text
from hf_vanilla.modeling_vanilla import VanillaForCausalLM

HEAD_SIZE = 8  # hidden units per attention head
DEPTH_RATIO = 20  # depth = round(width / DEPTH_RATIO): width and depth grow together
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class SweepPlan:
    """What one sweep trains: the budgets, the family's widths, the seeds, the learning-rate grid and the
    training recipe every run shares."""

    budgets: tuple[float, ...]  # FLOPs: (6 N + 12 L d T) D, or 6 N D without count_attention
    widths: tuple[int, ...]  # the family's model widths (depth follows)
    seeds: tuple[int, ...] = (0, 1, 2)
    learning_rates: tuple[float, ...] = (1e-3, 2e-3, 4e-3)  # one value: no learning-rate stage
    rate_extensions: int = 2  # times a width whose best rate is the highest (lowest) tried is tried at 2x (1/2x)
    sizes_per_budget: int = 5
    size_span: float = 16.0  # each budget's sizes run from N*/sqrt(span) to N*·sqrt(span) ...
    tokens_per_parameter: float = 80.0  # ... around the N* at which D/N is this (the first sweep's optima: 55-142)
    count_attention: bool = True  # budgets count attention's 12 L d T a token (the first sweep's did not)
    vocab_size: int = 512
    block_size: int = 128
    batch_size: int = 8
    warmup_fraction: float = 0.05
    final_lr_fraction: float = 0.1  # the cosine ends at this fraction of the peak (Chinchilla: 10x decay)
    held_out_windows: int = 96  # block_size-token windows scored per held-out corpus
    validation_windows: int = 96  # training blocks never trained on: the learning rate is chosen on them

    @property
    def tokens_per_step(self) -> int:
        return self.block_size * self.batch_size


# The first sweep (commit f7c0275, docs/figures/scaling-first-sweep.json): C = 6 N D, one seed, one learning rate for every
# size, the grid centred on 20 tokens a parameter. Kept so that its runs can be re-trained with more seeds.
FIRST = SweepPlan(budgets=tuple(10**10.5 * 10 ** (1.5 * i / 4) for i in range(5)),
                  widths=(8, 12, 16, 20, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128), seeds=(0,), learning_rates=(2e-3,),
                  tokens_per_parameter=20.0, count_attention=False, validation_windows=0)
# The seeded sweep, cut to fit 2.5 hours of the 2-core CPU with two workers (docs/experiments.md gives the
# estimate and what the cut costs): five budgets over 6.3x (the smallest is where the family's smallest width,
# d = 8, still lies two sizes below the centre), three seeds, three learning rates per width.
# Six extensions: the seeded sweep's two left widths 8-40 at the highest rate tried (issue 53).
CPU = replace(FIRST, budgets=tuple(10**11.1 * 10 ** (0.8 * i / 4) for i in range(5)), seeds=(0, 1, 2),
              learning_rates=(1e-3, 2e-3, 4e-3), rate_extensions=6, tokens_per_parameter=80.0, count_attention=True,
              validation_windows=96)
# The same sweep on a GPU: 100x the budgets, a wider family, larger batches, bfloat16 (not run: see the docs).
GPU = replace(CPU, budgets=tuple(c * 100 for c in CPU.budgets), widths=(32, 48, 64, 80, 96, 128, 160, 192, 256,
              320, 384, 448, 512), batch_size=32)
PLANS = {"cpu": CPU, "gpu": GPU}


def dry_run(plan: SweepPlan) -> SweepPlan:
    """``plan`` at dry-run size: its seeds, learning-rate grid, sizes per budget, span and compute count, with
    tiny models, short windows and budgets of a few hundred steps in all (the test suite trains it)."""
    return replace(plan, budgets=(8e6, 1.6e7, 3.2e7, 6.4e7, 1.28e8), widths=(8, 12, 16, 20, 24, 32, 40, 48, 56),
                   tokens_per_parameter=0.01, size_span=12.0, vocab_size=300, block_size=16,
                   batch_size=4, held_out_windows=8, validation_windows=min(plan.validation_windows, 8))


# --------------------------------------------------------------------------------------------------
# The model family and the runs of a plan


def depth_of(width: int) -> int:
    return max(1, round(width / DEPTH_RATIO))


def model_config(width: int, vocab_size: int, block_size: int):
    """The family's decoder at ``width``: the clm task's pre-norm decoder, no dropout."""
    return VanillaConfig(architecture="decoder", norm_position="pre", vocab_size=vocab_size, hidden_size=width,
                         intermediate_size=4 * width, num_hidden_layers=depth_of(width),
                         num_attention_heads=max(1, width // HEAD_SIZE), hidden_dropout=0.0, attention_dropout=0.0,
                         max_position_embeddings=block_size, pad_token_id=1, bos_token_id=0, eos_token_id=2)


def build_model(width: int, plan: SweepPlan):
    return VanillaForCausalLM(model_config(width, plan.vocab_size, plan.block_size))


def parameter_counts(model: torch.nn.Module) -> dict[str, int]:
    """N counted both ways: every distinct parameter, and without the token embedding and output head
    (the same matrix when tied, as here) or any position table."""
    total = sum(p.numel() for p in model.parameters())
    embedding = {id(p): p.numel() for m in (model.get_input_embeddings(), model.get_output_embeddings())
                 for p in m.parameters()}
    embedding.update({id(p): p.numel() for name, p in model.named_parameters() if "position" in name})
    return {"total": total, "non_embedding": total - sum(embedding.values())}


@dataclass(frozen=True)
class RunSpec:
    """One run: a budget, a width, a learning rate, a seed, and the length that spends the budget."""

    budget: float
    width: int
    depth: int
    parameters: int  # N, every parameter
    non_embedding_parameters: int
    steps: int
    tokens: int  # D actually trained on: steps · tokens per step
    target_tokens: float  # C / (6 N + 12 L d T), or C / (6 N) without count_attention
    learning_rate: float
    seed: int

    @property
    def name(self) -> str:
        return f"C{self.budget:.3g}-d{self.width}-lr{self.learning_rate:g}-s{self.seed}"


def family(plan: SweepPlan) -> dict[int, dict[str, int]]:
    """Each width's parameter counts (built once, on the meta device: the counts are the model's, not a
    formula's)."""
    with torch.device("meta"):
        return {w: parameter_counts(build_model(w, plan)) for w in plan.widths}


def flops_per_token(width: int, parameters: int, plan: SweepPlan) -> float:
    """The plan's count of a training token's compute: 6 N (+ attention's 12 L d T with count_attention)."""
    return 6 * parameters + (12 * depth_of(width) * width * plan.block_size if plan.count_attention else 0)


def grid_centre(budget: float, plan: SweepPlan, counts: dict[int, dict[str, int]]) -> float:
    """The N at which a budget's D/N is the plan's tokens_per_parameter (interpolated along the family in ln N)."""
    n = np.log([counts[w]["total"] for w in plan.widths])
    ratio = np.log([budget / flops_per_token(w, counts[w]["total"], plan) / counts[w]["total"] for w in plan.widths])
    return float(math.exp(np.interp(-math.log(plan.tokens_per_parameter), -ratio, n)))


def widths_for(budget: float, plan: SweepPlan, counts: dict[int, dict[str, int]]) -> list[int]:
    """The plan's sizes for one budget: the widths nearest (in ln N) to points spread evenly over
    [N*/sqrt(span), N*·sqrt(span)]. Two points landing on one width mean the family is too coarse there."""
    centre, k = grid_centre(budget, plan, counts), plan.sizes_per_budget
    targets = [centre * plan.size_span ** (i / (k - 1) - 0.5) for i in range(k)]
    chosen = [min(counts, key=lambda w, t=t: abs(math.log(counts[w]["total"] / t))) for t in targets]
    if len(set(chosen)) != k:
        raise ValueError(f"budget {budget:.3g}: the family's widths {plan.widths} give only {len(set(chosen))} "
                         f"distinct sizes near N* = {centre:.3g}; add widths or widen size_span")
    return chosen


def spec(budget: float, width: int, plan: SweepPlan, counts: dict[int, dict[str, int]], learning_rate: float,
         seed: int) -> RunSpec:
    n = counts[width]["total"]
    target = budget / flops_per_token(width, n, plan)
    steps = max(1, round(target / plan.tokens_per_step))
    return RunSpec(budget, width, depth_of(width), n, counts[width]["non_embedding"], steps,
                   steps * plan.tokens_per_step, target, learning_rate, seed)


def rate_budgets(plan: SweepPlan) -> tuple[float, ...]:
    """The budgets a learning rate may be chosen at: those the frontier is fitted on, never one it predicts
    (every budget when the plan has too few to predict any)."""
    return plan.budgets[:-HELD_OUT] if len(plan.budgets) >= 3 + HELD_OUT else plan.budgets


def home_budgets(plan: SweepPlan, counts: dict[int, dict[str, int]]) -> dict[int, float]:
    """Each width the sweep uses and where its rate is chosen: of the rate budgets using it, the one whose grid
    centre lies nearest it in ln N; for a width only the predicted budgets use, the nearest-centred rate budget."""
    allowed = rate_budgets(plan)
    centres = {b: grid_centre(b, plan, counts) for b in allowed}
    sizes = {b: widths_for(b, plan, counts) for b in plan.budgets}
    used = sorted({w for b in plan.budgets for w in sizes[b]})

    def home(width: int) -> float:
        where = [b for b in allowed if width in sizes[b]] or list(allowed)
        return min(where, key=lambda b: abs(math.log(counts[width]["total"] / centres[b])))

    return {w: home(w) for w in used}


def learning_rate_specs(plan: SweepPlan, counts: dict[int, dict[str, int]] | None = None) -> list[RunSpec]:
    """Stage 1: every width the sweep uses, at its home budget, once per learning rate (the first seed)."""
    if len(plan.learning_rates) == 1:
        return []
    counts = counts or family(plan)
    return [spec(b, w, plan, counts, lr, plan.seeds[0]) for w, b in home_budgets(plan, counts).items()
            for lr in plan.learning_rates]


def isoflop_specs(plan: SweepPlan, rates: dict[int, float], counts: dict[int, dict[str, int]] | None = None
                  ) -> list[RunSpec]:
    """Stage 2: per budget its sizes, each at its chosen learning rate, once per seed."""
    counts = counts or family(plan)
    return [spec(b, w, plan, counts, rates[w], seed) for b in plan.budgets for w in widths_for(b, plan, counts)
            for seed in plan.seeds]


def edge_rate_specs(plan: SweepPlan, counts: dict[int, dict[str, int]], results: list[dict[str, Any]]
                    ) -> list[RunSpec]:
    """Stage 1 extended: each width whose best rate so far is the highest (lowest) it was tried at is tried at
    twice (half) that, at its home budget, so that a chosen rate has a worse one on each side."""
    if len(plan.learning_rates) == 1:
        return []
    homes, extra = home_budgets(plan, counts), []
    for width, best in choose_learning_rates(plan, results).items():
        tried = sorted(r["learning_rate"] for r in results if r["width"] == width)
        beyond = best * 2 if best == tried[-1] else best / 2 if best == tried[0] else None
        if beyond is not None:
            extra.append(spec(homes[width], width, plan, counts, beyond, plan.seeds[0]))
    return extra


def choose_learning_rates(plan: SweepPlan, results: list[dict[str, Any]]) -> dict[int, float]:
    """Each width's learning rate with the lowest validation loss (a diverged run loses); with one rate, it."""
    if len(plan.learning_rates) == 1:
        return {w: plan.learning_rates[0] for w in plan.widths}
    best: dict[int, tuple[float, float]] = {}
    for r in results:
        loss = r["validation_loss"] if r["validation_loss"] is not None else math.inf
        if r["width"] not in best or loss < best[r["width"]][0]:
            best[r["width"]] = (loss, r["learning_rate"])
    return {w: lr for w, (_, lr) in best.items()}


def learning_rate_factor(step: int, steps: int, plan: SweepPlan) -> float:
    """Linear warm-up, then a cosine from the peak to ``final_lr_fraction`` of it exactly at the last step."""
    warmup = max(1, round(plan.warmup_fraction * steps))
    if step < warmup:
        return (step + 1) / warmup
    progress = 1.0 if step >= steps - 1 else (step - warmup) / (steps - 1 - warmup)
    return plan.final_lr_fraction + (1 - plan.final_lr_fraction) * 0.5 * (1 + math.cos(math.pi * progress))


# --------------------------------------------------------------------------------------------------
# Data: one tokenizer, one shuffled stream of training blocks, one held-out set, shared by every run


def english_corpora() -> dict[str, dict[str, list[str]]]:
    """Training and held-out documents of the three English corpora: Shakespeare's works, the KJV's books
    (English side, verses of a book joined), BBC News articles; held-out = their test works, books, articles."""
    # the corpora need the [train] extra (datasets): only when the sweep reads its data
    from hf_vanilla.corpora import load_bbc_news, load_bible_pairs, load_shakespeare

    def books(split) -> list[str]:
        joined: dict[str, list[str]] = {}
        for book, verse in zip(split["book"], split["en"], strict=True):
            joined.setdefault(book, []).append(verse)
        return [" ".join(verses) for verses in joined.values()]

    shakespeare, bible, bbc = load_shakespeare(sample_by="document"), load_bible_pairs(), load_bbc_news()
    return {"train": {"shakespeare": list(shakespeare["train"]["text"]), "bible": books(bible["train"]),
                      "bbc": list(bbc["train"]["text"])},
            "test": {"shakespeare": list(shakespeare["test"]["text"]), "bible": books(bible["test"]),
                     "bbc": list(bbc["test"]["text"])}}


def local_corpora(data_files: list[str]) -> dict[str, dict[str, list[str]]]:
    """``train=PATH`` and ``test=PATH`` text files, documents separated by blank lines."""
    splits: dict[str, dict[str, list[str]]] = {"train": {}, "test": {}}
    for item in data_files:
        split, sep, path = item.partition("=")
        if not sep or split not in splits:
            raise ValueError(f"--data-files for scaling takes train=PATH and test=PATH, got {item!r}")
        text = Path(path).read_text(encoding="utf-8")
        splits[split][Path(path).stem] = [d.strip() for d in text.split("\n\n") if d.strip()]
    if not splits["train"] or not splits["test"]:
        raise ValueError("--data-files for scaling needs both a train=PATH and a test=PATH file")
    return splits


def token_stream(tokenizer, documents: list[str]) -> list[int]:
    """Documents joined by </s>, as the clm task joins them."""
    ids: list[int] = []
    for encoded in tokenizer(documents, add_special_tokens=False)["input_ids"]:
        ids.extend(encoded + [tokenizer.eos_token_id])
    return ids


def prepare_data(plan: SweepPlan, load_corpora: Callable[[], dict[str, dict[str, list[str]]]], folder: Path
                 ) -> dict[str, Any]:
    """Train the tokenizer on the training documents; cut the training stream into blocks, keep
    ``validation_windows`` evenly spaced ones out of training (the learning rate is chosen on them), and cut
    each held-out corpus into ``held_out_windows`` evenly spaced windows; save them (a resumed sweep loads
    them). Each run reads the training blocks in its seed's order (``run_order``)."""
    # the corpora need the [train] extra (datasets): only when the sweep reads its data
    from hf_vanilla.corpora import train_tokenizer

    path = folder / "data.pt"
    if path.exists():
        return torch.load(path)
    corpora = load_corpora()
    documents = [d for docs in corpora["train"].values() for d in docs]
    tokenizer = train_tokenizer(documents, vocab_size=plan.vocab_size, add_eos=False)
    tokenizer.save_pretrained(folder / "tokenizer")
    train = torch.tensor(token_stream(tokenizer, documents))
    blocks = train[: len(train) // plan.block_size * plan.block_size].view(-1, plan.block_size)
    kept = torch.ones(len(blocks), dtype=torch.bool)
    kept[torch.linspace(0, len(blocks) - 1, plan.validation_windows).round().long()] = False
    held_out = {}
    for name, docs in corpora["test"].items():
        stream = torch.tensor(token_stream(tokenizer, docs))
        windows = stream[: len(stream) // plan.block_size * plan.block_size].view(-1, plan.block_size)
        pick = torch.linspace(0, len(windows) - 1, min(plan.held_out_windows, len(windows))).round().long()
        held_out[name] = windows[pick]
    data = {"blocks": blocks[kept], "validation": blocks[~kept], "held_out": held_out, "vocab_size": len(tokenizer),
            "train_characters": {k: sum(map(len, v)) for k, v in corpora["train"].items()},
            "train_tokens": len(train)}
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(data, path)
    return data


# --------------------------------------------------------------------------------------------------
# One run


def run_order(blocks: torch.Tensor, seed: int) -> torch.Tensor:
    """The training blocks in the order seed ``seed`` reads them (seed 0's is the first sweep's order)."""
    return blocks[torch.randperm(len(blocks), generator=torch.Generator().manual_seed(seed))]


def batches(blocks: torch.Tensor, steps: int, batch_size: int):
    """The first steps·batch_size blocks of an order (wrapping round, i.e. repeating, only if needed)."""
    for step in range(steps):
        index = torch.arange(step * batch_size, (step + 1) * batch_size) % len(blocks)
        yield blocks[index]


def held_out_loss(model, held_out: dict[str, torch.Tensor], autocast) -> dict[str, float]:
    """Mean next-token loss (nats) per held-out corpus and over all their scored tokens together: each window
    scored alone, every token but its first (compare's ``loss_at`` at the training length)."""
    losses, counts = {}, {}
    with autocast:
        for name, windows in held_out.items():
            losses[name] = loss_at(model, windows.reshape(-1), windows.shape[1], windows.shape[1])
            counts[name] = windows.numel() - len(windows)  # every token but each window's first
    losses["all"] = sum(losses[k] * counts[k] for k in counts) / sum(counts.values())
    return losses


def train_run(spec: RunSpec, plan: SweepPlan, folder: Path, device: str = "cpu", dtype: str = "float32"
              ) -> dict[str, Any]:
    """Train one run to its D tokens; write and return its result (the held-out and validation losses, the
    curve, the time). A run whose loss turns NaN/inf is recorded as diverged (no losses), not raised."""
    data = torch.load(folder / "data.pt")
    torch.manual_seed(spec.seed)
    model = build_model(spec.width, plan).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.learning_rate, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: learning_rate_factor(s, spec.steps, plan))
    autocast = torch.autocast(torch.device(device).type, dtype=DTYPES[dtype], enabled=dtype != "float32")
    curve, rates, diverged_at, start = [], [], None, time.perf_counter()
    log_every = max(1, spec.steps // 50)
    for step, batch in enumerate(batches(run_order(data["blocks"], spec.seed), spec.steps, plan.batch_size)):
        batch = batch.to(device)
        with autocast:
            loss = model(input_ids=batch, labels=batch).loss
        if not torch.isfinite(loss):
            diverged_at = step
            break
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        rates.append(schedule.get_last_lr()[0])
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if step % log_every == 0 or step == spec.steps - 1:
            curve.append((step + 1, round(loss.item(), 4)))
            report_step(spec.name, step + 1)
        if (step + 1) % max(1, spec.steps // 4) == 0 and step + 1 < spec.steps:
            print(f"{spec.name}: step {step + 1} of {spec.steps}, loss {loss.item():.3f}", flush=True)
    train_time = time.perf_counter() - start
    model.eval()
    scored = diverged_at is None
    result = dict(asdict(spec), name=spec.name, diverged_at=diverged_at,
                  held_out_loss=held_out_loss(model, data["held_out"], autocast) if scored else None,
                  validation_loss=held_out_loss(model, {"validation": data["validation"]}, autocast)["all"]
                  if scored and len(data["validation"]) else None,
                  train_curve=curve, first_lr=rates[0] if rates else None, last_lr=rates[-1] if rates else None,
                  epochs=spec.steps * plan.batch_size / len(data["blocks"]), train_time_s=round(train_time, 1),
                  seconds_per_step=train_time / max(1, len(rates)), device=device, dtype=dtype)
    run_dir = folder / spec.name
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / "result.json", json.dumps(result, indent=1) + "\n")  # a kill never leaves half
    outcome = f"held-out loss {result['held_out_loss']['all']:.4f}" if scored else f"diverged at step {diverged_at}"
    print(f"{spec.name}: N={spec.parameters:,} D={spec.tokens:,} ({spec.steps} steps) {outcome} in "
          f"{train_time:.0f} s", flush=True)
    return result


def claim_folder(plan: SweepPlan, folder: Path) -> None:
    """Mark ``folder`` as this plan's (kept results are only reused by the same plan)."""
    path, wanted = folder / "plan.json", json.dumps(asdict(plan), indent=1)
    if path.exists() and path.read_text(encoding="utf-8") != wanted:
        raise ValueError(f"{folder} holds runs of another sweep plan ({path}); pass another --runs folder")
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, wanted)


def finished(spec: RunSpec, folder: Path) -> dict[str, Any] | None:
    path = folder / spec.name / "result.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def train_all(specs: list[RunSpec], plan: SweepPlan, folder: Path, workers: int, device: str, dtype: str,
              order: Callable[[RunSpec], Any] = lambda s: (s.budget, -s.steps)) -> list[dict[str, Any]]:
    """Every run's result: kept ones read back, the others trained by compare's runner (``workers`` processes of
    one thread each that die with the sweep, or in this process with one worker) in ``order``: by default
    smallest budget first so that an interrupted sweep leaves whole budgets to fit. Runs of the same name (a
    stage-1 run that is also a stage-2 one) are trained once; a run that fails stops the sweep, once the
    others have finished."""
    specs = sorted({s.name: s for s in specs}.values(), key=order)
    print(f"{sum(finished(s, folder) is not None for s in specs)} of {len(specs)} runs already finished in {folder}",
          flush=True)
    outcomes = run_all(specs, workers if workers > 1 else 0, 1, recorded=partial(finished_outcome, folder=folder),
                       execute_run=partial(train_job, plan=plan, folder=folder, device=device, dtype=dtype))
    failed = [f"{name}: {found['detail']}" for name, found in outcomes.items() if found["status"] == "failed"]
    if failed:
        raise RuntimeError(f"{len(failed)} scaling run(s) failed ({'; '.join(failed)}); the finished ones are kept "
                           "and the same command trains the rest")
    return [finished(s, folder) for s in specs]  # type: ignore[misc]


def finished_outcome(spec: RunSpec, folder: Path) -> dict[str, Any] | None:
    """A kept run's result as the runner reads an outcome (with its status)."""
    found = finished(spec, folder)
    return None if found is None else dict(found, status="diverged" if found["diverged_at"] is not None else "completed")


def train_job(spec: RunSpec, deadline: float | None, plan: SweepPlan, folder: Path, device: str, dtype: str
              ) -> dict[str, Any]:
    """One run as the runner's workers execute it (the sweep sets no deadline): its result file written, its
    outcome returned; an error is the run's outcome ("failed"), not the worker's end."""
    try:
        train_run(spec, plan, folder, device, dtype)
    except Exception as error:  # noqa: BLE001 -- reported by train_all, after the other runs
        traceback.print_exc()
        return dict(status="failed", detail=sentence(error))
    return finished_outcome(spec, folder)  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------------
# Time: measured step costs and the plan's wall time


def step_seconds(plan: SweepPlan, widths: list[int], steps: int = 6, device: str = "cpu") -> dict[int, float]:
    """Seconds a training step of each width takes here (one thread, random tokens, after two warm-up steps)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        seconds = {}
        for width in widths:
            model = build_model(width, plan).to(device).train()
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
            batch = torch.randint(3, plan.vocab_size, (plan.batch_size, plan.block_size), device=device)
            for step in range(steps + 2):
                if step == 2:
                    start = time.perf_counter()
                model(input_ids=batch, labels=batch).loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            seconds[width] = (time.perf_counter() - start) / steps
        return seconds
    finally:
        torch.set_num_threads(threads)


def all_specs(plan: SweepPlan, counts: dict[int, dict[str, int]] | None = None) -> list[RunSpec]:
    """Every run of both stages as one list (stage 2 at the first learning rate: a run's cost does not
    depend on its rate), runs of one name once."""
    counts = counts or family(plan)
    home = home_budgets(plan, counts)
    stage2 = isoflop_specs(plan, {w: plan.learning_rates[0] for w in plan.widths}, counts)
    # the home budget's first-seed run at the chosen rate is a stage-1 run already
    stage2 = [s for s in stage2 if len(plan.learning_rates) == 1 or not (s.seed == plan.seeds[0]
                                                                         and home.get(s.width) == s.budget)]
    return list({s.name: s for s in learning_rate_specs(plan, counts) + stage2}.values())


def wall_time(durations: list[float], workers: int) -> float:
    """Seconds ``workers`` take over jobs of these durations, each given to the first free worker, longest
    first (how train_all orders a budget's runs)."""
    free = [0.0] * workers
    for duration in sorted(durations, reverse=True):
        free[free.index(min(free))] += duration
    return max(free)


def estimate(plan: SweepPlan, seconds: dict[int, float], workers: int) -> dict[str, Any]:
    """The plan's runs, steps and wall time from measured seconds a step (stage 1 then stage 2: the second
    cannot start before the first has chosen the rates)."""
    counts = family(plan)
    stage1 = {s.name for s in learning_rate_specs(plan, counts)}
    runs = all_specs(plan, counts)
    cost = {s.name: s.steps * seconds[s.width] for s in runs}
    first = wall_time([cost[n] for n in stage1], workers)
    second = wall_time([cost[s.name] for s in runs if s.name not in stage1], workers)
    return dict(runs=len(runs), learning_rate_runs=len(stage1), steps=sum(s.steps for s in runs),
                train_seconds=sum(cost.values()), wall_seconds=first + second, workers=workers,
                seconds_per_step={str(w): seconds[w] for w in sorted(seconds)}, load_average=os.getloadavg())


# --------------------------------------------------------------------------------------------------
# Output: table, figures, record


def _interval(values: list[float] | None, fmt: str = "{:.3f}") -> str:
    return f"[{fmt.format(values[0])}, {fmt.format(values[1])}]" if values else "[none]"


def _spread(sd: float | None) -> str:
    return f"± {sd:.4f}" if sd is not None else "(one seed: spread not measured)"


def _rate_stage_lines(record: dict[str, Any]) -> list[str]:
    """The learning-rate stage's runs, one row each, the chosen rate of each width marked (none without the stage)."""
    if not record.get("learning_rate_runs"):
        return []
    lines = ["| width | home budget | learning rate | steps | validation loss | held-out loss | chosen |",
             "|---|---|---|---|---|---|---|"]
    for r in sorted(record["learning_rate_runs"], key=lambda r: (r["width"], r["learning_rate"])):
        loss = f"{r['validation_loss']:.4f}" if r["validation_loss"] is not None else f"diverged ({r['diverged_at']})"
        held = f"{r['held_out_loss']['all']:.4f}" if r["held_out_loss"] else ""
        chosen = "✓" if record["learning_rates"].get(str(r["width"])) == r["learning_rate"] else ""
        if chosen and not record.get("bracketed", {}).get(str(r["width"]), True):
            chosen = "✓ (not bracketed)"
        lines.append(f"| {r['width']} | {r['budget']:.3g} | {r['learning_rate']:g} | {r['steps']:,} | {loss} | "
                     f"{held} | {chosen} |")
    lines.append("")
    return lines


def _prediction_lines(p: dict[str, Any]) -> list[str]:
    """The frontier and each held-out budget's prediction against its measured loss."""
    f = p["frontier"]
    lines = [f"Frontier {f['form']} = {f['E']:.3f} + {f['A']:.3f}·(C/{f['reference_budget']:.3g})^-{f['alpha']:.3f}, "
             f"fitted on the budgets {', '.join(f'{c:.3g}' for c in p['fitted_budgets'])}.", "",
             "| held-out budget | C (best run) | predicted (95%) | prediction's seed sd | measured (seed se, seeds) | "
             "error | error / combined seed se | log-log line: error |", "|---|---|---|---|---|---|---|---|"]
    for q in p["predictions"]:
        ratio = f"{q['error_in_combined_se']:+.1f}" if q.get("error_in_combined_se") is not None else "not measured"
        se = f"± {q['measured_seed_se']:.4f}" if q.get("measured_seed_se") else "(one seed)"
        sd = f"{q['prediction_seed_sd']:.4f}" if q.get("prediction_seed_sd") is not None else ""
        lines.append(f"| {q['budget']:.3g} | {q['compute']:.3g} | {q['predicted_loss']:.4f} "
                     f"{_interval(q['predicted_ci95'], '{:.4f}')} | {sd} | {q['measured_loss']:.4f} {se}, {q['seeds']} | "
                     f"{q['error']:+.4f} ({100 * q['relative_error']:+.2f}%) | {ratio} | {q['baseline_error']:+.4f} |")
    return lines


def scaling_table(record: dict[str, Any]) -> str:
    """The runs (one row each), the learning-rate stage, the fits in both bases and the predictions, in Markdown."""
    analysis = record["analysis"]
    lines = [f"**Partial sweep**: {len(record['missing_runs'])} runs not finished ({', '.join(record['missing_runs'])});"
             " only budgets whose runs all finished are fitted.", ""] if record["partial"] else []
    lines += _rate_stage_lines(record)
    for width, v in record.get("rates_not_rerun", {}).items():
        gain = f"{v['held_out_gain_at_home']:+.4f}" if v["held_out_gain_at_home"] is not None else "not measured"
        chosen = f"its chosen {v['chosen']:g}" if v["chosen"] else "a rate (none tried at its home budget yet)"
        lines.append(f"Width {width}: IsoFLOP runs at {v['used']:g}, not rerun at {chosen} "
                     f"(held-out gain at {v['home_budget']:.3g}, one seed: {gain}).")
    for width, c in record.get("rate_changes", {}).items():
        lines.append(f"Width {width}: IsoFLOP runs moved from {c['earlier_rate']:g} to {c['rate']:g}; held-out loss "
                     f"change, paired by budget and seed ({c['n']} pairs): {c['mean']:+.4f} "
                     f"[{c['low']:+.4f}, {c['high']:+.4f}] (95%, t).")
    sensitivity = analysis.get("rate_sensitivity")
    if sensitivity:
        lines += ["", f"With those widths' losses lowered by their gains: a = {sensitivity['a']:.3f} (total), "
                  f"{sensitivity['kaplan_a']:.3f} (Kaplan's basis).", ""]
    lines += ["| budget C (FLOPs) | width × depth | N | N non-emb. | D (tokens) | steps | lr | seed | held-out loss |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in record["runs"]:
        lines.append(f"| {r['budget']:.3g} | {r['width']}×{r['depth']} | {r['parameters']:,} | "
                     f"{r['non_embedding_parameters']:,} | {r['tokens']:,} | {r['steps']:,} | {r['learning_rate']:g} | "
                     f"{r['seed']} | {r['held_out_loss']['all']:.4f} |")
    lines += ["", f"Compute counted as {analysis['compute']}; each basis counts N and C the same way.", "",
              "| budget | basis | N_opt (95% interval) | C at N_opt | D_opt/N_opt | sizes below / above | best loss (seed sd) |",
              "|---|---|---|---|---|---|---|"]
    for b in analysis["per_budget"]:
        for basis in BASES:
            fit = b["fits"][basis]
            if fit["n_opt"] is None:
                lines.append(f"| {b['budget']:.3g} | {basis} | no minimum | | | | |")
                continue
            best = f"{b['best_loss']:.4f} {_spread(b['best_loss_seed_sd'])}, {len(b['seeds'])} seed(s)" \
                if basis == "total" else ""
            lines.append(f"| {b['budget']:.3g} | {basis} | {fit['n_opt']:,.0f} {_interval(fit['n_opt_ci95'], '{:,.0f}')} | "
                         f"{fit['compute']:.3g} | {fit['d_opt'] / fit['n_opt']:.1f} | {fit['sizes_below']} / "
                         f"{fit['sizes_above']} | {best} |")
    lines += ["", "| exponent | basis | measured (95%, per-size seed noise) | OLS over the optima (95%, t) | "
              "sizes resampled (95%) | Chinchilla | Kaplan |", "|---|---|---|---|---|---|---|"]
    (ch_a, ch_b), (ka_a, ka_b) = REFERENCE_EXPONENTS.values()
    for basis in BASES:
        fit = analysis["exponents"][basis]
        for label, key, ch, ka in (("a (N_opt ∝ C^a)", "a", ch_a, ka_a), ("b (D_opt ∝ C^b)", "b", ch_b, ka_b)):
            if fit is None or fit[key] is None:
                continue
            e = fit[key]
            lines.append(f"| {label} | {basis} | {e['exponent']:.3f} {_interval(e['ci95'])} | {e['ols_exponent']:.3f} "
                         f"{_interval(e.get('ols_ci95'))} | {_interval(e.get('case_ci95'))} | {ch:.2f} | {ka:.2f} |")
    for basis, choices in analysis.get("fit_choices", {}).items():
        if choices["range"]:
            lines += ["", f"Other per-budget fits ({basis} basis, OLS across budgets): " + "; ".join(
                f"{name} {value:.3f}" for name, value in choices["exponents"].items() if value is not None)
                + f": a from {choices['range'][0]:.3f} to {choices['range'][1]:.3f}."]
    p = analysis["prediction"]
    lines.append("")
    if p["status"] != "ok":
        return "\n".join([*lines, f"No prediction ({p['status']}).", ""])
    return "\n".join([*lines, *_prediction_lines(p)]) + "\n"


def plot_scaling(record: dict[str, Any], path: Path) -> None:
    """Three panels: the IsoFLOP curves (every run, the seed means, the parabolas); N_opt against C in both
    bases with their intervals; the frontier and its held-out predictions."""
    # matplotlib (the [viz] extra) only when the figure is drawn
    from hf_vanilla.tools.viz import Picture, _new_figure

    analysis, runs = record["analysis"], record["runs"]
    figure = _new_figure(17, 4.8)
    iso, opt, front = (figure.add_subplot(1, 3, i) for i in (1, 2, 3))
    for i, b in enumerate(analysis["per_budget"]):
        color = f"C{i}"
        points = [(r["parameters"], r["held_out_loss"]["all"]) for r in runs if r["budget"] == b["budget"]]
        iso.plot(*zip(*points, strict=True), ".", color=color, alpha=0.5)
        iso.plot(b["sizes"], b["mean_loss_by_size"], "o", color=color, label=f"C = {b['budget']:.2g}")
        grid = np.linspace(math.log(b["sizes"][0]), math.log(b["sizes"][-1]), 100)
        iso.plot(np.exp(grid), np.polyval(b["fits"]["total"]["coefficients"], grid), "-", color=color, lw=1)
        if b["fits"]["total"]["n_opt"]:
            iso.plot(b["fits"]["total"]["n_opt"], b["fits"]["total"]["loss_at_opt"], "*", color=color, ms=12)
    _finish(iso, "parameters N (all, tied embedding once)", "held-out loss (nats per token)",
            "IsoFLOP curves (· runs, o seed means, ★ minimum)")
    for basis, marker in zip(BASES, ("o", "s", "^"), strict=True):
        fits = [b["fits"][basis] for b in analysis["per_budget"] if b["fits"][basis]["n_opt_ci95"]]
        if not fits:
            continue
        c, n = np.array([f["compute"] for f in fits]), np.array([f["n_opt"] for f in fits])
        low, high = np.array([f["n_opt_ci95"] for f in fits]).T
        fit = analysis["exponents"][basis]
        label = f"N_opt ({basis})" + (f", a = {fit['a']['exponent']:.2f}" if fit else "")
        opt.errorbar(c, n, yerr=[np.maximum(n - low, 0), np.maximum(high - n, 0)], fmt=marker, capsize=3, label=label)
    opt.set_yscale("log")
    _finish(opt, "compute C in the basis's count (FLOPs)", "compute-optimal N (95% interval)",
            "N_opt against compute, one basis per series")
    p = analysis["prediction"]
    best = [(b["best_compute"], b["best_loss"]) for b in analysis["per_budget"]]
    if p["status"] == "ok":
        fitted = best[: len(p["fitted_budgets"])]
        front.plot(*zip(*fitted, strict=True), "o", color="k", label="fitted budgets (best size, seed mean)")
        f = p["frontier"]
        grid = np.geomspace(best[0][0], best[-1][0] * 1.5, 100)
        front.plot(grid, frontier_values(f, grid), "-", color="k", lw=1, label=f"{f['form']}, α = {f['alpha']:.2f}")
        for q in p["predictions"]:
            front.plot(q["compute"], q["measured_loss"], "o", color="tab:red", mfc="none", ms=10)
            ci = q["predicted_ci95"] or [q["predicted_loss"]] * 2
            front.errorbar(q["compute"], q["predicted_loss"], fmt="x", color="tab:red", ms=10, capsize=3,
                           yerr=[[max(0, q["predicted_loss"] - ci[0])], [max(0, ci[1] - q["predicted_loss"])]])
        front.plot([], [], "o", color="tab:red", mfc="none", label="held out, measured")
        front.plot([], [], "x", color="tab:red", label="held out, predicted (95%)")
    elif best:
        front.plot(*zip(*best, strict=True), "o", color="k", label=f"best size per budget ({p['status']})")
    _finish(front, "compute C (FLOPs, total basis)", "best held-out loss", "Frontier: two budgets predicted")
    Picture(figure).save(path)


def _finish(axes, xlabel: str, ylabel: str, title: str) -> None:
    """A panel's log x-axis, labels, title and legend (when it has labelled series)."""
    axes.set_xscale("log")
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize=8)


def frontier_values(frontier: dict[str, Any], budgets: np.ndarray) -> np.ndarray:
    return frontier["E"] + frontier["A"] * (budgets / frontier["reference_budget"]) ** -frontier["alpha"]


def check_device(device: str, dtype: str) -> None:
    """Refuse a device torch cannot use here, or a dtype the sweep does not train in, before anything runs."""
    if dtype not in DTYPES:
        raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    try:
        kind = torch.device(device).type
    except RuntimeError:
        raise ValueError(f"--device {device!r} is not a torch device; pass cpu, cuda or cuda:N") from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: torch sees no CUDA device here (torch.cuda.is_available() is False);"
                         " run on a GPU machine or pass --device cpu")


def choose_plan(plan: str | None, device: str, tiny: bool) -> SweepPlan:
    """The named plan (default: gpu on a CUDA device, else cpu), at dry-run size with ``tiny``."""
    chosen = PLANS[plan or ("gpu" if torch.device(device).type == "cuda" else "cpu")]
    return dry_run(chosen) if tiny else chosen


def measure_sweep(runs: Path, plan: SweepPlan, data_files: tuple[str, ...], workers: int, device: str, dtype: str,
                  train: bool, where: dict[str, Any]) -> dict[str, Any]:
    """Train (or read back) the learning-rate stage, then the IsoFLOP runs at the chosen rates, and fit them
    (``where``: the provenance the record keeps). ``train=False`` trains nothing and fits the budgets whose runs
    have all finished (a partial sweep, marked so in the record)."""
    start = time.perf_counter()
    claim_folder(plan, runs)
    data = prepare_data(plan, lambda: local_corpora(list(data_files)) if data_files else english_corpora(), runs)
    counts = family(plan)

    def stage(specs: list[RunSpec]) -> list[dict[str, Any]]:
        done = train_all(specs, plan, runs, workers, device, dtype) if train else [finished(s, runs) for s in specs]
        return [r for r in done if r is not None]

    stage1 = learning_rate_specs(plan, counts)
    rate_runs = stage(stage1)
    missing = sorted({s.name for s in stage1} - {r["name"] for r in rate_runs})
    for _ in range(plan.rate_extensions if not missing else 0):
        extension = edge_rate_specs(plan, counts, rate_runs)
        rate_runs += stage(extension)
        missing = sorted({s.name for s in extension} - {r["name"] for r in rate_runs})
        if not extension or missing:
            break
    rates = choose_learning_rates(plan, rate_runs) if not missing else {}
    stage2 = isoflop_specs(plan, rates, counts) if not missing else []
    results = stage(stage2)
    done = {r["name"] for r in results if r["diverged_at"] is None}
    missing += [s.name for s in stage2 if s.name not in done]
    budgets = tuple(b for b in plan.budgets if stage2 and not any(s.budget == b and s.name not in done for s in stage2))
    results = [r for r in results if r["budget"] in budgets]
    return dict(experiment="scaling", plan=asdict(plan), workers=workers, device=device, dtype=dtype,
                partial=bool(missing), missing_runs=missing, **where, train_tokens=data["train_tokens"],
                train_characters=data["train_characters"],
                held_out_tokens={k: int(v.numel()) for k, v in data["held_out"].items()},
                learning_rate_runs=rate_runs, learning_rates={str(w): lr for w, lr in rates.items()},
                rate_homes={str(w): b for w, b in home_budgets(plan, counts).items()},
                runs=results, analysis=analyse(results, budgets, plan.block_size), load_average_at_end=os.getloadavg(),
                wall_time_s=round(time.perf_counter() - start, 1),
                train_time_s=round(sum(r["train_time_s"] for r in rate_runs + results), 1),
                data=list(data_files) or "Shakespeare, KJV (English), BBC News (hf_vanilla.corpora)")


def reanalysed(record: dict[str, Any], added: list[dict[str, Any]], where: dict[str, Any]) -> dict[str, Any]:
    """A written record refitted with this analysis, with ``added`` result files (more seeds, more rates):
    with a learning-rate stage, the rates are chosen again by this protocol (``rechoose_rates``)."""
    plan = record["plan"]
    for run in record["runs"]:  # the first sweep's runs: one seed, one rate, both then fields of the plan
        run.setdefault("seed", plan.get("seed", 0))
        run.setdefault("learning_rate", plan.get("learning_rate"))
    known = {r["name"] for r in record["runs"] + record.get("learning_rate_runs", []) + record.get("superseded_runs", [])}
    keys = [(r["budget"], r["width"], r["learning_rate"], r["seed"]) for r in record["runs"] + added]
    if len(set(keys)) != len(keys) or known & {r["name"] for r in added}:
        raise ValueError("--add-runs repeats a run the record has (same budget, width, rate and seed); drop it")
    unknown = {r["budget"] for r in added} - set(plan["budgets"])
    if unknown:
        raise ValueError(f"--add-runs has runs of budgets the record's plan does not have: {sorted(unknown)}")
    before = {r["name"] for r in record.get("learning_rate_runs", [])}
    if record.get("learning_rate_runs"):
        record = dict(record, **rechoose_rates(record, added))
    else:
        record = dict(record, runs=record["runs"] + added)
    record["reanalysed"] = with_history(record.get("reanalysed"), where,
                                        [dict(name=r["name"], why=why_added(record, r, before)) for r in added])
    if record.get("superseded_runs"):
        record["rate_changes"] = rate_changes(record)
    runs = record["runs"]
    budgets = tuple(b for b in plan["budgets"] if any(r["budget"] == b for r in runs))
    record.update(runs=sorted(runs, key=lambda r: (r["budget"], r["parameters"], r["seed"])),
                  analysis=analyse(runs, budgets, plan["block_size"]))
    if record.get("rates_not_rerun"):
        record["analysis"]["rate_sensitivity"] = rate_sensitivity(record, budgets)
    return record


def with_history(earlier: dict[str, Any] | None, where: dict[str, Any], added: list[dict[str, Any]]) -> dict[str, Any]:
    """This re-analysis's provenance and the runs it added, after those every earlier re-analysis added (each
    entry with the commit that added it) and the earlier provenances: the record keeps why each run is in it."""
    if not earlier:
        return dict(where, added_runs=[dict(a, commit=where.get("commit")) for a in added])
    previous = {k: v for k, v in earlier.items() if k not in ("added_runs", "earlier")}
    kept = [dict(a, commit=a.get("commit", previous.get("commit"))) for a in earlier.get("added_runs", [])]
    return dict(where, added_runs=kept + [dict(a, commit=where.get("commit")) for a in added],
                earlier=[*earlier.get("earlier", []), previous])


def rate_changes(record: dict[str, Any]) -> dict[str, Any]:
    """Per width whose IsoFLOP runs are at another rate than its earlier (superseded) ones: the held-out loss at
    the rate now used minus at the earlier one, paired by budget and seed (the same initialisation and data
    order), its mean over the pairs and the t interval of that mean (compare's ``paired_difference``)."""
    pool = {(r["budget"], r["width"], r["seed"], r["learning_rate"]): r for key in ("runs", "learning_rate_runs",
            "superseded_runs") for r in record.get(key, []) if r["held_out_loss"]}
    changes = {}
    for width in sorted({r["width"] for r in record["runs"]}):
        now = sorted((r for r in record["runs"] if r["width"] == width), key=lambda r: (r["budget"], r["seed"]))
        for old in sorted({r["learning_rate"] for r in record["superseded_runs"] if r["width"] == width}):
            before = [pool.get((r["budget"], width, r["seed"], old)) for r in now]
            if old == now[0]["learning_rate"] or None in before:
                continue  # only a width whose every run has its pair at the earlier rate
            difference = paired_difference([r["held_out_loss"]["all"] for r in now],
                                           [r["held_out_loss"]["all"] for r in before])  # type: ignore[index]
            changes[str(width)] = dict(earlier_rate=old, rate=now[0]["learning_rate"], **difference.as_dict())
    return changes


def why_added(record: dict[str, Any], run: dict[str, Any], earlier_rate_runs: set[str]) -> str:
    """What an added run is for in the refitted record, in a few words."""
    homes = record.get("rate_homes", {})
    if any(r["name"] == run["name"] for r in record.get("learning_rate_runs", [])):
        moved = any(r["width"] == run["width"] for r in record["learning_rate_runs"] if r["name"] in earlier_rate_runs)
        return (f"rate stage at d{run['width']}'s home budget {homes[str(run['width'])]:.3g}: "
                + ("a rate beyond the highest (lowest) tried, to bracket it" if moved
                   else "its home moved off a predicted budget"))
    if any(r["name"] == run["name"] for r in record["runs"]):
        replaced = sorted({r["learning_rate"] for r in record.get("superseded_runs", []) if (r["budget"], r["width"],
                           r["seed"]) == (run["budget"], run["width"], run["seed"])})
        return "an IsoFLOP run at its width's chosen rate" + "".join(
            f", in place of the run at {lr:g}" for lr in replaced)
    if record.get("learning_rates", {}).get(str(run["width"])) == run["learning_rate"]:
        return "an IsoFLOP run at its width's chosen rate, not fitted until every run of the width has run"
    return "superseded: not used by the fit"


def rechoose_rates(record: dict[str, Any], added: list[dict[str, Any]]) -> dict[str, Any]:
    """The rate stage redone over every run the record and ``added`` hold, by this code's plan of the same
    budgets: each width's rate from the first seed's runs at its home budget (never a predicted budget),
    bracketed or not; a width's IsoFLOP runs are those at its chosen rate when every one of them has run,
    else the record's earlier ones, named in ``rates_not_rerun`` with the gain the chosen rate measured at
    the home budget (held-out loss, first seed)."""
    plan = plan_of(record["plan"])
    counts, homes = family(plan), home_budgets(plan, family(plan))
    pool = {r["name"]: r for r in record.get("superseded_runs", []) + record["learning_rate_runs"] + record["runs"] + added}
    rate_runs = [r for r in pool.values() if r["seed"] == plan.seeds[0] and homes.get(r["width"]) == r["budget"]]
    rates = choose_learning_rates(plan, rate_runs)
    runs, not_rerun = [], {}
    for width in sorted(homes):
        budgets = {b for b in plan.budgets if width in widths_for(b, plan, counts)}
        names = {spec(b, width, plan, counts, rates[width], seed).name for b in budgets
                 for seed in plan.seeds} if width in rates else {""}
        if names <= set(pool):  # with any added seeds of those runs
            runs += [pool[n] for n in sorted(names)] + [r for r in added if r["width"] == width and r["name"] not in names
                                                        and r["learning_rate"] == rates[width] and r["budget"] in budgets]
            continue
        earlier = [r for r in record["runs"] if r["width"] == width]
        runs += earlier
        used = earlier[0]["learning_rate"]
        home_loss = {r["learning_rate"]: r["held_out_loss"]["all"] for r in rate_runs if r["width"] == width}
        gain = home_loss[used] - home_loss[rates[width]] if used in home_loss and width in rates else None
        not_rerun[str(width)] = dict(used=used, chosen=rates.get(width), home_budget=homes[width],
                                     held_out_gain_at_home=gain)
    used_names = {r["name"] for r in runs}
    tried = {w: sorted(r["learning_rate"] for r in rate_runs if r["width"] == w) or [0.0] for w in homes}
    return dict(plan=asdict(plan), learning_rate_runs=sorted(rate_runs, key=lambda r: (r["width"], r["learning_rate"])),
                learning_rates={str(w): rates[w] for w in sorted(rates)},
                rate_homes={str(w): homes[w] for w in sorted(homes)},
                bracketed={str(w): tried[w][0] < rates.get(w, 0.0) < tried[w][-1] for w in sorted(homes)},
                runs=runs, rates_not_rerun=not_rerun,
                superseded_runs=[r for r in pool.values() if r["name"] not in used_names
                                 and r["name"] not in {x["name"] for x in rate_runs}])


def rerun_specs(record: dict[str, Any]) -> list[RunSpec]:
    """The IsoFLOP runs a record names under ``rates_not_rerun`` and does not hold: each such width at its
    chosen rate, at every budget using it, with every seed (a run the rate stage already trained is not
    trained again)."""
    plan = plan_of(record["plan"])
    counts = family(plan)
    held = {r["name"] for key in ("learning_rate_runs", "runs", "superseded_runs") for r in record.get(key, [])}
    wanted = [spec(b, int(w), plan, counts, v["chosen"], seed) for w, v in record.get("rates_not_rerun", {}).items()
              if v["chosen"] for b in plan.budgets if int(w) in widths_for(b, plan, counts) for seed in plan.seeds]
    return [s for s in wanted if s.name not in held]


def whole_widths_first(specs: list[RunSpec]) -> Callable[[RunSpec], Any]:
    """The order of a rerun: the widths whose runs spend the least compute in all first, so that a rerun stopped
    early leaves whole widths (a width's runs replace its earlier ones only when every one of them has run)."""
    compute: dict[int, float] = {}
    for s in specs:
        compute[s.width] = compute.get(s.width, 0.0) + s.budget
    return lambda s: (compute[s.width], s.width, s.budget, -s.steps)


def train_reruns(record: dict[str, Any], folder: Path, workers: int, device: str = "cpu", dtype: str = "float32"
                 ) -> list[dict[str, Any]]:
    """Train, in ``folder`` (resumable, as the sweep's runs), the IsoFLOP runs ``rerun_specs`` names, on the
    record's own data, and return their results; a folder whose prepared data is not the record's is refused."""
    plan = plan_of(record["plan"])
    claim_folder(plan, folder)
    sources = record.get("data")
    data = prepare_data(plan, lambda: local_corpora(sources) if isinstance(sources, list) else english_corpora(), folder)
    held_out = {k: int(v.numel()) for k, v in data["held_out"].items()}
    if (data["train_tokens"], held_out) != (record["train_tokens"], record["held_out_tokens"]):
        raise ValueError(f"{folder / 'data.pt'} holds {data['train_tokens']:,} training tokens and held-out {held_out}, "
                         f"the record {record['train_tokens']:,} and {record['held_out_tokens']}: not the record's data;"
                         " pass another --runs folder")
    specs = rerun_specs(record)
    return train_all(specs, plan, folder, workers, device, dtype, order=whole_widths_first(specs))


def plan_of(recorded: dict[str, Any]) -> SweepPlan:
    """The plan a record was trained under, with this code's rate protocol where a named plan has its budgets
    and family (its ``rate_extensions``): the record's own otherwise."""
    plan = SweepPlan(**{k: tuple(v) if isinstance(v, list) else v for k, v in recorded.items()})
    for named in PLANS.values():
        if replace(named, rate_extensions=plan.rate_extensions) == plan:
            return named
    return plan


def rate_sensitivity(record: dict[str, Any], budgets: tuple[float, ...]) -> dict[str, Any]:
    """The exponent and predictions again with each not-rerun width's losses lowered by the gain its chosen
    rate measured at its home budget: what rerunning those widths at their rates would move, as far as one
    seed at one budget can say."""
    gains = {w: v["held_out_gain_at_home"] for w, v in record["rates_not_rerun"].items()
             if v["held_out_gain_at_home"] is not None}
    lowered = [dict(r, held_out_loss=dict(r["held_out_loss"], all=r["held_out_loss"]["all"] - gains.get(str(r["width"]), 0.0)))
               for r in record["runs"]]
    analysis = analyse(lowered, budgets, record["plan"]["block_size"], draws=400)
    return dict(gains=gains, a=analysis["exponents"]["total"]["a"]["exponent"],
                kaplan_a=analysis["exponents"]["kaplan"]["a"]["exponent"],
                predictions=[dict(budget=q["budget"], predicted_loss=q["predicted_loss"], measured_loss=q["measured_loss"])
                             for q in analysis["prediction"].get("predictions", [])])


def write_outputs(record: dict[str, Any], figure: Path, table: Path, data: Path) -> None:
    plot_scaling(record, figure)
    atomic_write_text(table, scaling_table(record))
    atomic_write_text(data, json.dumps(record, indent=1) + "\n")


def provenance() -> dict[str, Any]:
    """The record of where the sweep ran, in the names its records have always used."""
    here = machine()
    return dict(here, dirty=here["uncommitted_changes"], load_average_at_start=here["load_average"])


def sweep(out: Path, runs: Path, plan: SweepPlan, data_files: tuple[str, ...] = (), workers: int = 1,
          device: str = "cpu", dtype: str = "float32", train: bool = True) -> dict[str, Any]:
    """The whole experiment into ``out/scaling.{png,md,json}``, the folder claimed before anything trains."""
    check_device(device, dtype)
    with claimed_outputs(out, "scaling") as outputs:
        record = measure_sweep(runs, plan, data_files, workers, device, dtype, train, provenance())
        write_outputs(record, *outputs)
    print(scaling_table(record))
    print(f"scaling: {record['wall_time_s']} s; written to {out}/scaling.{{png,md,json}}")
    return record


def reanalyse(out: Path, record_path: Path, added: tuple[Path, ...] = (), rerun_in: Path | None = None,
              workers: int = 1) -> dict[str, Any]:
    """Refit a written record (and added result files) with this analysis into ``out/scaling.{png,md,json}``;
    with ``rerun_in``, first train there the runs the record names as not rerun (``rates_not_rerun``), and add them."""
    record = json.loads(record_path.read_text(encoding="utf-8"))
    runs = [json.loads(path.read_text(encoding="utf-8")) for path in added]
    if rerun_in is not None:
        named = {r["name"] for r in runs}
        runs += [r for r in train_reruns(record, rerun_in, workers) if r["name"] not in named]
    record = reanalysed(record, runs, provenance())
    with claimed_outputs(out, "scaling") as outputs:
        write_outputs(record, *outputs)
    print(scaling_table(record))
    return record
