"""Whole commands killed at their file operations, then the next natural command: train (a new run, --overwrite,
--resume, checkpoint rotation) and convert (a new folder, an existing empty one, --overwrite).

What must hold at every kill point (issues 41.1, 43.0): the next command recovers before it judges the folder, so
it succeeds or refuses naming the command that goes on (never calling our own journal "files hf_vanilla did not
write"); a checkpoint visible in the folder after the kill is continued from, never deleted; a half-deleted
checkpoint of a rotation is gone after the next command; the user's files (a note, a folder named like a
checkpoint, a link out of the folder and its target) are untouched throughout.

The default run kills at a sample of points, chosen by what the operation touches (the journal, the record, a
checkpoint's placement and removal, and the operation after each); ``-m slow`` kills at every operation.
"""

from __future__ import annotations

import gc
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

import hf_vanilla  # noqa: F401  (registers the Auto classes)
from hf_vanilla import training as T
from hf_vanilla.convert import convert_checkpoint
from hf_vanilla.files.output_folder import JOURNAL, RECORD, REPLACED, own_files
from tests.attacks.test_folders import snapshot
from tests.attacks.test_journal import FILE_OPERATIONS, Killed
from tests.test_train import TINY, corpus, text_files  # noqa: F401  (corpus is a fixture)

#: Where the default run kills, per flow: at the first operation matching each pattern, and at the operations
#: that many places after it (0: the operation itself fails; 1: it was done, the next one was not).
TELLING = {
    "new": [(r"hf_vanilla-journal\.json\..*\.tmp$", (1,)),  # the journal alone, before its first record
            (r"\.hf_vanilla-fresh-checkpoint-\d+/checkpoint-\d+$", (1,))],  # the first checkpoint placed, not committed
    "overwrite": [(r"\.hf_vanilla-fresh-checkpoint-\d+/checkpoint-\d+$", (1,))],
    "resume": [(r"\.hf_vanilla-fresh-checkpoint-\d+/checkpoint-\d+$", (1,))],
    "rotation": [(r"/run/checkpoint-\d+$", (1, 6))],  # renamed away but recorded; half deleted (inside its rmtree)
    "new-conversion": [(r"^replace .*/\.staging-out-\w+$", (0, 1))],  # the staged folder published, and after
    "existing-empty": [(r"hf_vanilla-journal\.json\..*\.tmp$", (1, 2)),  # the journal alone, before its record
                       (r"^rmdir .*fresh-conversion$", (1, 2))],  # published, not yet committed
    "overwrite-conversion": [(r"^mkdir .*hf_vanilla-replaced$", (1, 3)), (r"^rmdir .*fresh-conversion$", (1, 2)),
                             (r"^rmtree .*hf_vanilla-replaced$", (3,))],
}

Operation = tuple[str, str]  # (function, the path it acts on)


def operations(action: Callable[[], object]) -> list[Operation]:
    """The file operations ``action`` performs, in order (it runs to the end)."""
    seen: list[Operation] = []

    def watching(name, operation):
        def call(*args, **kwargs):
            seen.append((name, os.fsdecode(args[0]) if args else ""))
            return operation(*args, **kwargs)
        return call

    with pytest.MonkeyPatch.context() as patch:
        for module, name in FILE_OPERATIONS:
            patch.setattr(module, name, watching(name, getattr(module, name)))
        action()
    return seen


def killed_at(n: int, action: Callable[[], object]) -> Operation | None:
    """Run ``action`` as a process that dies at its n-th file operation (that one and every later one raise
    :class:`Killed`: a dead process cleans nothing up); the operation it died at, or None if it finished."""
    count, died = 0, None

    def dying(name, operation):
        def call(*args, **kwargs):
            nonlocal count, died
            count += 1
            if count >= n:
                died = died or (name, os.fsdecode(args[0]) if args else "")
                raise Killed(f"killed at file operation {n}")
            return operation(*args, **kwargs)
        return call

    with pytest.MonkeyPatch.context() as patch:
        for module, name in FILE_OPERATIONS:
            patch.setattr(module, name, dying(name, getattr(module, name)))
        try:
            action()
        except Killed:
            pass
        else:
            return None
    gc.collect()  # the dead writer's lock objects go, and with them its locks (as the system drops a dead process's)
    return died


def kill_points(ops: list[Operation], flow: str, every: bool) -> list[int]:
    """1-based indexes of the operations to die at: all of them, or the flow's telling ones (:data:`TELLING`)."""
    if every:
        return list(range(1, len(ops) + 1))
    points = set()
    for pattern, offsets in TELLING[flow]:
        first = next(i for i, (name, path) in enumerate(ops, 1) if re.search(pattern, f"{name} {path}"))
        points |= {first + offset for offset in offsets if first + offset <= len(ops)}
    return sorted(points)


@pytest.fixture
def no_fsync(monkeypatch):
    monkeypatch.setattr(os, "fsync", lambda fd: None)  # a kill, not a power cut: flushing changes nothing here


def users_files(folder: Path, outside: Path) -> None:
    """A note, a folder named like a checkpoint, a link out of the folder (to a file that must stay as it is)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "my-notes.txt").write_text("mine")
    (folder / "checkpoint-3-best").mkdir(exist_ok=True)
    (folder / "checkpoint-3-best" / "note.txt").write_text("copied by hand")
    outside.write_text("the target of my link")
    (folder / "my-link").symlink_to(outside)


def users_state(folder: Path, outside: Path) -> dict:
    keep = ("my-notes.txt", "checkpoint-3-best", "my-link")
    return {name: value for name, value in snapshot(folder).items() if name.startswith(keep)} | \
        {"outside": outside.read_text()}


def no_bookkeeping_left(folder: Path) -> None:
    left = [p.name for p in folder.iterdir() if p.name in (JOURNAL, REPLACED) or p.name.startswith(".hf_vanilla-fresh")
            or p.name.endswith(".tmp")]
    assert not left, f"left in {folder} after the next command: {left}"


def visible_checkpoints(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("checkpoint-*") if re.fullmatch(r"checkpoint-\d+", p.name)
                  and (p / "trainer_state.json").is_file())


# ----------------------------------------------------------------------------------------------
# train


FLOWS = {  # the killed command's options beyond the base, and how its folder is prepared
    "new": dict(),
    "overwrite": dict(overwrite=True),
    "resume": dict(resume=True, max_steps=4),
    "rotation": dict(resume=True, max_steps=4, save_total_limit=1),
}


@pytest.fixture(scope="module")
def templates(corpus, tmp_path_factory) -> tuple[Path, dict]:  # noqa: F811
    """A finished 2-step run (checkpoints 1 and 2) with the user's files beside it, built once."""
    root = tmp_path_factory.mktemp("kill-templates")
    base = dict(TINY, data_files=text_files(corpus), max_steps=2, save_steps=1, eval_steps=2, num_samples=0)
    T.train("clm", root / "run", **base)
    users_files(root / "run", root / "outside.txt")
    return root, base


def prepare(flow: str, templates: tuple[Path, dict], where: Path) -> tuple[Path, Path]:
    root, _ = templates
    where.mkdir()
    outside = where / "outside.txt"
    run_dir = where / "run"
    if flow == "new":
        outside.write_text("the target of my link")
    else:
        shutil.copytree(root / "run", run_dir, symlinks=True)
        (run_dir / "my-link").unlink()
        outside.write_text("the target of my link")
        (run_dir / "my-link").symlink_to(outside)
    return run_dir, outside


def train_sweep(flow: str, templates, tmp_path: Path, every: bool) -> int:
    _, base = templates
    options = dict(base, **FLOWS[flow])
    probe_dir, _ = prepare(flow, templates, tmp_path / "probe")
    points = kill_points(operations(lambda: T.train("clm", probe_dir, **options)), flow, every)
    for n in points:
        run_dir, outside = prepare(flow, templates, tmp_path / f"{flow}-{n}")
        users = users_state(run_dir, outside) if run_dir.exists() else {"outside": outside.read_text()}
        died = killed_at(n, lambda: T.train("clm", run_dir, **options))  # noqa: B023
        at = f"{flow}, killed at operation {n} {died}"
        seen = visible_checkpoints(run_dir) if run_dir.exists() else []
        try:
            T.train("clm", run_dir, **options)  # the next command: the same one
        except FileExistsError as refusal:
            assert flow == "new" and "pass --resume to continue it" in str(refusal), f"{at}: {refusal}"
            assert seen, f"{at}: refused a folder without a checkpoint: {refusal}"
            T.train("clm", run_dir, **dict(options, resume=True))  # what the refusal says
            resumed = json.loads((run_dir / "run.json").read_text())["resumed_from"]
            assert resumed and Path(resumed).name == seen[-1], f"{at}: resumed from {resumed}, not {seen[-1]}"
        run = json.loads((run_dir / "run.json").read_text())
        assert run["status"] == "completed", at
        assert json.loads((run_dir / "trainer_state.json").read_text())["global_step"] == options["max_steps"], at
        assert users_state(run_dir, outside) == users, at
        no_bookkeeping_left(run_dir)
        if options.get("save_total_limit") == 1:
            assert visible_checkpoints(run_dir) == [f"checkpoint-{options['max_steps']}"], at
        recorded = {p.name for p in own_files(run_dir)}
        assert set(visible_checkpoints(run_dir)) <= recorded, at
        shutil.rmtree(run_dir.parent)
    return len(points)


@pytest.mark.parametrize("flow", list(FLOWS))
def test_train_killed_at_telling_operations_is_taken_up_by_the_next_command(flow, templates, tmp_path, no_fsync):
    assert train_sweep(flow, templates, tmp_path, every=False) >= 1


@pytest.mark.slow  # every operation of four flows: about 400 kills, each followed by a whole run
@pytest.mark.parametrize("flow", list(FLOWS))
def test_train_killed_at_every_operation_is_taken_up_by_the_next_command(flow, templates, tmp_path, no_fsync):
    assert train_sweep(flow, templates, tmp_path, every=True) > 40


# ----------------------------------------------------------------------------------------------
# convert


@pytest.fixture(scope="module")
def native(tmp_path_factory) -> Path:
    from transformers import GPT2Config, GPT2LMHeadModel

    source = tmp_path_factory.mktemp("native") / "src"
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, bos_token_id=0,
                               eos_token_id=0)).save_pretrained(source)
    return source


CONVERSIONS = ("new", "existing-empty", "overwrite")


def prepare_conversion(kind: str, native: Path, where: Path) -> tuple[Path, Path]:
    where.mkdir()
    out, outside = where / "out", where / "outside.txt"
    outside.write_text("the target of my link")
    if kind == "existing-empty":
        out.mkdir()
    if kind == "overwrite":
        convert_checkpoint(native, out)
        users_files(out, outside)
    return out, outside


def convert_sweep(kind: str, native: Path, tmp_path: Path, every: bool) -> int:
    overwrite = kind == "overwrite"
    probe, _ = prepare_conversion(kind, native, tmp_path / "probe")
    ops = operations(lambda: convert_checkpoint(native, probe, overwrite=overwrite))
    points = kill_points(ops, f"{kind}-conversion" if kind != "existing-empty" else kind, every)
    for n in points:
        out, outside = prepare_conversion(kind, native, tmp_path / f"{kind}-{n}")
        users = users_state(out, outside) if overwrite else None
        died = killed_at(n, lambda: convert_checkpoint(native, out, overwrite=overwrite))  # noqa: B023
        at = f"convert into {kind}, killed at operation {n} {died}"
        try:
            convert_checkpoint(native, out, overwrite=overwrite)  # the next command: the same one
        except FileExistsError as refusal:  # the kill came after the conversion was in place, complete
            assert not overwrite and "already holds a converted model: pass --overwrite" in str(refusal), at
        assert (out / "model.safetensors").is_file() and (out / RECORD).is_file(), at
        no_bookkeeping_left(out)
        assert not [p for p in out.parent.glob(".staging-*") if p.is_dir()], at  # a lone lock file is harmless
        if users is not None:
            assert users_state(out, outside) == users, at
        shutil.rmtree(out.parent)
    return len(points)


@pytest.mark.parametrize("kind", CONVERSIONS)
def test_convert_killed_at_telling_operations_is_taken_up_by_the_next_command(kind, native, tmp_path, no_fsync):
    assert convert_sweep(kind, native, tmp_path, every=False) >= 1


@pytest.mark.slow
@pytest.mark.parametrize("kind", CONVERSIONS)
def test_convert_killed_at_every_operation_is_taken_up_by_the_next_command(kind, native, tmp_path, no_fsync):
    assert convert_sweep(kind, native, tmp_path, every=True) > 5
