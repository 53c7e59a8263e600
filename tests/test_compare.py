"""hf-vanilla compare: its statistics are calibrated on synthetic experiments (A/A holds 0 in ~95%, a planted
difference is found at the stated power, intervals widen with noise); its plan refuses what a row's rules refuse
before anything trains; a tiny experiment runs end to end, resumes after a kill, and keeps a report the user edited."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hf_vanilla.experiments import statistics as st

REPEATS = 600  # synthetic experiments per calibration check: binomial sd of a 95% rate is ~0.009


def binomial_band(p: float, repeats: int = REPEATS, sds: float = 4.0) -> tuple[float, float]:
    half = sds * math.sqrt(p * (1 - p) / repeats)
    return p - half, p + half


@pytest.mark.parametrize(("p", "df", "expected"), [(0.975, 1, 12.706205), (0.975, 2, 4.302653), (0.975, 4, 2.776445),
                                                   (0.975, 9, 2.262157), (0.975, 200, 1.971896), (0.05, 3, -2.353363)])
def test_t_quantile_matches_the_tables(p, df, expected):
    assert st.t_quantile(p, df) == pytest.approx(expected, abs=2e-6)


def test_the_t_distribution_is_symmetric_and_monotone():
    grid = np.linspace(-6, 6, 49)
    for df in (1, 2, 3, 6, 11):
        cdf = np.array([st.t_cdf(t, df) for t in grid])
        assert np.all(np.diff(cdf) > 0)
        np.testing.assert_allclose(cdf + cdf[::-1], 1.0, atol=1e-12)


@pytest.mark.parametrize("seeds", [3, 5])
def test_an_a_a_comparison_holds_zero_in_95_percent_of_repeats(seeds):
    # A variant against itself: each seed shifts both sides alike (the data order), plus each run's own noise.
    rng = np.random.default_rng(seeds)
    shared = rng.normal(0, 0.2, (REPEATS, 1, seeds))
    runs = 3.0 + shared + rng.normal(0, 0.05, (REPEATS, 2, seeds))
    _, low, high = st.t_intervals(runs[:, 1] - runs[:, 0])
    held = np.mean((low <= 0) & (0 <= high))
    assert binomial_band(0.95)[0] <= held <= binomial_band(0.95)[1]


def test_a_variants_own_interval_covers_its_true_mean_in_95_percent():
    rng = np.random.default_rng(7)
    _, low, high = st.t_intervals(2.5 + rng.normal(0, 0.1, (REPEATS, 4)))
    covered = np.mean((low <= 2.5) & (2.5 <= high))
    assert binomial_band(0.95)[0] <= covered <= binomial_band(0.95)[1]


@pytest.mark.parametrize(("effect", "seeds"), [(0.05, 3), (0.05, 5), (0.02, 8), (0.12, 3)])
def test_a_planted_difference_is_found_at_the_stated_power(effect, seeds):
    # The seed-paired differences spread with sd 0.04: the fraction of repeats whose interval excludes 0 must
    # match the power the module states for that effect and seed count.
    rng = np.random.default_rng(int(effect * 1000) + seeds)
    differences = effect + rng.normal(0, 0.04, (REPEATS, seeds))
    _, low, high = st.t_intervals(differences)
    found = np.mean(low > 0)  # found, and on the right side
    stated = st.power(effect, 0.04, seeds)
    low_band, high_band = binomial_band(stated)
    assert low_band <= found <= high_band, (found, stated)


def test_the_detectable_difference_is_found_at_80_percent():
    size = st.detectable_difference(0.04, 5)
    assert st.power(size, 0.04, 5) == pytest.approx(0.8, abs=1e-3)
    assert st.detectable_difference(0.04, 10) < size < st.detectable_difference(0.04, 3)


def test_intervals_widen_with_noise():
    rng = np.random.default_rng(3)
    unit = rng.normal(0, 1, (REPEATS, 5))
    widths = []
    for noise in (0.01, 0.05, 0.2):
        _, low, high = st.t_intervals(unit * noise)
        widths.append(np.median(high - low))
    assert widths[0] < widths[1] < widths[2]
    assert widths[2] / widths[0] == pytest.approx(20, rel=1e-9)  # proportional to the spread, exactly


def test_paired_difference_removes_what_a_seed_does_to_both():
    # Seed effects 10x larger than the true difference: unpaired it is lost, paired it is found.
    seed_effect = np.array([0.5, -0.4, 0.9, -0.7, 0.1])
    base, variant = 3 + seed_effect, 3 + seed_effect + 0.05 + np.array([0.01, -0.01, 0.0, 0.005, -0.005])
    difference = st.paired_difference(variant, base)
    assert not difference.holds_zero and difference.mean == pytest.approx(0.05)
    assert st.verdict(difference) == "worse by 0.05"
    assert st.interval(variant).low < st.interval(base).mean < st.interval(variant).high  # unpaired: overlapping


def test_verdicts_in_words():
    assert st.verdict(st.paired_difference([1.0, 1.2, 0.9], [1.0, 1.0, 1.0])) == st.NO_DIFFERENCE
    assert st.verdict(st.paired_difference([0.5, 0.6, 0.55], [1.0, 1.0, 1.0])).startswith("better by 0.45")
    assert st.verdict(st.paired_difference([0.5], [1.0])).startswith("one seed: no interval")
    with pytest.raises(ValueError, match="same seeds"):
        st.paired_difference([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="finite"):
        st.interval([1.0, float("nan")])
