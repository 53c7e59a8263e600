"""Seals for every writer, not only push (issue 50): a command that writes into a folder of ours checks each
recorded file against its seal (size and sha256) before it replaces or deletes it, and never writes a file in place.

- ``--resume`` refuses to replace a file the user changed after the run (the card, metrics.json, a tokenizer saved
  into the run), in one sentence naming the file and the ``mv`` that keeps it; that command then works.
- TensorBoard's ``runs/`` is sealed as TensorBoard writes it, so a folder the user adds there is not deleted by
  ``--overwrite`` (nor swallowed into the seal by ``--resume``).
- A resumed run leaves a hard-link backup of the folder (``cp -al R R.bak``) as it was: new bytes go to a new file
  renamed over the old name.
- ``checkpoint-N`` is ASCII digits only; a temporary file an older hf_vanilla left beside a recorded name goes.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from transformers import TrainerCallback
from transformers.integrations import integration_utils

import hf_vanilla  # noqa: F401  (registers the Auto classes)
from hf_vanilla import training as T
from hf_vanilla.files.output_folder import (
    RECORD,
    ChangedFileError,
    OutputFolder,
    UntrustedRecordError,
    own_files,
)
from hf_vanilla.training.trainer import recorded_checkpoints
from tests.attacks.test_folders import sealed_run, snapshot
from tests.test_train import TINY, corpus, text_files  # noqa: F401  (corpus is a fixture)


@pytest.fixture(scope="module")
def finished(corpus, tmp_path_factory) -> tuple[Path, dict]:  # noqa: F811
    """A finished 2-step run (checkpoints 1 and 2), built once; each test works on a copy."""
    root = tmp_path_factory.mktemp("sealed")
    base = dict(TINY, data_files=text_files(corpus), max_steps=2, save_steps=1, eval_steps=2, num_samples=0)
    T.train("clm", root / "run", **base)
    return root / "run", base


def copy_of(finished: tuple[Path, dict], where: Path) -> Path:
    shutil.copytree(finished[0], where, symlinks=True)
    return where


def the_advised_mv(refusal: BaseException) -> list[list[str]]:
    """The ``mv`` commands the refusal names, as argument lists (run exactly as printed)."""
    command = re.search(r"`(mv [^`]+)`", str(refusal)).group(1)
    return [shlex.split(part) for part in command.split(" && ")]


def user_saves_a_tokenizer_into(run_dir: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(run_dir)
    tokenizer.add_tokens(["zebra-crossing"])
    tokenizer.save_pretrained(run_dir)


@pytest.mark.parametrize("edit", ["README.md", "metrics.json", "a tokenizer saved into the run"])
def test_resume_refuses_to_replace_a_file_the_user_changed_and_the_mv_it_names_keeps_it(finished, tmp_path, edit):
    run_dir = copy_of(finished, tmp_path / "run")
    if edit.endswith(".json") or edit.endswith(".md"):
        (run_dir / edit).write_text((run_dir / edit).read_text() + "my notes\n")
    else:
        user_saves_a_tokenizer_into(run_dir)
    edited = snapshot(run_dir)
    options = dict(finished[1], resume=True, max_steps=3)
    with pytest.raises(ChangedFileError, match=r"changed since hf_vanilla wrote (it|them) .*will not replace") as said:
        T.train("clm", run_dir, **options)
    assert snapshot(run_dir) == edited, "a refused resume changed the folder"
    moves = the_advised_mv(said.value)
    for move in moves:
        subprocess.run(move, check=True)
    kept = {move[-1]: Path(move[-1]).read_bytes() for move in moves}
    T.train("clm", run_dir, **options)
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"
    assert {name: Path(name).read_bytes() for name in kept} == kept  # the user's bytes, under the names printed
    assert not {Path(name).name for name in kept} & {path.name for path in own_files(run_dir)}


class StandInTensorBoard(TrainerCallback):
    """Writes as transformers' TensorBoardCallback does (tensorboard itself is not a dependency): an event file under
    ``<output_dir>/runs/<logdir>/``, appended and flushed at each log, closed at the end of training and opened
    again (a new file) by a log after it (the final evaluation's)."""

    events = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.logdir = Path(args.output_dir) / integration_utils.default_logdir()
        self.open()

    def open(self):
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.events = open(self.logdir / f"events.out.tfevents.{len(list(self.logdir.iterdir()))}", "ab")  # noqa: SIM115

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.events.closed:
            self.open()
        self.events.write(json.dumps(logs).encode() + b"\n")
        self.events.flush()

    def on_train_end(self, args, state, control, **kwargs):
        self.events.close()


def test_a_folder_the_user_adds_under_tensorboards_runs_survives_overwrite_and_resume(corpus, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setitem(integration_utils.INTEGRATION_TO_CALLBACK, "tensorboard", StandInTensorBoard)
    options = dict(TINY, data_files=text_files(corpus), max_steps=2, save_steps=1, eval_steps=2, num_samples=0,
                   report_to="tensorboard")
    run_dir = tmp_path / "run"
    T.train("clm", run_dir, **options)
    folder = OutputFolder(run_dir)
    assert folder.record()["files"]["runs"] is not None and folder.changed() == []  # sealed as TensorBoard wrote it
    (run_dir / "runs" / "mine").mkdir()
    (run_dir / "runs" / "mine" / "notes.txt").write_text("my own logs")
    before = snapshot(run_dir)
    for flag in ("overwrite", "resume"):
        with pytest.raises(ChangedFileError, match=r"runs changed since hf_vanilla wrote it"):
            T.train("clm", run_dir, **dict(options, **{flag: True}, max_steps=3))
        assert snapshot(run_dir) == before, flag


def test_a_resumed_run_leaves_a_hard_link_backup_as_it_was(finished, tmp_path):
    """``cp -al R R.bak`` then ``--resume``: every file of the backup keeps its bytes (curves.png and
    trainer_state.json were written in place)."""
    run_dir = copy_of(finished, tmp_path / "run")
    backup = tmp_path / "run.bak"
    shutil.copytree(run_dir, backup, copy_function=os.link)
    before = snapshot(backup)
    T.train("clm", run_dir, **dict(finished[1], resume=True, max_steps=3))
    assert json.loads((run_dir / "trainer_state.json").read_text())["global_step"] == 3
    changed = sorted(name for name, value in snapshot(backup).items() if before.get(name) != value)
    assert changed == [], f"written in place, so the backup changed too: {changed}"


def test_a_checkpoint_named_with_non_ascii_digits_is_never_the_runs(tmp_path):
    """``"checkpoint-٣": null`` added to a record by hand beside the user's folder of that name: the record is not
    one hf_vanilla wrote (its checkpoints are ASCII digits), so --overwrite deletes nothing."""
    run = sealed_run(tmp_path / "run")
    (run.path / "checkpoint-٣").mkdir()
    (run.path / "checkpoint-٣" / "notes.txt").write_text("mine")
    record = json.loads((run.path / RECORD).read_text())
    record["files"]["checkpoint-٣"] = None
    (run.path / RECORD).write_text(json.dumps(record))
    before = snapshot(run.path)
    with pytest.raises(UntrustedRecordError, match="checkpoint-٣"):
        OutputFolder(run.path).check(overwrite=True)
    with pytest.raises(UntrustedRecordError):
        recorded_checkpoints(run.path)
    assert snapshot(run.path) == before


def test_a_temporary_file_an_older_hf_vanilla_left_beside_a_recorded_name_is_recovered(tmp_path):
    """A kill during run.json's atomic write left ``.run.json.XXXXXXXX.tmp`` and every later command refused the
    folder; the next command removes it (only beside a name the record holds) and goes on."""
    run = sealed_run(tmp_path / "run")
    (run.path / ".run.json.k3x9q_2a.tmp").write_text('{"task": "cl')
    (run.path / ".notes.txt.k3x9q_2a.tmp").write_text("the user's, named like one")
    OutputFolder(run.path).check(resume=True)
    assert not (run.path / ".run.json.k3x9q_2a.tmp").exists()
    assert (run.path / ".notes.txt.k3x9q_2a.tmp").read_text() == "the user's, named like one"


# ----------------------------------------------------------------------------------------------
# Hostile values in the files hf_vanilla reads back (issue 50.5): one sentence naming the file and the field


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(("name", "value", "field"), [
    (RECORD, lambda record: {**record, "kind": ["run"]}, "kind must be a string, got a list"),
    (RECORD, lambda record: nested(100_000), "nested 100000 levels deep"),
    ("run.json", lambda run: {**run, "options": list(run["options"])}, "options must be a JSON object, got a list"),
    ("run.json", lambda run: nested(100_000), "nested 100000 levels deep"),
    (".hf_vanilla-journal.json", lambda _: nested(100_000), "nested 100000 levels deep"),
    (".hf_vanilla-journal.json", lambda _: {"phase": "new", "names": "run.json", "record": None},
     "names must be a list, got a string"),
], ids=["record-kind-list", "record-deep", "run-options-list", "run-deep", "journal-deep", "journal-names-string"])
def test_a_hostile_value_in_a_file_resume_reads_is_one_sentence_naming_file_and_field(finished, tmp_path, name,
                                                                                      value, field):
    from hf_vanilla.errors import HfVanillaError

    run_dir = copy_of(finished, tmp_path / "run")
    path = run_dir / name
    written = value(json.loads(path.read_text()) if path.exists() else None)
    path.write_text(written if isinstance(written, str) else json.dumps(written))
    if name == "run.json":  # sealed again, as if written by hf_vanilla: else its seal alone refuses the resume
        OutputFolder(run_dir).seal([name])
    before = snapshot(run_dir)
    with pytest.raises(HfVanillaError) as said:
        T.train("clm", run_dir, **dict(finished[1], resume=True, max_steps=3))
    message = str(said.value)
    assert name in message and field in message and "\n" not in message, message
    assert snapshot(run_dir) == before


def test_an_output_dir_name_longer_than_a_file_name_may_be_is_one_sentence(corpus, tmp_path):  # noqa: F811
    from hf_vanilla.errors import HfVanillaError

    long = tmp_path / ("r" * 300)
    with pytest.raises(HfVanillaError, match=r"is 300 bytes long, more than the 255 a file name may have"):
        T.train("clm", long, **dict(TINY, data_files=text_files(corpus), max_steps=1))


def test_undoing_an_uncommitted_write_keeps_a_file_of_it_the_user_changed(tmp_path):
    """A new write that fails before its first checkpoint removes its own files; one the user changed meanwhile (its
    seal no longer matches) is kept under a printed name instead."""
    folder = OutputFolder(tmp_path / "run")
    with folder.locked():
        folder.begin(overwrite=False)
        folder.write_text("README.md", "# the new run's card\n")
        (folder.path / "README.md").write_text("# the new run's card\nmy notes\n")
        folder.undo()
    assert (folder.path / "README.md.changed-1").read_text() == "# the new run's card\nmy notes\n"
    assert not (folder.path / "README.md").exists() and own_files(folder.path) == []


def as_an_older_hf_vanilla_recorded_it(run: Path) -> None:
    """The run's record as an hf_vanilla before seals wrote it: a plain list of names."""
    record = json.loads((run / RECORD).read_text())
    (run / RECORD).write_text(json.dumps({"written_by": "hf_vanilla", "kind": "run", "files": sorted(record["files"])}))


def test_an_older_records_unsealed_entries_are_kept_as_the_users_never_deleted_or_replaced(finished, tmp_path):
    """Issue 50: an entry recorded before seals carries no proof that it is the run's as written. --overwrite and
    rotation refuse to delete one (one sentence, the ``mv`` that keeps it: that command then works); a resumed run
    that writes one again keeps it first, moved aside to the name its warning prints."""
    run = copy_of(finished, tmp_path / "run")
    as_an_older_hf_vanilla_recorded_it(run)
    (run / "README.md").write_text((run / "README.md").read_text() + "\nmy notes\n")
    before = snapshot(run)
    with pytest.raises(ChangedFileError, match=r"README\.md.* carry no seal in its record .*not replace") as refused:
        T.train("clm", run, **dict(finished[1], overwrite=True))
    with pytest.raises(ChangedFileError, match="checkpoint-1 carries no seal"):
        OutputFolder(run).remove("checkpoint-1")  # what rotation asks; it keeps the checkpoint on this refusal
    assert snapshot(run) == before
    assert OutputFolder(run).older() == sorted(p.name for p in own_files(run))
    resumed = copy_of((run, None), tmp_path / "resumed")

    for mv in the_advised_mv(refused.value):  # the refusal's own command keeps them, then --overwrite works
        subprocess.run(mv, check=True)
    T.train("clm", run, **dict(finished[1], overwrite=True))
    assert "my notes" in (run / "README.md.mine").read_text() and (run / "checkpoint-1.mine").is_dir()
    assert OutputFolder(run).older() == [] and OutputFolder(run).changed() == []

    T.train("clm", resumed, **dict(finished[1], resume=True, max_steps=3))
    assert "my notes" in (resumed / "README.md.older-1").read_text()
    assert "my notes" not in (resumed / "README.md").read_text()
    own = {p.name for p in own_files(resumed)}
    assert "README.md.older-1" not in own and "README.md" in own and "README.md" not in OutputFolder(resumed).older()
    assert OutputFolder(resumed).changed() == []
