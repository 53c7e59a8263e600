"""scripts/scaling.py (``experiments.py scaling``): the plan spends each budget as C = 6 N D with a schedule that
ends at D, the fits recover exponents they are given, and the --tiny sweep runs end to end and resumes."""

from __future__ import annotations

import importlib.util
import json
import math
import random
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
WORDS = "the king queen lord lady sword crown night day love death heart blood fair foul speak".split()

sys.path.insert(0, str(REPO / "scripts"))  # scaling imports experiments by name, as the command line does
import scaling  # noqa: E402

spec = importlib.util.spec_from_file_location("experiments_script", REPO / "scripts" / "experiments.py")
experiments = importlib.util.module_from_spec(spec)
sys.modules["experiments_script"] = experiments
spec.loader.exec_module(experiments)


@pytest.fixture(scope="module")
def text_files(tmp_path_factory) -> tuple[str, ...]:
    root, rng = tmp_path_factory.mktemp("text"), random.Random(0)
    files = []
    for split, n in (("train", 300), ("test", 40)):
        lines = (" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))) + ".\n\n" for _ in range(n))
        (root / f"{split}.txt").write_text("".join(lines), encoding="utf-8")
        files.append(f"{split}={root / f'{split}.txt'}")
    return tuple(files)


def test_full_plan_meets_the_issue():
    # at least four budgets spanning at least 30x, five distinct sizes each, every run at D = C/(6N) to within
    # half a step, and no run repeating its data more than twice
    plan, specs = scaling.FULL, scaling.run_specs(scaling.FULL)
    assert len(plan.budgets) >= 4 and plan.budgets[-1] / plan.budgets[0] >= 30
    for budget in plan.budgets:
        runs = [s for s in specs if s.budget == budget]
        assert len({s.parameters for s in runs}) == len(runs) == 5
        assert [s.depth for s in runs] == sorted(s.depth for s in runs) and runs[0].depth < runs[-1].depth
    for s in specs:
        assert s.target_tokens == pytest.approx(s.budget / (6 * s.parameters))
        assert abs(s.tokens - s.target_tokens) <= plan.tokens_per_step / 2
        assert s.tokens == s.steps * plan.tokens_per_step
        assert 0 < s.non_embedding_parameters < s.parameters


def test_parameter_counts_take_the_tied_embedding_once():
    model = scaling.build_model(32, scaling.FULL)
    assert model.get_input_embeddings().weight is model.get_output_embeddings().weight
    counts = scaling.parameter_counts(model)
    assert counts["total"] == sum(p.numel() for p in model.parameters())
    assert counts["total"] - counts["non_embedding"] == scaling.FULL.vocab_size * 32


def test_schedule_ends_at_the_runs_last_step():
    plan = scaling.FULL
    for steps in (1, 2, 3, 7, 100, 4474):
        factors = [scaling.learning_rate_factor(s, steps, plan) for s in range(steps)]
        assert factors[-1] == pytest.approx(plan.final_lr_fraction if steps > 1 else 1.0)
        warmup = max(1, round(plan.warmup_fraction * steps))
        assert factors[warmup - 1] == pytest.approx(1.0)
        assert all(a >= b for a, b in zip(factors[warmup - 1:], factors[warmup:], strict=False))


def test_too_coarse_a_family_is_refused():
    plan = replace(scaling.FULL, widths=(8, 64, 128))
    with pytest.raises(ValueError, match="distinct sizes near N\\*"):
        scaling.run_specs(plan)


def test_isoflop_parabola_finds_the_minimum_or_says_there_is_none():
    x = np.log([1e3, 3e3, 1e4, 3e4, 1e5])
    fit = scaling.fit_isoflop(x, 0.2 * (x - math.log(7e3)) ** 2 + 3.0)
    assert fit["n_opt"] == pytest.approx(7e3) and fit["loss_at_opt"] == pytest.approx(3.0)
    assert fit["log_n_opt_se"] == pytest.approx(0.0, abs=1e-6)
    assert scaling.fit_isoflop(x, -0.2 * x**2)["n_opt"] is None


def chinchilla_results(budgets, alpha=0.34, beta=0.28, noise=0.0):
    """Runs whose loss is Chinchilla's L(N, D) = E + A/N^alpha + B/D^beta: the compute-optimal N grows as
    C^(beta/(alpha+beta)) and D as C^(alpha/(alpha+beta))."""
    rng, results = np.random.default_rng(0), []
    scale = (alpha * 406 / (beta * 411)) ** (1 / (alpha + beta))  # N_opt = scale · (C/6)^(beta/(alpha+beta))
    for budget in budgets:
        centre = scale * (budget / 6) ** (beta / (alpha + beta))
        for i, n in enumerate(centre * np.geomspace(0.25, 4, 5)):
            d = budget / (6 * n)
            loss = 1.7 + 406 / n**alpha + 411 / d**beta + noise * rng.standard_normal()
            results.append(dict(budget=budget, name=f"{budget:g}-{i}", parameters=n, non_embedding_parameters=0.8 * n,
                                held_out_loss={"all": loss}))
    return results


def test_fits_recover_the_exponents_they_are_given():
    budgets = tuple(1e15 * 10 ** (i / 2) for i in range(5))
    analysis = scaling.analyse(chinchilla_results(budgets, noise=1e-4), budgets)
    a, b = analysis["exponents"]["total"]["a"], analysis["exponents"]["total"]["b"]
    assert a["exponent"] == pytest.approx(0.28 / 0.62, abs=0.02)
    assert b["exponent"] == pytest.approx(1 - a["exponent"])
    assert a["ci95"][0] < a["exponent"] < a["ci95"][1]
    # a fixed fraction of N is embedding here, so the non-embedding exponent is the same
    assert analysis["exponents"]["non_embedding"]["a"]["exponent"] == pytest.approx(a["exponent"], abs=1e-6)
    p = analysis["prediction"]
    assert p["status"] == "ok" and abs(p["relative_error"]) < 0.01
    assert p["measured_loss"] == analysis["per_budget"][-1]["best_measured_loss"]


def test_scaling_tiny_end_to_end_and_resumes(tmp_path: Path, text_files, capsys):
    args = ["scaling", "--tiny", "--out", str(tmp_path / "out"), "--runs", str(tmp_path / "runs"), "--data-files",
            *text_files]
    assert experiments.main(args) == 0
    record = json.loads((tmp_path / "out" / "scaling.json").read_text())
    plan = scaling.TINY
    assert len(record["runs"]) == len(plan.budgets) * plan.sizes_per_budget
    for run in record["runs"]:
        assert abs(run["tokens"] - run["budget"] / (6 * run["parameters"])) <= plan.tokens_per_step / 2
        assert run["last_lr"] == pytest.approx(plan.learning_rate * (plan.final_lr_fraction if run["steps"] > 1 else 1))
        assert len(run["train_curve"]) >= 1 and run["train_curve"][-1][0] == run["steps"]
        assert math.isfinite(run["held_out_loss"]["all"]) and run["epochs"] < 1
    p = record["analysis"]["prediction"]
    assert p["status"] == "ok" and math.isfinite(p["predicted_loss"]) and p["budget"] == plan.budgets[-1]
    table = (tmp_path / "out" / "scaling.md").read_text()
    assert f"measured {p['measured_loss']:.4f}" in table
    assert (tmp_path / "out" / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").glob("*/result.json")}
    assert experiments.main(args) == 0  # a second call keeps every finished run
    assert f"{len(stamps)} of {len(stamps)} runs already finished" in capsys.readouterr().out
    assert stamps == {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").glob("*/result.json")}
    # a sweep cut short: --no-train fits the complete budgets only and says which runs are missing
    lost = record["runs"][-1]["name"]
    (tmp_path / "runs" / lost / "result.json").unlink()
    assert experiments.main([*args, "--no-train"]) == 0
    partial = json.loads((tmp_path / "out" / "scaling.json").read_text())
    assert partial["partial"] is True and partial["missing_runs"] == [lost]
    assert [b["budget"] for b in partial["analysis"]["per_budget"]] == list(plan.budgets[:-1])
    assert "has 3 complete" in partial["analysis"]["prediction"]["status"]
    assert (tmp_path / "out" / "scaling.md").read_text().startswith(f"**Partial sweep**: 1 runs not finished ({lost})")
    assert not (tmp_path / "runs" / lost / "result.json").exists()


def test_a_runs_folder_of_another_plan_is_refused(tmp_path: Path):
    scaling.claim_folder(scaling.TINY, tmp_path)
    scaling.claim_folder(scaling.TINY, tmp_path)  # the same plan resumes
    with pytest.raises(ValueError, match="another sweep plan"):
        scaling.claim_folder(replace(scaling.TINY, seed=1), tmp_path)


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


def test_bfloat16_autocast_trains_on_cpu(tmp_path: Path, text_files):
    plan = replace(scaling.TINY, budgets=(scaling.TINY.budgets[0],))
    scaling.prepare_data(plan, lambda: scaling.local_corpora(list(text_files)), tmp_path)
    run = scaling.run_specs(plan)[0]
    result = scaling.train_run(run, plan, tmp_path, dtype="bfloat16")
    assert result["dtype"] == "bfloat16" and math.isfinite(result["held_out_loss"]["all"])
