"""Attacks on the code a model carries: an ``auto_map`` naming another repository's code (``repo--module.Class``,
which ``trust_remote_code=True`` fetches and runs) or a module hf_vanilla did not write must not reach a run's
config.json or a push; only hf_vanilla's own code, shipped in the folder, travels."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from hf_vanilla.configuration_vanilla import auto_map_for
from hf_vanilla.publishing.hub import plan_upload, push_run
from hf_vanilla.training import train
from tests.factories import tiny_model, tiny_tokenizer
from tests.hub_fixtures import FakeHfApi

FOREIGN = {
    "AutoConfig": "attacker/evil-code--configuration_vanilla.VanillaConfig",
    "AutoModelForCausalLM": "attacker/evil-code--modeling_vanilla.VanillaForCausalLM",
    "AutoModel": "evil.EvilModel",  # a module beside the config that hf_vanilla did not write
}


def plant_foreign_code(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {**config.get("auto_map", {}), **FOREIGN}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "evil.py").write_text("import os  # runs on load\n")


def assert_only_ours(config: dict) -> None:
    assert config["auto_map"] == auto_map_for("decoder"), config["auto_map"]


def assert_warned_naming_each(caplog: pytest.LogCaptureFixture) -> None:
    said = caplog.text
    assert "attacker/evil-code--modeling_vanilla.VanillaForCausalLM" in said and "evil.EvilModel" in said, said


def test_a_run_initialised_from_a_model_naming_foreign_code_ships_only_ours(
    trained_run: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = tmp_path / "M"
    shutil.copytree(trained_run, source, ignore=shutil.ignore_patterns("checkpoint-*"))
    plant_foreign_code(source)
    data = [f"{split}={trained_run.parent / f'{split}.txt'}" for split in ("train", "validation", "test")]
    with caplog.at_level(logging.WARNING):
        train("clm", tmp_path / "run", init_from=str(source), data_files=data, block_size=16, batch_size=4,
              max_steps=1, save_total_limit=None, disable_tqdm=True, num_samples=0, use_cpu=True)
    assert_warned_naming_each(caplog)
    assert_only_ours(json.loads((tmp_path / "run" / "config.json").read_text()))
    assert not (tmp_path / "run" / "evil.py").exists()

    api = FakeHfApi()
    push_run(tmp_path / "run", "tester/from-m", api=api)
    assert_only_ours(json.loads(api.files("tester/from-m")["config.json"]))


def test_a_push_of_a_folder_whose_config_names_foreign_code_publishes_only_ours(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "model"
    tiny_model("decoder").save_pretrained(folder)
    tiny_tokenizer("decoder").save_pretrained(folder)
    plant_foreign_code(folder)
    assert "evil.py" in plan_upload(folder).skipped
    api = FakeHfApi()
    with caplog.at_level(logging.WARNING):
        result = push_run(folder, "tester/planted-code", api=api)
    assert_warned_naming_each(caplog)
    assert_only_ours(json.loads(api.files("tester/planted-code")["config.json"]))
    assert "evil.py" not in api.files("tester/planted-code") and "evil.py" in result.skipped
    assert "attacker" not in api.files("tester/planted-code")["README.md"].decode()
