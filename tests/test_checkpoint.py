"""hf_vanilla.checkpoint and hf_vanilla.files.atomic: the one list of checkpoint files and the one way to write files and folders atomically."""

import errno
import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from hf_vanilla import VanillaConfig, VanillaForCausalLM
from hf_vanilla.checkpoint import code_files, ensure_code_files, loading_files
from hf_vanilla.files.atomic import (
    atomic_write_bytes,
    atomic_write_json,
    disk_full_error,
    is_model_file,
    save_pretrained_atomic,
    staged_folder,
)


def umask_modes() -> tuple[int, int]:
    mask = os.umask(0)
    os.umask(mask)
    return 0o755 & ~mask, 0o644 & ~mask


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def tiny_model() -> VanillaForCausalLM:
    torch.manual_seed(0)
    return VanillaForCausalLM(VanillaConfig.from_preset("tiny-gpt2"))


def test_atomic_write_replaces_whole_file_with_ordinary_mode_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "sub" / "metrics.json"
    atomic_write_json(target, {"loss": 1.5, "files": {"b", "a"}, "path": tmp_path})
    atomic_write_json(target, {"loss": 0.5})
    assert json.loads(target.read_text()) == {"loss": 0.5}
    assert mode(target) == umask_modes()[1]
    assert [p.name for p in target.parent.iterdir()] == ["metrics.json"]


def test_atomic_write_failing_midway_keeps_the_old_file_and_says_the_disk_is_full(tmp_path, monkeypatch):
    target = tmp_path / "a.txt"
    target.write_text("old")

    def full_disk(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match=r"No space left on device while flushing to disk .*a\.txt"):  # the step that failed
        atomic_write_bytes(target, b"new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_staged_folder_publishes_on_success_and_keeps_only_what_keep_allows(tmp_path):
    target = tmp_path / "run"
    target.mkdir()
    (target / "old.txt").write_text("old")
    (target / "notes.md").write_text("mine")
    with staged_folder(target, keep=lambda name: name == "notes.md") as staging:
        assert staging.parent == tmp_path and not any(staging.iterdir())
        (staging / "new.txt").write_text("new")
        assert (target / "old.txt").exists()  # nothing visible before the block ends
    assert sorted(p.name for p in target.iterdir()) == ["new.txt", "notes.md"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert mode(target) == umask_modes()[0] and mode(target / "new.txt") == umask_modes()[1]


def test_staged_folder_failure_leaves_target_untouched(tmp_path):
    target = tmp_path / "run"
    target.mkdir()
    (target / "model.safetensors").write_bytes(b"good")
    with pytest.raises(KeyError), staged_folder(target) as staging:
        (staging / "model.safetensors").write_bytes(b"half")
        raise KeyError("killed mid-way")
    assert (target / "model.safetensors").read_bytes() == b"good"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_staged_folder_refuses_a_file_target(tmp_path):
    (tmp_path / "x").write_text("a file")
    with pytest.raises(NotADirectoryError, match="is a file"), staged_folder(tmp_path / "x"):
        pass


def test_disk_full_errors_become_a_clear_message(tmp_path):
    torch_error = RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 64 vs 0")
    clear = disk_full_error(torch_error, tmp_path / "optimizer.pt")
    assert clear is not None and clear.errno == errno.ENOSPC
    assert "No space left on device while writing" in str(clear) and "optimizer.pt" in str(clear)
    assert disk_full_error(OSError(errno.ENOSPC, "No space left on device"), tmp_path) is not None
    assert disk_full_error(ValueError("bad value"), tmp_path) is None


def test_disk_full_inside_staged_folder_is_reported_as_such(tmp_path):
    with pytest.raises(OSError, match="No space left on device while writing .*run"), staged_folder(tmp_path / "run"):
        raise RuntimeError("[enforce fail at inline_container.cc:664] . PytorchStreamWriter failed writing file")
    assert not (tmp_path / "run").exists()


def test_save_pretrained_atomic_keeps_neighbours_drops_stale_shards_and_has_ordinary_modes(tmp_path):
    target = tmp_path / "model"
    target.mkdir()
    (target / "tokenizer.json").write_text("{}")
    (target / "model-00001-of-00002.safetensors").write_bytes(b"stale shard")
    model = tiny_model()
    save_pretrained_atomic(model, target)
    names = {p.name for p in target.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "modeling_vanilla.py"} <= names
    assert "model-00001-of-00002.safetensors" not in names
    assert mode(target) == umask_modes()[0] and mode(target / "model.safetensors") == umask_modes()[1]
    reloaded = VanillaForCausalLM.from_pretrained(target)
    for (name, a), b in zip(model.state_dict().items(), reloaded.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)


def test_save_pretrained_atomic_of_a_tokenizer_or_config_keeps_the_model_beside_it(tmp_path):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    model = tiny_model()
    save_pretrained_atomic(model, tmp_path)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")))
    save_pretrained_atomic(tokenizer, tmp_path)
    save_pretrained_atomic(model.generation_config, tmp_path)
    save_pretrained_atomic(model.config, tmp_path)
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"} <= {
        p.name for p in tmp_path.iterdir()}
    reloaded = VanillaForCausalLM.from_pretrained(tmp_path)
    torch.testing.assert_close(reloaded.lm_head.weight, model.lm_head.weight, rtol=0, atol=0)


def test_save_pretrained_atomic_into_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep.txt").write_text("kept")
    save_pretrained_atomic(tiny_model(), ".")
    assert (tmp_path / "model.safetensors").is_file() and (tmp_path / "keep.txt").read_text() == "kept"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".staging-")]


def test_a_save_killed_midway_leaves_the_previous_checkpoint_loadable(tmp_path):
    target = tmp_path / "model"
    model = tiny_model()
    save_pretrained_atomic(model, target)
    script = textwrap.dedent(f"""
        import os, torch
        from hf_vanilla import VanillaConfig, VanillaForCausalLM
        from hf_vanilla.files.atomic import save_pretrained_atomic
        model = VanillaForCausalLM(VanillaConfig.from_preset("tiny-gpt2"))
        def dying_state_dict(self, *args, **kwargs):
            os._exit(9)  # SIGKILL-like: no cleanup, no finally blocks
        model.state_dict = dying_state_dict.__get__(model)
        save_pretrained_atomic(model, {str(target)!r})
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 9, result.stderr[-2000:]
    reloaded = VanillaForCausalLM.from_pretrained(target)
    torch.testing.assert_close(reloaded.lm_head.weight, model.lm_head.weight, rtol=0, atol=0)
    save_pretrained_atomic(model, target)  # the next save removes what the killed one left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_loading_files_lists_exactly_what_loading_needs(tmp_path):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    model = tiny_model()
    model.save_pretrained(tmp_path)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")))
    tokenizer.save_pretrained(tmp_path)
    for name in ("token", "credentials.json", "optimizer.pt", "notes.txt"):
        (tmp_path / name).write_text("secret")
    files = loading_files(tmp_path)
    expected = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                "tokenizer_config.json", *(path.name for path in code_files())}
    assert set(files) == expected & {p.name for p in tmp_path.iterdir()}
    assert {"config.json", "model.safetensors", "modeling_vanilla.py", "tokenizer.json"} <= set(files)
    assert all(files[name] == tmp_path / name for name in files)


def test_ensure_code_files_restores_missing_code_and_keeps_existing(tmp_path):
    tiny_model().save_pretrained(tmp_path)
    (tmp_path / "modeling_vanilla.py").unlink()
    (tmp_path / "configuration_vanilla.py").write_text("# the code the weights were saved with\n")
    assert ensure_code_files(tmp_path) == ["modeling_vanilla.py"]
    assert (tmp_path / "configuration_vanilla.py").read_text().startswith("# the code the weights")
    assert ensure_code_files(tmp_path) == []


@pytest.mark.parametrize(
    ("name", "expected"),
    [("config.json", True), ("generation_config.json", True), ("model.safetensors", True),
     ("model-00002-of-00003.safetensors", True), ("model.safetensors.index.json", True),
     ("pytorch_model.bin", True), ("tokenizer.json", False), ("README.md", False), ("trainer_state.json", False)],
)
def test_is_model_file(name, expected):
    assert is_model_file(name) is expected


def test_a_staging_folder_in_use_by_another_writer_is_not_removed(tmp_path):
    from hf_vanilla.files.atomic import held_lock, remove_stale_staging

    live, dead = tmp_path / ".staging-corpus-live", tmp_path / ".staging-corpus-dead"
    live.mkdir(), dead.mkdir()
    with held_lock(live):  # a lock is per open file: a second open in this process contends like another process
        remove_stale_staging(tmp_path, "corpus")
        assert live.is_dir() and not dead.exists()
    remove_stale_staging(tmp_path, "corpus")
    assert not live.exists()


def test_checkpoint_writes_need_no_posix_locks(tmp_path, monkeypatch):
    """Windows has no fcntl: the atomic writes lock through filelock, as the output folder does (the fcntl-only
    lock refused with NotImplementedError there), and leave no lock file behind."""
    monkeypatch.setitem(sys.modules, "fcntl", None)  # `import fcntl` now fails as on Windows
    with staged_folder(tmp_path / "model") as staging:
        (staging / "config.json").write_text("{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"] and (tmp_path / "model" / "config.json").is_file()
