"""Attacks on the commands that use a saved model as it is: a checkpoint missing weights (or holding weights its
model does not use) is refused by name rather than run with random weights; generation is bounded by how far the
model's positions reach; a newest checkpoint whose training state does not load is skipped for the previous one."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from hf_vanilla import cli
from hf_vanilla.inference import EXTRAPOLATION_FACTOR
from hf_vanilla.training.trainer import find_resume_checkpoint
from tests.factories import tiny_model, tiny_tokenizer
from tests.hub_fixtures import copy_run


def saved_decoder(folder: Path, scheme: str = "sinusoidal", **overrides) -> Path:
    model = tiny_model("decoder", scheme, **overrides)
    model.save_pretrained(folder)
    tiny_tokenizer("decoder").save_pretrained(folder)
    return folder


def edit_weights(folder: Path, *, drop: str = "", add: str = "") -> None:
    """Remove every weight whose name holds ``drop``; add a weight named ``add``."""
    weights = load_file(str(folder / "model.safetensors"))
    weights = {name: value for name, value in weights.items() if not drop or drop not in name}
    if add:
        weights[add] = torch.zeros(2)
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})


def one_line_error(capsys: pytest.CaptureFixture[str], *named: str) -> str:
    """The command's own message (stderr also holds progress bars): one line, naming each of ``named``."""
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("hf-vanilla ")]
    assert len(said) == 1 and all(name in said[0] for name in named), said
    return said[0]


COMMANDS = {
    "attention": lambda folder, tmp: ["attention", str(folder), "the king", "--out", str(tmp / "a.png")],
    "generate": lambda folder, tmp: ["generate", str(folder), "the king", "--max-new-tokens", "3"],
}


@pytest.mark.parametrize("command", COMMANDS)
def test_a_checkpoint_without_its_q_proj_weights_or_with_a_stray_weight_is_refused_naming_them(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = saved_decoder(tmp_path / "model")
    edit_weights(folder, drop="q_proj")
    assert cli.main(COMMANDS[command](folder, tmp_path)) == 2
    one_line_error(capsys, "q_proj", "lacks weights")
    assert not (tmp_path / "a.png").exists()

    saved_decoder(folder)
    edit_weights(folder, add="model.smuggled")
    assert cli.main(COMMANDS[command](folder, tmp_path)) == 2
    one_line_error(capsys, "model.smuggled", "does not use")


def test_evaluate_refuses_a_run_whose_weights_lack_q_proj(
    trained_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = copy_run(trained_run, tmp_path / "run")
    edit_weights(run, drop="q_proj")
    assert cli.main(["evaluate", str(run)]) == 2
    one_line_error(capsys, "q_proj", "lacks weights")


@pytest.mark.parametrize(("scheme", "reach"), [("learned", 24), ("sinusoidal", EXTRAPOLATION_FACTOR * 24)])
def test_generate_asked_for_a_billion_tokens_without_eos_stops_at_the_models_reach_and_says_so(
    scheme: str, reach: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "model"
    model = tiny_model("decoder", scheme, max_position_embeddings=24)
    model.generation_config.max_new_tokens = 10**9
    model.generation_config.eos_token_id = None
    model.config.eos_token_id = None
    model.save_pretrained(folder)
    tiny_tokenizer("decoder").save_pretrained(folder)
    prompt_length = len(tiny_tokenizer("decoder")("the king queen")["input_ids"])

    assert cli.main(["generate", str(folder), "the king queen", "--no-return-full-text"]) == 0
    out, err = capsys.readouterr()
    assert f"max_new_tokens=1000000000 cut to {reach - prompt_length + 1}" in err, err  # the last one is not fed
    assert len(out.split()) <= reach - prompt_length + 1


@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt", "rng_state.pth"])
@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_resume_skips_a_newest_checkpoint_whose_training_state_does_not_load(
    trained_run: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, name: str, damage: str
) -> None:
    run = copy_run(trained_run, tmp_path / "run")
    damaged = run / "checkpoint-2" / name
    data = damaged.read_bytes()
    damaged.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"\x00garbage" * (len(data) // 8))
    with caplog.at_level(logging.WARNING):
        assert find_resume_checkpoint(run, "latest") == run / "checkpoint-1"
    assert f"skipping checkpoint-2: {damaged} is unreadable" in caplog.text, caplog.text


def test_a_resumed_run_whose_newest_optimizer_state_is_garbage_goes_on_from_the_previous_checkpoint(
    trained_run: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The whole path, not only the choice: today the Trainer's torch.load ends the run in a traceback."""
    from hf_vanilla.training import train
    from hf_vanilla.training.rundir import read_record

    run = copy_run(trained_run, tmp_path / "run")
    (run / "checkpoint-2" / "optimizer.pt").write_bytes(b"not a torch archive")
    data = [f"{split}={trained_run.parent / f'{split}.txt'}" for split in ("train", "validation", "test")]
    with caplog.at_level(logging.WARNING):
        train("clm", run, data_files=data, preset="tiny", config={"hidden_size": 32, "intermediate_size": 64},
              vocab_size=300, block_size=16, batch_size=4, max_steps=3, save_steps=1, save_total_limit=None,
              disable_tqdm=True, num_samples=1, max_new_tokens=4, resume=True)  # fmt: skip  (on to step 3)
    assert "skipping checkpoint-2" in caplog.text and "optimizer.pt is unreadable" in caplog.text, caplog.text
    record = read_record(run)
    assert record["status"] == "completed" and record["resumed_from"].endswith("checkpoint-1"), record
