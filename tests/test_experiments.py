"""scripts/experiments.py: its scoring is exact, and both experiments run end to end (train, score, draw) in
their --tiny mode, a diverged run recorded as such."""

from __future__ import annotations

import importlib.util
import json
import math
import random
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
WORDS = "the king queen lord lady sword crown night day love death heart blood fair foul speak".split()


spec = importlib.util.spec_from_file_location("experiments_script", REPO / "scripts" / "experiments.py")
experiments = importlib.util.module_from_spec(spec)
sys.modules["experiments_script"] = experiments  # dataclasses look their module up by name
spec.loader.exec_module(experiments)


@pytest.fixture(scope="module")
def text_files(tmp_path_factory) -> tuple[str, ...]:
    root, rng = tmp_path_factory.mktemp("text"), random.Random(0)
    files = []
    for split, n in (("train", 200), ("validation", 20), ("test", 40)):
        lines = (" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))) + ".\n\n" for _ in range(n))
        (root / f"{split}.txt").write_text("".join(lines), encoding="utf-8")
        files.append(f"{split}={root / f'{split}.txt'}")
    return tuple(files)


class Bigram(torch.nn.Module):
    """Logits that depend only on the current token: each prediction sees exactly one token of context."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(0)))

    def forward(self, input_ids):
        return type("Out", (), {"logits": self.table[input_ids]})()


def test_every_window_length_scores_the_same_tokens():
    # A model whose prediction of token i depends only on token i-1 gives the same perplexity at every window
    # length only if the same targets are scored: the window-first tokens (no context) are left out each time.
    stream = torch.randint(0, 11, (64,), generator=torch.Generator().manual_seed(1))
    model = Bigram(11)
    scores = [experiments.perplexity_at(model, stream, n, 4, batch_tokens=24) for n in (4, 8, 16, 32)]
    nll = torch.nn.functional.cross_entropy(model.table[stream[:-1]], stream[1:], reduction="none")
    expected = math.exp(nll[torch.arange(1, 64) % 4 != 0].double().mean().item())
    for score in scores:  # float32 logits: one token more or less would move it by ~1e-2, not 1e-7
        assert score == pytest.approx(expected, rel=1e-7)


def test_extrapolation_tiny_end_to_end(tmp_path: Path, text_files):
    record = experiments.run_experiment("extrapolation", tmp_path / "out", tmp_path / "runs", tiny=True,
                                        data_files=text_files, schemes=("learned", "alibi"))
    L = experiments.TINY.block_size
    assert record["lengths"] == [L, 2 * L, 4 * L, 8 * L]
    assert record["held_out_tokens"] % (8 * L) == 0 and record["held_out_tokens"] > 0
    assert record["scored_tokens"] == record["held_out_tokens"] - record["held_out_tokens"] // L
    learned, alibi = record["schemes"]["learned"]["perplexity"], record["schemes"]["alibi"]["perplexity"]
    assert [learned[n] is None for n in record["lengths"]] == [False, True, True, True]  # the table stops at L
    assert all(math.isfinite(p) and p > 1 for p in alibi.values())
    table = (tmp_path / "out" / "extrapolation.md").read_text()
    assert f"| learned | {learned[L]:.1f} | n/a | n/a | n/a |" in table
    assert (tmp_path / "out" / "extrapolation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = json.loads((tmp_path / "out" / "extrapolation.json").read_text())
    assert saved["schemes"]["alibi"]["perplexity"] == {str(n): p for n, p in alibi.items()}
    assert saved["tiny"] is True and saved["commit"]


def test_warmup_tiny_records_divergence_and_goes_on(tmp_path: Path, text_files):
    # A learning rate of 1e30 sends the weights to inf within two updates: each run must be recorded as
    # diverged (with its losses until then) and the experiment still draws and tabulates both.
    record = experiments.run_experiment("warmup", tmp_path / "out", tmp_path / "runs", tiny=True,
                                        data_files=text_files, learning_rates=(1e30,), norms=("post",))
    runs = record["runs"]
    assert sorted(r["warmup_steps"] for r in runs.values()) == [0, 1]
    for row in runs.values():
        assert row["status"] == "diverged", row
        assert "diverged" in row["detail"] and row["validation_loss"] is None
        assert row["train_losses"] and all(math.isfinite(v) for _, v in row["train_losses"][:1])
    table = (tmp_path / "out" / "warmup.md").read_text()
    assert table.count("training diverged") == 2
    assert (tmp_path / "out" / "warmup.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
