"""Every ``hf-vanilla`` subcommand against the hostile inputs of issue 41: each ends in exit status 2 and one
sentence on stderr naming what is wrong, never a traceback, and nothing is allocated, trained or uploaded first.

The commands run in-process through :func:`hf_vanilla.cli.main` (what the console script calls); a subprocess only
where the input needs one (a folder locked by another process).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_vanilla import cli
from hf_vanilla.files.output_folder import OutputFolder
from tests.factories import tiny_model, tiny_tokenizer
from tests.hub_fixtures import copy_run


def refused(capsys: pytest.CaptureFixture[str], argv: list[str], *named: str) -> str:
    """Run ``hf-vanilla ARGV``: exit 2, one line on stderr that names each of ``named``, no traceback."""
    capsys.readouterr()
    status = cli.main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2, (status, err[-3000:])
    assert "Traceback" not in err and len(lines) == 1, err[-3000:]
    assert lines[0].startswith(f"hf-vanilla {argv[0]}: "), lines[0]
    assert all(word in lines[0] for word in named), (named, lines[0])
    return lines[0]


def saved_decoder(folder: Path, **overrides) -> Path:
    tiny_model(**overrides).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder


# ----------------------------------------------------------------------------------------------
# Busy folders and the run files of a card


def test_convert_into_a_folder_another_process_writes_is_refused_in_one_sentence(tmp_path, capsys):
    from transformers import GPT2Config, GPT2LMHeadModel

    source, out = tmp_path / "gpt2", tmp_path / "out"
    GPT2LMHeadModel(GPT2Config(vocab_size=97, n_positions=32, n_embd=16, n_layer=1, n_head=2, bos_token_id=1, eos_token_id=2)).save_pretrained(source)
    assert cli.main(["convert", str(source), str(out)]) == 0
    with OutputFolder(out, "conversion").locked():  # another writer holds it (a second lock, in this process too)
        refused(capsys, ["convert", str(source), str(out), "--overwrite"], "in progress", str(out))


def test_push_rebuild_card_with_metrics_json_a_link_out_of_the_run_is_refused(trained_run, tmp_path, capsys):
    run = copy_run(trained_run, tmp_path / "run")
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"unrelated": 1}))
    (run / "metrics.json").unlink()
    (run / "metrics.json").symlink_to(elsewhere)
    refused(capsys, ["push", str(run), "user/x", "--rebuild-card"], "metrics.json", "leave")


def test_push_rebuild_card_with_a_metrics_json_edited_out_of_shape_is_refused(trained_run, tmp_path, capsys):
    run = copy_run(trained_run, tmp_path / "run")
    (run / "metrics.json").write_text(json.dumps({"unrelated": 1}))
    refused(capsys, ["push", str(run), "user/x", "--rebuild-card"], "metrics.json", "--keep-card")
