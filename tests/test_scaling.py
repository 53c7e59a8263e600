"""hf_vanilla/experiments/scaling.py and scaling_fits.py (``experiments.py scaling``): the plans spend each budget as
C = (6 N + 12 L d T) D with a schedule that ends at D and bracket the first sweep's optima; the analysis's
intervals cover a known exponent about 95% of the time and widen with noise, its prediction never sees the
budgets it predicts, its Kaplan basis counts N and C without the embedding, its fits are weighted; the
dry-run sweep trains both stages end to end and resumes."""

from __future__ import annotations

import importlib.util
import json
import math
import random
import re
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
WORDS = "the king queen lord lady sword crown night day love death heart blood fair foul speak".split()

from hf_vanilla.experiments import scaling  # noqa: E402
from hf_vanilla.experiments import scaling_fits as fits  # noqa: E402
from hf_vanilla.experiments.statistics import paired_difference  # noqa: E402

spec = importlib.util.spec_from_file_location("experiments_script", REPO / "scripts" / "experiments.py")
experiments = importlib.util.module_from_spec(spec)
sys.modules["experiments_script"] = experiments
spec.loader.exec_module(experiments)

FIRST_OPTIMA = (55, 142)  # D_opt / N_opt of the first sweep's five budgets ranged over these (docs/experiments.md)


@pytest.fixture(scope="module")
def text_files(tmp_path_factory) -> tuple[str, ...]:
    root, rng = tmp_path_factory.mktemp("text"), random.Random(0)
    files = []
    for split, n in (("train", 300), ("test", 40)):
        lines = (" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))) + ".\n\n" for _ in range(n))
        (root / f"{split}.txt").write_text("".join(lines), encoding="utf-8")
        files.append(f"{split}={root / f'{split}.txt'}")
    return tuple(files)


# --------------------------------------------------------------------------------------------------
# The plans


@pytest.mark.parametrize("name", ["cpu", "gpu"])
def test_plans_meet_the_issue(name):
    # three seeds, three learning rates per width, five budgets (three to fit, two to predict), five distinct
    # sizes each bracketing the first sweep's optima with two sizes on each side, D spending the budget counted
    # with attention to half a step
    plan = scaling.PLANS[name]
    counts = scaling.family(plan)
    assert len(plan.seeds) >= 3 and len(plan.learning_rates) >= 3 and plan.count_attention
    assert len(plan.budgets) >= 3 + fits.HELD_OUT
    specs = scaling.isoflop_specs(plan, {w: 1e-3 for w in plan.widths}, counts)
    for budget in plan.budgets:
        runs = [s for s in specs if s.budget == budget]
        sizes = sorted({s.parameters for s in runs})
        assert len(sizes) == plan.sizes_per_budget == 5 and len(runs) == 5 * len(plan.seeds)
        for ratio in FIRST_OPTIMA:  # the N at which D/N = ratio: two sizes below it and two above
            ratios = [next(s for s in runs if s.parameters == n).tokens / n for n in sizes]
            assert sum(r > ratio for r in ratios) >= 2 and sum(r < ratio for r in ratios) >= 2
    for s in specs:
        per_token = 6 * s.parameters + 12 * s.depth * s.width * plan.block_size
        assert s.target_tokens == pytest.approx(s.budget / per_token)
        assert abs(s.tokens - s.target_tokens) <= plan.tokens_per_step / 2 and s.tokens == s.steps * plan.tokens_per_step
    stage1 = scaling.learning_rate_specs(plan, counts)
    used = {s.width for s in specs}
    assert sorted(s.width for s in stage1) == sorted(w for w in used for _ in plan.learning_rates)
    for width in used:  # one budget and one seed per width, every rate
        runs = [s for s in stage1 if s.width == width]
        assert len({s.budget for s in runs}) == 1 and {s.learning_rate for s in runs} == set(plan.learning_rates)


def test_the_gpu_plan_is_the_cpu_plan_at_100x():
    assert scaling.GPU.budgets == pytest.approx([100 * c for c in scaling.CPU.budgets])
    assert (scaling.GPU.seeds, scaling.GPU.learning_rates) == (scaling.CPU.seeds, scaling.CPU.learning_rates)


def test_the_dry_run_keeps_the_plans_structure():
    for plan in scaling.PLANS.values():
        tiny = scaling.dry_run(plan)
        kept = ("seeds", "learning_rates", "sizes_per_budget", "count_attention")
        assert all(getattr(tiny, k) == getattr(plan, k) for k in kept) and len(tiny.budgets) == len(plan.budgets)
        assert sum(s.steps for s in scaling.all_specs(tiny)) < 1000  # seconds, not hours


def test_the_first_sweep_plan_reads_the_first_sweeps_order():
    # seed 0 of the first plan reads blocks in the order the first sweep's runs read them (randperm of seed 0)
    blocks = torch.arange(40).view(20, 2)
    first = blocks[torch.randperm(20, generator=torch.Generator().manual_seed(0))]
    torch.testing.assert_close(scaling.run_order(blocks, 0), first)
    assert not torch.equal(scaling.run_order(blocks, 1), first)


def test_parameter_counts_take_the_tied_embedding_once():
    model = scaling.build_model(32, scaling.CPU)
    assert model.get_input_embeddings().weight is model.get_output_embeddings().weight
    counts = scaling.parameter_counts(model)
    assert counts["total"] == sum(p.numel() for p in model.parameters())
    assert counts["total"] - counts["non_embedding"] == scaling.CPU.vocab_size * 32


def test_schedule_ends_at_the_runs_last_step():
    plan = scaling.CPU
    for steps in (1, 2, 3, 7, 100, 4474):
        factors = [scaling.learning_rate_factor(s, steps, plan) for s in range(steps)]
        assert factors[-1] == pytest.approx(plan.final_lr_fraction if steps > 1 else 1.0)
        warmup = max(1, round(plan.warmup_fraction * steps))
        assert factors[warmup - 1] == pytest.approx(1.0)
        assert all(a >= b for a, b in zip(factors[warmup - 1:], factors[warmup:], strict=False))


def test_too_coarse_a_family_is_refused():
    plan = replace(scaling.CPU, widths=(8, 64, 128))
    with pytest.raises(ValueError, match="distinct sizes near N\\*"):
        scaling.isoflop_specs(plan, {w: 1e-3 for w in plan.widths})


def test_no_rate_is_chosen_at_a_budget_the_frontier_predicts():
    # every width the sweep uses has a home budget among the fitted ones (the seeded sweep chose d32, d40 and d56's
    # rates at 7.94e11, a predicted budget), the one using it whose grid centre is nearest where one does
    for plan in scaling.PLANS.values():
        counts = scaling.family(plan)
        homes = scaling.home_budgets(plan, counts)
        fitted = plan.budgets[:-fits.HELD_OUT]
        assert set(homes) == {w for b in plan.budgets for w in scaling.widths_for(b, plan, counts)}
        assert set(homes.values()) <= set(fitted)
        assert all(w in scaling.widths_for(b, plan, counts) for w, b in homes.items()
                   if any(w in scaling.widths_for(f, plan, counts) for f in fitted))


def test_learning_rate_chosen_on_validation_and_a_diverged_run_loses():
    plan = scaling.CPU
    runs = [dict(width=8, learning_rate=1e-3, validation_loss=5.0), dict(width=8, learning_rate=2e-3, validation_loss=4.9),
            dict(width=8, learning_rate=4e-3, validation_loss=None), dict(width=16, learning_rate=4e-3, validation_loss=4.0),
            dict(width=16, learning_rate=1e-3, validation_loss=4.5)]
    assert scaling.choose_learning_rates(plan, runs) == {8: 2e-3, 16: 4e-3}


def test_a_best_rate_at_the_grids_edge_is_tried_beyond_it_until_bracketed():
    plan = scaling.dry_run(scaling.CPU)
    counts = scaling.family(plan)
    homes = scaling.home_budgets(plan, counts)
    top, bottom, inside, diverged_beyond = sorted(homes)[:4]

    def runs(width, losses):
        return [dict(width=width, learning_rate=lr, validation_loss=loss) for lr, loss in losses.items()]

    results = (runs(top, {1e-3: 5.0, 2e-3: 4.8, 4e-3: 4.6}) + runs(bottom, {1e-3: 4.0, 2e-3: 4.2, 4e-3: 4.9})
               + runs(inside, {1e-3: 5.0, 2e-3: 4.5, 4e-3: 4.7})
               + runs(diverged_beyond, {1e-3: 5.0, 2e-3: 4.8, 4e-3: 4.6, 8e-3: None}))
    extra = {s.width: s for s in scaling.edge_rate_specs(plan, counts, results)}
    assert set(extra) == {top, bottom}
    assert (extra[top].learning_rate, extra[bottom].learning_rate) == (8e-3, 5e-4)
    assert all(s.budget == homes[s.width] and s.seed == plan.seeds[0] for s in extra.values())
    assert scaling.edge_rate_specs(scaling.FIRST, scaling.family(scaling.FIRST), results) == []


def test_wall_time_and_estimate():
    assert scaling.wall_time([3, 5, 3, 4, 3], 2) == 10  # longest first, each to the first free worker: 5+3 | 4+3+3
    plan = scaling.dry_run(scaling.CPU)
    seconds = {w: 0.01 * w for w in plan.widths}
    e = scaling.estimate(plan, seconds, 2)
    runs = scaling.all_specs(plan)
    assert e["train_seconds"] == pytest.approx(sum(s.steps * seconds[s.width] for s in runs))
    assert e["train_seconds"] / 2 <= e["wall_seconds"] <= e["train_seconds"]


@given(st.lists(st.floats(0.1, 100), min_size=1, max_size=30), st.integers(1, 4))
def test_wall_time_lies_between_the_bounds(durations, workers):
    wall = scaling.wall_time(durations, workers)
    assert max(max(durations), sum(durations) / workers) - 1e-9 <= wall <= sum(durations) / workers + max(durations) + 1e-9


# --------------------------------------------------------------------------------------------------
# The analysis's pieces


def test_compute_counts_attention():
    # 6 N + 12 L d T a token: a 2-layer width-32 model of 41,856 parameters, T = 128, 1,000 tokens
    assert fits.training_flops(41_856, 2, 32, 128, 1_000) == (6 * 41_856 + 12 * 2 * 32 * 128) * 1_000


@given(st.floats(0.05, 2.0), st.floats(6.0, 12.0), st.floats(-1.0, 1.0), st.integers(4, 9))
def test_parabola_minimum_is_exact_on_a_parabola(curvature, minimum, offset, sizes):
    x = np.linspace(minimum - 2 + offset, minimum + 2 + offset, sizes)
    coefficients = fits.fit_parabolas(x, (curvature * (x - minimum) ** 2 + 3.0)[None])
    assert fits.parabola_minimum(coefficients)[0] == pytest.approx(minimum, abs=1e-6)
    assert np.isnan(fits.parabola_minimum(fits.fit_parabolas(x, (-curvature * x**2)[None])))[0]


def test_a_case_resample_with_fewer_than_three_sizes_fits_nothing():
    x = np.log([1e3, 1e3, 2e3, 2e3, 4e3, 4e3])
    weights = np.array([[1, 1, 2, 2, 0, 0], [1, 0, 1, 0, 1, 0]], dtype=float)
    coefficients = fits.fit_parabolas(x, np.broadcast_to((x - 7.6) ** 2, weights.shape), weights)
    assert np.isnan(coefficients[0]).all() and fits.parabola_minimum(coefficients)[1] == pytest.approx(7.6)


@given(st.integers(2, 6), st.integers(1, 4), st.integers(0, 2**16))
def test_case_weights_draw_sizes_then_seeds(sizes, seeds, seed):
    size_of_run = np.repeat(np.arange(sizes), seeds)
    weights = fits.size_case_weights(size_of_run, 50, np.random.default_rng(seed))
    assert (weights.sum(axis=1) == sizes * seeds).all()  # as many runs as the budget has, in whole sizes
    per_size = np.stack([weights[:, size_of_run == k].sum(axis=1) for k in range(sizes)], axis=1)
    assert (per_size % seeds == 0).all()


@given(st.lists(st.integers(-50, 50), min_size=3, max_size=8, unique=True), st.floats(-3, 3), st.floats(-10, 10))
def test_interpolation_is_linear_past_both_ends(xs, slope, at):
    xp = np.sort(np.array(xs)) / 10
    fp = slope * xp + 1.0
    assert fits.interpolate(np.array(at), xp, fp) == pytest.approx(slope * at + 1.0, abs=1e-6)


def test_the_weighted_fit_is_weighted():
    # the largest budget with a huge variance and an optimum far off the line must not pull the slope:
    # unweighted least squares gives 0.76 here
    log_c = np.log([1e15, 1e16, 1e17, 1e18, 1e19])
    log_n = 0.5 * log_c + 1.0
    log_n[4] += 3.0
    variance = np.array([0.01, 0.01, 0.01, 0.01, 1e6])
    fit = fits.fit_power_law(log_c, log_n, variance, log_c[None], log_n[None])
    assert fit["exponent"] == pytest.approx(0.5, abs=1e-4) and fit["ols_exponent"] == pytest.approx(0.76, abs=0.01)
    log_n[1] += 1.0  # now off the line at a budget of ordinary variance: the slope moves
    assert fits.fit_power_law(log_c, log_n, variance, log_c[None], log_n[None])["exponent"] != pytest.approx(0.5, abs=1e-3)


# --------------------------------------------------------------------------------------------------
# Synthetic sweeps of known exponent and noise


ALPHA, BETA = 0.34, 0.28  # Chinchilla's L(N, D) = E + A/N^alpha + B/D^beta: N_opt grows as C^(beta/(alpha+beta))
TRUE_A = BETA / (ALPHA + BETA)
SCALE = (ALPHA * 406.4 / (BETA * 410.7)) ** (1 / (ALPHA + BETA))  # N_opt = SCALE (C/6)^TRUE_A
SYNTHETIC_BUDGETS = tuple(1e15 * 10 ** (i / 2) for i in range(5))


def chinchilla_losses(budget: float, n: np.ndarray) -> np.ndarray:
    return 1.69 + 406.4 / n**ALPHA + 410.7 / (budget / (6 * n)) ** BETA


def chinchilla_results(budgets=SYNTHETIC_BUDGETS, noise=0.0, seeds=3, rng=None, embedding=0.0):
    """Runs of Chinchilla's loss plus Gaussian noise per run (a seed), 5 sizes over 16x around the true optimum,
    attention-free (depth 0) so that C = 6 N D exactly; ``embedding`` parameters are added to N and counted
    as the embedding."""
    rng, results = rng or np.random.default_rng(0), []
    for budget in budgets:
        for i, n in enumerate(SCALE * (budget / 6) ** TRUE_A * np.geomspace(0.25, 4, 5)):
            tokens = budget / (6 * n)
            for seed in range(seeds):
                loss = float(chinchilla_losses(budget, n) + noise * rng.standard_normal())
                results.append(dict(budget=budget, name=f"{budget:g}-{i}-s{seed}", seed=seed, width=1, depth=0,
                                    parameters=n + embedding, non_embedding_parameters=n, tokens=tokens,
                                    held_out_loss={"all": loss}))
    return results


RECORD = REPO / "docs" / "figures" / "scaling.json"


def record_shaped_sweep(record: dict, true_a: float, rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray]]:
    """One synthetic sweep shaped like the committed record: its budgets' sizes and parabola curvatures, three
    seeds, each size's own seed sd as the noise of its runs (0.003-0.2 nats), the optima on ln N = a ln C + k."""
    per_budget = record["analysis"]["per_budget"]
    log_c = np.array([b["fits"]["total"]["log_compute"] for b in per_budget])
    k = np.mean([b["fits"]["total"]["log_n_opt"] for b in per_budget]) - true_a * log_c.mean()
    sweep = []
    for b, c in zip(per_budget, log_c, strict=True):
        x, sd = np.log(b["sizes"]), np.array(b["seed_sd_by_size"])
        clean = 3.8 + b["fits"]["total"]["coefficients"][0] * (x - (true_a * c + k)) ** 2
        sweep.append((np.repeat(x, 3), np.repeat(clean, 3) + np.repeat(sd, 3) * rng.standard_normal(3 * len(x))))
    return sweep


def exponent_interval(sweep: list[tuple[np.ndarray, np.ndarray]], log_c: np.ndarray, draws: int,
                      rng: np.random.Generator) -> tuple[float, list[float]]:
    """The analysis's total-basis exponent and its 95% interval on one sweep (its draws, weights and slope)."""
    point = [fits.parabola_minimum(fits.fit_parabolas(log_n, loss[None]))[0] for log_n, loss in sweep]
    stack = np.stack([fits.parabola_minimum(fits.optimum_draws(log_n, loss, draws, rng)[0]) for log_n, loss in sweep],
                     axis=1)
    fit = fits.fit_power_law(log_c, np.array(point), fits.robust_variance(stack), np.broadcast_to(log_c, stack.shape),
                             stack)
    return fit["exponent"], fit["ci95"]


def test_the_interval_covers_the_true_exponent_with_the_records_own_noise():
    # 150 sweeps shaped like the committed record, each size with its own seed sd: the interval covers the
    # true exponent at least 90% of the time (pooling the noise over sizes covered 74%), and is not needlessly
    # wide: its median width under 2.5x the 95% width the estimates' own spread implies
    record = json.loads(RECORD.read_text())
    log_c = np.array([b["fits"]["total"]["log_compute"] for b in record["analysis"]["per_budget"]])
    true_a, rng = record["analysis"]["exponents"]["total"]["a"]["exponent"], np.random.default_rng(3)
    found = [exponent_interval(record_shaped_sweep(record, true_a, rng), log_c, 300, rng) for _ in range(150)]
    points, intervals = np.array([f[0] for f in found]), np.array([f[1] for f in found])
    covered = ((intervals[:, 0] <= true_a) & (true_a <= intervals[:, 1])).mean()
    assert covered >= 0.90, covered
    assert abs(points.mean() - true_a) < 0.02
    assert np.median(intervals[:, 1] - intervals[:, 0]) < 2.5 * 2 * 1.96 * points.std(), (intervals, points.std())


def test_the_interval_widens_with_the_noise():
    # the same shape at 3x the noise: about 3x as wide
    record = json.loads(RECORD.read_text())
    loud = json.loads(json.dumps(record))
    for b in loud["analysis"]["per_budget"]:
        b["seed_sd_by_size"] = [3 * v for v in b["seed_sd_by_size"]]
    log_c = np.array([b["fits"]["total"]["log_compute"] for b in record["analysis"]["per_budget"]])
    true_a, rng = record["analysis"]["exponents"]["total"]["a"]["exponent"], np.random.default_rng(4)
    width = {name: np.median([np.diff(exponent_interval(record_shaped_sweep(r, true_a, rng), log_c, 200, rng)[1])[0]
                              for _ in range(30)]) for name, r in (("quiet", record), ("loud", loud))}
    assert 2.0 < width["loud"] / width["quiet"] < 4.5, width


def test_analysis_recovers_the_exponent_and_its_interval_widens_with_noise():
    quiet = fits.analyse(chinchilla_results(noise=1e-4), SYNTHETIC_BUDGETS, context=0, draws=300)
    loud = fits.analyse(chinchilla_results(noise=3e-2), SYNTHETIC_BUDGETS, context=0, draws=300)
    a = quiet["exponents"]["total"]["a"]
    assert a["exponent"] == pytest.approx(TRUE_A, abs=0.01) and a["ci95"][0] < TRUE_A < a["ci95"][1]
    assert quiet["exponents"]["total"]["b"]["exponent"] == pytest.approx(1 - TRUE_A, abs=0.01)  # no attention: b = 1 - a
    width = {k: r["exponents"]["total"]["a"]["ci95"][1] - r["exponents"]["total"]["a"]["ci95"][0]
             for k, r in (("quiet", quiet), ("loud", loud))}
    assert width["loud"] > 5 * width["quiet"]  # the quiet one is mostly the parabola's misfit to Chinchilla's curve
    assert loud["per_budget"][0]["best_loss_seed_sd"] == pytest.approx(3e-2, rel=0.8)


def test_the_prediction_never_sees_the_budgets_it_predicts():
    results = chinchilla_results(noise=1e-3)
    honest = fits.analyse(results, SYNTHETIC_BUDGETS, context=0, draws=100)
    held = set(SYNTHETIC_BUDGETS[-fits.HELD_OUT:])
    shifted = [dict(r, held_out_loss={"all": r["held_out_loss"]["all"] + 1.0}) if r["budget"] in held else r
               for r in results]
    moved = fits.analyse(shifted, SYNTHETIC_BUDGETS, context=0, draws=100)
    for p, q in zip(honest["prediction"]["predictions"], moved["prediction"]["predictions"], strict=True):
        assert p["predicted_loss"] == q["predicted_loss"] and p["predicted_ci95"] == q["predicted_ci95"]
        assert q["measured_loss"] == pytest.approx(p["measured_loss"] + 1.0)
    assert honest["prediction"]["fitted_budgets"] == list(SYNTHETIC_BUDGETS[:-fits.HELD_OUT])
    for p in honest["prediction"]["predictions"]:  # three budgets fit a pure power law: Chinchilla's E bends it
        assert abs(p["relative_error"]) < 0.05 and p["seeds"] == 3 and p["error_in_seed_sds"] is not None


def test_the_kaplan_basis_counts_n_and_c_without_the_embedding():
    # runs whose loss is a parabola in ln(non-embedding N) with its minimum exactly at the middle size: the
    # non-embedding optimum is that run's non-embedding N, its compute that run's non-embedding C
    # (6 N_ne + 12 L d T) D, its tokens that run's D; the total basis sees other numbers
    results = []
    for budget in SYNTHETIC_BUDGETS:
        middle = 1e4 * (budget / 1e15) ** 0.6
        for i, n_ne in enumerate(middle * np.geomspace(0.25, 4, 5)):
            tokens = budget / (6 * n_ne)
            results.append(dict(budget=budget, name=f"{budget:g}-{i}", seed=0, width=16 * (i + 1), depth=i + 1,
                                parameters=n_ne + 5e3 * (i + 1), non_embedding_parameters=n_ne, tokens=tokens,
                                held_out_loss={"all": 0.3 * math.log(n_ne / middle) ** 2 + 3.0}))
    analysis = fits.analyse(results, SYNTHETIC_BUDGETS, context=64, draws=50)
    points = []
    for b in analysis["per_budget"]:
        middle = [r for r in results if r["budget"] == b["budget"]][2]
        fit = b["fits"]["non_embedding"]
        assert fit["n_opt"] == pytest.approx(middle["non_embedding_parameters"], rel=1e-6)
        kaplan_c = (6 * middle["non_embedding_parameters"] + 12 * 3 * 48 * 64) * middle["tokens"]
        assert fit["compute"] == pytest.approx(kaplan_c, rel=1e-6) and fit["d_opt"] == pytest.approx(middle["tokens"])
        assert b["fits"]["total"]["compute"] != pytest.approx(kaplan_c, rel=1e-3)
        points.append((math.log(kaplan_c), math.log(fit["n_opt"])))
    slope = np.polyfit(*zip(*points, strict=True), 1)[0]
    assert analysis["exponents"]["non_embedding"]["a"]["ols_exponent"] == pytest.approx(slope, abs=1e-9)


# --------------------------------------------------------------------------------------------------
# The sweep, end to end at dry-run size


@pytest.mark.slow  # 93 runs: 1-3 minutes on a shared 2-core machine; the test below covers one budget by default
def test_scaling_tiny_end_to_end_and_resumes(tmp_path: Path, text_files, capsys):
    args = ["scaling", "--tiny", "--out", str(tmp_path / "out"), "--runs", str(tmp_path / "runs"), "--data-files",
            *text_files]
    assert experiments.main(args) == 0
    record = json.loads((tmp_path / "out" / "scaling.json").read_text())
    plan = scaling.dry_run(scaling.CPU)
    assert not record["partial"] and record["plan"] == json.loads(json.dumps(scaling.asdict(plan)))
    # stage 1: every width the sweep uses at three rates; the chosen rate has the lowest validation loss
    rates = {int(w): lr for w, lr in record["learning_rates"].items()}
    for width, lr in rates.items():
        tried = [r for r in record["learning_rate_runs"] if r["width"] == width]
        assert set(plan.learning_rates) <= {r["learning_rate"] for r in tried}
        assert lr == min(tried, key=lambda r: r["validation_loss"])["learning_rate"]
    # stage 2: every size of every budget with every seed, at its width's chosen rate
    assert len(record["runs"]) == len(plan.budgets) * plan.sizes_per_budget * len(plan.seeds)
    for run in record["runs"]:
        assert run["learning_rate"] == rates[run["width"]] and run["seed"] in plan.seeds
        assert abs(run["tokens"] - run["target_tokens"]) <= plan.tokens_per_step / 2
        assert run["last_lr"] == pytest.approx(run["learning_rate"] * (plan.final_lr_fraction if run["steps"] > 1 else 1))
        assert math.isfinite(run["held_out_loss"]["all"]) and run["train_curve"][-1][0] == run["steps"]
    by_seed = {}
    for run in record["runs"]:  # seeds differ: the same size and budget, other losses
        by_seed.setdefault((run["budget"], run["width"]), set()).add(round(run["held_out_loss"]["all"], 6))
    assert any(len(losses) > 1 for losses in by_seed.values())
    p = record["analysis"]["prediction"]
    assert p["status"] == "ok" and [q["budget"] for q in p["predictions"]] == list(plan.budgets[-2:])
    table = (tmp_path / "out" / "scaling.md").read_text()
    assert f"{p['predictions'][0]['measured_loss']:.4f}" in table and "| 0.004 |" in table
    assert (tmp_path / "out" / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").glob("*/result.json")}
    assert experiments.main(args) == 0  # a second call keeps every finished run of both stages
    out = capsys.readouterr().out
    resumed = re.findall(r"(\d+) of (\d+) runs already finished", out)  # each stage and extension round
    assert resumed and all(done == planned for done, planned in resumed), out
    assert stamps == {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").glob("*/result.json")}
    # a sweep cut short: --no-train fits the complete budgets only and says which runs are missing
    lost = record["runs"][-1]["name"]
    (tmp_path / "runs" / lost / "result.json").unlink()
    assert experiments.main([*args, "--no-train"]) == 0
    partial = json.loads((tmp_path / "out" / "scaling.json").read_text())
    assert partial["partial"] is True and partial["missing_runs"] == [lost]
    assert [b["budget"] for b in partial["analysis"]["per_budget"]] == list(plan.budgets[:-1])
    assert (tmp_path / "out" / "scaling.md").read_text().startswith(f"**Partial sweep**: 1 runs not finished ({lost})")
    # ... and the same command without --no-train trains that one run, nothing else
    assert experiments.main(args) == 0
    assert {p: s for p, s in stamps.items() if lost not in str(p)} == {
        p: p.stat().st_mtime_ns for p in (tmp_path / "runs").glob("*/result.json") if lost not in str(p)}
    # --reanalyse refits a written record, with added runs (more seeds) and refuses a repeated one
    written = tmp_path / "out" / "scaling.json"
    extra = json.loads((tmp_path / "runs" / lost / "result.json").read_text())
    extra_path = tmp_path / "extra.json"
    extra_path.write_text(json.dumps(dict(extra, seed=7, name=extra["name"] + "-again")))
    copy = tmp_path / "record.json"
    copy.write_text(written.read_text())
    assert experiments.main(["scaling", "--out", str(tmp_path / "out"), "--reanalyse", str(copy), "--add-runs",
                             str(extra_path)]) == 0
    again = json.loads(written.read_text())
    assert len(again["runs"]) == len(record["runs"]) + 1 and 7 in again["analysis"]["per_budget"][-1]["seeds"]
    with pytest.raises(SystemExit):
        experiments.main(["scaling", "--out", str(tmp_path / "out"), "--reanalyse", str(copy), "--add-runs",
                          str(tmp_path / "runs" / lost / "result.json")])
    assert "repeats a run the record has" in capsys.readouterr().err


def test_one_budget_dry_run_trains_both_stages_and_resumes(tmp_path: Path, text_files, capsys):
    plan = replace(scaling.dry_run(scaling.CPU), budgets=(1.6e7,))
    record = scaling.sweep(tmp_path / "out", tmp_path / "runs", plan, data_files=text_files)
    rates = {int(w): lr for w, lr in record["learning_rates"].items()}
    assert len(rates) == 5
    for width, lr in rates.items():  # the plan's three rates, then 2x / 1/2x beyond an edge that won
        tried = sorted(r["learning_rate"] for r in record["learning_rate_runs"] if r["width"] == width)
        assert set(plan.learning_rates) <= set(tried) and len(tried) <= 3 + plan.rate_extensions
        assert lr not in (tried[0], tried[-1]) or len(tried) == 3 + plan.rate_extensions
    for run in record["runs"]:
        assert run["learning_rate"] == rates[run["width"]] and math.isfinite(run["held_out_loss"]["all"])
    assert sorted(r["seed"] for r in record["runs"]) == sorted(list(plan.seeds) * plan.sizes_per_budget)
    assert record["analysis"]["per_budget"][0]["best_loss_seed_sd"] > 0
    capsys.readouterr()
    scaling.sweep(tmp_path / "out", tmp_path / "runs", plan, data_files=text_files)
    assert "15 of 15 runs already finished" in capsys.readouterr().out


def test_a_run_that_diverges_is_recorded_not_raised(tmp_path: Path, text_files):
    plan = replace(scaling.dry_run(scaling.CPU), budgets=(1.6e7,))
    scaling.prepare_data(plan, lambda: scaling.local_corpora(list(text_files)), tmp_path)
    run = replace(scaling.learning_rate_specs(plan)[0], learning_rate=1e30)
    result = scaling.train_run(run, plan, tmp_path)
    assert result["diverged_at"] is not None and result["held_out_loss"] is None and result["validation_loss"] is None
    assert json.loads((tmp_path / run.name / "result.json").read_text())["diverged_at"] == result["diverged_at"]


def test_a_runs_folder_of_another_plan_is_refused(tmp_path: Path):
    scaling.claim_folder(scaling.dry_run(scaling.CPU), tmp_path)
    scaling.claim_folder(scaling.dry_run(scaling.CPU), tmp_path)  # the same plan resumes
    with pytest.raises(ValueError, match="another sweep plan"):
        scaling.claim_folder(replace(scaling.dry_run(scaling.CPU), seeds=(5, 6, 7)), tmp_path)


@pytest.mark.parametrize(("flags", "message"), [
    (["--dtype", "float16"], "--dtype must be one of float32, bfloat16"),
    (["--device", "tpu7"], "is not a torch device"),
    pytest.param(["--device", "cuda", "--dtype", "bfloat16"], "torch sees no CUDA device",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here")),
])
def test_device_and_dtype_are_checked_before_anything_runs(tmp_path: Path, capsys, flags, message):
    with pytest.raises(SystemExit):
        experiments.main(["scaling", "--tiny", "--runs", str(tmp_path / "runs"), *flags])
    assert message in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_the_gpu_plan_trains_in_bfloat16_on_cpu_at_dry_run_size(tmp_path: Path, text_files):
    # the --plan gpu --dtype bfloat16 code path at dry-run size: one budget's sizes and seeds, bfloat16 autocast
    plan = replace(scaling.dry_run(scaling.GPU), budgets=(scaling.dry_run(scaling.GPU).budgets[0],))
    scaling.prepare_data(plan, lambda: scaling.local_corpora(list(text_files)), tmp_path)
    runs = scaling.isoflop_specs(plan, {w: plan.learning_rates[1] for w in plan.widths})
    results = scaling.train_all(runs[:3], plan, tmp_path, 1, "cpu", "bfloat16")
    assert [r["seed"] for r in results] == list(plan.seeds) and all(r["dtype"] == "bfloat16" for r in results)
    assert all(math.isfinite(r["held_out_loss"]["all"]) for r in results)


# --------------------------------------------------------------------------------------------------
# The committed record, recomputed


def record_problems(record: dict) -> list[str]:
    """What is wrong with a scaling record: a run whose held-out loss is not its own (each run's held-out
    loss lies within 0.1 nats of its validation loss), an analysis the code does not recompute from the runs,
    a prediction interval narrower than the prediction's seed noise, a frontier not in the total basis, a
    rate chosen at a predicted budget."""
    problems = []
    for r in record["runs"] + record["learning_rate_runs"]:
        if r["validation_loss"] is not None and not abs(r["held_out_loss"]["all"] - r["validation_loss"]) < 0.1:
            problems.append(f"{r['name']}: held-out {r['held_out_loss']['all']:.4f}, validation {r['validation_loss']:.4f}")
    plan, stored = record["plan"], record["analysis"]
    again = fits.analyse(record["runs"], tuple(plan["budgets"]), plan["block_size"])
    for basis in fits.BASES:
        fit = (again["exponents"][basis] or {}).get("a") or {}
        for key in ("exponent", "ci95", "ols_exponent", "ols_ci95"):
            if fit.get(key) != pytest.approx(stored["exponents"][basis]["a"][key], rel=1e-9):
                problems.append(f"a ({basis}) {key}: recomputed {fit.get(key)}")
    for basis, kept in stored["fit_choices"].items():
        choices = again["fit_choices"][basis]
        if choices["exponents"] != pytest.approx(kept["exponents"], rel=1e-9) or choices["range"] != pytest.approx(
                kept["range"], rel=1e-9):
            problems.append(f"the fit choices ({basis}) do not recompute")
    for p, q in zip(again["prediction"].get("predictions", [{}] * fits.HELD_OUT), stored["prediction"]["predictions"],
                    strict=True):
        for key in ("compute", "predicted_loss", "predicted_ci95", "measured_loss", "prediction_seed_sd", "error"):
            if p.get(key) != pytest.approx(q[key], rel=1e-9):
                problems.append(f"prediction at {q['budget']:.3g}: {key} recomputed {p.get(key)}, stored {q[key]}")
        low, high = q["predicted_ci95"]
        if not (low < q["predicted_loss"] < high and high - low > 2 * q["prediction_seed_sd"] > 0):
            problems.append(f"prediction at {q['budget']:.3g}: interval {q['predicted_ci95']} against its seed sd")
    for b in stored["per_budget"]:
        best = next(r for r in record["runs"] if r["budget"] == b["budget"] and r["parameters"] == b["best_size"])
        if b["best_compute"] != pytest.approx(fits.run_compute(best, "total", plan["block_size"]), rel=1e-12):
            problems.append(f"budget {b['budget']:.3g}: the frontier's compute is not the total basis's")
    predicted = plan["budgets"][-fits.HELD_OUT:]
    problems += [f"width {w}: rate chosen at the predicted budget {b:.3g}" for w, b in record["rate_homes"].items()
                 if b in predicted]
    for width, rate in record["learning_rates"].items():  # bracketed means a worse rate tried on each side
        used = {r["learning_rate"] for r in record["runs"] if str(r["width"]) == width}
        if used != {rate} and width not in record["rates_not_rerun"]:
            problems.append(f"width {width}: IsoFLOP runs at {used}, chosen {rate}, not named as not rerun")
        tried = {r["learning_rate"]: r["validation_loss"] for r in record["learning_rate_runs"] if str(r["width"]) == width}
        if rate not in tried:
            problems.append(f"width {width}: its chosen rate {rate} was never tried at its home budget")
            continue
        worse = [lr for lr, loss in tried.items() if loss is None or loss > tried[rate]]
        if record["bracketed"][width] != (any(lr < rate for lr in worse) and any(lr > rate for lr in worse)):
            problems.append(f"width {width}: bracketed is {record['bracketed'][width]}, the rates tried say otherwise")
    return problems


@pytest.fixture(scope="module")
def committed() -> dict:
    return json.loads(RECORD.read_text())


def test_the_committed_record_recomputes(committed):
    assert record_problems(committed) == []


def test_a_flawed_record_is_caught(committed):
    # planted flaws, each alone: losses shuffled among the runs, a prediction interval collapsed to the
    # prediction, the frontier's compute counted in Kaplan's basis, a width's runs at a rate it did not choose
    shuffled = json.loads(json.dumps(committed))
    losses = [r["held_out_loss"] for r in shuffled["runs"]]
    for r, loss in zip(shuffled["runs"], losses[7:] + losses[:7], strict=True):
        r["held_out_loss"] = loss
    collapsed = json.loads(json.dumps(committed))
    q = collapsed["analysis"]["prediction"]["predictions"][-1]
    q["predicted_ci95"] = [q["predicted_loss"]] * 2
    kaplan = json.loads(json.dumps(committed))
    for b in kaplan["analysis"]["per_budget"]:
        best = next(r for r in kaplan["runs"] if r["budget"] == b["budget"] and r["parameters"] == b["best_size"])
        b["best_compute"] = fits.run_compute(best, "kaplan", kaplan["plan"]["block_size"])
    unnamed = json.loads(json.dumps(committed))  # a width whose runs are at another rate than it chose, unnamed
    width = next(iter(unnamed["learning_rates"]))
    unnamed["learning_rates"][width] *= 2
    unnamed["rates_not_rerun"].pop(width, None)
    for flawed, words in ((shuffled, "held-out"), (collapsed, "interval"), (kaplan, "total basis"),
                          (unnamed, "not named as not rerun")):
        assert any(words in p for p in record_problems(flawed)), words


def test_the_docs_quote_the_committed_record(committed):
    # docs/experiments.md's headline figures are the record's, to the printed digits
    text = (REPO / "docs" / "experiments.md").read_text()
    exponents = committed["analysis"]["exponents"]
    for basis in ("total", "kaplan", "non_embedding"):
        a = exponents[basis]["a"]
        assert f"{a['exponent']:.2f} [{a['ci95'][0]:.2f}, {a['ci95'][1]:.2f}]" in text, basis
    a = exponents["total"]["a"]
    assert f"[{a['ols_ci95'][0]:.2f}, {a['ols_ci95'][1]:.2f}]" in text
    for choices in committed["analysis"]["fit_choices"].values():
        low, high = choices["range"]
        assert f"{low:.2f}-{high:.2f}" in text
    for q in committed["analysis"]["prediction"]["predictions"]:
        assert f"{q['predicted_loss']:.3f}" in text and f"{q['measured_loss']:.3f}" in text


def test_the_record_reproduces_from_its_own_runs(committed):
    # refitting the committed record (the reproducing command, ``--reanalyse docs/figures/scaling.json``) chooses the
    # same rates at the same home budgets, uses the same runs and gives the same analysis
    again = scaling.reanalysed(json.loads(json.dumps(committed)), [], {})
    for key in ("learning_rates", "rate_homes", "bracketed", "rates_not_rerun", "analysis"):
        assert again[key] == committed[key], key
    assert [r["name"] for r in again["runs"]] == [r["name"] for r in committed["runs"]]


# --------------------------------------------------------------------------------------------------
# Compare's runner and statistics under the sweep; a record's runs rerun at their chosen rates


@pytest.mark.slow  # two spawned workers import torch: 15 s quiet, minutes on the shared machine
def test_the_sweeps_runs_go_through_compares_runner(tmp_path: Path, text_files):
    # two of the runner's worker processes train what this process trains, to the same losses
    plan = replace(scaling.dry_run(scaling.CPU), budgets=(1.6e7,))
    runs = scaling.isoflop_specs(plan, {w: plan.learning_rates[1] for w in plan.widths})[:2]
    scaling.prepare_data(plan, lambda: scaling.local_corpora(list(text_files)), tmp_path / "workers1")
    (tmp_path / "workers2").mkdir()
    shutil.copy(tmp_path / "workers1" / "data.pt", tmp_path / "workers2" / "data.pt")
    results = {workers: [r["held_out_loss"]["all"] for r in scaling.train_all(
        runs, plan, tmp_path / f"workers{workers}", workers, "cpu", "float32")] for workers in (1, 2)}
    assert results[2] == pytest.approx(results[1], rel=1e-6)


def test_a_failed_run_is_named_after_the_others_ran(tmp_path: Path, text_files):
    plan = replace(scaling.dry_run(scaling.CPU), budgets=(1.6e7,))
    runs = scaling.isoflop_specs(plan, {w: plan.learning_rates[1] for w in plan.widths})[:2]
    with pytest.raises(RuntimeError, match=r"2 scaling run\(s\) failed .*data\.pt.*the same command trains the rest"):
        scaling.train_all(runs, plan, tmp_path, 1, "cpu", "float32")


def test_a_rerun_trains_what_the_record_names_and_nothing_it_holds(committed):
    # the runs a record names as not rerun: the width at its chosen rate at every budget using it, every seed,
    # less those it holds (the rate stage's first-seed run at the home budget)
    record = json.loads(json.dumps(committed))
    width, rate = "8", committed["learning_rates"]["8"]
    taken = [r for r in record["runs"] if str(r["width"]) == width]
    for key in ("runs", "superseded_runs"):  # the width's IsoFLOP runs at any rate gone
        record[key] = [r for r in record[key] if str(r["width"]) != width]
    record["rates_not_rerun"] = {width: dict(used=rate / 4, chosen=rate, home_budget=record["rate_homes"][width],
                                             held_out_gain_at_home=None)}
    home, specs = (record["rate_homes"][width], scaling.CPU.seeds[0]), scaling.rerun_specs(record)
    assert {(s.budget, s.seed) for s in specs} == {(r["budget"], r["seed"]) for r in taken} - {home}
    assert {s.learning_rate for s in specs} == {rate} and len(specs) == len({s.name for s in specs})


def test_a_rerun_trains_whole_widths_cheapest_first():
    def run(width, budget, seed):
        return scaling.RunSpec(budget, width, 1, 1, 1, 10, 10, 10.0, 1e-3, seed)

    specs = [run(w, b, s) for w, budgets in ((12, (1.0, 2.0)), (16, (2.5,)), (8, (1.0, 1.0))) for b in budgets
             for s in (0, 1)]
    assert [(s.width, s.budget, s.seed) for s in sorted(specs, key=scaling.whole_widths_first(specs))] == [
        (8, 1.0, 0), (8, 1.0, 1), (8, 1.0, 0), (8, 1.0, 1), (16, 2.5, 0), (16, 2.5, 1), (12, 1.0, 0), (12, 1.0, 1),
        (12, 2.0, 0), (12, 2.0, 1)]


def test_a_rerun_refuses_a_runs_folder_of_other_data(tmp_path: Path, text_files):
    plan = replace(scaling.dry_run(scaling.CPU), budgets=(1.6e7,))
    record = dict(plan=scaling.asdict(plan), data=list(text_files), train_tokens=1, held_out_tokens={}, runs=[],
                  rates_not_rerun={})
    with pytest.raises(ValueError, match="not the record's data; pass another --runs folder"):
        scaling.train_reruns(record, tmp_path, 1)
    assert not any(p.name.startswith("C") for p in tmp_path.iterdir())  # nothing trained


def test_a_rate_change_is_measured_as_a_paired_difference():
    # each run at the rate now used against the superseded run of the same budget and seed at the earlier rate
    def run(budget, seed, rate, loss):
        return dict(budget=budget, width=8, seed=seed, learning_rate=rate, held_out_loss={"all": loss})

    now = [run(b, s, 0.064, 4.0 + 0.01 * s + b) for b in (1, 2) for s in (0, 1, 2)]
    before = [run(b, s, 0.016, 4.05 + 0.02 * s + b) for b in (1, 2) for s in (0, 1, 2)]
    record = dict(runs=now, superseded_runs=before[1:], learning_rate_runs=before[:1])
    found = scaling.rate_changes(record)["8"]
    expected = paired_difference([r["held_out_loss"]["all"] for r in now], [r["held_out_loss"]["all"] for r in before])
    assert found == dict(earlier_rate=0.016, rate=0.064, **expected.as_dict()) and found["high"] < 0
    assert scaling.rate_changes(dict(record, superseded_runs=before[2:])) == {}  # a run without its pair: none


def test_each_reanalysis_keeps_the_runs_earlier_ones_added():
    first = scaling.with_history(None, {"commit": "a"}, [{"name": "x", "why": "bracket"}])
    second = scaling.with_history(first, {"commit": "b"}, [{"name": "y", "why": "rerun"}])
    assert second["added_runs"] == [{"name": "x", "why": "bracket", "commit": "a"},
                                    {"name": "y", "why": "rerun", "commit": "b"}]
    assert second["commit"] == "b" and second["earlier"] == [{"commit": "a"}]
    migrated = scaling.with_history({"commit": "old", "added_runs": [{"name": "x", "why": "w"}]}, {"commit": "c"}, [])
    assert migrated["added_runs"] == [{"name": "x", "why": "w", "commit": "old"}]
