"""The IsoFLOP sweep's analysis (hf_vanilla/experiments/scaling.py trains the runs; docs/experiments.md reads it).

Compute is counted in one of three bases, and every claim names its basis:

    total          C = (6 N + 12 L d T) D   N: every parameter (the tied embedding/head once)
    non_embedding  C = (6 N + 12 L d T) D   N: without the embedding and head, attention counted
    kaplan         C = 6 N D                N: without the embedding and head (Kaplan et al. 2020's own C)

with L layers of width d (the attention width: heads x 8 = d here), T the training context and D the tokens
(Kaplan et al. 2020 table 1 counts 2 L T d a token forward for QK^T; the softmax-weighted sum of values is
as large, hence 2 x 2 L T d forward and 3x that with the backward pass). Each basis regresses its N_opt on its C.

Per budget a parabola of held-out loss against ln N through all runs (every size and seed) gives ln N_opt.
Its uncertainty comes from a parametric bootstrap with each size's own seed noise (`optimum_draws`): the
runs of a size are redrawn around the parabola with a variance drawn from that size's posterior given its
seeds' spread (scaled inverse chi-square with seeds - 1 degrees of freedom), so a size of noisy seeds moves
the optimum as much as it should and three seeds' sd is not taken as exact; a sweep with one seed a size
falls back to the budget's pooled residuals. The exponent a (N_opt ~ C^a) is a weighted least-squares slope
(weights 1 / a robust variance, (IQR/1.349)^2, of each budget's ln N_opt draws) and its 95% interval the
percentiles of the slopes refitted on the draws. tests/test_scaling.py measures its coverage on synthetic
sweeps shaped like the committed record, each size with its own seed sd. Beside it stand the ordinary
least-squares line through the optima with its t interval (budgets - 2 dof), which also holds the optima's
scatter about the line, and the spread of a over other reasonable fits (`fit_choices`).

The frontier L(C) is fitted on the smaller budgets only and predicts the held-out larger ones; each error
stands beside the seed noise of the measured mean and of the prediction (the sd of the prediction over the
same draws), and beside a naive baseline (a straight line in log-log through the two largest fitted budgets).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from hf_vanilla.experiments.statistics import CONFIDENCE, t_quantile
from hf_vanilla.experiments.statistics import interval as seed_interval

#: Chinchilla's and Kaplan's exponents (N_opt ~ C^a, D_opt ~ C^b), printed beside the measured ones.
REFERENCE_EXPONENTS = {"Chinchilla (Hoffmann et al. 2022)": (0.50, 0.50), "Kaplan et al. 2020": (0.73, 0.27)}


@dataclass(frozen=True)
class Basis:
    """How one basis counts: the run's field holding its N, and whether C counts attention's 12 L d T."""

    parameters: str
    attention: bool


#: The bases: each counts N and C its own way (the module's docstring).
BASES = {"total": Basis("parameters", True), "non_embedding": Basis("non_embedding_parameters", True),
         "kaplan": Basis("non_embedding_parameters", False)}
DRAWS = 2000  # bootstrap draws per analysis
FRONTIER_DRAWS = 200  # of which the frontier is refitted on (a least-squares search each)
HELD_OUT = 2  # budgets the frontier predicts without seeing them


def training_flops(parameters: float, depth: int, width: int, context: int, tokens: float) -> float:
    """C = (6 N + 12 L d T) D: the weights' multiplies (6 N a token, forward and backward) and attention's
    two T x T products (QK^T and the weighted sum of values: 2 x 2 L T d forward, 3x that with backward)."""
    return (6 * parameters + 12 * depth * width * context) * tokens


def run_compute(run: dict[str, Any], basis: str, context: int) -> float:
    counted = BASES[basis]
    return training_flops(run[counted.parameters], run["depth"], run["width"], context if counted.attention else 0,
                          run["tokens"])


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
    """Bootstrap draws of one budget's parabola: (coefficients, redrawn losses). With two or more seeds at
    every size, each size's runs are redrawn around the parabola with normal noise whose variance is drawn
    from the size's posterior, (k - 1) s^2 / chi2(k - 1) (k seeds, s their sd): the record's noise is
    heteroscedastic (0.003-0.2 nats by size), and pooling it over sizes covered a known exponent 74% of the
    time. Otherwise the budget's residuals are resampled over all its runs, scaled by sqrt(n / (n - 3))."""
    n = len(losses)
    fitted = parabola_design(log_n) @ fit_parabolas(log_n, losses[None])[0]
    sizes, seeds = np.unique(log_n, return_counts=True)
    if seeds.min() < 2:
        residuals = (losses - fitted) * math.sqrt(n / max(1, n - 3))
        resampled = fitted + rng.choice(residuals, size=(draws, n))
        return fit_parabolas(log_n, resampled), resampled
    noise = np.empty((draws, n))
    for size, k in zip(sizes, seeds, strict=True):
        members = log_n == size
        variance = (k - 1) * losses[members].var(ddof=1) / rng.chisquare(k - 1, size=draws)
        noise[:, members] = np.sqrt(variance)[:, None] * rng.standard_normal((draws, k))
    resampled = fitted + noise
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


def percentile_interval(values: np.ndarray) -> list[float] | None:
    """The central 95% of bootstrap draws (the fits' intervals; a mean over seeds has compare's t interval)."""
    finite = values[np.isfinite(values)]
    return [float(v) for v in np.percentile(finite, [2.5, 97.5])] if len(finite) else None


def robust_variance(draws: np.ndarray) -> np.ndarray:
    """Per column, (IQR / 1.349)^2: a normal's variance, unmoved by the heavy tails of the posterior draws."""
    low, high = np.nanpercentile(draws, [25, 75], axis=0)
    return ((high - low) / 1.349) ** 2


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
    """ln y = a ln C + k weighted by 1 / variance (each budget's variance of ln y over its draws); the 95%
    interval from the slopes of the draws (draws x budgets, the same weights); beside it the ordinary
    least-squares a through the points with its t interval (budgets - 2 dof)."""
    weights = 1 / np.maximum(variance, 1e-12)
    result = dict(exponent=float(weighted_slopes(log_c, log_y, weights)), ci95=percentile_interval(
        weighted_slopes(draws_c, draws_y, weights)), **ols_line(log_c, log_y))
    if case_c is not None:
        result["case_ci95"] = percentile_interval(weighted_slopes(case_c, case_y, weights))
    return result


def ols_line(log_c: np.ndarray, log_y: np.ndarray) -> dict[str, Any]:
    """The ordinary least-squares slope through the points and its 95% t interval (None with two points)."""
    slope, intercept = np.polyfit(log_c, log_y, 1)
    dof = len(log_c) - 2
    if dof < 1:
        return dict(ols_exponent=float(slope), ols_ci95=None)
    scatter = np.sum((log_y - slope * log_c - intercept) ** 2) / dof
    se = math.sqrt(scatter / np.sum((log_c - log_c.mean()) ** 2))
    half = t_quantile(0.5 + CONFIDENCE / 2, dof) * se
    return dict(ols_exponent=float(slope), ols_ci95=[float(slope - half), float(slope + half)])


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
    # scipy loads in about a second: only where an interval or a curve is fitted
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
        var = robust_variance(np.stack([draws_of[i][basis]["log_n"] for i in usable], axis=1))
        stack = {key: np.stack([draws_of[i][basis][key] for i in usable], axis=1)
                 for key in ("log_n", "log_c", "log_d", "case_log_n", "case_log_c", "case_log_d")}
        fit_n = fit_power_law(point_c, point_n, var, stack["log_c"], stack["log_n"], stack["case_log_c"],
                              stack["case_log_n"])
        fit_d = None
        if basis == "total":
            point_d = np.array([per_budget[i]["fits"][basis]["log_d_opt"] for i in usable])
            var_d = robust_variance(np.stack([draws_of[i][basis]["log_d"] for i in usable], axis=1))
            fit_d = fit_power_law(point_c, point_d, var_d, stack["log_c"], stack["log_d"], stack["case_log_c"],
                                  stack["case_log_d"])
        exponents[basis] = dict(a=fit_n, b=fit_d, budgets=[per_budget[i]["budget"] for i in usable])
    return dict(compute=f"C = (6 N + 12 L d T) D, T = {context}", per_budget=per_budget, exponents=exponents,
                fit_choices={basis: fit_choices(results, budgets, context, basis) for basis in ("total", "kaplan")},
                prediction=held_out_prediction(per_budget, draws_of, held_out))


def fit_choices(results: list[dict[str, Any]], budgets: tuple[float, ...], context: int, basis: str = "total"
                ) -> dict[str, Any]:
    """The exponent a in ``basis`` under other reasonable per-budget fits (each budget's ln N_opt, then the
    ordinary least-squares line across budgets), and their range: how much the choice of fit moves a."""
    choices: dict[str, list[float]] = {name: [] for name in CHOICES}
    log_c: list[float] = []
    for budget in budgets:
        runs = [r for r in results if r["budget"] == budget]
        size = np.array([r[BASES[basis].parameters] for r in runs], dtype=float)
        loss = np.array([r["held_out_loss"]["all"] for r in runs])
        sizes = np.unique(size)
        for name, choose in CHOICES.items():
            choices[name].append(choose(np.log(size), loss, np.log(sizes)))
        by_size = np.log([run_compute(next(r for r in runs if r[BASES[basis].parameters] == s), basis, context)
                          for s in sizes])
        log_c.append(float(interpolate(np.array(choices["runs"][-1]), np.log(sizes), by_size)))
    slopes = {name: float(np.polyfit(log_c, values, 1)[0]) if np.isfinite(values).all() and len(values) > 1
              else None for name, values in choices.items()}
    found = [v for v in slopes.values() if v is not None]
    return dict(exponents=slopes, range=[min(found), max(found)] if found else None)


def _parabola_at(log_n: np.ndarray, loss: np.ndarray, weights: np.ndarray | None = None) -> float:
    return float(parabola_minimum(fit_parabolas(log_n, loss[None], None if weights is None else weights[None]))[0])


def _size_means(log_n: np.ndarray, loss: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each size's mean loss and its inverse squared standard error (1 where a size has one seed)."""
    means = np.array([loss[log_n == s].mean() for s in sizes])
    precision = np.array([(log_n == s).sum() / max(loss[log_n == s].var(ddof=1), 1e-8) if (log_n == s).sum() > 1
                          else 1.0 for s in sizes])
    return means, precision


def _nearest_three(log_n: np.ndarray, loss: np.ndarray, sizes: np.ndarray) -> float:
    means, _ = _size_means(log_n, loss, sizes)
    centre = min(max(int(means.argmin()), 1), len(sizes) - 2)
    return _parabola_at(sizes[centre - 1:centre + 2], means[centre - 1:centre + 2])


#: The per-budget fits of ``fit_choices``: (every run's ln N, loss, the distinct ln N) -> ln N_opt.
CHOICES = {
    "runs": lambda log_n, loss, sizes: _parabola_at(log_n, loss),
    "size means weighted by their seed precision": lambda log_n, loss, sizes: _parabola_at(
        sizes, *_size_means(log_n, loss, sizes)),
    "the three sizes around the lowest mean": _nearest_three,
    "without the largest size": lambda log_n, loss, sizes: _parabola_at(log_n[log_n < sizes[-1]],
                                                                        loss[log_n < sizes[-1]]),
    "without the smallest size": lambda log_n, loss, sizes: _parabola_at(log_n[log_n > sizes[0]],
                                                                         loss[log_n > sizes[0]]),
}


def budget_optimum(runs: list[dict[str, Any]], context: int, draws: int, rng: np.random.Generator
                   ) -> tuple[dict[str, Any], dict[str, Any]]:
    """One budget: its runs' losses by size and seed, and per basis the parabola's optimum N, the compute and
    tokens there (interpolated along the budget's sizes), with bootstrap draws of each."""
    loss = np.array([r["held_out_loss"]["all"] for r in runs])
    size = np.array([r["parameters"] for r in runs])
    seeds = np.array([r.get("seed", 0) for r in runs])
    sizes = np.unique(size)
    by_size = [seed_interval(loss[size == s]) for s in sizes]  # each size's mean and sd over its seeds
    mean, spread = np.array([i.mean for i in by_size]), [i.sd for i in by_size]
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
    per_basis: dict[str, Any] = dict(best_loss=best_loss_draws(loss[size == sizes[best]], draws, rng))
    for basis, counting in BASES.items():
        counted = np.array([r[counting.parameters] for r in runs])
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
            ci = percentile_interval(draws_x)
            fit.update(log_n_opt=x, n_opt=math.exp(x), log_compute=c_opt, compute=math.exp(c_opt), log_d_opt=d_opt,
                       d_opt=math.exp(d_opt), loss_at_opt=float(np.polyval(point, x)),
                       log_n_opt_se=float(np.nanstd(draws_x)), n_opt_ci95=[math.exp(v) for v in ci] if ci else None,
                       sizes_below=int((along < x).sum()), sizes_above=int((along > x).sum()))
        summary["fits"][basis] = fit
    return summary, per_basis


def best_loss_draws(losses: np.ndarray, draws: int, rng: np.random.Generator) -> np.ndarray:
    """Draws of the best size's seed-mean loss with its own seed noise: the mean plus normal noise of variance
    sigma^2 / k, sigma^2 drawn from its posterior (k - 1) s^2 / chi2(k - 1) as in ``optimum_draws`` (with k = 3
    the mean's draws follow a t with 2 dof: its 95% interval is 4.30 standard errors each side, not 1.96). With
    one seed the noise is not measured and every draw is the loss itself."""
    k = len(losses)
    if k < 2:
        return np.full(draws, float(losses.mean()))
    variance = (k - 1) * losses.var(ddof=1) / rng.chisquare(k - 1, size=draws)
    return losses.mean() + np.sqrt(variance / k) * rng.standard_normal(draws)


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
    prediction_sd = np.sqrt(robust_variance(draw_array)) if len(draw_array) else [None] * len(held)
    (c1, l1), (c2, l2) = [(b["best_compute"], b["best_loss"]) for b in fitted[-2:]]
    slope = math.log(l2 / l1) / math.log(c2 / c1)
    predictions = []
    for j, b in enumerate(held):
        predicted, measured, spread = predict_frontier(frontier, b["best_compute"]), b["best_loss"], \
            b["best_loss_seed_sd"]
        baseline = l2 * (b["best_compute"] / c2) ** slope
        mean_se = spread / math.sqrt(len(b["seeds"])) if spread else None
        noise = math.hypot(mean_se, prediction_sd[j]) if mean_se and prediction_sd[j] is not None else None
        predictions.append(dict(
            measured_seed_se=mean_se, prediction_seed_sd=None if prediction_sd[j] is None else float(prediction_sd[j]),
            combined_seed_se=noise, error_in_combined_se=(predicted - measured) / noise if noise else None,
            budget=b["budget"], compute=b["best_compute"], predicted_loss=predicted,
            predicted_ci95=percentile_interval(draw_array[:, j]) if len(draw_array) else None, measured_loss=measured,
            measured_seed_sd=spread, seeds=len(b["seeds"]), error=predicted - measured,
            relative_error=(predicted - measured) / measured,
            error_in_seed_sds=(predicted - measured) / spread if spread else None,
            baseline_loss=baseline, baseline_error=baseline - measured))
    return dict(status="ok", frontier=frontier, fitted_budgets=[b["budget"] for b in fitted],
                predictions=predictions)
