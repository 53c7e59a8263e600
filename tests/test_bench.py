"""The benchmark runs end to end in tiny mode and writes rows of the documented schema (not how fast)."""

from __future__ import annotations

import json
import math
import runpy
import sys
from pathlib import Path

import pytest

from hf_vanilla.cli import main as cli_main
from hf_vanilla.tools import bench

ROOT = Path(__file__).resolve().parents[1]
ROW_KEYS = {"name", "ours", "reference", "unit", "ratio", "control_ratio"}


@pytest.fixture(scope="module")
def tiny_rows(tmp_path_factory) -> list[dict]:
    path = tmp_path_factory.mktemp("bench") / "rows.json"
    assert cli_main(["bench", "--tiny", "--repeats", "1", "--control", "--json", str(path)]) == 0
    return json.loads(path.read_text())


def test_rows_have_the_schema(tiny_rows):
    assert tiny_rows and all(set(row) == ROW_KEYS for row in tiny_rows)
    for row in tiny_rows:
        assert isinstance(row["name"], str) and isinstance(row["unit"], str)
        for key in ("ours", "reference", "ratio", "control_ratio"):
            assert row[key] is None or (isinstance(row[key], int | float) and math.isfinite(row[key]))
    names = [row["name"] for row in tiny_rows]
    assert len(names) == len(set(names))


def test_every_pair_and_measurement_has_its_row(tiny_rows):
    names = {row["name"] for row in tiny_rows}
    for pair in bench.PAIRS:
        assert {f"train/{pair}", f"forward/{pair}", f"mfu-train/{pair}", f"memory-train/{pair}"} <= names
    for pair in bench.GENERATING:
        assert {f"generate-b1/{pair}", f"generate-b8/{pair}"} <= names
    for length in bench.TINY.memory_lengths:
        assert {f"memory-T{length}/eager", f"memory-T{length}/sdpa"} <= names


def test_throughputs_are_positive(tiny_rows):
    for row in tiny_rows:
        if row["unit"] == "tokens/s":
            assert row["ours"] > 0 and row["reference"] > 0 and row["ratio"] > 0
            assert row["control_ratio"] > 0  # --control: every model row has an A/A ratio


def test_memory_rows_of_pairs_have_an_a_a_ratio(tiny_rows):
    for row in tiny_rows:
        if row["name"].startswith("memory-train/"):
            assert row["control_ratio"] is not None


def test_the_mfu_row_counts_against_a_matmul_timed_in_its_rounds(tiny_rows):
    rows = {row["name"]: row for row in tiny_rows}
    for pair in bench.PAIRS:
        train, mfu = rows[f"train/{pair}"], rows[f"mfu-train/{pair}"]
        assert 0 < mfu["ours"] and 0 < mfu["reference"] and mfu["ratio"] == train["ratio"]


def test_table_shows_the_a_a_column_when_a_control_ran():
    row = bench.Row("train/x", 10.0, 8.0, "tokens/s", 1.25, control_ratio=0.97)
    lines = bench.format_table([row, bench.Row("memory-T8/sdpa", 2.0, 1.0, "MiB", 0.5)]).splitlines()
    assert lines[:3] == ["| name | ours | reference | unit | ratio | A/A ratio |", "|---|---:|---:|---|---:|---:|",
                         "| train/x | 10 | 8 | tokens/s | 1.25 | 0.97 |"]
    assert lines[3] == "| memory-T8/sdpa | 2 | 1 | MiB | 0.50 |  |"
    assert bench.format_table([bench.Row("train/x", 10.0, 8.0, "tokens/s", 1.25)]).splitlines()[0] == \
        "| name | ours | reference | unit | ratio |"


def test_control_is_an_identical_copy_of_ours():
    import torch

    pair = bench.build_pair("gpt2", bench.TINY, control=True)
    assert set(pair.contestants()) == {"ours", "reference", "control"} and type(pair.control) is type(pair.ours)
    ids = torch.tensor([[1, 2, 3, 4]])
    torch.testing.assert_close(pair.control(ids).logits, pair.ours(ids).logits, rtol=0, atol=0)


@pytest.mark.parametrize("name", bench.PAIRS)
def test_pairs_are_matched(name):
    """Matched sizes: the same parameter count (BART's output bias is a parameter here, a buffer there)."""
    pair = bench.build_pair(name, bench.TINY)
    slack = pair.ours.config.vocab_size if name == "bart" else 0
    assert abs(bench.count_params(pair.ours) - bench.count_params(pair.reference)) <= slack
    assert pair.ours.config._attn_implementation == pair.reference.config._attn_implementation == "sdpa"


def test_flops_count_the_head_once():
    pair = bench.build_pair("gpt2", bench.TINY)  # tied head: the embedding matrix counts as the head
    config = pair.ours.config
    embeddings = (config.vocab_size + config.max_position_embeddings) * config.hidden_size
    assert bench.flop_params(pair.ours) == bench.count_params(pair.ours) - embeddings + config.vocab_size * config.hidden_size


def test_alternate_interleaves_and_flips_order():
    calls: list[str] = []
    times = bench.alternate({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=2, warmup=0)
    assert calls == ["a", "b", "b", "a"] and all(len(v) == 2 for v in times.values())


def test_alternate_pauses_untimed_before_each_call(monkeypatch):
    clock = iter(range(100))
    slept: list[float] = []
    monkeypatch.setattr(bench.time, "perf_counter", lambda: next(clock))  # each call takes one tick
    monkeypatch.setattr(bench.time, "sleep", slept.append)
    times = bench.alternate({"a": lambda: None, "b": lambda: None}, repeats=2, warmup=1, pause=1.5)
    assert slept == [1.5] * 4 and times == {"a": [1, 1], "b": [1, 1]}  # not before warm-up calls, never timed


def test_peak_memory_sees_a_large_allocation():
    import torch

    added = bench.peak_memory_mib(lambda: torch.ones(16, 1024, 1024).add_(1))  # 64 MiB of float32
    assert 60 < added < 200


def test_peak_memory_leaves_the_first_two_calls_out():
    """One-off set-ups that a fresh process makes in its first calls (libraries' kernels and per-thread buffers)
    are not the call's memory."""
    import torch

    calls = []

    def run():
        calls.append(len(calls))
        if len(calls) == 2:
            torch.ones(16, 1024, 1024).add_(1)  # 64 MiB, on the second call only

    assert bench.peak_memory_mib(run) < 16


def test_script_help(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["bench.py", "--help"])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(ROOT / "scripts" / "bench.py"), run_name="__main__")
    assert exit_.value.code == 0
    assert "--json" in capsys.readouterr().out


def test_gpu_bench_dry_run_on_cpu(tmp_path, monkeypatch):
    """scripts/gpu_bench.py cannot be timed here (no GPU); its CPU dry run must work and write the same schema."""
    path = tmp_path / "gpu.json"
    monkeypatch.setattr(sys, "argv", ["gpu_bench.py", "--dry-run", "--json", str(path)])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(ROOT / "scripts" / "gpu_bench.py"), run_name="__main__")
    assert exit_.value.code == 0
    rows = json.loads(path.read_text())
    assert rows and all(set(row) == ROW_KEYS for row in rows)
    names = {row["name"] for row in rows}
    assert {"train/sdpa", "mfu-train/sdpa", "generate-b1/sdpa", "numerics/sdpa-vs-eager"} <= names
    numerics = next(row for row in rows if row["name"] == "numerics/sdpa-vs-eager")
    assert numerics["ours"] < numerics["reference"]  # sdpa and eager agree within the tolerance


def test_profile_groups_ops_and_leaves_the_rest_to_other():
    profile = runpy.run_path(str(ROOT / "scripts" / "profile_pair.py"))
    events = [("aten::mm", 3000.0), ("aten::addmm", 1000.0), ("aten::_scaled_dot_product_flash_attention_for_cpu",
              500.0), ("aten::mul", 200.0), ("aten::copy_", 100.0), ("aten::view", 5.0), ("aten::transpose", 5.0),
              ("autograd::engine::evaluate_function: MmBackward0", 50.0)]  # engine bookkeeping: not an op
    table = profile["split"](events, wall_s=0.010)
    assert table == {"matmul": (4.0, 2), "attention": (0.5, 1), "element-wise": (pytest.approx(0.3), 2),
                     "views": (0.01, 2), "other": (pytest.approx(10.0 - 4.81), 0)}


def test_profile_script_runs_on_tiny_models(monkeypatch, capsys):
    measures = ("train", "generate-b1", "generate-b8")
    monkeypatch.setattr(sys, "argv", ["profile_pair.py", "--tiny", "--repeats", "1", "--profiled", "1", "--top", "2",
                                      "--measure", *measures])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(ROOT / "scripts" / "profile_pair.py"), run_name="__main__")
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "pair=llama" in out
    for measure in measures:
        assert f"\n{measure}: wall ours" in out
    assert out.count("| matmul |") == 3 and out.count("| other |") == 3
