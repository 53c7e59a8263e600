"""The size ladder (hf-vanilla bench --size): its smallest rung end to end at tiny shapes, structure only (no
timing asserts); the real rungs are a script's job (docs/performance.md, "At the user's size")."""

from __future__ import annotations

import json
import math

import pytest

from hf_vanilla.tools import bench_cli, ladder
from hf_vanilla.tools.ladder import SIZES, format_table, run_child, run_in_process

ROWS = [
    "convert-to-vanilla peak / checkpoint", "convert-to-native peak / checkpoint", "model code import time",
    "meta build time", "meta rebuild CPU time", "load bf16 time", "load bf16 peak RSS", "load-remote code import time", "load-remote time",
    "load-remote peak RSS", "save_pretrained time", "save_pretrained peak RSS", "forward bf16",
    "train step fp32 AdamW time", "train step fp32 AdamW peak RSS", "train step fp32 AdamW + checkpointing time",
    "train step fp32 AdamW + checkpointing peak RSS", "generate b1 bf16 (tokens identical)",
    "generate b8 bf16 (tokens identical)",
]


def test_the_tiny_rung_measures_every_row_against_the_twin(tmp_path):
    specs = []

    def run(spec):
        specs.append(spec)
        # trust_remote_code without the package needs a process that never imported it; the rest runs here.
        result = run_child(spec) if spec["kind"] == "remote" else run_in_process(spec)
        if spec["kind"] == "train":  # which run a row's figure came from: ours 1 s, the twin 2 s, its control 3 s
            twins = sum(earlier["kind"] == "train" and earlier["side"] == "twin" for earlier in specs)
            for step in result.values():
                step["seconds"] = 1.0 if spec["side"] == "ours" else 1.0 + twins
        return result

    rows = ladder.ladder("tiny", tmp_path, run=run, log=lambda message: None)
    assert [row.name for row in rows] == ROWS
    for row in rows:
        assert all(math.isfinite(value) and value >= 0 for value in (row.ours, row.twin, row.control)), row
    timed = [row for row in rows if row.unit in ("s", "tokens/s")]
    assert all(row.ours > 0 and row.twin > 0 and row.ratio > 0 for row in timed)
    # ours is measured on the converted folder, between the twin's two runs on its own (the second: the A/A control)
    for kind in ("serve", "train"):
        sides = [(spec["side"], spec["dir"].rsplit("/", 1)[-1]) for spec in specs if spec["kind"] == kind]
        assert sides == [("twin", "twin"), ("ours", "ours"), ("twin", "twin")], kind
    train = next(row for row in rows if row.name == "train step fp32 AdamW time")
    assert (train.ours, train.twin, train.control) == (1.0, 2.0, 3.0)
    # the estimate follows the same plan: one line per process the ladder ran
    assert [spec["kind"] for spec in specs] == [kind for kind, _ in ladder._processes("tiny")]
    assert "| load bf16 time |" in format_table("tiny", rows)


RATES = dict(import_s=5.0, fp32_flops=100e9, bf16_flops=50e9, bf16_flops_b1=2e9, bf16_flops_conv1d=5e9,
             fill_per_s=2e8, write_bytes_per_s=500e6)


def test_the_estimate_lists_every_process_and_grows_with_the_size():
    totals = {name: sum(s for _, s in ladder.estimate_seconds(name, RATES)) for name in ("124m", "350m", "1b")}
    assert len(ladder.estimate_seconds("1b", RATES)) == 7 and len(ladder.estimate_seconds("350m", RATES)) == 10
    assert totals["124m"] < totals["350m"]
    # every process pays its imports; twice the imports' cost moves each rung by exactly that many processes
    slower = {name: sum(s for _, s in ladder.estimate_seconds(name, {**RATES, "import_s": 10.0})) for name in totals}
    assert slower["124m"] - totals["124m"] == pytest.approx(5.0 * (10 + 1))  # the remote process imports twice
    plan = ladder.format_plan(["124m", "1b"], RATES)
    assert "--size 124m: 10 processes" in plan and "--size 1b: 7 processes" in plan and "all: about" in plan


def test_a_size_that_does_not_fit_is_refused_before_anything_is_built(tmp_path, monkeypatch):
    monkeypatch.setattr(ladder, "available_bytes", lambda: 2 * 1024**3)
    built = []
    with pytest.raises(MemoryError, match=r"--size 350m needs about 7\.0 GiB .* 2\.0 GiB is available"):
        ladder.ladder("350m", tmp_path, run=built.append)
    assert built == [] and list(tmp_path.iterdir()) == []


def test_the_bench_command_offers_the_real_rungs():
    assert set(bench_cli.SIZES) == set(SIZES) - {"tiny"}


def test_the_estimate_without_a_size_is_refused_in_one_sentence(capsys):
    from hf_vanilla.tools.bench import main

    assert main(["--estimate"]) == 2
    assert capsys.readouterr().err.strip() == ("hf-vanilla bench: --estimate prices the size ladder: add --size 124m, "
                                               "350m or 1b.")


def test_the_work_folder_is_made_and_the_json_kept_rung_by_rung(tmp_path, monkeypatch):
    # --work named a folder that did not exist yet: the first rung failed in mkdtemp with a traceback
    work, json_path = tmp_path / "runs" / "ladder", tmp_path / "ladder.json"
    measured = ladder.Row("load bf16 time", ours=1.0, twin=2.0, control=2.2, unit="s")

    def one_rung(name, folder, **kwargs):
        assert folder.parent == work and folder.is_dir()
        if name == "350m":  # a later rung's failure keeps the rows of the rungs before it
            raise RuntimeError("out of memory")
        return [measured]

    monkeypatch.setattr(ladder, "ladder", one_rung)
    monkeypatch.setattr(ladder, "refuse_if_too_large", lambda name, size: None)
    with pytest.raises(RuntimeError):
        ladder.run_ladder(ladder.Options(sizes=["124m", "350m"], work=str(work), json=str(json_path)),
                          log=lambda message: None)
    kept = json.loads(json_path.read_text())
    assert list(kept) == ["124m"] and kept["124m"][0]["ratio"] == pytest.approx(2.0)


def test_the_build_load_rows_stop_each_serving_process_after_the_load(tmp_path):
    specs = []

    def run(spec):
        specs.append(spec)
        result = run_in_process(spec)
        if spec["kind"] == "serve":  # which process the rebuild row reads: the twin 1 s, ours 2 s, its control 3 s
            result["meta-again"]["seconds"] = float(sum(earlier["kind"] == "serve" for earlier in specs))
        return result

    rows = ladder.ladder("tiny", tmp_path, run=run, log=lambda message: None, build_load_only=True)
    assert tuple(row.name for row in rows) == ladder.BUILD_LOAD_ROWS
    rebuilt = next(row for row in rows if row.name == "meta rebuild CPU time")
    assert (rebuilt.ours, rebuilt.twin, rebuilt.control) == (2.0, 1.0, 3.0)
    assert all(row.ours > 0 and row.twin > 0 and row.control > 0 for row in rows if row.unit == "s")
    # make, convert once, then twin, ours, twin: the serving processes stop at the load (no save, forward, generate)
    assert [(spec["kind"], spec.get("side")) for spec in specs] == [
        ("make", None), ("convert", None), ("serve", "twin"), ("serve", "ours"), ("serve", "twin")]
    assert all(spec["stop_after"] == "load" for spec in specs if spec["kind"] == "serve")
    assert set(run_in_process(specs[3])) == {"import", "meta", "meta-again", "load"}
