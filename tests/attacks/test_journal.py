"""Attacks on the output folder's journal: a writer killed at every single file operation of an --overwrite, a
commit, an undo and a recovery; rotation and resume against folders of the user's that look like checkpoints; a
user's file that changes while a run writes; a second writer while a run is in progress; experiments.py --out.

The rule (issue 30): the record lists exactly the names hf_vanilla creates, entered before they exist; rotation,
resume and overwrite go by it alone; after a kill at any point the next writer finds the old write or the new
one complete, never less, and every file of the user's untouched.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

import hf_vanilla  # noqa: F401  (registers the Auto classes)
from hf_vanilla import training as T
from hf_vanilla.files.output_folder import (
    JOURNAL,
    LOCK,
    RECORD,
    REPLACED,
    FolderBusyError,
    OutputFolder,
    own_files,
)
from tests.attacks.test_folders import snapshot
from tests.test_train import TINY, corpus, text_files  # noqa: F401  (corpus is a fixture)

ROOT = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------------------------
# Killing a writer at its N-th file operation

#: Every call that changes a folder's entries (pathlib's and shutil's go through these, as does the atomic write's
#: own rename).
FILE_OPERATIONS = [(os, "replace"), (os, "rename"), (os, "unlink"), (os, "remove"), (os, "rmdir"), (os, "mkdir"),
                   (os, "link"), (shutil, "rmtree")]


class Killed(BaseException):
    """The writer died here (a BaseException: no ``except Exception`` of the code under test survives it)."""


@pytest.fixture
def kill_at(monkeypatch) -> Callable[[int, Callable[[], object]], bool]:
    """``kill_at(n, action)`` runs ``action`` as a process that dies at its n-th file operation: that one and every
    later one raise :class:`Killed` (a dead process cleans nothing up). Returns whether it died."""

    monkeypatch.setattr(os, "fsync", lambda fd: None)  # a kill, not a power cut: flushing changes nothing here

    def run(n: int, action: Callable[[], object]) -> bool:
        count = 0

        def dying(operation):
            def call(*args, **kwargs):
                nonlocal count
                count += 1
                if count >= n:
                    raise Killed(f"killed at file operation {n}")
                return operation(*args, **kwargs)
            return call

        with pytest.MonkeyPatch.context() as patch:
            for module, name in FILE_OPERATIONS:
                patch.setattr(module, name, dying(getattr(module, name)))
            try:
                action()
            except Killed:
                return True
        return False

    return run


def old_run(folder: Path, *, with_run: bool = True) -> Path:
    """The user's files, and (``with_run``) a previous run of hf_vanilla's beside them, recorded."""
    folder.mkdir(parents=True)
    (folder / "my-notes.txt").write_text("mine")
    (folder / "eval").mkdir()
    (folder / "eval" / "scores.csv").write_text("bleu,12.3\n")
    (folder / "checkpoint-3-best").mkdir()
    (folder / "checkpoint-3-best" / "note.txt").write_text("the best one, copied by hand")
    if with_run:
        OutputFolder(folder).add(["run.json", "model.safetensors", "checkpoint-1"])
        (folder / "run.json").write_text('{"task": "clm", "status": "completed"}')
        (folder / "model.safetensors").write_bytes(b"old weights")
        (folder / "checkpoint-1").mkdir()
        (folder / "checkpoint-1" / "trainer_state.json").write_text('{"global_step": 1}')
    return folder


def write_new(folder: OutputFolder, *, commits: bool = True) -> None:
    """What a new run writes once it has claimed the folder: a model (a name the old run had too) and a checkpoint
    (whose placement commits the write, as a run's first checkpoint does, unless told otherwise)."""
    work = folder.fresh("final-model")
    (work / "model.safetensors").write_bytes(b"new weights")
    (work / "tokenizer.json").write_text("{}")
    folder.publish(work)
    work = folder.fresh("checkpoint-2")
    (work / "checkpoint-2").mkdir()
    (work / "checkpoint-2" / "trainer_state.json").write_text('{"global_step": 2}')
    folder.place(work / "checkpoint-2", "checkpoint-2", commits=commits)
    shutil.rmtree(work)


def overwrite(path: Path) -> None:
    folder = OutputFolder(path)
    folder.begin(overwrite=True)
    write_new(folder)
    folder.commit()


def recover(path: Path) -> list[str]:
    return OutputFolder(path).recover()


@pytest.fixture(params=[True, False], ids=["over-an-old-run", "into-a-folder-of-the-users"])
def states(request, tmp_path) -> Callable[[str], tuple[Path, dict, dict]]:
    """``states(name)``: a fresh folder (an old run and the user's files, or the user's files only) and the two
    states a writer may leave it in: the old one as it is, the new one as a whole --overwrite leaves it."""
    with_run = request.param
    finished = old_run(tmp_path / "finished", with_run=with_run)
    overwrite(finished)
    new = snapshot(finished)

    def make(name: str) -> tuple[Path, dict, dict]:
        path = old_run(tmp_path / name, with_run=with_run)
        return path, snapshot(path), new

    return make


def names_only(state: dict) -> dict:
    """A snapshot with the record reduced to its names: a kill between writing an entry and sealing it leaves the
    entry unsealed (trusted by name in a run folder), which is neither more nor less of either write."""
    if RECORD not in state:
        return state
    return {**state, RECORD: sorted(json.loads(state[RECORD])["files"])}


def check_recovered(path: Path, old: dict, new: dict, lines: list[str]) -> None:
    """After recovery: exactly the old state or the new one (every seal left true), and the recovery's words say
    which."""
    now, old, new = names_only(snapshot(path)), names_only(old), names_only(new)
    assert now in (old, new), f"after recovery {path} holds neither the old nor the new write: {sorted(now)}"
    assert not OutputFolder(path).changed(), f"after recovery {path} holds a seal that is not true"
    said = " ".join(lines)
    if now == new and new != old:
        assert "stays" in said or not lines
    elif lines:
        assert "is back" in said or "as it found it" in said


def until_it_completes(step: Callable[[int], bool]) -> int:
    """Call ``step(n)`` for n = 1, 2, ... until it completes without being killed; returns the number of kills."""
    n = 1
    while step(n):
        n += 1
        assert n < 500, "the operation never completes"
    return n - 1


def test_an_overwrite_killed_at_any_file_operation_leaves_the_old_or_the_new_write_complete(states, kill_at):
    """Including the points between the first checkpoint's publication and the commit after it (issue 43): a
    checkpoint visible in the folder is the new write's, and recovery keeps that write, never deletes it."""
    def step(n: int) -> bool:
        path, old, new = states(f"overwrite-{n}")
        killed = kill_at(n, lambda: overwrite(path))
        visible = (path / "checkpoint-2" / "trainer_state.json").is_file()
        check_recovered(path, old, new, recover(path))
        if visible:
            assert names_only(snapshot(path)) == names_only(new), \
                f"killed at {n}: recovery removed a checkpoint that was in place"
        return killed

    assert until_it_completes(step) > 10  # begin, two publishes and the commit: every one of their operations


@pytest.mark.parametrize("ending", ["commit", "undo"])
def test_a_commit_or_an_undo_killed_at_any_file_operation_leaves_a_complete_write(states, kill_at, ending):
    """A commit leaves the old write or the new one; an undo, the old one."""
    def step(n: int) -> bool:
        path, old, new = states(f"{ending}-{n}")
        folder = OutputFolder(path)
        folder.begin(overwrite=True)
        write_new(folder, commits=False)
        killed = kill_at(n, getattr(folder, ending))
        check_recovered(path, old, new if ending == "commit" else old, recover(path))
        return killed

    assert until_it_completes(step) >= 2


def test_a_recovery_killed_at_any_file_operation_is_finished_by_the_next(states, kill_at):
    """Each kill point of an overwrite, then each kill point of the recovery that follows, then a recovery."""
    def step(n: int) -> bool:
        killed_path, old, new = states(f"recover-{n}")
        killed_overwrite = kill_at(n, lambda: overwrite(killed_path))

        def recovery_step(m: int) -> bool:
            path = shutil.copytree(killed_path, killed_path.with_name(f"recover-{n}-{m}"), symlinks=True)
            killed = kill_at(m, lambda: recover(path))
            check_recovered(path, old, new, recover(path))
            return killed

        until_it_completes(recovery_step)
        return killed_overwrite

    until_it_completes(step)


def test_the_kill_inside_the_move_aside_then_resume_keeps_the_whole_old_run(corpus, tmp_path, kill_at):  # noqa: F811
    """The issue's case: SIGKILL while --overwrite moves the old files aside, then --resume. On main, recovery
    deleted every listed file still in place and failed on the record's absence: the old run was gone."""
    run_dir = old_run(tmp_path / "run")
    before = snapshot(run_dir)
    assert kill_at(3, lambda: OutputFolder(run_dir).begin(overwrite=True))  # half the files moved
    assert snapshot(run_dir) != before

    def stop(self, raw, tokenizer, opts):
        assert (run_dir / "model.safetensors").read_bytes() == b"old weights"  # recovered before the run read it
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(type(T.get_task("clm")), "tokenize", stop)
        with pytest.raises(T.TrainingInterruptedError):
            T.train("clm", run_dir, **dict(TINY, data_files=text_files(corpus), resume=True))
    after = snapshot(run_dir)
    assert {name: after.get(name) for name in before if name != RECORD} == \
        {name: content for name, content in before.items() if name != RECORD}  # the whole old run, and the user's
    assert {"run.json", "model.safetensors", "checkpoint-1"} <= set(json.loads(after[RECORD])["files"])


@pytest.mark.slow  # the child imports hf_vanilla (transformers): 10-25 s on a shared CPU
def test_a_sigkilled_overwrite_is_recovered(tmp_path):
    """A real SIGKILL of a child process in the middle of its move-aside (it stops at its third rename)."""
    run_dir = old_run(tmp_path / "run")
    before = snapshot(run_dir)
    child = textwrap.dedent(f"""
        import os, sys, time
        from hf_vanilla.files.output_folder import OutputFolder
        rename, calls = os.replace, []
        def slow(*args):
            calls.append(args)
            if len(calls) == 3:
                print("moving", flush=True)
                time.sleep(60)
            return rename(*args)
        os.replace = slow
        OutputFolder({str(run_dir)!r}).begin(overwrite=True)
    """)
    process = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert process.stdout.readline().strip() == "moving"
        assert (run_dir / JOURNAL).is_file()
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    lines = recover(run_dir)
    assert snapshot(run_dir) == before and "is back" in lines[0]


def test_a_journal_whose_aside_folder_is_a_link_moves_nothing_in(tmp_path):
    """A hand-made journal beside a ``.hf_vanilla-replaced`` that links elsewhere would pull that folder's files
    into the run folder on recovery: refused, nothing moved."""
    from hf_vanilla.files.output_folder import UntrustedRecordError

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret.txt").write_text("private")
    run_dir = old_run(tmp_path / "run")
    (run_dir / REPLACED).symlink_to(elsewhere)
    (run_dir / JOURNAL).write_text(json.dumps({"phase": "aside", "names": ["secret.txt"], "record": None}))
    before = snapshot(run_dir)
    with pytest.raises(UntrustedRecordError, match=f"{REPLACED} is a link"):
        recover(run_dir)
    assert snapshot(run_dir) == before and (elsewhere / "secret.txt").read_text() == "private"


# ----------------------------------------------------------------------------------------------
# Rotation, resume and the record of a real run


def meddling_callback(run_dir: Path):
    """A callback that, on every step, appends to the user's monitor.log and writes into the user's mydir/."""
    from transformers import TrainerCallback

    class UserWritesDuringTheRun(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            with (run_dir / "monitor.log").open("a") as log:
                log.write(f"step {state.global_step}\n")
            (run_dir / "mydir" / f"step-{state.global_step}.txt").write_text("x")

    return UserWritesDuringTheRun()


def test_rotation_resume_and_overwrite_go_by_the_record_alone(corpus, tmp_path):  # noqa: F811
    """The issue's cases: with ``save_total_limit`` the user's checkpoint-3-best/ and checkpoint-1.bak/ were
    deleted by --resume and --overwrite; a user's copy named like the newest checkpoint was resumed from; a user's
    file that changed during the run was recorded as the run's and deleted by the next --overwrite."""
    run_dir = tmp_path / "run"
    options = dict(TINY, data_files=text_files(corpus), max_steps=3, save_steps=3, eval_steps=3, num_samples=0,
                   save_total_limit=1)
    T.train("clm", run_dir, **options)
    users = {"checkpoint-3-best/note.txt": "my best", "checkpoint-1.bak/note.txt": "my backup",
             "checkpoint-99/trainer_state.json": json.dumps({"global_step": 99}), "keep.txt": "mine",
             "mydir/keep.txt": "never changes", "monitor.log": "started\n"}
    for name, text in users.items():
        (run_dir / name).parent.mkdir(exist_ok=True)
        (run_dir / name).write_text(text)
    shutil.copytree(run_dir / "checkpoint-3", run_dir / "checkpoint-99", dirs_exist_ok=True)  # a copy by hand
    (run_dir / "checkpoint-99" / "trainer_state.json").write_text(json.dumps({"global_step": 99}))

    result = T.train("clm", run_dir, callbacks=[meddling_callback(run_dir)],
                     **dict(options, max_steps=9, resume=True))
    assert result.global_step == 9  # resumed from checkpoint-3, the newest of the run's own, not the user's 99
    record = set(json.loads((run_dir / RECORD).read_text())["files"])
    assert {p.name for p in own_files(run_dir) if p.name.startswith("checkpoint")} == {"checkpoint-9"}
    assert not {"monitor.log", "mydir", "keep.txt", "checkpoint-99", "checkpoint-3-best", "checkpoint-1.bak"} & record
    entries = {p.name for p in run_dir.iterdir()} - {RECORD, LOCK}
    assert record & entries == entries - {"monitor.log", "mydir", "keep.txt", "checkpoint-99", "checkpoint-3-best",
                                          "checkpoint-1.bak"}  # every other entry is declared

    T.train("clm", run_dir, **dict(options, overwrite=True))
    for name, text in users.items():
        if name != "monitor.log":
            assert (run_dir / name).read_text() == text, name
    assert (run_dir / "monitor.log").read_text().startswith("started\nstep 4\n")
    assert len(list((run_dir / "mydir").glob("step-*.txt"))) == 6
    assert (run_dir / "checkpoint-99" / "model.safetensors").is_file()


# ----------------------------------------------------------------------------------------------
# A second writer while a run is in progress (issue 32)


def test_a_second_writer_is_told_a_run_is_in_progress_with_its_pid_not_to_resume(tmp_path):
    run_dir = old_run(tmp_path / "run")
    with OutputFolder(run_dir).locked():
        for flags in ({}, {"resume": True}, {"overwrite": True}):
            with pytest.raises(FolderBusyError) as error:
                OutputFolder(run_dir).check(**flags)
            message = str(error.value)
            assert f"a training run is in progress there (an hf_vanilla process, pid {os.getpid()}," in message
            assert f"kill {os.getpid()}" in message and "--resume" not in message
    OutputFolder(run_dir).check(resume=True)  # free again


# ----------------------------------------------------------------------------------------------
# scripts/experiments.py --out


@pytest.fixture
def experiments(monkeypatch):
    """scripts/experiments.py as a module, whose studies fail the test if they train anything."""
    spec = importlib.util.spec_from_file_location("experiments_script", ROOT / "scripts" / "experiments.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "experiments_script", module)
    spec.loader.exec_module(module)
    import hf_vanilla.experiments.experiment as experiment

    monkeypatch.setattr(experiment, "run_all", lambda *a, **k: pytest.fail("trained before refusing"))
    monkeypatch.setattr(experiment, "estimate", lambda *a, **k: pytest.fail("probed before refusing"))
    return module


def extrapolation(experiments, out, runs) -> int:
    return experiments.main(["extrapolation", "--tiny", "--out", str(out), "--runs", str(runs)])


def test_experiments_out_refuses_a_users_file_of_the_same_name_before_measuring(tmp_path, experiments, capsys):
    out = tmp_path / "figures"
    OutputFolder(out, "experiments").add(["warmup.md"])  # a folder of experiment outputs...
    (out / "extrapolation.md").write_text("my own notes on extrapolation")  # ...holding a file of the user's
    before = snapshot(out)
    assert extrapolation(experiments, out, tmp_path / "runs") == 2
    err = capsys.readouterr().err
    assert re.search(r"extrapolation.md in .* is not hf_vanilla's own .* move them elsewhere", err), err
    assert snapshot(out) == before  # nothing recorded, nothing written


def test_experiments_refuse_a_folder_of_the_users_before_training_in_one_sentence(tmp_path, experiments, capsys):
    """Issue 41.7: --out holding the user's files (and no record) was refused only after every run had trained,
    with a traceback. Claimed first, as train claims its folder: one sentence, exit 2, nothing trained."""
    out = tmp_path / "my-documents"
    out.mkdir()
    (out / "thesis.tex").write_text("mine")
    assert extrapolation(experiments, out, tmp_path / "runs") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("experiments.py extrapolation: ") and "thesis.tex" in err and "choose a new or empty" in err
    assert sorted(p.name for p in out.iterdir()) == ["thesis.tex"] and not (tmp_path / "runs").exists()


def test_experiments_refuse_a_run_folder_of_the_users_before_training_the_first_run(tmp_path, experiments, capsys):
    runs = tmp_path / "runs"
    mine = runs / "extrapolation" / "alibi" / "seed-1"  # not the first run: refused before the first trains
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    assert extrapolation(experiments, tmp_path / "out", runs) == 2
    err = capsys.readouterr().err
    assert "alibi/seed-1" in err and "notes.txt" in err and "--resume will not write into it" in err, err
    assert [p.relative_to(runs).as_posix() for p in runs.rglob("*")] == [
        "extrapolation", "extrapolation/alibi", "extrapolation/alibi/seed-1", "extrapolation/alibi/seed-1/notes.txt"]
    assert not (tmp_path / "out").exists()


def test_a_second_experiment_into_the_same_out_is_refused_while_the_first_writes(tmp_path, experiments, capsys):
    out = tmp_path / "out"
    with OutputFolder(out, "experiments").locked():  # the first experiment, still measuring
        assert extrapolation(experiments, out, tmp_path / "runs") == 2
    assert re.search(rf"{out}: experiment outputs is in progress there .*pid {os.getpid()}", capsys.readouterr().err)
    assert not out.exists()


# ----------------------------------------------------------------------------------------------
# Long names (issue 41.6)


@pytest.mark.parametrize("length", [200, 240, 255])
def test_a_valid_long_folder_name_is_published_and_its_staging_names_fit(tmp_path, length):
    """A 240-byte folder name once failed: its staging name was 258 bytes. Every helper name is derived within
    NAME_MAX; a second publish (with a stale staging folder left from a kill) still cleans up."""
    from hf_vanilla.files.atomic import atomic_write_text, staged_folder

    target = tmp_path / ("é" * (length // 2) + "x" * (length % 2))
    assert len(target.name.encode()) == length
    with staged_folder(target) as staging:
        atomic_write_text(staging / "config.json", "{}")
    assert (target / "config.json").read_text() == "{}"
    with pytest.raises(RuntimeError), staged_folder(target) as staging:
        (staging / "half").write_text("x")
        raise RuntimeError("killed")
    with staged_folder(target) as staging:
        (staging / "config.json").write_text("[]")
    assert (target / "config.json").read_text() == "[]"
    assert [p.name for p in tmp_path.iterdir()] == [target.name]
    atomic_write_text(tmp_path / ("n" * 250), "a long file name")
    assert (tmp_path / ("n" * 250)).read_text() == "a long file name"
