"""The IsoFLOP sweep (Chinchilla's approach 2) on the project's English corpora (docs/experiments.md).

    python scripts/experiments.py scaling [--out docs/figures] [--runs runs/scaling] [--workers 2] [--tiny]
                                          [--device cpu|cuda] [--dtype float32|bfloat16]

For each compute budget C (FLOPs, C = 6 N D with N every parameter, the tied embedding counted once) five
decoders of one family (width d and depth round(d/20) grown together, 8-dimensional heads, d_ff = 4d) are
trained on D = C / (6 N) tokens each, with a cosine schedule that ends exactly at D. All runs read the same
shuffled blocks of one English stream (Shakespeare, the King James Bible and BBC News, training works only)
from the start, and each is scored on the same held-out tokens (whole works, books and articles never
trained on). Then, per budget, a parabola of loss against ln N gives N_opt (counted with and without the
embedding); across budgets N_opt = k C^a and D_opt = k' C^b; and the loss frontier L(C) = E + A C^-alpha,
fitted on every budget but the largest, predicts the largest budget's best loss.

The training loop is a lean one (no Trainer): one tokenizer and one token stream for every run, so runs
differ only in size and length. A finished run's result (``RUN/result.json``) is kept and never re-trained,
so an interrupted sweep resumes where it stopped; ``--workers`` trains that many runs at once.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hf_vanilla.files.atomic import atomic_write_text

#: Chinchilla's and Kaplan's exponents (N_opt ~ C^a, D_opt ~ C^b), printed beside the measured ones.
REFERENCE_EXPONENTS = {"Chinchilla (Hoffmann et al. 2022)": (0.50, 0.50), "Kaplan et al. 2020": (0.73, 0.27)}
#: The two ways of counting N: every parameter (Chinchilla) and without the token embedding (Kaplan).
COUNTS = ("total", "non_embedding")
HEAD_SIZE = 8  # hidden units per attention head
DEPTH_RATIO = 20  # depth = round(width / DEPTH_RATIO): width and depth grow together
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class SweepPlan:
    """What one sweep trains: the budgets, the family's widths, and the training recipe every run shares."""

    budgets: tuple[float, ...]  # FLOPs, C = 6 N D
    widths: tuple[int, ...]  # the family's model widths (depth follows)
    sizes_per_budget: int = 5
    size_span: float = 16.0  # each budget's sizes run from N*/sqrt(span) to N*·sqrt(span) ...
    tokens_per_parameter: float = 20.0  # ... around N* = sqrt(C / (6 · this)), Chinchilla's D/N
    vocab_size: int = 512
    block_size: int = 128
    batch_size: int = 8
    learning_rate: float = 2e-3
    warmup_fraction: float = 0.05
    final_lr_fraction: float = 0.1  # the cosine ends at this fraction of the peak (Chinchilla: 10x decay)
    held_out_windows: int = 96  # block_size-token windows scored per held-out corpus
    seed: int = 0

    @property
    def tokens_per_step(self) -> int:
        return self.block_size * self.batch_size


# Sized for about 40 minutes of a quiet 2-core CPU with --workers 2 (measured step costs in docs/experiments.md).
FULL = SweepPlan(budgets=tuple(10**10.5 * 10 ** (1.5 * i / 4) for i in range(5)),
                 widths=(8, 12, 16, 20, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128))
# The same sweep on a GPU: 100x the budgets, a wider family, larger batches (not yet run: see the docs).
GPU = replace(FULL, budgets=tuple(c * 100 for c in FULL.budgets), widths=(32, 48, 64, 96, 128, 160, 192, 256, 320,
              384, 448, 512), batch_size=32)
TINY = SweepPlan(budgets=(8e6, 1.6e7, 3.2e7, 6.4e7), widths=(8, 12, 16, 20, 24, 32, 40, 48), size_span=12.0,
                 tokens_per_parameter=0.02, vocab_size=300, block_size=16, batch_size=4, held_out_windows=8)


# --------------------------------------------------------------------------------------------------
# The model family and the runs of a plan


def depth_of(width: int) -> int:
    return max(1, round(width / DEPTH_RATIO))


def model_config(width: int, vocab_size: int, block_size: int):
    """The family's decoder at ``width``: the clm task's pre-norm decoder, no dropout."""
    from hf_vanilla.configuration_vanilla import VanillaConfig

    return VanillaConfig(architecture="decoder", norm_position="pre", vocab_size=vocab_size, hidden_size=width,
                         intermediate_size=4 * width, num_hidden_layers=depth_of(width),
                         num_attention_heads=max(1, width // HEAD_SIZE), hidden_dropout=0.0, attention_dropout=0.0,
                         max_position_embeddings=block_size, pad_token_id=1, bos_token_id=0, eos_token_id=2)


def build_model(width: int, plan: SweepPlan):
    from hf_vanilla.modeling_vanilla import VanillaForCausalLM

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
    """One run: a budget, a width, and the length that spends the budget."""

    budget: float
    width: int
    depth: int
    parameters: int  # N, every parameter
    non_embedding_parameters: int
    steps: int
    tokens: int  # D actually trained on: steps · tokens per step
    target_tokens: float  # C / (6 N)

    @property
    def name(self) -> str:
        return f"C{self.budget:.3g}-d{self.width}"


def family(plan: SweepPlan) -> dict[int, dict[str, int]]:
    """Each width's parameter counts (built once: the counts are the model's, not a formula's)."""
    return {w: parameter_counts(build_model(w, plan)) for w in plan.widths}


def widths_for(budget: float, plan: SweepPlan, counts: dict[int, dict[str, int]]) -> list[int]:
    """The plan's sizes for one budget: the widths nearest (in ln N) to points spread evenly over
    [N*/sqrt(span), N*·sqrt(span)]. Two points landing on one width mean the family is too coarse there."""
    centre = math.sqrt(budget / (6 * plan.tokens_per_parameter))
    k = plan.sizes_per_budget
    targets = [centre * plan.size_span ** (i / (k - 1) - 0.5) for i in range(k)]
    chosen = [min(counts, key=lambda w, t=t: abs(math.log(counts[w]["total"] / t))) for t in targets]
    if len(set(chosen)) != k:
        raise ValueError(f"budget {budget:.3g}: the family's widths {plan.widths} give only {len(set(chosen))} "
                         f"distinct sizes near N* = {centre:.3g}; add widths or widen size_span")
    return chosen


def run_specs(plan: SweepPlan) -> list[RunSpec]:
    counts, specs = family(plan), []
    for budget in plan.budgets:
        for width in widths_for(budget, plan, counts):
            n = counts[width]["total"]
            target = budget / (6 * n)
            steps = max(1, round(target / plan.tokens_per_step))
            specs.append(RunSpec(budget, width, depth_of(width), n,
                                 counts[width]["non_embedding"], steps, steps * plan.tokens_per_step, target))
    return specs


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
    """Train the tokenizer on the training documents; cut the training stream into blocks in a fixed shuffled
    order and each held-out corpus into ``held_out_windows`` evenly spaced windows; save them (a resumed sweep
    loads them)."""
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
    order = torch.randperm(len(blocks), generator=torch.Generator().manual_seed(plan.seed))
    held_out = {}
    for name, docs in corpora["test"].items():
        stream = torch.tensor(token_stream(tokenizer, docs))
        windows = stream[: len(stream) // plan.block_size * plan.block_size].view(-1, plan.block_size)
        pick = torch.linspace(0, len(windows) - 1, min(plan.held_out_windows, len(windows))).round().long()
        held_out[name] = windows[pick]
    data = {"blocks": blocks[order], "held_out": held_out, "vocab_size": len(tokenizer),
            "train_characters": {k: sum(map(len, v)) for k, v in corpora["train"].items()},
            "train_tokens": len(train)}
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(data, path)
    return data


# --------------------------------------------------------------------------------------------------
# One run


def batches(blocks: torch.Tensor, steps: int, batch_size: int):
    """The first steps·batch_size blocks of the shared order (wrapping round, i.e. repeating, only if needed)."""
    for step in range(steps):
        index = torch.arange(step * batch_size, (step + 1) * batch_size) % len(blocks)
        yield blocks[index]


@torch.no_grad()
def held_out_loss(model, held_out: dict[str, torch.Tensor], autocast) -> dict[str, float]:
    """Mean next-token loss (nats) per held-out corpus and over all their scored tokens together."""
    from experiments import perplexity_at

    device = next(model.parameters()).device
    losses, counts = {}, {}
    with autocast:
        for name, windows in held_out.items():
            stream = windows.reshape(-1).to(device)
            losses[name] = math.log(perplexity_at(model, stream, windows.shape[1], windows.shape[1]))
            counts[name] = windows.numel() - len(windows)  # every token but each window's first
    losses["all"] = sum(losses[k] * counts[k] for k in counts) / sum(counts.values())
    return losses


def train_run(spec: RunSpec, plan: SweepPlan, folder: Path, device: str = "cpu", dtype: str = "float32",
              threads: int | None = None) -> dict[str, Any]:
    """Train one run to its D tokens; write and return its result (the held-out loss, the curve, the time)."""
    if threads:
        torch.set_num_threads(threads)
    data = torch.load(folder / "data.pt")
    torch.manual_seed(plan.seed)
    model = build_model(spec.width, plan).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=plan.learning_rate, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: learning_rate_factor(s, spec.steps, plan))
    autocast = torch.autocast(torch.device(device).type, dtype=DTYPES[dtype], enabled=dtype != "float32")
    curve, rates, start = [], [], time.perf_counter()
    log_every = max(1, spec.steps // 50)
    for step, batch in enumerate(batches(data["blocks"], spec.steps, plan.batch_size)):
        batch = batch.to(device)
        with autocast:
            loss = model(input_ids=batch, labels=batch).loss
        if not torch.isfinite(loss):
            raise FloatingPointError(f"{spec.name}: the loss is {loss.item()} at step {step}")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        rates.append(schedule.get_last_lr()[0])
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if step % log_every == 0 or step == spec.steps - 1:
            curve.append((step + 1, round(loss.item(), 4)))
        if (step + 1) % max(1, spec.steps // 4) == 0 and step + 1 < spec.steps:
            print(f"{spec.name}: step {step + 1} of {spec.steps}, loss {loss.item():.3f}", flush=True)
    train_time = time.perf_counter() - start
    model.eval()
    result = dict(asdict(spec), name=spec.name, held_out_loss=held_out_loss(model, data["held_out"], autocast),
                  train_curve=curve, first_lr=rates[0], last_lr=rates[-1],
                  epochs=spec.steps * plan.batch_size / len(data["blocks"]), train_time_s=round(train_time, 1),
                  seconds_per_step=train_time / spec.steps, device=device, dtype=dtype)
    run_dir = folder / spec.name
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / "result.json", json.dumps(result, indent=1) + "\n")  # a kill never leaves half
    print(f"{spec.name}: N={spec.parameters:,} D={spec.tokens:,} ({spec.steps} steps) held-out loss "
          f"{result['held_out_loss']['all']:.4f} in {train_time:.0f} s", flush=True)
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


def train_all(specs: list[RunSpec], plan: SweepPlan, folder: Path, workers: int, device: str, dtype: str
              ) -> list[dict[str, Any]]:
    """Every run's result: kept ones read back, the others trained (``workers`` at a time, one thread each when
    more than one), smallest budget first so that an interrupted sweep leaves whole budgets to fit."""
    todo = sorted((s for s in specs if finished(s, folder) is None), key=lambda s: (s.budget, -s.steps))
    print(f"{len(specs) - len(todo)} of {len(specs)} runs already finished in {folder}", flush=True)
    if workers > 1 and len(todo) > 1:
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            for future in [pool.submit(train_run, s, plan, folder, device, dtype, 1) for s in todo]:
                future.result()
    else:
        for spec in todo:
            train_run(spec, plan, folder, device, dtype)
    return [finished(s, folder) for s in specs]  # type: ignore[misc]


# --------------------------------------------------------------------------------------------------
# Fits


def fit_isoflop(log_n: np.ndarray, loss: np.ndarray) -> dict[str, Any]:
    """A parabola loss = p0·x² + p1·x + p2 in x = ln N; its minimum x* = -p1 / (2 p0) with the standard error
    from the fit's covariance (delta method). No minimum (p0 <= 0) is reported as such."""
    coef, cov = np.polyfit(log_n, loss, 2, cov=True) if len(log_n) > 4 else (np.polyfit(log_n, loss, 2), None)
    p0, p1, p2 = coef
    fit = dict(coefficients=coef.tolist(), log_n_opt=None, log_n_opt_se=None, n_opt=None, loss_at_opt=None)
    if p0 <= 0:
        return fit
    x = -p1 / (2 * p0)
    se = None
    if cov is not None:
        grad = np.array([p1 / (2 * p0**2), -1 / (2 * p0), 0.0])
        se = float(math.sqrt(max(0.0, grad @ cov @ grad)))
    return dict(fit, log_n_opt=float(x), log_n_opt_se=se, n_opt=float(math.exp(x)),
                loss_at_opt=float(np.polyval(coef, x)))


def fit_power_law(log_c: np.ndarray, log_y: np.ndarray, se: np.ndarray, draws: int = 4000, seed: int = 0
                  ) -> dict[str, Any]:
    """ln y = a·ln C + k by weighted least squares (weights 1/se²); the 95% interval of a from a parametric
    bootstrap (each ln y drawn from its estimate ± se, refitted), and the ordinary least-squares a beside it."""
    weights = 1 / np.maximum(se, 1e-9) ** 2
    slope = float(np.polyfit(log_c, log_y, 1, w=np.sqrt(weights))[0])
    rng = np.random.default_rng(seed)
    samples = log_y + rng.standard_normal((draws, len(log_y))) * se
    slopes = np.array([np.polyfit(log_c, s, 1, w=np.sqrt(weights))[0] for s in samples])
    low, high = np.percentile(slopes, [2.5, 97.5])
    return dict(exponent=slope, ci95=[float(low), float(high)], ols_exponent=float(np.polyfit(log_c, log_y, 1)[0]))


def frontier_curve(c: np.ndarray, e: float, a: float, alpha: float) -> np.ndarray:
    return e + a * c ** (-alpha)


def fit_frontier(budgets: np.ndarray, losses: np.ndarray) -> dict[str, Any]:
    """L(C) = E + A·(C/C_0)^-alpha on the given budgets (C_0 the first: the fit works near 1), with the
    parameters' covariance; E, A >= 0 and 0 < alpha < 3."""
    from scipy.optimize import curve_fit

    c = budgets / budgets[0]
    guess = (max(0.0, float(losses.min()) - 0.5), float(losses[0] - losses.min()) + 0.5, 0.2)
    params, cov = curve_fit(frontier_curve, c, losses, p0=guess, bounds=([0, 0, 1e-3], [np.inf, np.inf, 3]),
                            maxfev=20000)
    return dict(E=float(params[0]), A=float(params[1]), alpha=float(params[2]), reference_budget=float(budgets[0]),
                covariance=np.where(np.isfinite(cov), cov, None).tolist())


def predict_frontier(frontier: dict[str, Any], budget: float) -> tuple[float, float | None]:
    """The frontier's loss at ``budget`` and its standard error (delta method; None without a covariance)."""
    e, a, alpha = frontier["E"], frontier["A"], frontier["alpha"]
    c = budget / frontier["reference_budget"]
    value = float(frontier_curve(np.array(c), e, a, alpha))
    cov = frontier["covariance"]
    if any(v is None for row in cov for v in row):
        return value, None
    grad = np.array([1.0, c ** (-alpha), -a * c ** (-alpha) * math.log(c)])
    return value, float(math.sqrt(max(0.0, grad @ np.array(cov, dtype=float) @ grad)))


def analyse(results: list[dict[str, Any]], budgets: tuple[float, ...]) -> dict[str, Any]:
    """Per budget the IsoFLOP parabolas (both counts); across budgets the exponents; the frontier's held-out
    prediction of the largest budget's best loss."""
    per_budget = []
    for budget in budgets:
        runs = sorted((r for r in results if r["budget"] == budget), key=lambda r: r["parameters"])
        loss = np.array([r["held_out_loss"]["all"] for r in runs])
        fits = {count: fit_isoflop(np.log([r[key] for r in runs]), loss)
                for count, key in zip(COUNTS, ("parameters", "non_embedding_parameters"), strict=True)}
        n_opt = fits["total"]["n_opt"]
        per_budget.append(dict(budget=budget, runs=[r["name"] for r in runs], fits=fits,
                               d_opt=budget / (6 * n_opt) if n_opt else None,
                               best_measured_loss=float(loss.min()),
                               best_measured_run=runs[int(loss.argmin())]["name"]))
    exponents: dict[str, Any] = {}
    for count in COUNTS:
        usable = [b for b in per_budget if b["fits"][count]["log_n_opt_se"] is not None]
        if len(usable) < 2:
            exponents[count] = None
            continue
        log_c = np.log([b["budget"] for b in usable])
        log_n = np.array([b["fits"][count]["log_n_opt"] for b in usable])
        se = np.array([b["fits"][count]["log_n_opt_se"] for b in usable])
        fit_n = fit_power_law(log_c, log_n, se)
        # ln D_opt = ln C - ln 6 - ln N_opt(total): its slope is 1 - a with the same uncertainty
        fit_d = fit_power_law(log_c, log_c - math.log(6) - log_n, se) if count == "total" else None
        exponents[count] = dict(a=fit_n, b=fit_d, budgets=[b["budget"] for b in usable])
    return dict(per_budget=per_budget, exponents=exponents, prediction=held_out_prediction(per_budget))


def held_out_prediction(per_budget: list[dict[str, Any]]) -> dict[str, Any]:
    """Fit the frontier on all budgets but the largest (each budget's best measured loss) and predict the
    largest one's; the error is predicted minus measured."""
    if len(per_budget) < 4:
        return dict(status=f"needs 3 budgets to fit and 1 to predict, has {len(per_budget)} complete")
    fitted, held = per_budget[:-1], per_budget[-1]
    budgets = np.array([b["budget"] for b in fitted])
    losses = np.array([b["best_measured_loss"] for b in fitted])
    frontier = fit_frontier(budgets, losses)
    predicted, se = predict_frontier(frontier, held["budget"])
    measured = held["best_measured_loss"]
    return dict(status="ok", frontier=frontier, budget=held["budget"], predicted_loss=predicted,
                predicted_loss_se=se, measured_loss=measured, error=predicted - measured,
                relative_error=(predicted - measured) / measured)


# --------------------------------------------------------------------------------------------------
# Output: table, figures, record


def scaling_table(record: dict[str, Any]) -> str:
    """The runs (one row each) and the fits, in Markdown."""
    analysis = record["analysis"]
    lines = [f"**Partial sweep**: {len(record['missing_runs'])} runs not finished ({', '.join(record['missing_runs'])});"
             " only budgets whose runs all finished are fitted.", ""] if record["partial"] else []
    lines += ["| budget C (FLOPs) | width × depth | N | N non-emb. | D (tokens) | steps | epochs | held-out loss |",
             "|---|---|---|---|---|---|---|---|"]
    for r in record["runs"]:
        lines.append(f"| {r['budget']:.3g} | {r['width']}×{r['depth']} | {r['parameters']:,} | "
                     f"{r['non_embedding_parameters']:,} | {r['tokens']:,} | {r['steps']:,} | {r['epochs']:.2f} | "
                     f"{r['held_out_loss']['all']:.4f} |")
    lines += ["", "| budget C | N_opt (all params) | N_opt (non-emb.) | D_opt | D_opt/N_opt | best measured loss |",
              "|---|---|---|---|---|---|"]
    for b in analysis["per_budget"]:
        cells = [f"{b['budget']:.3g}"]
        for count in COUNTS:
            fit = b["fits"][count]
            cells.append(f"{fit['n_opt']:,.0f} (×/÷ {math.exp(fit['log_n_opt_se']):.2f})"
                         if fit["log_n_opt_se"] is not None else "no minimum")
        n_opt = b["fits"]["total"]["n_opt"]
        cells += [f"{b['d_opt']:,.0f}" if b["d_opt"] else "-", f"{b['d_opt'] / n_opt:.1f}" if n_opt else "-",
                  f"{b['best_measured_loss']:.4f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| exponent | N counted | measured (95% interval) | OLS | Chinchilla | Kaplan |", "|---|---|---|---|---|---|"]
    (ch_a, ch_b), (ka_a, ka_b) = REFERENCE_EXPONENTS.values()
    for count in COUNTS:
        fit = analysis["exponents"][count]
        for label, key, ch, ka in (("a (N_opt ∝ C^a)", "a", ch_a, ka_a), ("b (D_opt ∝ C^b)", "b", ch_b, ka_b)):
            if fit is None or fit[key] is None:
                continue
            e = fit[key]
            lines.append(f"| {label} | {count.replace('_', '-')} | {e['exponent']:.3f} "
                         f"[{e['ci95'][0]:.3f}, {e['ci95'][1]:.3f}] | {e['ols_exponent']:.3f} | {ch:.2f} | {ka:.2f} |")
    p = analysis["prediction"]
    if p["status"] == "ok":
        se = f" ± {p['predicted_loss_se']:.4f}" if p["predicted_loss_se"] is not None else ""
        f = p["frontier"]
        lines += ["", f"Frontier L(C) = {f['E']:.3f} + {f['A']:.3f}·(C/{f['reference_budget']:.3g})^-{f['alpha']:.3f}"
                  f" fitted on the {len(analysis['per_budget']) - 1} smaller budgets; at C = {p['budget']:.3g} it "
                  f"predicts {p['predicted_loss']:.4f}{se}, measured {p['measured_loss']:.4f}: error "
                  f"{p['error']:+.4f} nats ({100 * p['relative_error']:+.2f}%)."]
    else:
        lines += ["", f"No held-out prediction: {p['status']}."]
    return "\n".join(lines) + "\n"


def plot_scaling(record: dict[str, Any], path: Path) -> None:
    """Three panels: the IsoFLOP curves with their parabolas; N_opt and D_opt against C; the frontier and
    its prediction of the largest budget."""
    from hf_vanilla.tools.viz import Picture, _new_figure

    analysis, runs = record["analysis"], record["runs"]
    figure = _new_figure(17, 4.8)
    iso, opt, front = (figure.add_subplot(1, 3, i) for i in (1, 2, 3))
    colors = [f"C{i}" for i in range(len(analysis["per_budget"]))]
    for b, color in zip(analysis["per_budget"], colors, strict=True):
        points = sorted((r["parameters"], r["held_out_loss"]["all"]) for r in runs if r["budget"] == b["budget"])
        iso.plot(*zip(*points, strict=True), "o", color=color, label=f"C = {b['budget']:.2g}")
        grid = np.linspace(math.log(points[0][0]), math.log(points[-1][0]), 100)
        iso.plot(np.exp(grid), np.polyval(b["fits"]["total"]["coefficients"], grid), "-", color=color, lw=1)
        if b["fits"]["total"]["n_opt"]:
            iso.plot(b["fits"]["total"]["n_opt"], b["fits"]["total"]["loss_at_opt"], "*", color=color, ms=12)
    iso.set_xscale("log")
    iso.set_xlabel("parameters N (all, tied embedding once)")
    iso.set_ylabel("held-out loss (nats per token)")
    iso.set_title("IsoFLOP curves (★ the parabola's minimum)")
    iso.legend(fontsize=8)
    for count, marker in zip(COUNTS, ("o", "s"), strict=True):
        fit = analysis["exponents"][count]
        usable = [b for b in analysis["per_budget"] if b["fits"][count]["log_n_opt_se"] is not None]
        if not usable:
            continue
        c = np.array([b["budget"] for b in usable])
        n = np.array([b["fits"][count]["n_opt"] for b in usable])
        err = np.array([b["fits"][count]["log_n_opt_se"] for b in usable])
        label = f"N_opt ({count.replace('_', '-')})" + (f", a = {fit['a']['exponent']:.2f}" if fit else "")
        opt.errorbar(c, n, yerr=[n - n * np.exp(-err), n * np.exp(err) - n], fmt=marker, capsize=3, label=label)
        if count == "total":
            label = "D_opt" + (f", b = {fit['b']['exponent']:.2f}" if fit else "")
            opt.errorbar(c, c / (6 * n), yerr=[c / (6 * n) * (1 - np.exp(-err)), c / (6 * n) * (np.exp(err) - 1)],
                         fmt="^", capsize=3, label=label)
    opt.set_xscale("log")
    opt.set_yscale("log")
    opt.set_xlabel("compute C (FLOPs)")
    opt.set_ylabel("compute-optimal N or D")
    opt.set_title("N_opt and D_opt against compute")
    opt.legend(fontsize=8)
    best = [(b["budget"], b["best_measured_loss"]) for b in analysis["per_budget"]]
    p = analysis["prediction"]
    if p["status"] == "ok":
        front.plot(*zip(*best[:-1], strict=True), "o", color="k", label="fitted budgets (best run)")
        front.plot(*best[-1], "o", color="tab:red", mfc="none", ms=10, label="largest budget, held out (measured)")
        f = p["frontier"]
        grid = np.geomspace(best[0][0], best[-1][0] * 1.5, 100)
        front.plot(grid, frontier_curve(grid / f["reference_budget"], f["E"], f["A"], f["alpha"]), "-", color="k",
                   lw=1, label=f"L = {f['E']:.2f} + {f['A']:.2f}·(C/C0)^-{f['alpha']:.2f}")
        front.errorbar(p["budget"], p["predicted_loss"], yerr=p["predicted_loss_se"] or 0, fmt="x", color="tab:red",
                       ms=10, capsize=3, label=f"predicted (error {p['error']:+.3f})")
    elif best:
        front.plot(*zip(*best, strict=True), "o", color="k", label=f"best run per budget ({p['status']})")
    front.set_xscale("log")
    front.set_xlabel("compute C (FLOPs)")
    front.set_ylabel("best held-out loss")
    front.set_title("Frontier: the largest budget predicted")
    front.legend(fontsize=8)
    Picture(figure).save(path)


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


def sweep(out: Path, runs: Path, tiny: bool = False, data_files: tuple[str, ...] = (), workers: int = 1,
          device: str = "cpu", dtype: str = "float32", plan: SweepPlan | None = None, train: bool = True
          ) -> dict[str, Any]:
    """The whole experiment: prepare the data, train (or read back) every run, fit, write
    ``out/scaling.{png,md,json}``; return the record. ``train=False`` trains nothing and fits the budgets whose
    runs have all finished (a partial sweep, marked so in the record)."""
    from experiments import claimed_outputs

    check_device(device, dtype)
    with claimed_outputs(out, "scaling") as outputs:
        record = measure_sweep(runs, tiny, data_files, workers, device, dtype, plan, train)
        write_outputs(record, *outputs)
    print(scaling_table(record))
    print(f"scaling: {record['wall_time_s']} s; written to {out}/scaling.{{png,md,json}}")
    return record


def measure_sweep(runs: Path, tiny: bool, data_files: tuple[str, ...], workers: int, device: str, dtype: str,
                  plan: SweepPlan | None, train: bool) -> dict[str, Any]:
    """Train (or read back) every run of the plan and fit them: the sweep's record."""
    from experiments import provenance

    plan = plan or (TINY if tiny else GPU if torch.device(device).type == "cuda" else FULL)
    specs = run_specs(plan)
    start, where = time.perf_counter(), provenance()
    claim_folder(plan, runs)
    data = prepare_data(plan, lambda: local_corpora(list(data_files)) if data_files else english_corpora(), runs)
    if train:
        results = train_all(specs, plan, runs, workers, device, dtype)
    else:
        results = [r for r in (finished(s, runs) for s in specs) if r is not None]
    done = {r["name"] for r in results}
    missing = [s.name for s in specs if s.name not in done]
    budgets = tuple(b for b in plan.budgets if not any(s.budget == b and s.name in missing for s in specs))
    results = [r for r in results if r["budget"] in budgets]
    record = dict(experiment="scaling", tiny=tiny, plan=asdict(plan), workers=workers, device=device, dtype=dtype,
                  partial=bool(missing), missing_runs=missing, **where, train_tokens=data["train_tokens"],
                  train_characters=data["train_characters"],
                  held_out_tokens={k: int(v.numel()) for k, v in data["held_out"].items()},
                  runs=results, analysis=analyse(results, budgets), load_average_at_end=os.getloadavg(),
                  wall_time_s=round(time.perf_counter() - start, 1),
                  train_time_s=round(sum(r["train_time_s"] for r in results), 1),
                  data=list(data_files) or "Shakespeare, KJV (English), BBC News (hf_vanilla.corpora)")
    return record


def write_outputs(record: dict[str, Any], figure: Path, table: Path, data: Path) -> None:
    plot_scaling(record, figure)
    atomic_write_text(table, scaling_table(record))
    atomic_write_text(data, json.dumps(record, indent=1) + "\n")
