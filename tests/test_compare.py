"""hf-vanilla compare: its statistics are calibrated on synthetic experiments (A/A holds 0 in ~95%, a planted
difference is found at the stated power, intervals widen with noise); its plan refuses what a row's rules refuse
before anything trains; a tiny experiment runs end to end, resumes after a kill, and keeps a report the user edited."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from hf_vanilla.experiments import command, compare, report
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


@pytest.mark.parametrize(("effect", "seeds"), [(0.05, 3), (0.05, 5), (0.02, 8), (0.12, 3), (0.1, 2)])
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
    assert st.verdict(st.paired_difference([0.5], [1.0])).startswith("one seed pair finished: no interval")
    with pytest.raises(ValueError, match="same seeds"):
        st.paired_difference([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="finite"):
        st.interval([1.0, float("nan")])


# --------------------------------------------------------------------------------------------------
# The plan, the runs and the report

WORDS = "the king queen lord lady sword crown night day love death heart blood fair foul speak".split()
TINY = ("--preset", "tiny", "--config", "hidden_size=32", "--config", "intermediate_size=64", "--config",
        "num_attention_heads=2", "--block-size", "8", "--batch-size", "4", "--vocab-size", "300", "--max-steps", "4",
        "--max-eval-samples", "4", "--max-test-samples", "8")


@pytest.fixture(scope="module")
def text_files(tmp_path_factory) -> tuple[str, ...]:
    root, rng = tmp_path_factory.mktemp("text"), random.Random(0)
    files = []
    for split, n in (("train", 200), ("validation", 20), ("test", 40)):
        lines = (" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))) + ".\n\n" for _ in range(n))
        (root / f"{split}.txt").write_text("".join(lines), encoding="utf-8")
        files.append(f"{split}={root / f'{split}.txt'}")
    return tuple(files)


def plan_of(*argv: str):
    args = compare.build_parser().parse_args(["--output-dir", "unused", *argv])
    return compare.make_plan(args, "hf-vanilla compare (test)")


def test_variants_a_row_refuses_are_named_and_skipped_before_training():
    # head_dim 15: RoPE rotates pairs of dimensions, so its row refuses an odd head_dim; the others train.
    plan = plan_of("--config", "hidden_size=30", "--config", "num_attention_heads=2", "--max-steps", "3",
                   "--vary", "position_embedding_type=sinusoidal,rope,alibi", "--vary", "norm_position=pre,post")
    assert [s.label for s in plan.settings] == ["sinusoidal, pre", "sinusoidal, post", "alibi, pre", "alibi, post"]
    assert [(s.label, "head_dim=15 must be even" in why) for s, why in plan.refused] == [("rope, pre", True),
                                                                                           ("rope, post", True)]
    assert plan.run_options(plan.settings[3], 2)["config"] == dict(hidden_size=30, num_attention_heads=2,
                                                                   position_embedding_type="alibi",
                                                                   norm_position="post")
    assert plan.run_options(plan.settings[3], 2)["seed"] == 2


def test_a_refused_base_and_bad_input_are_one_sentence():
    with pytest.raises(compare.CompareError, match=r"base variant \(rope\) is refused: .*even"):
        plan_of("--config", "hidden_size=30", "--config", "num_attention_heads=2", "--max-steps", "3",
                "--vary", "position_embedding_type=rope,alibi")
    for argv, words in [(("--vary", "position_embedding_type=rope,alibi"), "give the budget"),
                        (("--vary", "hidden_size=32,64", "--max-steps", "3"), "table's options"),
                        (("--vary", "norm_position=pre", "--max-steps", "3"), "at least two different values"),
                        (("--vary", "architecture=decoder,encoder", "--max-steps", "3"), "the task decides"),
                        (("--vary", "norm_position=pre,post", "--config", "norm_position=pre", "--max-steps", "3"),
                         "both fixed"),
                        (("--vary", "norm_position=pre,post", "--seed", "4", "--max-steps", "3"), "--seeds N"),
                        (("--vary", "norm_position=pre,post", "--tokens", "10"), "less than one step")]:
        with pytest.raises(compare.CompareError, match=words):
            plan_of(*argv)


def test_a_token_budget_is_the_same_steps_for_every_variant():
    plan = plan_of("--vary", "norm_position=pre,post", "--vary", "learning_rate=1e-3,3e-3", "--tokens", "100000",
                   "--block-size", "64", "--batch-size", "16")
    assert plan.options["max_steps"] == math.ceil(100000 / (16 * 64)) and plan.tokens_per_run == 98 * 16 * 64
    assert {plan.run_options(s, 0)["max_steps"] for s in plan.settings} == {98}
    assert [plan.run_options(s, 0)["learning_rate"] for s in plan.settings] == [1e-3, 3e-3, 1e-3, 3e-3]


def test_a_base_folder_gives_its_architecture(tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps(dict(
        model_type="vanilla", architecture="decoder", hidden_size=48, num_attention_heads=3, intermediate_size=96,
        num_hidden_layers=1, vocab_size=999, eos_token_id=2, architectures=["VanillaForCausalLM"])))
    plan = plan_of("--base", str(tmp_path), "--max-steps", "2", "--vary", "norm_type=layernorm,rmsnorm")
    assert plan.options["config"] == dict(hidden_size=48, num_attention_heads=3,
                                          intermediate_size=96, num_hidden_layers=1)
    (tmp_path / "config.json").write_text(json.dumps(dict(model_type="vanilla", architecture="encoder")))
    with pytest.raises(compare.CompareError, match="encoder model and --task clm trains a decoder"):
        plan_of("--base", str(tmp_path), "--max-steps", "2", "--vary", "norm_type=layernorm,rmsnorm")


def test_learned_positions_are_not_measured_past_their_training_length_whatever_a_run_recorded():
    # Training at L = 64 reaches the first 64 rows of the learned table: a score at 2x-4x would read rows still at
    # their initialisation. The report says "not measured" and why, even for a run recorded with such a score.
    plan = plan_of("--vary", "position_embedding_type=rope,learned", "--block-size", "64", "--max-steps", "3",
                   "--seeds", "2", "--measure", "extrapolation")
    unscored = compare.unscored_lengths(plan)
    assert unscored["rope"] == {} and sorted(unscored["learned"]) == [2, 3, 4]
    assert "cannot extrapolate" in unscored["learned"][2] and "64 tokens" in unscored["learned"][2]
    outcomes = {f"{variant}/seed-{seed}": dict(status="completed", loss=5.0 + seed, curve=[(1, 6.0)],
                                               extrapolation=dict(losses={str(n): 5.0 + n + seed for n in (1, 2, 3, 4)}))
                for variant in ("rope", "learned") for seed in (0, 1)}
    summary = report.summarise(plan, outcomes, {}, unscored)
    at = {metric["key"]: metric["variants"] for metric in summary["metrics"]}
    assert at["loss_at_1x"]["learned"]["interval"]["n"] == 2 and at["loss_at_1x"]["learned"]["difference"]["n"] == 2
    for n in (2, 3, 4):
        learned = at[f"loss_at_{n}x"]["learned"]
        assert learned["interval"] is None and "difference" not in learned and "cannot extrapolate" in learned["not_measured"]
        assert at[f"loss_at_{n}x"]["rope"]["interval"]["n"] == 2
    table = report.extrapolation_table(summary)
    assert "| learned | 6.5 (" in table and table.count("not measured |") == 3
    assert "- learned: not measured from 2x: learned positions cannot extrapolate" in table
    assert "| learned | not measured |" in report.metric_table(summary["metrics"][2], "rope")
    # Each model against itself at 1x, seed by seed: rope's loss here is 1 nat higher per step of the factor.
    growth = report.growth_table(summary)
    assert "| rope | +1 (1 .. 1): rises | +2 (2 .. 2): rises | +3 (3 .. 3): rises |" in growth
    assert "| learned | not measured | not measured | not measured |" in growth


def wait_for(path: Path, process: subprocess.Popen, seconds: float = 600) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.2)


def test_a_killed_experiment_goes_on_and_keeps_what_the_user_edited(tmp_path: Path, text_files):
    out = tmp_path / "exp"
    argv = ["--output-dir", str(out), "--vary", "position_embedding_type=rope,alibi", *TINY, "--seeds", "2",
            "--workers", "0", "--measure", "extrapolation", "--data-files", *text_files]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    child = subprocess.Popen([sys.executable, "-m", "hf_vanilla.cli", "compare", *argv], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    first = out / "runs" / "rope" / "seed-0.json"
    try:
        wait_for(first, child)
    finally:
        child.kill()  # mid-experiment: the first run is done, the second on its way
        child.wait()
    done = first.read_bytes()
    assert command.run_command(argv) == 0
    assert first.read_bytes() == done  # not trained again
    outcomes = {p.relative_to(out / "runs").as_posix(): json.loads(p.read_text()) for p in (out / "runs").glob("*/*.json")}
    assert sorted(outcomes) == ["alibi/seed-0.json", "alibi/seed-1.json", "rope/seed-0.json", "rope/seed-1.json"]
    assert {o["status"] for o in outcomes.values()} == {"completed"}
    assert all(len(o["extrapolation"]["losses"]) == 4 for o in outcomes.values())
    report = json.loads((out / "compare.json").read_text())
    loss = report["metrics"][0]
    alibi = loss["variants"]["alibi"]
    paired = [outcomes[f"alibi/seed-{s}.json"]["loss"] - outcomes[f"rope/seed-{s}.json"]["loss"] for s in (0, 1)]
    assert alibi["difference"]["mean"] == pytest.approx(np.mean(paired))
    assert alibi["difference"]["n"] == 2 and alibi["paired_seeds"] == [0, 1]
    text = (out / "compare.md").read_text()
    assert "## Held-out loss" in text and alibi["verdict"] in text and report["provenance"]["commit"] in text
    assert "; 3 of its 4 runs trained or continued in this sitting" in text
    assert str(tmp_path) not in (out / "README.md").read_text()  # the card names no local path
    for name in ("compare-curves.png", "compare-extrapolation.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The user's notes in the report are kept: the same command refuses to replace them, naming the file.
    with open(out / "compare.md", "a", encoding="utf-8") as notes:
        notes.write("\nmy notes\n")
    assert command.run_command(argv) == 2
    assert (out / "compare.md").read_text().endswith("my notes\n")
    # Another plan in the same folder is refused, naming the command that goes on with this one.
    assert command.run_command([*argv[:3], "position_embedding_type=rope,learned", *argv[4:]]) == 2


def test_an_experiment_past_its_time_limit_starts_no_run_and_says_so(tmp_path: Path, text_files):
    out = tmp_path / "exp"
    argv = ["--output-dir", str(out), "--vary", "norm_position=pre,post", *TINY, "--seeds", "2", "--workers", "0",
            "--time-limit", "0.001", "--data-files", *text_files]
    assert command.run_command(argv) == 0
    text = (out / "compare.md").read_text()
    assert text.count(": not started (the experiment's time limit was reached first)") == 4
    assert "| pre (base) | no completed run |" in text and not (out / "runs" / "pre" / "seed-0").exists()
    assert "; 0 of its 4 runs trained or continued in this sitting" in text
