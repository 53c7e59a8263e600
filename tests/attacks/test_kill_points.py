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

import errno
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
from hf_vanilla.files.output_folder import JOURNAL, RECORD, REPLACED, OutputFolder, own_files
from tests.attacks.test_folders import snapshot
from tests.attacks.test_journal import FILE_OPERATIONS, Killed
from tests.test_train import TINY, corpus, text_files  # noqa: F401  (corpus is a fixture)

#: Where the default run kills, per flow: at the first operation matching each pattern, and at the operations
#: that many places after it (0: the operation itself fails; 1: it was done, the next one was not).
TELLING = {
    "new": [(r"hf_vanilla-journal\.json\..*\.tmp$", (1,)),  # the journal alone, before its first record
            (r"/\.run\.json\.\w+\.tmp$", (0, 1)),  # run.json's first write: its temporary file renamed, and after
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
            result = T.train("clm", run_dir, **dict(options, resume=True))  # what the refusal says
            resumed = json.loads((run_dir / "run.json").read_text())["resumed_from"]
            if not result.recorded:  # killed after its last output: --resume reports the run as it recorded itself
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


# ----------------------------------------------------------------------------------------------
# A full disk or a refused permission at a file operation (issue 41.6)

#: The operations a full disk or a read-only folder refuses (removals still work).
WRITES = [(os, "replace"), (os, "rename"), (os, "mkdir")]


def refused_from(n: int, code: int, action: Callable[[], object]) -> tuple[list[str], BaseException | None]:
    """Run ``action`` with its n-th write (a rename or a mkdir) refused by the system with ``code``, and every later
    one too (a full disk stays full while the command runs, its undo included). The names of the entries the first
    refused write acted on, and the error the action ended with (None if it finished)."""
    count, first = 0, []

    def refusing(name, operation):
        def call(*args, **kwargs):
            nonlocal count
            count += 1
            if name == "mkdir" and os.path.lexists(args[0]):
                return operation(*args, **kwargs)  # the system says it exists before it looks at free space
            if count >= n:
                paths = [arg for arg in args[:2] if isinstance(arg, str | bytes | os.PathLike)]
                first[:] = first or [Path(os.fsdecode(path)).name for path in paths]
                raise OSError(code, os.strerror(code), os.fsdecode(args[0]))
            return operation(*args, **kwargs)
        return call

    with pytest.MonkeyPatch.context() as patch:
        for module, name in WRITES:
            patch.setattr(module, name, refusing(name, getattr(module, name)))
        try:
            action()
        except Exception as error:  # noqa: BLE001  (what the command ended with is what is checked)
            gc.collect()
            return first, error
    return first, None


def write_points(action: Callable[[], object], patterns: list[str]) -> list[int]:
    """The 1-based indexes among ``action``'s writes of the first write matching each pattern (that one occurs in
    this flow), and the first."""
    writes = [f"{name} {path}" for name, path in operations(action) if name in {name for _, name in WRITES}]
    found = [next((i for i, op in enumerate(writes, 1) if re.search(p, op)), None) for p in patterns]
    points = sorted({1, *(i for i in found if i is not None)})
    assert len(points) >= 3, writes
    return points


def said_in_one_sentence(first: list[str], error: BaseException, code: int) -> str:
    """The refusal names the file the first refused write acted on, how to set it right, and what comes next."""
    from hf_vanilla.errors import sentence
    from hf_vanilla.files.atomic import FileOperationError

    said = sentence(error)
    assert isinstance(error, FileOperationError), f"{type(error).__name__}: {said}"
    helper = all(name.startswith(".") for name in first) and re.search(r"(temporary file|staging folder) beside", said)
    assert said.startswith(os.strerror(code)) and (any(name in said for name in first) or helper), (first, said)
    assert ("free some space, then " if code == errno.ENOSPC else "make it writable, then ") in said, said
    return said


@pytest.mark.parametrize(("flow", "code"), [
    pytest.param("new", errno.ENOSPC, id="new-ENOSPC", marks=pytest.mark.slow),  # 30 s: five runs, each run twice
    pytest.param("overwrite", errno.EACCES, id="overwrite-EACCES"),  # 10 s: the default run's one train case
    pytest.param("resume", errno.ENOSPC, id="resume-ENOSPC", marks=pytest.mark.slow)])
def test_train_refused_by_the_system_says_what_failed_first_and_the_next_command_does_it(
        flow, code, templates, tmp_path, no_fsync):
    _, base = templates
    options = dict(base, **FLOWS[flow])
    probe, _ = prepare(flow, templates, tmp_path / "probe")
    points = write_points(lambda: T.train("clm", probe, **options), [
        r"hf_vanilla-journal\.json\..*\.tmp", r"\.tokenizer\.json\..*\.tmp|fresh-\w*Tokenizer",
        r"fresh-checkpoint-\d+/checkpoint", r"run\.json\..*\.tmp",
        # after the first checkpoint (issue 50.7): the second checkpoint's placement, and the curves at the end
        rf"fresh-checkpoint-{options['max_steps']}/checkpoint", r"curves\.png"])
    for n in points:
        run_dir, outside = prepare(flow, templates, tmp_path / f"{flow}-{n}")
        users = users_state(run_dir, outside) if run_dir.exists() else None
        before = snapshot(run_dir) if run_dir.exists() else None
        first, error = refused_from(n, code, lambda: T.train("clm", run_dir, **options))  # noqa: B023
        said = said_in_one_sentence(first, error, code)
        if (resumed := re.search(r"it continues from (checkpoint-\d+)", said)) is not None:
            assert resumed.group(1) in visible_checkpoints(run_dir), f"{n}: {said}"
            T.train("clm", run_dir, **dict(options, resume=True))
            assert Path(json.loads((run_dir / "run.json").read_text())["resumed_from"]).name == resumed.group(1)
        else:
            assert "run the same command again" in said, said
            if "is as this command found it" in said:  # true of the whole folder, as the command left it
                assert (snapshot(run_dir) if run_dir.exists() else None) == before, f"{n}: {said}"
            T.train("clm", run_dir, **options)
        assert json.loads((run_dir / "run.json").read_text())["status"] == "completed", f"{n}: {said}"
        if users is not None:
            assert users_state(run_dir, outside) == users, f"{n}: {said}"
        no_bookkeeping_left(run_dir)
        shutil.rmtree(run_dir.parent)


@pytest.mark.parametrize(("kind", "code"), [("overwrite", errno.ENOSPC), ("new", errno.EACCES)],
                         ids=["overwrite-ENOSPC", "new-EACCES"])
@pytest.mark.parametrize("every", [pytest.param(False, id="sampled"), pytest.param(True, id="every",
                                                                                   marks=pytest.mark.slow)])
def test_convert_refused_by_the_system_at_any_write_says_so_and_the_next_command_does_it(
        kind, code, every, native, tmp_path, no_fsync):
    """Every write of a conversion (``-m slow``; the default run every fourth: about 8 s) refused by a full disk or
    a permission: one sentence naming what failed first, and the command it names puts everything right."""
    overwrite = kind == "overwrite"
    probe, _ = prepare_conversion(kind, native, tmp_path / "probe")
    writes = [op for op in operations(lambda: convert_checkpoint(native, probe, overwrite=overwrite))
              if op[0] in {name for _, name in WRITES}]
    for n in range(1, len(writes) + 1, 1 if every else 4):
        out, outside = prepare_conversion(kind, native, tmp_path / f"{kind}-{n}")
        before = snapshot(out) if overwrite else None
        first, error = refused_from(n, code, lambda: convert_checkpoint(native, out, overwrite=overwrite))  # noqa: B023
        said = said_in_one_sentence(first, error, code)
        assert "run the same command again" in said, said
        if "is as this command found it" in said:
            assert snapshot(out) == before, f"{n}: {said}"
        if "was not created" in said:
            assert not out.exists(), f"{n}: {said}"
        convert_checkpoint(native, out, overwrite=overwrite)
        assert (out / "model.safetensors").is_file() and OutputFolder(out).changed() == [], f"{n}: {said}"
        no_bookkeeping_left(out)
        shutil.rmtree(out.parent)


def test_convert_into_an_existing_folder_on_a_full_disk_says_the_step_and_the_next_command(native, tmp_path, monkeypatch):
    """Issue 50.8: the code files transformers copies into a conversion (``shutil.copy``, through ``os.sendfile``)
    failing on a full disk printed the raw ``[Errno 28] ... modeling_vanilla.py -> ...``."""
    out, outside = prepare_conversion("overwrite", native, tmp_path / "full")
    before = snapshot(out)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as patch:
        patch.setattr(os, "sendfile", full)
        patch.setattr(shutil, "_USE_CP_SENDFILE", True)
        with pytest.raises(OSError) as refused:
            convert_checkpoint(native, out, overwrite=True)
    said = said_in_one_sentence(["modeling_vanilla.py"], refused.value, errno.ENOSPC)
    assert "free some space, then run the same command again" in said, said
    if "is as this command found it" in said:
        assert snapshot(out) == before, said
    convert_checkpoint(native, out, overwrite=True)  # the command it names
    assert (out / "model.safetensors").is_file() and OutputFolder(out).changed() == []
    no_bookkeeping_left(out)
