"""Attacks on the user's folders: a run or a conversion written into a folder that holds the user's own files, a
folder that only looks like a run, symlinked output folders, a process killed half-way through an --overwrite,
and the scripts' defaults. The rule: hf_vanilla removes or replaces only files it wrote itself (its record,
``.hf_vanilla.json``, lists them), never replaces a folder holding anything else without an explicit word, never
follows a link out of the folder it was given nor replaces the link, and no default destroys anything.

Training is stopped where the run has just claimed its folder (its tokenizer saved, nothing trained): that is
where an old run used to be moved away whole, and each test looks at the folder there, then lets the run's undo
put it back. Nothing here trains a step.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

import hf_vanilla  # noqa: F401  (registers the Auto classes)
from hf_vanilla import training as T
from hf_vanilla.convert import convert_checkpoint
from hf_vanilla.files.output_folder import (
    JOURNAL,
    RECORD,
    REPLACED,
    ChangedFileError,
    OutputFolder,
    UntrustedRecordError,
    own_files,
)
from tests.factories import tiny_model
from tests.test_train import TINY, corpus, text_files  # noqa: F401  (corpus is a fixture)

ROOT = Path(__file__).resolve().parents[2]


def snapshot(folder: Path) -> dict[str, bytes | str]:
    """Every entry under ``folder``, hidden ones included: files by content, links by target, folders by name."""
    entries: dict[str, bytes | str] = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        entries[name] = f"-> {os.readlink(path)}" if path.is_symlink() else path.read_bytes() if path.is_file() else "/"
    return entries


def fake_run(folder: Path, *, recorded: bool = True) -> Path:
    """A finished run's files (as far as the folder checks go), recorded as hf_vanilla's unless told otherwise."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.json").write_text(json.dumps({"task": "clm", "status": "completed"}))
    (folder / "model.safetensors").write_bytes(b"old weights")
    (folder / "checkpoint-1").mkdir()
    (folder / "checkpoint-1" / "trainer_state.json").write_text("{}")
    if recorded:
        OutputFolder(folder).add(["run.json", "model.safetensors", "checkpoint-1"])
    return folder


def users_files(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "my-notes.txt").write_text("what I learnt from this run")
    (folder / "eval").mkdir()
    (folder / "eval" / "scores.csv").write_text("bleu,12.3\n")


class Stop(RuntimeError):
    """Raised where the run has claimed its folder, before it tokenises (and so before it trains)."""


@pytest.fixture
def stop_after_claiming(monkeypatch):
    """Stop every run right after it claimed its folder, first calling ``look()`` to inspect the folder there."""

    def install(look=lambda: None):
        def tokenize(self, raw, tokenizer, opts):
            look()
            raise Stop("stopped after the run claimed its folder")

        monkeypatch.setattr(type(T.get_task("clm")), "tokenize", tokenize)

    return install


def tiny(corpus, **extra):  # noqa: F811  (corpus is the fixture's value)
    return dict(TINY, data_files=text_files(corpus), **extra)


# ----------------------------------------------------------------------------------------------
# train --overwrite / --resume: only the run's own files


def test_overwrite_moves_only_the_runs_own_files_and_keeps_the_users(corpus, tmp_path, stop_after_claiming):  # noqa: F811
    run_dir = fake_run(tmp_path / "run")
    users_files(run_dir)
    before = snapshot(run_dir)

    def look():
        assert (run_dir / "my-notes.txt").read_text() == "what I learnt from this run"
        assert (run_dir / "eval" / "scores.csv").is_file()
        assert not (run_dir / "model.safetensors").exists() and (run_dir / REPLACED / "model.safetensors").is_file()
        assert (run_dir / "tokenizer.json").is_file()  # the new run writes beside the user's files

    stop_after_claiming(look)
    with pytest.raises(Stop):
        T.train("clm", run_dir, **tiny(corpus, overwrite=True))
    assert snapshot(run_dir) == before  # stopped before its first checkpoint: the old run is back, as it was


def test_overwrite_commits_by_deleting_only_the_old_runs_own_files(tmp_path):
    run_dir = fake_run(tmp_path / "run")
    users_files(run_dir)
    folder = OutputFolder(run_dir)
    with folder.locked():
        assert folder.begin(overwrite=True)
        work = folder.fresh("model")
        (work / "model.safetensors").write_bytes(b"new weights")
        folder.publish(work)
        folder.commit()
    assert sorted(p.name for p in run_dir.iterdir()) == [RECORD, "eval", "model.safetensors", "my-notes.txt"]
    assert (run_dir / "model.safetensors").read_bytes() == b"new weights"
    assert own_files(run_dir) == [run_dir / "model.safetensors"]


@pytest.mark.parametrize("flag", ["overwrite", "resume"])
def test_a_folder_whose_run_json_merely_names_a_task_is_not_written(corpus, tmp_path, stop_after_claiming, flag):  # noqa: F811
    folder = fake_run(tmp_path / "looks-like-a-run", recorded=False)
    (folder / "notes.txt").write_text("mine")
    before = snapshot(folder)
    stop_after_claiming()
    with pytest.raises(FileExistsError, match=rf"not a training run hf_vanilla wrote.*notes.txt.*--{flag} will not"):
        T.train("clm", folder, **tiny(corpus, **{flag: True}))
    assert snapshot(folder) == before


def test_resume_refuses_a_model_folder_that_is_not_a_run(corpus, tmp_path, stop_after_claiming):  # noqa: F811
    folder = tmp_path / "my-model"
    tiny_model("decoder").save_pretrained(folder)
    (folder / "notes.txt").write_text("mine")
    before = snapshot(folder)
    stop_after_claiming()
    with pytest.raises(FileExistsError, match=r"config.json.*model.safetensors.*notes.txt.*--resume will not"):
        T.train("clm", folder, **tiny(corpus, resume=True))
    assert snapshot(folder) == before


def test_a_run_of_an_hf_vanilla_without_records_resumes_but_is_not_overwritten_and_a_user_file_stops_both(tmp_path):
    """Runs written before the record existed hold only names a run writes: --resume adopts them (recording those
    names), --overwrite still refuses, and one file of the user's among them means it is not adopted."""
    older = fake_run(tmp_path / "older", recorded=False)
    with pytest.raises(FileExistsError, match="--overwrite will not replace anything"):
        OutputFolder(older).check(overwrite=True)
    assert not (older / RECORD).exists()
    OutputFolder(older).check(resume=True)
    assert own_files(older) == [older / name for name in ("checkpoint-1", "model.safetensors", "run.json")]
    mixed = fake_run(tmp_path / "mixed", recorded=False)
    (mixed / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="--resume will not write into it"):
        OutputFolder(mixed).check(resume=True)
    no_checkpoint = fake_run(tmp_path / "no-checkpoint", recorded=False)
    (no_checkpoint / "checkpoint-1" / "trainer_state.json").unlink()
    with pytest.raises(FileExistsError, match="--resume will not write into it"):
        OutputFolder(no_checkpoint).check(resume=True)


def test_another_kind_of_hf_vanilla_folder_is_not_overwritten(tmp_path):
    folder = tmp_path / "converted"
    folder.mkdir()
    OutputFolder(folder, "conversion").add(["config.json"])
    (folder / "config.json").write_text("{}")
    with pytest.raises(FileExistsError, match="holds a converted model written by hf_vanilla, not a training run"):
        OutputFolder(folder, "run").check(overwrite=True)


@pytest.mark.parametrize("record", [
    json.dumps({"kind": "run", "files": ["../outside.txt"]}), json.dumps({"kind": "run", "files": ["/etc/passwd"]}),
    json.dumps({"kind": "run", "files": ["."]}), json.dumps({"kind": "run", "files": ["sub/model.safetensors"]}),
    json.dumps({"kind": "run", "files": "model.safetensors"}), '{"kind": "run", "files": [', "[]",
    # issue 41.2: as a dict of seals too; a name a run never writes; a seal that is not one; an unknown kind
    json.dumps({"kind": "run", "files": {"../outside.txt": None}}), json.dumps({"kind": "run", "files": {"/etc/x": None}}),
    json.dumps({"kind": "run", "files": ["thesis.tex"]}), json.dumps({"kind": "run", "files": {"notes.txt": None}}),
    json.dumps({"kind": "run", "files": {"model.safetensors": {"size": 4, "sha256": "abc"}}}),
    json.dumps({"kind": "run", "files": {"model.safetensors": {"size": -1, "sha256": "0" * 64}}}),
    json.dumps({"kind": "mine", "files": {}})])
def test_a_record_hf_vanilla_cannot_have_written_is_refused_never_trusted_nor_rewritten(tmp_path, record):
    """A record naming anything but a plain name in the folder, or not JSON, is refused by every reader (the
    old code dropped the bad names and went on, then rewrote the record as its own)."""
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / RECORD).write_text(record)
    (run_dir / "model.safetensors").write_text("mine")
    before = snapshot(run_dir)
    with pytest.raises(UntrustedRecordError, match=rf"{RECORD}:? .*hf_vanilla did not write it and will neither "
                                                   "trust nor rewrite it: restore it, or move it out"):
        OutputFolder(run_dir).check(overwrite=True)
    with pytest.raises(UntrustedRecordError):
        own_files(run_dir)
    with pytest.raises(UntrustedRecordError), OutputFolder(run_dir).locked() as folder:
        folder.begin(overwrite=True)
    assert snapshot(run_dir) == before and outside.read_text() == "keep"


def sealed_run(folder: Path) -> OutputFolder:
    """A run's files written as a run writes them: each declared, then sealed with its size and sha256."""
    run = OutputFolder(folder)
    run.write_json("run.json", {"task": "clm", "status": "completed"})
    run.write_text("README.md", "# a card\n")
    work = run.fresh("checkpoint-1")
    (work / "checkpoint-1").mkdir()
    (work / "checkpoint-1" / "trainer_state.json").write_text('{"global_step": 1}')
    run.place(work / "checkpoint-1", "checkpoint-1")
    work.rmdir()
    return run


@pytest.mark.parametrize("edit", ["same size", "longer", "inside a checkpoint"])
def test_a_recorded_file_changed_since_it_was_written_is_neither_replaced_nor_deleted(tmp_path, edit):
    """Issue 41.2: the seal written with each file tells an edit (even one that keeps the size): --overwrite and
    a removal (rotation's) refuse, naming it, and nothing is moved or deleted."""
    run = sealed_run(tmp_path / "run")
    assert run.changed() == [] and run.unsealed() == []
    name = "checkpoint-1" if edit == "inside a checkpoint" else "README.md"
    path = run.path / ("checkpoint-1/trainer_state.json" if name == "checkpoint-1" else name)
    text = path.read_text()
    path.write_text(text.upper() if edit != "longer" else text + "my notes\n")
    assert len(path.read_text()) == len(text) or edit == "longer"
    before = snapshot(run.path)
    said = rf"{name} changed since hf_vanilla wrote it .*will not (replace|delete) it: keep it under another name \(`mv .*{name} .*{name}.mine`"
    with pytest.raises(ChangedFileError, match=said):
        OutputFolder(run.path).check(overwrite=True)
    with run.locked(), pytest.raises(ChangedFileError, match=said):
        run.begin(overwrite=True)
    with pytest.raises(ChangedFileError, match=said):
        run.remove(name)
    assert snapshot(run.path) == before


def test_a_journal_whose_record_lists_a_users_file_is_refused_and_the_file_stays(tmp_path):
    """Issue 41: a hand-edited journal whose embedded record listed the user's notes.txt got it deleted by the next
    --overwrite. The journal's names and record are held to the record's own rules."""
    run = sealed_run(tmp_path / "run")
    (run.path / "notes.txt").write_text("mine")
    record = {"written_by": "hf_vanilla", "kind": "run", "files": {"notes.txt": None, "run.json": None}}
    for journal in ({"written_by": "hf_vanilla", "phase": "aside", "names": [], "record": json.dumps(record)},
                    {"written_by": "hf_vanilla", "phase": "new", "names": ["notes.txt"], "record": None}):
        (run.path / JOURNAL).write_text(json.dumps(journal))
        before = snapshot(run.path)
        with pytest.raises(UntrustedRecordError, match=rf"{JOURNAL} is not a journal hf_vanilla wrote"):
            OutputFolder(run.path).check(overwrite=True)
        with pytest.raises(UntrustedRecordError), run.locked():
            run.recover()
        assert snapshot(run.path) == before and (run.path / "notes.txt").read_text() == "mine"


def test_convert_overwrite_leaves_a_file_its_record_cannot_vouch_for(tmp_path):
    """A conversion holds whatever side files its source had, so its names alone prove nothing: an entry without a
    seal (a hand-edited record, an older hf_vanilla's) is not replaced, and the user's file stays."""
    from transformers import GPT2Config, GPT2LMHeadModel

    src, out = tmp_path / "src", tmp_path / "out"
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, bos_token_id=0,
                               eos_token_id=0)).save_pretrained(src)
    convert_checkpoint(src, out)
    record = json.loads((out / RECORD).read_text())
    assert all(record["files"].values())  # every file of a conversion is sealed as it is written
    (out / "notes.txt").write_text("mine")
    record["files"]["notes.txt"] = None
    (out / RECORD).write_text(json.dumps(record))
    before = snapshot(out)
    with pytest.raises(ChangedFileError, match=r"notes.txt carries no seal in its record .*will not replace it"):
        convert_checkpoint(src, out, overwrite=True)
    assert snapshot(out) == before


def test_a_symlinked_record_is_refused_and_the_users_files_stay(corpus, tmp_path):  # noqa: F811
    """The issue's case: a folder of the user's own model files whose record is a link to another run's record;
    --overwrite replaced all of them on main."""
    other = fake_run(tmp_path / "other-run")
    mine = tmp_path / "my-model"
    mine.mkdir()
    (mine / "model.safetensors").write_bytes(b"my weights")
    (mine / "run.json").write_text("{}")
    (mine / RECORD).symlink_to(Path("..") / "other-run" / RECORD)
    before, theirs = snapshot(mine), snapshot(other)
    with pytest.raises(UntrustedRecordError, match=rf"{RECORD} is a symbolic link .*neither trust nor rewrite"):
        T.train("clm", mine, **tiny(corpus, overwrite=True))
    assert snapshot(mine) == before and snapshot(other) == theirs


# ----------------------------------------------------------------------------------------------
# Symbolic links: written through, never replaced, never followed out


def test_a_symlinked_output_dir_is_written_through_and_stays_a_link(corpus, tmp_path, stop_after_claiming):  # noqa: F811
    target = tmp_path / "big-disk" / "run"
    target.mkdir(parents=True)
    link = tmp_path / "run"
    link.symlink_to(target)

    def look():
        assert link.is_symlink() and (target / "tokenizer.json").is_file() and (target / RECORD).is_file()

    stop_after_claiming(look)
    with pytest.raises(Stop):
        T.train("clm", link, **tiny(corpus))
    assert link.is_symlink() and os.readlink(link) == str(target) and list(target.iterdir()) == []


def test_resume_through_a_symlink_keeps_the_link(corpus, tmp_path, stop_after_claiming):  # noqa: F811
    target = fake_run(tmp_path / "big-disk" / "run")
    link = tmp_path / "run"
    link.symlink_to(target)

    def look():
        assert link.is_symlink() and (target / "tokenizer.json").is_file() and (target / "checkpoint-1").is_dir()

    stop_after_claiming(look)
    with pytest.raises(Stop):
        T.train("clm", link, **tiny(corpus, resume=True))
    assert link.is_symlink() and os.readlink(link) == str(target)


def test_links_inside_the_folder_are_neither_followed_nor_replaced(tmp_path):
    """A recorded name that is a link now is the user's: the record is refused by every reader (issue 41.2), so
    nothing is moved, replaced or deleted, and the link and its target stay."""
    secret = tmp_path / "secret.txt"
    secret.write_text("private")
    run_dir = fake_run(tmp_path / "run")
    (run_dir / "model.safetensors").unlink()
    (run_dir / "model.safetensors").symlink_to(secret)  # a recorded name, now the user's link
    before = snapshot(run_dir)
    with pytest.raises(UntrustedRecordError, match=r"names \['model.safetensors'\] that is a symbolic link now"):
        own_files(run_dir)
    with pytest.raises(UntrustedRecordError):
        OutputFolder(run_dir).check(overwrite=True)
    folder = OutputFolder(run_dir)
    with folder.locked(), pytest.raises(UntrustedRecordError):
        folder.begin(overwrite=True)
    assert snapshot(run_dir) == before and secret.read_text() == "private"


def test_an_atomic_save_into_a_symlinked_folder_keeps_the_link(tmp_path):
    from hf_vanilla.files.atomic import save_pretrained_atomic

    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "model"
    link.symlink_to(target)
    save_pretrained_atomic(tiny_model("decoder"), link)
    assert link.is_symlink() and (target / "model.safetensors").is_file()


def test_a_dangling_symlinked_output_dir_is_refused_clearly(tmp_path):
    link = tmp_path / "run"
    link.symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match=r"symbolic link to .*nowhere, which does not exist"):
        OutputFolder(link).check()


# ----------------------------------------------------------------------------------------------
# --output-dir . and a process killed half-way through an --overwrite


def test_output_dir_dot_with_overwrite_works_in_place(corpus, tmp_path, stop_after_claiming, monkeypatch):  # noqa: F811
    run_dir = fake_run(tmp_path / "run")
    users_files(run_dir)
    before = snapshot(run_dir)
    monkeypatch.chdir(run_dir)
    stop_after_claiming(lambda: None)
    with pytest.raises(Stop):  # the old code tried to rename the working directory: a raw OSError
        T.train("clm", ".", **tiny(corpus, overwrite=True))
    assert snapshot(run_dir) == before
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.txt").write_text("x")
    with pytest.raises(FileExistsError, match=r"not a training run hf_vanilla wrote.*mine.txt"):
        T.train("clm", ".", **tiny(corpus, overwrite=True))


def _killed_during_overwrite(run_dir: Path, *, committed: bool) -> None:
    """What a process killed during --overwrite leaves: the old run's files aside, some of the new run's in place."""
    folder = OutputFolder(run_dir)
    folder.begin(overwrite=True)
    work = folder.fresh("model")
    (work / "model.safetensors").write_bytes(b"new weights")
    folder.publish(work)
    folder.fresh("final-model")  # a work folder, half written
    if committed:  # killed right after the commit's point of no return
        journal = json.loads((run_dir / JOURNAL).read_text())
        (run_dir / JOURNAL).write_text(json.dumps(dict(journal, phase="discarding")))


def test_a_killed_overwrite_is_undone_by_the_next_run_and_never_piles_up(corpus, tmp_path, stop_after_claiming):  # noqa: F811
    run_dir = fake_run(tmp_path / "run")
    users_files(run_dir)
    before = snapshot(run_dir)
    for _ in range(2):  # killed twice: still one copy of the old run
        _killed_during_overwrite(run_dir, committed=False)
        with OutputFolder(run_dir).locked() as folder:
            assert folder.recover() == [f"an interrupted --overwrite had not committed: what it replaced is back, "
                                        f"complete (put back from {REPLACED}/), and the interrupted write's own "
                                        "files were removed"]
        assert snapshot(run_dir) == before
    _killed_during_overwrite(run_dir, committed=False)

    def look():  # the next run put the old run back before moving it aside again: one copy, the whole old run
        aside = snapshot(run_dir / REPLACED)
        assert aside == {k: v for k, v in before.items() if k.split("/")[0] in ("run.json", "model.safetensors",
                                                                                 "checkpoint-1")}
        assert json.loads((run_dir / JOURNAL).read_text())["record"].encode() == before[RECORD]  # its record
        assert not list(run_dir.glob(".hf_vanilla-fresh-*"))  # the killed run's work folder went too

    stop_after_claiming(look)
    with pytest.raises(Stop):
        T.train("clm", run_dir, **tiny(corpus, overwrite=True))
    assert snapshot(run_dir) == before


def test_a_killed_overwrite_past_its_commit_is_finished(tmp_path):
    run_dir = fake_run(tmp_path / "run")
    users_files(run_dir)
    _killed_during_overwrite(run_dir, committed=True)
    with OutputFolder(run_dir).locked() as folder:
        assert folder.recover()[0].startswith("an interrupted --overwrite had committed: the new write stays")
    assert sorted(p.name for p in run_dir.iterdir()) == [RECORD, "eval", "model.safetensors", "my-notes.txt"]


def test_an_older_versions_leftover_beside_the_run_is_reported_not_touched(tmp_path):
    run_dir = fake_run(tmp_path / "run")
    leftover = fake_run(tmp_path / ".run.replaced-4242", recorded=False)
    with OutputFolder(run_dir).locked() as folder:
        lines = folder.recover()
    assert any(str(leftover) in line and "interrupted --overwrite" in line for line in lines)
    assert (leftover / "model.safetensors").read_bytes() == b"old weights"


# ----------------------------------------------------------------------------------------------
# convert


@pytest.fixture
def native_checkpoint(tmp_path) -> Path:
    from transformers import GPT2Config, GPT2LMHeadModel

    source = tmp_path / "models" / "src"
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, bos_token_id=0,
                                       eos_token_id=0)).save_pretrained(source)
    return source


def test_convert_overwrite_never_deletes_the_users_files(native_checkpoint, tmp_path):
    out = tmp_path / "out"
    users_files(out)
    before = snapshot(out)
    with pytest.raises(FileExistsError, match=r"not a converted model hf_vanilla wrote.*eval/, my-notes.txt"):
        convert_checkpoint(native_checkpoint, out, overwrite=True)
    assert snapshot(out) == before


def test_convert_overwrite_replaces_its_own_conversion_and_keeps_the_users_files(native_checkpoint, tmp_path):
    out = tmp_path / "out"
    convert_checkpoint(native_checkpoint, out)
    first = sorted(p.name for p in own_files(out))
    assert "model.safetensors" in first and "config.json" in first
    (out / "stale-shard.safetensors").write_bytes(b"mine, not the conversion's")
    users_files(out)
    with pytest.raises(FileExistsError, match="already holds a converted model: pass --overwrite"):
        convert_checkpoint(native_checkpoint, out)
    convert_checkpoint(native_checkpoint, out, overwrite=True)
    assert sorted(p.name for p in own_files(out)) == first
    assert (out / "my-notes.txt").is_file() and (out / "eval" / "scores.csv").is_file()
    assert (out / "stale-shard.safetensors").read_bytes() == b"mine, not the conversion's"
    assert not (out / REPLACED).exists() and not (out / JOURNAL).exists()


def test_convert_into_the_sources_parent_is_refused(native_checkpoint):
    parent = native_checkpoint.parent
    neighbour = parent / "other-model"
    neighbour.mkdir()
    (neighbour / "weights.bin").write_bytes(b"x")
    before = snapshot(parent)
    with pytest.raises(ValueError, match="must neither be SRC_DIR nor hold it"):
        convert_checkpoint(native_checkpoint, parent, overwrite=True)
    assert snapshot(parent) == before


def test_convert_into_a_symlinked_folder_writes_through(native_checkpoint, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "out"
    link.symlink_to(target)
    convert_checkpoint(native_checkpoint, link)
    assert link.is_symlink() and (target / "model.safetensors").is_file() and (target / RECORD).is_file()


def test_convert_does_not_copy_a_side_file_that_links_out_of_the_source(native_checkpoint, tmp_path):
    secret = tmp_path / "id_rsa"
    secret.write_text("PRIVATE KEY")
    (native_checkpoint / "vocab.txt").symlink_to(secret)
    out = tmp_path / "out"
    convert_checkpoint(native_checkpoint, out)
    assert not (out / "vocab.txt").exists()


# ----------------------------------------------------------------------------------------------
# The scripts' defaults destroy nothing


def _script(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_translation_dry_run_writes_to_a_new_folder_and_overwrites_nothing(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(T, "train", lambda task, output_dir, **options: calls.append((output_dir, options)) or 0 / 0)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    script = _script("train_translation")
    with pytest.raises(ZeroDivisionError):  # stop at the call: only its arguments matter here
        script.main(["--dry-run"])
    (output_dir, options), = calls
    assert Path(output_dir).parent == tmp_path and not any(Path(output_dir).iterdir())
    assert not options["overwrite"] and not options["resume"]


def test_main_job_run_twice_refuses_with_the_way_forward(tmp_path, capsys):
    run_dir = fake_run(tmp_path / "main-shakespeare")
    before = snapshot(run_dir)
    assert _script("main_job").main(["--output-dir", str(run_dir)]) == 2
    assert "--resume to continue it, or --overwrite to start again" in capsys.readouterr().err
    assert snapshot(run_dir) == before
