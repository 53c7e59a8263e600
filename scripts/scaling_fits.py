"""The IsoFLOP sweep's analysis (scripts/scaling.py trains the runs; docs/experiments.md reads the results).

Compute is counted with attention, in one of two bases, and every claim names its basis:

    C = (6 N + 12 L d T) D      N: every parameter (the tied embedding/head once)      -> basis "total"
                                N: without the embedding and head (Kaplan's count)      -> basis "non_embedding"

with L layers of width d (the attention width: heads x 8 = d here), T the training context and D the tokens
(Kaplan et al. 2020 table 1 counts 2 L T d a token forward for QK^T; the softmax-weighted sum of values is
as large, hence 2 x 2 L T d forward and 3x that with the backward pass). A Kaplan-basis fit regresses
non-embedding N_opt on non-embedding C; a total-basis fit total N_opt on total C.

Per budget a parabola of held-out loss against ln N through all runs (every size and seed) gives ln N_opt.
Its uncertainty comes from a bootstrap over the budget's runs: each run's residual from the parabola is
resampled with replacement among the budget's runs (sizes x seeds), scaled by sqrt(n / (n - 3)), and the
parabola refitted (`optimum_draws`). The exponent a (N_opt ~ C^a) is a weighted least-squares slope (weights
1 / the bootstrap variance of each budget's ln N_opt) and its 95% interval the percentiles of the slopes
refitted on the same draws, so the per-budget uncertainty propagates. tests/test_scaling.py measures the
interval's coverage on synthetic sweeps of known exponent and noise. A second, conservative interval
resamples whole sizes (with their seeds) as cases: it says how much the choice of runs moves the exponent.

The frontier L(C) is fitted on the smaller budgets only and predicts the held-out larger ones; each error
stands beside the seed-to-seed spread of the measured loss and beside a naive baseline (a straight line in
log-log through the two largest fitted budgets).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: Chinchilla's and Kaplan's exponents (N_opt ~ C^a, D_opt ~ C^b), printed beside the measured ones.
REFERENCE_EXPONENTS = {"Chinchilla (Hoffmann et al. 2022)": (0.50, 0.50), "Kaplan et al. 2020": (0.73, 0.27)}
#: The two bases: each counts N and C the same way (a run's field holding its N, per basis).
BASES = {"total": "parameters", "non_embedding": "non_embedding_parameters"}
DRAWS = 2000  # bootstrap draws per analysis
FRONTIER_DRAWS = 200  # of which the frontier is refitted on (a least-squares search each)
HELD_OUT = 2  # budgets the frontier predicts without seeing them


def training_flops(parameters: float, depth: int, width: int, context: int, tokens: float) -> float:
    """C = (6 N + 12 L d T) D: the weights' multiplies (6 N a token, forward and backward) and attention's
    two T x T products (QK^T and the weighted sum of values: 2 x 2 L T d forward, 3x that with backward)."""
    return (6 * parameters + 12 * depth * width * context) * tokens


def run_compute(run: dict[str, Any], basis: str, context: int) -> float:
    return training_flops(run[BASES[basis]], run["depth"], run["width"], context, run["tokens"])


# --------------------------------------------------------------------------------------------------
# One budget: the parabola, its bootstrap


def parabola_design(log_n: np.ndarray) -> np.ndarray:
    return np.stack([log_n**2, log_n, np.ones_like(log_n)], axis=-1)


def parabola_minimum(coefficients: np.ndarray) -> np.ndarray:
    """x* = -p1 / (2 p0) for each row of coefficients; NaN where the parabola has no minimum (p0 <= 0)."""
    p0, p1 = coefficients[..., 0], coefficients[..., 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(p0 > 0, -p1 / (2 * p0), np.nan)


def fit_parabolas(log_n: np.ndarray, losses: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Least-squares parabolas in ln N, one per row of ``losses`` (draws x runs), optionally with per-run
    weights (counts of a case resample). Rows with fewer than three distinct sizes get NaN coefficients."""
    design = parabola_design(log_n)
    w = np.ones_like(losses) if weights is None else weights
    gram = np.einsum("ri,dr,rj->dij", design, w, design)
    moment = np.einsum("ri,dr->di", design, w * losses)
    sizes = np.unique(log_n)
    distinct = (np.stack([(w[:, log_n == s] > 0).any(axis=1) for s in sizes], axis=1)).sum(axis=1)
    usable = distinct >= 3
    gram[~usable] = np.eye(3)
    coefficients = np.linalg.solve(gram, moment[..., None])[..., 0]
    coefficients[~usable] = np.nan
    return coefficients


def optimum_draws(log_n: np.ndarray, losses: np.ndarray, draws: int, rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Bootstrap draws of one budget's parabola, from its runs' residuals resampled with replacement over all
    the budget's runs (every size and seed) and scaled by sqrt(n / (n - 3)): (coefficients, resampled losses)."""
    n = len(losses)
    point = fit_parabolas(log_n, losses[None])[0]
    fitted = parabola_design(log_n) @ point
    residuals = (losses - fitted) * math.sqrt(n / max(1, n - 3))
    resampled = fitted + rng.choice(residuals, size=(draws, n))
    return fit_parabolas(log_n, resampled), resampled


def size_case_weights(size_of_run: np.ndarray, draws: int, rng: np.random.Generator) -> np.ndarray:
    """Case-resampling weights (draws x runs), a two-stage bootstrap over sizes x seeds: as many sizes as the
    budget has drawn with replacement, then each drawn size's seeds drawn with replacement."""
    sizes = np.unique(size_of_run)
    weights = np.zeros((draws, len(size_of_run)))
    picks = rng.integers(0, len(sizes), size=(draws, len(sizes)))
    for k, size in enumerate(sizes):
        members = np.flatnonzero(size_of_run == size)
        times = (picks == k).sum(axis=1) * len(members)
        weights[:, members] = rng.multinomial(times, np.full(len(members), 1 / len(members)))
    return weights


def interpolate(x: np.ndarray, xp: np.ndarray, fp: np.ndarray) -> np.ndarray:
    """Piecewise-linear interpolation of fp(xp) (xp increasing), extended linearly past both ends."""
    inside = np.interp(x, xp, fp)
    low = fp[0] + (x - xp[0]) * (fp[1] - fp[0]) / (xp[1] - xp[0])
    high = fp[-1] + (x - xp[-1]) * (fp[-1] - fp[-2]) / (xp[-1] - xp[-2])
    return np.where(x < xp[0], low, np.where(x > xp[-1], high, inside))


def interval(values: np.ndarray) -> list[float] | None:
    finite = values[np.isfinite(values)]
    return [float(v) for v in np.percentile(finite, [2.5, 97.5])] if len(finite) else None


# --------------------------------------------------------------------------------------------------
# Across budgets


def weighted_slopes(log_c: np.ndarray, log_y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The weighted least-squares slope of each row: log_c and log_y (draws x budgets), one weight per budget."""
    w = weights / weights.sum()
    xc = log_c - (w * log_c).sum(axis=-1, keepdims=True)
    yc = log_y - (w * log_y).sum(axis=-1, keepdims=True)
    return (w * xc * yc).sum(axis=-1) / (w * xc * xc).sum(axis=-1)


def fit_power_law(log_c: np.ndarray, log_y: np.ndarray, variance: np.ndarray, draws_c: np.ndarray,
                  draws_y: np.ndarray, case_c: np.ndarray | None = None, case_y: np.ndarray | None = None
                  ) -> dict[str, Any]:
    """ln y = a ln C + k weighted by 1 / variance (each budget's bootstrap variance of ln y); the 95% interval
    from the slopes of the draws (draws x budgets, the same weights), the ordinary least-squares a beside it."""
    weights = 1 / np.maximum(variance, 1e-12)
    result = dict(exponent=float(weighted_slopes(log_c, log_y, weights)), ci95=interval(
        weighted_slopes(draws_c, draws_y, weights)), ols_exponent=float(np.polyfit(log_c, log_y, 1)[0]))
    if case_c is not None:
        result["case_ci95"] = interval(weighted_slopes(case_c, case_y, weights))
    return result


def frontier_curve(c: np.ndarray, e: float, a: float, alpha: float) -> np.ndarray:
    return e + a * c ** (-alpha)


def fit_frontier(budgets: np.ndarray, losses: np.ndarray, start: dict[str, Any] | None = None) -> dict[str, Any]:
    """With four or more budgets L(C) = E + A (C/C_0)^-alpha (E, A >= 0, 0 < alpha < 3; C_0 the first
    budget); with three, E = 0 (a straight line in log-log): three parameters through three points would
    leave nothing to test. ``start``: a frontier to start the search from (a bootstrap draw starts from the
    point fit)."""
    c = budgets / budgets[0]
    if len(budgets) < 4:
        slope, intercept = np.polyfit(np.log(c), np.log(losses), 1)
        return dict(form="A (C/C0)^-alpha", E=0.0, A=float(math.exp(intercept)), alpha=float(-slope),
                    reference_budget=float(budgets[0]))
    from scipy.optimize import curve_fit

    guess = (start["E"], start["A"], start["alpha"]) if start else (
        max(0.0, float(losses.min()) - 0.5), float(losses[0] - losses.min()) + 0.5, 0.2)
    params, _ = curve_fit(frontier_curve, c, losses, p0=guess, bounds=([0, 0, 1e-3], [np.inf, np.inf, 3]),
                          maxfev=20000)
    return dict(form="E + A (C/C0)^-alpha", E=float(params[0]), A=float(params[1]), alpha=float(params[2]),
                reference_budget=float(budgets[0]))


def predict_frontier(frontier: dict[str, Any], budget: float) -> float:
    c = budget / frontier["reference_budget"]
    return float(frontier_curve(np.array(c), frontier["E"], frontier["A"], frontier["alpha"]))


# --------------------------------------------------------------------------------------------------
# The whole analysis


def analyse(results: list[dict[str, Any]], budgets: tuple[float, ...], context: int, draws: int = DRAWS,
            seed: int = 0, held_out: int = HELD_OUT) -> dict[str, Any]:
    """Per budget the optimum in both bases with its bootstrap draws; across budgets the exponents; the
    frontier fitted on all but the ``held_out`` largest budgets predicting those."""
    rng = np.random.default_rng(seed)
    per_budget, draws_of = [], []
    for budget in budgets:
        runs = sorted((r for r in results if r["budget"] == budget), key=lambda r: (r["parameters"], r.get("seed", 0)))
        summary, budget_draws = budget_optimum(runs, context, draws, rng)
        per_budget.append(dict(budget=budget, **summary))
        draws_of.append(budget_draws)
    exponents: dict[str, Any] = {}
    for basis in BASES:
        usable = [i for i, b in enumerate(per_budget) if b["fits"][basis]["log_n_opt"] is not None]
        if len(usable) < 2:
            exponents[basis] = None
            continue
        point_c = np.array([per_budget[i]["fits"][basis]["log_compute"] for i in usable])
        point_n = np.array([per_budget[i]["fits"][basis]["log_n_opt"] for i in usable])
        var = np.array([np.nanvar(draws_of[i][basis]["log_n"]) for i in usable])
        stack = {key: np.stack([draws_of[i][basis][key] for i in usable], axis=1)
                 for key in ("log_n", "log_c", "log_d", "case_log_n", "case_log_c", "case_log_d")}
        fit_n = fit_power_law(point_c, point_n, var, stack["log_c"], stack["log_n"], stack["case_log_c"],
                              stack["case_log_n"])
        fit_d = None
        if basis == "total":
            point_d = np.array([per_budget[i]["fits"][basis]["log_d_opt"] for i in usable])
            var_d = np.array([np.nanvar(draws_of[i][basis]["log_d"]) for i in usable])
            fit_d = fit_power_law(point_c, point_d, var_d, stack["log_c"], stack["log_d"], stack["case_log_c"],
                                  stack["case_log_d"])
        exponents[basis] = dict(a=fit_n, b=fit_d, budgets=[per_budget[i]["budget"] for i in usable])
    return dict(compute=f"C = (6 N + 12 L d T) D, T = {context}", per_budget=per_budget, exponents=exponents,
                prediction=held_out_prediction(per_budget, draws_of, held_out),
                earlier_split=held_out_prediction(per_budget, draws_of, 1))


def budget_optimum(runs: list[dict[str, Any]], context: int, draws: int, rng: np.random.Generator
                   ) -> tuple[dict[str, Any], dict[str, Any]]:
    """One budget: its runs' losses by size and seed, and per basis the parabola's optimum N, the compute and
    tokens there (interpolated along the budget's sizes), with bootstrap draws of each."""
    loss = np.array([r["held_out_loss"]["all"] for r in runs])
    size = np.array([r["parameters"] for r in runs])
    seeds = np.array([r.get("seed", 0) for r in runs])
    sizes = np.unique(size)
    mean = np.array([loss[size == s].mean() for s in sizes])
    spread = [float(loss[size == s].std(ddof=1)) if (size == s).sum() > 1 else None for s in sizes]
    best = int(mean.argmin())
    best_runs = [r for r in runs if r["parameters"] == sizes[best]]
    summary: dict[str, Any] = dict(
        runs=[r["name"] for r in runs], seeds=sorted({int(s) for s in seeds}), sizes=sizes.tolist(),
        mean_loss_by_size=mean.tolist(), seed_sd_by_size=spread, best_loss=float(mean[best]),
        best_loss_seed_sd=spread[best], best_size=int(sizes[best]),
        best_compute=run_compute(best_runs[0], "total", context), fits={})
    residual_coefficients, resampled = optimum_draws(np.log(size), loss, draws, rng)
    case_weights = size_case_weights(size, draws, rng)
    case_coefficients = fit_parabolas(np.log(size), np.broadcast_to(loss, case_weights.shape), case_weights)
    per_size = np.stack([resampled[:, size == s].mean(axis=1) for s in sizes], axis=1)
    per_basis: dict[str, Any] = dict(best_loss=per_size.min(axis=1))
    for basis, key in BASES.items():
        counted = np.array([r[key] for r in runs])
        if basis == "total":
            coefficients, cases = residual_coefficients, case_coefficients
            point = fit_parabolas(np.log(size), loss[None])[0]
        else:  # the same runs, ln N counted without the embedding
            point = fit_parabolas(np.log(counted), loss[None])[0]
            coefficients = fit_parabolas(np.log(counted), resampled)
            cases = fit_parabolas(np.log(counted), np.broadcast_to(loss, case_weights.shape), case_weights)
        along = np.log(np.array([counted[size == s][0] for s in sizes]))
        log_c = np.log([run_compute(next(r for r in runs if r["parameters"] == s), basis, context) for s in sizes])
        log_d = np.log([next(r for r in runs if r["parameters"] == s)["tokens"] for s in sizes])
        x = float(parabola_minimum(point))
        draws_x, cases_x = parabola_minimum(coefficients), parabola_minimum(cases)
        per_basis[basis] = dict(log_n=draws_x, log_c=interpolate(draws_x, along, log_c),
                                log_d=interpolate(draws_x, along, log_d), case_log_n=cases_x,
                                case_log_c=interpolate(cases_x, along, log_c),
                                case_log_d=interpolate(cases_x, along, log_d))
        fit = dict(coefficients=point.tolist(), log_n_opt=None, n_opt=None, log_compute=None, compute=None,
                   log_d_opt=None, d_opt=None, loss_at_opt=None, log_n_opt_se=None, n_opt_ci95=None,
                   no_minimum_fraction=float(np.isnan(draws_x).mean()), sizes_below=None, sizes_above=None)
        if math.isfinite(x):
            c_opt, d_opt = (float(interpolate(np.array(x), along, v)) for v in (log_c, log_d))
            ci = interval(draws_x)
            fit.update(log_n_opt=x, n_opt=math.exp(x), log_compute=c_opt, compute=math.exp(c_opt), log_d_opt=d_opt,
                       d_opt=math.exp(d_opt), loss_at_opt=float(np.polyval(point, x)),
                       log_n_opt_se=float(np.nanstd(draws_x)), n_opt_ci95=[math.exp(v) for v in ci] if ci else None,
                       sizes_below=int((along < x).sum()), sizes_above=int((along > x).sum()))
        summary["fits"][basis] = fit
    return summary, per_basis


def held_out_prediction(per_budget: list[dict[str, Any]], draws_of: list[dict[str, Any]], held_out: int
                        ) -> dict[str, Any]:
    """The frontier (total basis: each budget's best size, its seed-mean loss and its compute) fitted on all
    but the ``held_out`` largest budgets predicts each of those; the prediction's 95% interval from the same
    bootstrap draws; the error beside the measured loss's seed spread and beside the log-log line through
    the two largest fitted budgets."""
    fitted, held = per_budget[:-held_out], per_budget[-held_out:]
    if len(fitted) < 3:
        return dict(status=f"needs 3 budgets to fit and {held_out} to predict, has {len(per_budget)} complete")
    budgets = np.array([b["best_compute"] for b in fitted])
    losses = np.array([b["best_loss"] for b in fitted])
    frontier = fit_frontier(budgets, losses)
    resampled_best = np.stack([draws_of[i]["best_loss"] for i in range(len(fitted))], axis=1)
    draw_predictions = []
    for row in resampled_best[:FRONTIER_DRAWS]:
        try:
            f = fit_frontier(budgets, row, frontier)
        except RuntimeError:  # curve_fit found no fit for this draw
            continue
        draw_predictions.append([predict_frontier(f, b["best_compute"]) for b in held])
    draw_array = np.array(draw_predictions)
    (c1, l1), (c2, l2) = [(b["best_compute"], b["best_loss"]) for b in fitted[-2:]]
    slope = math.log(l2 / l1) / math.log(c2 / c1)
    predictions = []
    for j, b in enumerate(held):
        predicted, measured, spread = predict_frontier(frontier, b["best_compute"]), b["best_loss"], \
            b["best_loss_seed_sd"]
        baseline = l2 * (b["best_compute"] / c2) ** slope
        predictions.append(dict(
            budget=b["budget"], compute=b["best_compute"], predicted_loss=predicted,
            predicted_ci95=interval(draw_array[:, j]) if len(draw_array) else None, measured_loss=measured,
            measured_seed_sd=spread, seeds=len(b["seeds"]), error=predicted - measured,
            relative_error=(predicted - measured) / measured,
            error_in_seed_sds=(predicted - measured) / spread if spread else None,
            baseline_loss=baseline, baseline_error=baseline - measured))
    return dict(status="ok", frontier=frontier, fitted_budgets=[b["budget"] for b in fitted],
                predictions=predictions)
