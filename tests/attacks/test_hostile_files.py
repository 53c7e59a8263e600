"""Hostile or damaged files handed to hf_vanilla: each is refused with one clear message that names the file (and
the line) and says what to do, never a library traceback or a hint about something else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_vanilla import corpora

# -- data files -------------------------------------------------------------------------------------------------

DAMAGED = [  # (file name, bytes, what the message must say)
    ("empty.txt", b"", r"empty\.txt is empty: put text in it"),
    ("empty.jsonl", b"", r"empty\.jsonl is empty"),
    ("blank.txt", b"\n  \n\t\n", r"blank\.txt holds only blank lines"),
    ("blank.jsonl", b"\n\n", r"blank\.jsonl holds only blank lines"),
    ("binary.txt", b"PK\x03\x04\x00\x00\x08\x00" + bytes(range(256)), r"binary\.txt looks binary \(it holds NUL"),
    ("latin.txt", "first line\ncaf\u00e9 ol\u00e9\n".encode("latin-1"),
     r"latin\.txt line 2 is not utf-8 text \(byte b'\\xe9' at column 4\); .*re-save it as UTF-8"),
    ("broken.jsonl", b'{"text": "fine"}\n{"text": "no end\n', r"broken\.jsonl line 2 is not valid JSON"),
    ("scalar.jsonl", b'"just a string"\n', r"scalar\.jsonl line 1 holds a JSON str, not an object"),
    ("numbers.jsonl", b'{"text": "fine"}\n\n{"text": 42}\n', r"numbers\.jsonl line 3: 'text' is 42 \(int\), not text"),
    ("nested.json", b'[\n {"text": "fine"},\n {"text": ["a", "list"]}\n]\n', r"nested\.json item 2: 'text' is \["),
    ("cut.json", b'[\n {"text": "fine"},\n {"text": \n', r"cut\.json is not valid JSON \(.*line 4"),
    ("header.csv", b"text,label\n", r"header\.csv has a header line but no rows"),
    ("ids.csv", b"text,label\n1,a\n2,b\n", r"column 'text' was read as int \(row 1 is 1\), not text"),
]


@pytest.mark.parametrize(("name", "content", "message"), DAMAGED, ids=[d[0] for d in DAMAGED])
def test_damaged_data_files_are_refused_naming_the_file_line_and_fix(tmp_path: Path, name: str, content: bytes,
                                                                      message: str) -> None:
    (tmp_path / name).write_bytes(content)
    with pytest.raises(ValueError, match=message):
        corpora.load_local_files(tmp_path / name, cache_dir=tmp_path / "cache")


def test_well_formed_json_documents_and_lines_still_load(tmp_path: Path) -> None:
    (tmp_path / "one-line.json").write_text(json.dumps([{"text": "a"}, {"text": None}, {"text": "b"}]))
    (tmp_path / "pairs.jsonl").write_text('{"en": "hi", "es": "hola", "n": 1}\n\n{"en": "yes", "es": "s\u00ed"}\n',
                                          encoding="utf-8")
    assert corpora.load_local_files(tmp_path / "one-line.json", cache_dir=tmp_path / "c")["train"]["text"][:] == [
        "a", None, "b"]
    pairs = corpora.load_local_files(tmp_path / "pairs.jsonl", text_column=None, string_columns=["en", "es"],
                                     cache_dir=tmp_path / "c")
    assert pairs["train"]["es"][:] == ["hola", "s\u00ed"]


def test_string_columns_are_checked_beyond_the_text_column(tmp_path: Path) -> None:
    (tmp_path / "pairs.jsonl").write_text('{"en": "one", "es": "uno"}\n{"en": "two", "es": 2}\n')
    with pytest.raises(ValueError, match=r"pairs\.jsonl line 2: 'es' is 2 \(int\), not text"):
        corpora.load_local_files(tmp_path / "pairs.jsonl", text_column=None, string_columns=["en", "es"],
                                 cache_dir=tmp_path / "c")


# -- folders given as models, checkpoints to resume from -----------------------------------------------------------


def test_init_from_a_missing_folder_or_a_native_model_says_what_to_do(tmp_path: Path) -> None:
    from hf_vanilla.training import train

    with pytest.raises(FileNotFoundError, match=r"--init-from .*nowhere: no such folder"):
        train("clm", tmp_path / "run", init_from=str(tmp_path / "nowhere"), use_cpu=True)
    llama = tmp_path / "llama"
    llama.mkdir()
    (llama / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    with pytest.raises(ValueError, match=r"holds a 'llama' model, not an hf_vanilla one: convert it first "
                                         r"\(hf-vanilla convert .*llama CONVERTED_DIR\)"):
        train("clm", tmp_path / "run", init_from=str(llama), use_cpu=True)
    assert not (tmp_path / "run").exists()


def test_init_from_a_hub_repo_id_is_left_to_from_pretrained_and_a_path_is_not_taken_for_one() -> None:
    from hf_vanilla.training.options import check_init_from, looks_like_repo_id

    assert looks_like_repo_id("gpt2") and looks_like_repo_id("alice/vanilla-small")
    check_init_from("alice/vanilla-small")  # no folder of that name here: the Hub's, as from_pretrained would
    for path in ("./alice/vanilla-small", "/tmp/alice", "~/models/base", "runs/a/b", "a\\b"):
        assert not looks_like_repo_id(path)
    with pytest.raises(FileNotFoundError, match="no such folder"):
        check_init_from("runs/a/b")


def test_a_newest_checkpoint_without_its_tokenizer_is_skipped_for_the_previous_one(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    from hf_vanilla.files.output_folder import OutputFolder
    from hf_vanilla.training.trainer import find_resume_checkpoint

    for step, tokenizer in ((2, "{}"), (4, None), (6, '{"trunc')):
        checkpoint = tmp_path / f"checkpoint-{step}"
        checkpoint.mkdir()
        (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": step}))
        save_file({"w": torch.zeros(2)}, str(checkpoint / "model.safetensors"))
        if tokenizer is not None:
            (checkpoint / "tokenizer.json").write_text(tokenizer)
    OutputFolder(tmp_path).add(["checkpoint-2", "checkpoint-4", "checkpoint-6"])  # the run's own: resume goes by its record
    assert find_resume_checkpoint(tmp_path, "latest") == tmp_path / "checkpoint-2"
    with pytest.raises(ValueError, match=r"cannot resume from .*checkpoint-4: .*tokenizer\.json is unreadable"):
        find_resume_checkpoint(tmp_path, str(tmp_path / "checkpoint-4"))


# -- convert ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("quantization", [{"quant_method": "bitsandbytes", "load_in_4bit": True},
                                          {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}])
def test_convert_refuses_a_quantised_checkpoint(tmp_path: Path, quantization: dict) -> None:
    from hf_vanilla.convert import convert_checkpoint
    from tests.factories import tiny_model

    model = tiny_model("decoder", "rope")
    model.save_pretrained(tmp_path / "src")
    config = json.loads((tmp_path / "src" / "config.json").read_text())
    (tmp_path / "src" / "config.json").write_text(json.dumps({**config, "model_type": "llama",
                                                              "quantization_config": quantization}))
    with pytest.raises(ValueError, match=rf"holds a quantised checkpoint .*'{quantization['quant_method']}'.*convert "
                                         r"the unquantised checkpoint"):
        convert_checkpoint(tmp_path / "src", tmp_path / "out")
    assert not (tmp_path / "out").exists()


# -- the command line ------------------------------------------------------------------------------------------


def test_ctrl_c_while_a_command_imports_is_one_line_and_exit_130(monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import importlib

    from hf_vanilla import cli

    def ctrl_c(name: str, *args):
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib, "import_module", ctrl_c)
    try:
        status = cli.main(["convert", "src", "out"])
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped hf-vanilla's entry point as a traceback")
    assert status == 130
    assert capsys.readouterr().err == "hf-vanilla: interrupted (Ctrl-C)\n"
