"""scripts/save_gap.py builds what its save experiment claims to compare (tiny shapes; no timing asserts)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "save_gap.py"


@pytest.fixture(scope="module")
def save_gap():
    spec = importlib.util.spec_from_file_location("save_gap", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return {name: tensor for path in sorted(folder.glob("*.safetensors")) for name, tensor in load_file(path).items()}


def test_the_four_folders_hold_one_model_written_three_ways_and_each_is_timed(save_gap, tmp_path):
    save_gap.build("tiny", tmp_path)
    ours = weights(tmp_path / "ours")
    assert set(weights(tmp_path / "twin")) != set(ours)  # the twin's names, converted to ours
    for copy in ("copied", "resaved"):
        torch.testing.assert_close(weights(tmp_path / copy), ours, rtol=0, atol=0)
        assert (tmp_path / copy / "modeling_vanilla.py").exists()  # ours, with its code: loads as ours does
    runs = {name: [save_gap.time_saves(tmp_path / name, "40KB")] for name in save_gap.FOLDERS}
    for name, (result,) in runs.items():
        assert set(result) == {"first", "second"}, name
        assert all(result[save]["seconds"] > 0 and result[save]["minor_faults"] >= 0 for save in result), name
    lines = save_gap.summarise(runs).splitlines()
    assert [line.split()[0] for line in lines] == list(save_gap.FOLDERS)
    assert "(1.00x)" in lines[0]  # the twin against itself
    try:  # root on Linux: the page cache dropped, the folders read back; elsewhere a refusal that says what it needs
        save_gap.reread([tmp_path / name for name in save_gap.FOLDERS])
    except SystemExit as refusal:
        assert "--reread needs to write /proc/sys/vm/drop_caches" in str(refusal)
    with pytest.raises(SystemExit, match="already holds twin, ours, copied, resaved"):
        save_gap.build("tiny", tmp_path)  # never over a previous experiment's folders
