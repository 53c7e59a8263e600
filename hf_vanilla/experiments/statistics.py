"""The statistics of a controlled comparison: a variant's mean over seeds with its 95% interval, and the paired
difference to the base variant (same seeds, same data order) with its interval.

Seeds are few (3 to 10), so the intervals are Student t intervals: over a variant's per-seed values for its own
mean, and over the seed-paired differences for a difference (the paired t interval a reviewer of an ablation asks
for; pairing removes what a seed does to every variant alike, such as the data order). An interval that holds 0 is
reported as "no difference measured": it does not say the variants are equal, only that these seeds cannot tell.

Everything is vectorised over leading axes (``values[..., seed]``) so the calibration tests run a few hundred
synthetic experiments at once. The t distribution is computed here (integer degrees of freedom have a closed-form
distribution function), so the package needs no scipy.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

CONFIDENCE = 0.95
NO_DIFFERENCE = "no difference measured"


def t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with integer ``df`` >= 1 (Abramowitz & Stegun 26.7.3-4, exact sums)."""
    if df < 1 or int(df) != df:
        raise ValueError(f"degrees of freedom must be a whole number >= 1, got {df!r}")
    theta = math.atan2(t, math.sqrt(df))
    s, c = math.sin(theta), math.cos(theta)
    if df % 2:  # odd: A = (2/pi)(theta + sin cos (1 + 2/3 c^2 + ...))
        term, total = 1.0, 1.0 if df > 1 else 0.0
        for k in range(3, df - 1, 2):
            term *= (k - 1) / k * c * c
            total += term
        a = 2 / math.pi * (theta + (s * c * total if df > 1 else 0.0))
    else:  # even: A = sin (1 + 1/2 c^2 + 1*3/(2*4) c^4 + ...)
        term, total = 1.0, 1.0
        for k in range(2, df - 1, 2):
            term *= (k - 1) / k * c * c
            total += term
        a = s * total
    return 0.5 + 0.5 * a


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with integer ``df`` (bisection on :func:`t_cdf`, to 1e-12)."""
    if not 0 < p < 1:
        raise ValueError(f"a quantile needs 0 < p < 1, got {p!r}")
    low, high = -1e6, 1e6
    for _ in range(200):
        middle = (low + high) / 2
        if t_cdf(middle, df) < p:
            low = middle
        else:
            high = middle
        if high - low < 1e-12 * max(1.0, abs(middle)):
            break
    return (low + high) / 2


def critical_value(n: int, confidence: float = CONFIDENCE) -> float:
    """The two-sided t multiplier of a ``confidence`` interval over ``n`` values (``n - 1`` degrees of freedom)."""
    return t_quantile(0.5 + confidence / 2, n - 1)


@dataclass(frozen=True)
class Interval:
    """A mean over seeds and its t interval (``low``/``high`` None with fewer than two seeds: no spread to use)."""

    mean: float
    sd: float | None  # the seed spread: the sample standard deviation over seeds
    n: int
    low: float | None
    high: float | None
    confidence: float = CONFIDENCE

    @property
    def holds_zero(self) -> bool:
        return self.low is None or self.low <= 0 <= self.high

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def t_intervals(values: np.ndarray, confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, lower and upper bound of the t interval over the last axis of ``values`` (>= 2 seeds), vectorised."""
    values = np.asarray(values, dtype=float)
    n = values.shape[-1]
    if n < 2:
        raise ValueError(f"an interval needs at least 2 seeds, got {n}")
    mean = values.mean(axis=-1)
    half = critical_value(n, confidence) * values.std(axis=-1, ddof=1) / math.sqrt(n)
    return mean, mean - half, mean + half


def interval(values: Any, confidence: float = CONFIDENCE) -> Interval:
    """The mean of one variant's per-seed values and its t interval."""
    values = np.asarray(values, dtype=float)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"expected one value per seed, got shape {values.shape}")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"values must be finite numbers, got {values.tolist()}")
    if values.size < 2:
        return Interval(float(values[0]), None, 1, None, None, confidence)
    mean, low, high = t_intervals(values, confidence)
    return Interval(float(mean), float(values.std(ddof=1)), int(values.size), float(low), float(high), confidence)


def paired_difference(variant: Any, base: Any, confidence: float = CONFIDENCE) -> Interval:
    """``variant - base`` seed by seed (the same seeds and data order: index i of each is seed i), and the t
    interval of its mean."""
    variant, base = np.asarray(variant, dtype=float), np.asarray(base, dtype=float)
    if variant.shape != base.shape:
        raise ValueError(f"a paired difference needs the same seeds on both sides, got {variant.size} and {base.size}")
    return interval(variant - base, confidence)


def verdict(difference: Interval, unit: str = "", lower_is_better: bool = True) -> str:
    """What a difference says in words: "no difference measured" where its interval holds 0."""
    if difference.low is None:
        return "one seed pair finished: no interval (an interval needs two or more)"
    if difference.holds_zero:
        return NO_DIFFERENCE
    better = (difference.mean < 0) == lower_is_better
    return f"{'better' if better else 'worse'} by {abs(difference.mean):.4g}{unit}"


def normal_cdf(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1 + np.vectorize(math.erf)(np.asarray(x, dtype=float) / math.sqrt(2)))


def power(effect: float, sd: float, n: int, confidence: float = CONFIDENCE, grid: int = 4000) -> float:
    """The chance that a paired comparison over ``n`` seeds finds a true difference ``effect`` (its interval
    excludes 0) when the seed-paired differences spread with standard deviation ``sd``: the power of the two-sided
    paired t test, integrated over the chi-square law of the sample variance."""
    if n < 2:
        return 0.0
    df, crit, shift = n - 1, critical_value(n, confidence), abs(effect) / sd * math.sqrt(n)
    # sample variance / sd^2 = V / df with V ~ chi2(df): reject when |Z + shift| > crit * sqrt(V / df); integrated
    # over log V, where the chi-square density times V is smooth for every df (df = 1 has a pole at V = 0)
    w = np.linspace(-40.0, math.log(df + 40 * math.sqrt(2 * df) + 40), grid)
    v = np.exp(w)
    density = np.exp((df / 2) * w - v / 2 - (df / 2) * math.log(2) - math.lgamma(df / 2))
    bound = crit * np.sqrt(v / df)
    reject = normal_cdf(-bound - shift) + 1 - normal_cdf(bound - shift)
    return float(np.trapezoid(reject * density, w) / np.trapezoid(density, w))


def detectable_difference(sd: float, n: int, target_power: float = 0.8, confidence: float = CONFIDENCE) -> float | None:
    """The smallest true difference these ``n`` seeds find with ``target_power`` given the paired spread ``sd``
    (None below two seeds): the size a "no difference measured" rules out, roughly."""
    if n < 2 or not sd > 0:
        return None
    low, high = 0.0, sd * 100
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if power(middle, sd, n, confidence) < target_power else (low, middle)
    return high
