"""scripts/experiments.py, the door to the compare studies: the extrapolation scoring is exact, both studies run end
to end in their --tiny form (a diverged run recorded as such), and a report the user edited is never replaced."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import torch

from hf_vanilla.experiments import compare, measures, report
from hf_vanilla.experiments.recipes import STUDIES
from tests.test_compare import text_files  # noqa: F401 -- the fixture

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("experiments_script", REPO / "scripts" / "experiments.py")
experiments = importlib.util.module_from_spec(spec)
sys.modules["experiments_script"] = experiments
spec.loader.exec_module(experiments)


class Bigram(torch.nn.Module):
    """Logits that depend only on the current token: each prediction sees exactly one token of context."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(0)))

    def forward(self, input_ids):
        return type("Out", (), {"logits": self.table[input_ids]})()


def test_every_window_length_scores_the_same_tokens():
    # A model whose prediction of token i depends only on token i-1 gives the same loss at every window length
    # only if the same targets are scored: the window-first tokens (no context) are left out each time.
    stream = torch.randint(0, 11, (48,), generator=torch.Generator().manual_seed(1))
    model = Bigram(11)
    scores = [measures.loss_at(model, stream, n, 4, batch_tokens=24) for n in (4, 8, 12, 16)]
    nll = torch.nn.functional.cross_entropy(model.table[stream[:-1]], stream[1:], reduction="none")
    expected = nll[torch.arange(1, 48) % 4 != 0].double().mean().item()
    for score in scores:  # float32 logits: one token more or less would move it by ~1e-2, not 1e-7
        assert score == pytest.approx(expected, rel=1e-7)
    assert measures.perplexity_at(model, stream, 8, 4) == pytest.approx(math.exp(expected), rel=1e-7)


@pytest.mark.parametrize("name", sorted(STUDIES))
def test_each_study_is_a_plan_with_nothing_refused(name):
    args = compare.build_parser().parse_args(compare.with_study(["--study", name, "--output-dir", "unused"]))
    plan = compare.make_plan(args, "test")
    assert not plan.refused and len(plan.settings) >= 2 and plan.seeds >= 3
    assert len({plan.run_options(s, 0)["max_steps"] for s in plan.settings}) == 1  # equal budgets


def door(tmp_path: Path, name: str, files: tuple[str, ...], *flags: str) -> int:
    return experiments.main([name, "--tiny", "--out", str(tmp_path / "out"), "--runs", str(tmp_path / "runs"),
                             "--workers", "0", "--data-files", *files, *flags])


def test_extrapolation_tiny_end_to_end_and_an_edited_report_is_kept(tmp_path: Path, text_files, capsys):  # noqa: F811
    assert door(tmp_path, "extrapolation", text_files, "--vary", "position_embedding_type=learned,alibi") == 0
    out = tmp_path / "out"
    report = json.loads((out / "extrapolation.json").read_text())
    assert report["variants"] == ["learned", "alibi"] and report["seeds"] == 2
    at = {m["key"]: m for m in report["metrics"]}
    for n in measures.LENGTH_FACTORS:  # learned positions only at the training length: their other rows are untrained
        assert at[f"loss_at_{n}x"]["variants"]["alibi"]["interval"]["n"] == 2
        assert (at[f"loss_at_{n}x"]["variants"]["learned"]["interval"] is not None) == (n == 1)
    outcome = json.loads((tmp_path / "runs" / "extrapolation" / "alibi" / "seed-0.json").read_text())
    assert outcome["extrapolation"]["scored_tokens"] > 0 and outcome["extrapolation"]["training_length"] == 8
    learned = json.loads((tmp_path / "runs" / "extrapolation" / "learned" / "seed-0.json").read_text())["extrapolation"]
    assert learned["losses"]["1"] > 0 and [learned["losses"][str(n)] for n in (2, 3, 4)] == [None] * 3
    assert "cannot extrapolate" in learned["not_scored"] and outcome["extrapolation"]["not_scored"] is None
    for picture in ("extrapolation-curves.png", "extrapolation-extrapolation.png"):
        assert (out / picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| learned (base) |" in (out / "extrapolation.md").read_text()
    # Issue 50.2: the user's notes in an output are kept; the same experiment again is refused, naming the file.
    with open(out / "extrapolation.md", "a", encoding="utf-8") as notes:
        notes.write("\nnotes\n")
    capsys.readouterr()
    assert door(tmp_path, "extrapolation", text_files, "--vary", "position_embedding_type=learned,alibi") == 2
    err = capsys.readouterr().err
    assert err.startswith("experiments.py extrapolation: ") and "extrapolation.md changed since" in err, err
    assert (out / "extrapolation.md").read_text().endswith("\nnotes\n")


def test_warmup_tiny_records_divergence_and_goes_on(tmp_path: Path, text_files):  # noqa: F811
    # A learning rate of 1e30 sends the weights to inf within two updates: recorded as diverged, not retried, and
    # the report names it while the other variant is reported.
    assert door(tmp_path, "warmup", text_files, "--vary", "learning_rate=1e-3,1e30", "--seeds", "1") == 0
    found = json.loads((tmp_path / "runs" / "warmup" / "1e+30" / "seed-0.json").read_text())
    assert found["status"] == "diverged" and "diverged" in found["detail"] and found["curve"]
    text = (tmp_path / "out" / "warmup.md").read_text()
    assert "1e+30/seed-0: diverged" in text and "| 0.001 (base) |" in text
    assert door(tmp_path, "warmup", text_files, "--vary", "learning_rate=1e-3,1e30", "--seeds", "1") == 0
    assert json.loads((tmp_path / "runs" / "warmup" / "1e+30" / "seed-0.json").read_text()) == found


@pytest.mark.parametrize("study", ["extrapolation", "warmup"])
def test_the_docs_quote_each_studys_committed_report(study):
    # docs/experiments.md's tables are the committed report's (docs/figures/STUDY/compare.json), line for line.
    summary = json.loads((REPO / "docs" / "figures" / study / "compare.json").read_text(encoding="utf-8"))
    text = (REPO / "docs" / "experiments.md").read_text(encoding="utf-8")
    tables = [report.metric_table(summary["metrics"][0], summary["base"])]
    if "extrapolation" in summary["measures"]:
        tables += [report.extrapolation_table(summary), report.growth_table(summary)]
    for line in (line for table in tables for line in table.splitlines() if line):
        assert line in text, f"docs/experiments.md lacks the {study} report's line {line!r}"
