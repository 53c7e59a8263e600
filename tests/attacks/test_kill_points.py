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

import builtins
import errno
import functools
import gc
import io
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
from hf_vanilla.files.output_folder import JOURNAL, LOCK, RECORD, REPLACED, OutputFolder, own_files
from tests.attacks.test_folders import snapshot
from tests.attacks.test_journal import FILE_OPERATIONS, Killed
from tests.test_train import TINY, corpus, text_files  # noqa: F401  (corpus is a fixture)

#: The step a resumed run trains to (FLOWS): its last checkpoint is the one rotation and the refusals aim at.
RESUMED_TO = 4

#: Where the default run kills, per flow: at the first operation matching each pattern, and at the operations
#: that many places after it (0: the operation itself fails; 1: it was done, the next one was not).
TELLING = {
    "new": [(r"hf_vanilla-journal\.json\..*\.tmp$", (1,)),  # the journal alone, before its first record
            (r"/\.run\.json\.\w+\.tmp$", (0, 1)),  # run.json's first write: its temporary file renamed, and after
            (r"\.hf_vanilla-fresh-checkpoint-\d+/checkpoint-\d+$", (1,))],  # the first checkpoint placed, not committed
    "overwrite": [(r"\.hf_vanilla-fresh-checkpoint-\d+/checkpoint-\d+$", (1,))],
    "resume": [(r"\.hf_vanilla-fresh-checkpoint-\d+/checkpoint-\d+$", (1,))],
    "rotation": [(r"/run/checkpoint-\d+$", (1, 6)),  # renamed away but recorded; half deleted (inside its rmtree)
                 # the last checkpoint placed, not yet rotated
                 (rf"^replace .*fresh-checkpoint-{RESUMED_TO}/checkpoint-{RESUMED_TO}$", (1,))],
    "new-conversion": [(r"^replace .*/\.staging-out-\w+$", (0, 1))],  # the staged folder published, and after
    "existing-empty": [(r"hf_vanilla-journal\.json\..*\.tmp$", (1, 2)),  # the journal alone, before its record
                       (r"^rmdir .*fresh-conversion$", (1, 2)),  # published, not yet committed
                       (r"^unlink .*/\.hf_vanilla\.lock$", (0,))],  # all done but the lock file's unlinking
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
    left = [p.name for p in folder.iterdir() if p.name in (JOURNAL, REPLACED, LOCK)
            or p.name.startswith(".hf_vanilla-fresh") or p.name.endswith(".tmp")]
    assert not left, f"left in {folder} after the next command: {left}"


def visible_checkpoints(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("checkpoint-*") if re.fullmatch(r"checkpoint-\d+", p.name)
                  and (p / "trainer_state.json").is_file())


# ----------------------------------------------------------------------------------------------
# train


FLOWS = {  # the killed command's options beyond the base, and how its folder is prepared
    "new": dict(),
    "overwrite": dict(overwrite=True),
    "resume": dict(resume=True, max_steps=RESUMED_TO),
    "rotation": dict(resume=True, max_steps=RESUMED_TO, save_total_limit=1),
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
    ops = operations(lambda: T.train("clm", probe_dir, **options))
    points = kill_points(ops, flow, every)
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
    print(f"{flow}: killed at {len(points)} of {len(ops)} file operations, each taken up by the next command")
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
    print(f"convert into {kind}: killed at {len(points)} of {len(ops)} file operations, each taken up by the next command")
    return len(points)


@pytest.mark.parametrize("kind", CONVERSIONS)
def test_convert_killed_at_telling_operations_is_taken_up_by_the_next_command(kind, native, tmp_path, no_fsync):
    assert convert_sweep(kind, native, tmp_path, every=False) >= 1


@pytest.mark.slow
@pytest.mark.parametrize("kind", CONVERSIONS)
def test_convert_killed_at_every_operation_is_taken_up_by_the_next_command(kind, native, tmp_path, no_fsync):
    assert convert_sweep(kind, native, tmp_path, every=True) > 5



# ----------------------------------------------------------------------------------------------
# A full disk or a refused permission at a file operation (issues 41.6, 50)

#: What each refusal of the system refuses: a full disk, whatever writes (removals still work, and it stays full
#: while the command runs, its undo included); a permission taken away (the folder made read-only), every change.
WRITING = frozenset({"replace", "rename", "mkdir", "link", "open"})
REFUSES = {errno.ENOSPC: WRITING, errno.EACCES: WRITING | {"unlink", "remove", "rmdir", "rmtree"}}

#: The operations watched: the kill tests', and opening a file to write it (``os.open``: tempfile's and the
#: locks'; ``open``: every writer's in Python, the Trainer's JSON included).
WATCHED = [*FILE_OPERATIONS, (os, "open"), (builtins, "open"), (io, "open")]


def opens_to_write(args: tuple, kwargs: dict) -> bool:
    mode = args[1] if len(args) > 1 else kwargs.get("flags", kwargs.get("mode", "r"))
    if isinstance(mode, int):  # os.open's flags
        return bool(mode & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
    return any(letter in mode for letter in "wax+")


def changed_paths(name: str, args: tuple, kwargs: dict) -> list[str]:
    """The paths an operation changes (none for an ``open`` to read, or one relative to a folder descriptor)."""
    if "dir_fd" in kwargs or (name == "open" and not opens_to_write(args, kwargs)):
        return []
    return [os.path.abspath(os.fsdecode(arg)) for arg in args[:1 if name == "open" else 2]
            if isinstance(arg, str | bytes | os.PathLike)]


def under_refusal(code: int, inside: Path, action: Callable[[], object], n: int | None = None
                  ) -> tuple[list[str], list[str], BaseException | None]:
    """Run ``action`` with the n-th operation inside ``inside`` that ``code`` refuses (:data:`REFUSES`) refused by
    the system, and every later one too (None: none refused). The refusable operations done or refused in order
    (``"name path"``), the names of the entries the refused ones acted on, and the error ``action`` ended with."""
    seen: list[str] = []
    refused: list[str] = []

    def refusing(name, operation):
        def call(*args, **kwargs):
            paths = changed_paths(name, args, kwargs)
            if name not in REFUSES[code] or not paths or not any(Path(p).is_relative_to(inside) for p in paths) \
                    or (name == "mkdir" and os.path.lexists(args[0])):  # "exists" comes before free space
                return operation(*args, **kwargs)
            seen.append(f"{name} {paths[0]}")
            if n is None or len(seen) < n:
                return operation(*args, **kwargs)
            refused.extend(Path(path).name for path in paths)
            if name == "rmtree" and (kwargs.get("ignore_errors") or (len(args) > 1 and args[1] is True)):
                return None  # nothing removed, nothing said
            raise OSError(code, os.strerror(code), paths[0])
        return call

    with pytest.MonkeyPatch.context() as patch:
        for module, name in WATCHED:
            patch.setattr(module, name, refusing(name, getattr(module, name)))
        try:
            action()
        except Exception as error:  # noqa: BLE001  (what the command ended with is what is checked)
            gc.collect()  # the failed writer's lock objects go, as a process's do when it exits
            return seen, refused, error
    gc.collect()
    return seen, refused, None


def telling_points(seen: list[str], patterns: list[str]) -> list[int]:
    """The 1-based indexes among refusable operations ``seen`` of the first matching each pattern, and the first."""
    found = [next((i for i, op in enumerate(seen, 1) if re.search(p, op)), None) for p in patterns]
    return sorted({1, *(i for i in found if i is not None)})


def said_in_one_sentence(refused: list[str], error: BaseException, code: int) -> str:
    """The refusal is one sentence of ours naming a file a refused operation acted on (or the helper beside it),
    how to set it right, and what comes next."""
    from hf_vanilla.errors import sentence
    from hf_vanilla.files.atomic import FileOperationError

    said = sentence(error)
    assert isinstance(error, FileOperationError), f"{type(error).__name__}: {said}"
    helper = re.search(r"(temporary file|staging folder|work folder) beside", said)
    assert said.startswith(os.strerror(code)) and (any(name in said for name in refused) or helper), (refused, said)
    assert ("free some space, then " if code == errno.ENOSPC else "make it writable, then ") in said, said
    return said


def true_of_the_folder(said: str, folder: Path, before: dict | None) -> None:
    """What the sentence says of the folder as the command left it (put back first, not created, created holding
    only bookkeeping, as found but for bookkeeping) is what the folder holds (``before``: as the command found it)."""
    now = snapshot(folder) if folder.exists() else None
    if "first puts" in said or "first deletes what it replaced" in said:  # the journal says which
        journal = json.loads((folder / JOURNAL).read_text())
        committed = journal["phase"] == "discarding" or (folder / journal.get("committing_by", "\0")).is_dir()
        assert committed == ("complete write" in said), (said, journal)
        if committed:
            assert all((folder / name).exists() for name in json.loads((folder / RECORD).read_text())["files"]), said
    elif "was not created" in said:
        assert now is None, said
    elif (created := re.search(r"was created and holds only (.+?) \(hf_vanilla's bookkeeping", said)) is not None:
        holds = sorted({name.split("/")[0] for name in now or {}})
        assert before is None and holds == ([] if created.group(1) == "nothing" else created.group(1).split(", ")), said
    else:
        found = re.search(r"is as this command found it(?: but for (.+?) \(hf_vanilla's bookkeeping)?", said)
        assert found is not None, said
        left = found.group(1).split(", ") if found.group(1) else []
        assert all(name.startswith(".") for name in left), said

        def besides(state):
            return None if state is None else \
                {key: value for key, value in state.items() if key.split("/")[0] not in left}
        assert besides(now) == besides(before), said


def sweep(points: list[int], tmp_path: Path, label: str, check: Callable[[int, Path], None]) -> int:
    """``check(n, folder)`` at every point, each in a folder of its own; all it found false (not only the first) is
    one failure, a line a point. Returns how many points were checked."""
    found = []
    for n in points:
        where = tmp_path / f"{label}-{n}"
        try:
            check(n, where)
        except AssertionError as problem:
            found.append(f"at refused operation {n}: {problem}")
        finally:
            shutil.rmtree(where, ignore_errors=True)
    assert not found, f"{len(found)} of {len(points)} points of {label}:\n" + "\n".join(found)
    return len(points)


#: Where the default run refuses, per train flow: the journal, the tokenizer, the first checkpoint, run.json, and
#: after the first checkpoint (issue 50.7) the last checkpoint's placement and the curves at the end.
TELLING_REFUSALS = [r"hf_vanilla-journal\.json\..*\.tmp", r"\.tokenizer\.json\..*\.tmp|fresh-\w*Tokenizer",
                    r"fresh-checkpoint-\d+/checkpoint", r"run\.json\..*\.tmp", rf"fresh-checkpoint-{RESUMED_TO}/checkpoint",
                    r"curves\.png"]


def check_train_refusal(flow: str, code: int, n: int, templates, where: Path) -> None:
    """The train command of ``flow`` refused at its n-th refusable operation: its sentence is true of the folder as
    it left it, and the command it names (once the disk has room again) finishes the run; the user's files stay."""
    _, base = templates
    options = dict(base, **FLOWS[flow])
    run_dir, outside = prepare(flow, templates, where)
    users = users_state(run_dir, outside) if run_dir.exists() else None
    before = snapshot(run_dir) if run_dir.exists() else None
    _, refused, error = under_refusal(code, where, lambda: T.train("clm", run_dir, **options), n)
    if error is None:  # only refused cleanups (a permission): the run finished all the same
        assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"
        return
    said = said_in_one_sentence(refused, error, code)
    if (resumed := re.search(r"it continues from (checkpoint-\d+)", said)) is not None:
        assert resumed.group(1) in visible_checkpoints(run_dir), said
        result = T.train("clm", run_dir, **dict(options, resume=True))
        if not result.recorded:  # refused after its last output: --resume reports the run as it recorded itself
            resumed_from = json.loads((run_dir / "run.json").read_text())["resumed_from"]
            assert Path(resumed_from).name == resumed.group(1), said
    else:
        assert "run the same command again" in said, said
        true_of_the_folder(said, run_dir, before)
        T.train("clm", run_dir, **options)
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed", said
    if users is not None:
        assert users_state(run_dir, outside) == users, said
    no_bookkeeping_left(run_dir)


def train_refusal_sweep(flow: str, code: int, templates, tmp_path: Path, every: bool) -> int:
    _, base = templates
    options = dict(base, **FLOWS[flow])
    probe, _ = prepare(flow, templates, tmp_path / "probe")
    seen, _, _ = under_refusal(code, tmp_path / "probe", lambda: T.train("clm", probe, **options))
    points = list(range(1, len(seen) + 1)) if every else telling_points(seen, TELLING_REFUSALS)
    return sweep(points, tmp_path, flow, lambda n, where: check_train_refusal(flow, code, n, templates, where))


REFUSED_FLOWS = [(flow, code) for flow in ("new", "overwrite", "resume") for code in REFUSES]


@pytest.mark.parametrize(("flow", "code"), [("overwrite", errno.EACCES)], ids=["overwrite-EACCES"])  # ``-m slow``: all
def test_train_refused_by_the_system_says_what_failed_and_the_next_command_does_it(flow, code, templates, tmp_path,
                                                                                      no_fsync):
    """The default run's sample (:data:`TELLING_REFUSALS`, the lock first): one sentence each, true of the folder as
    left (the lock and the journal's temporary file a read-only folder keeps are named), the next command works."""
    assert train_refusal_sweep(flow, code, templates, tmp_path, every=False) >= 3


@pytest.fixture(scope="module")
def new_run_refusable(templates, tmp_path_factory) -> Callable[[int], list[str]]:
    """The refusable operations of a new run under a refusal ``code`` (:func:`under_refusal`, none refused)."""
    _, base = templates

    @functools.cache
    def seen(code: int) -> list[str]:
        where = tmp_path_factory.mktemp("new-run-refusable") / "probe"
        probe, _ = prepare("new", templates, where)
        return under_refusal(code, where, lambda: T.train("clm", probe, **base))[0]
    return seen


@pytest.mark.parametrize(("code", "operation"), [
    (errno.ENOSPC, r"^open .*/\.hf_vanilla-fresh-writing-trainer_state\.json/trainer_state\.json$"),  # the Trainer's
    (errno.ENOSPC, r"^open .*/\.hf_vanilla-fresh-writing-curves\.png/curves\.png$"),  # matplotlib's own open
    (errno.EACCES, r"^(rmtree|rmdir|unlink|remove) .*/\.hf_vanilla-fresh-writing-run\.json$"),  # published, then removed
], ids=["trainer-state-ENOSPC", "curves-ENOSPC", "work-folder-removal-EACCES"])
def test_train_refused_at_an_operation_the_sweep_found_says_so_and_the_next_command_does_it(
        code, operation, new_run_refusable, templates, tmp_path, no_fsync):
    """The operations of a new run the every-operation sweep found said as a raw ``[Errno 28]`` (a7b639a) or
    ``[Errno 13]`` (9e1a6a7; issue 50): the Trainer's and matplotlib's own writes into
    :meth:`OutputFolder.writing`'s work folder, and the removal of a work folder once its files were published
    (every writer's, run.json's first)."""
    n = next(i for i, op in enumerate(new_run_refusable(code), 1) if re.search(operation, op))
    check_train_refusal("new", code, n, templates, tmp_path / "refused")


@pytest.mark.slow  # every refusable operation of three flows, two refusals: about 1,000 runs
@pytest.mark.parametrize(("flow", "code"), [pytest.param(flow, code, id=f"{flow}-{errno.errorcode[code]}")
                                            for flow, code in REFUSED_FLOWS])
def test_train_refused_at_every_operation_says_what_is_true_and_the_next_command_does_it(
        flow, code, templates, tmp_path, no_fsync):
    assert train_refusal_sweep(flow, code, templates, tmp_path, every=True) > 40


def check_convert_refusal(kind: str, code: int, n: int, native: Path, where: Path) -> None:
    overwrite = kind == "overwrite"
    out, outside = prepare_conversion(kind, native, where)
    before = snapshot(out) if out.exists() else None
    _, refused, error = under_refusal(code, where, lambda: convert_checkpoint(native, out, overwrite=overwrite), n)
    if error is None:
        assert (out / "model.safetensors").is_file() and OutputFolder(out).changed() == []
        return
    said = said_in_one_sentence(refused, error, code)
    assert "run the same command again" in said or "run the same command with --overwrite" in said, said
    true_of_the_folder(said, out, before)
    convert_checkpoint(native, out, overwrite=overwrite or "with --overwrite" in said)  # the command it names
    assert (out / "model.safetensors").is_file() and OutputFolder(out).changed() == [], said
    no_bookkeeping_left(out)


#: Where the default run also refuses a conversion, besides every seventh operation: the first lock file, and the
#: first deletion of its commit (what it replaced, or its journal: the write is complete then).
TELLING_CONVERSION = [r"^open .*\.lock$", r"^(rmtree|unlink) .*(hf_vanilla-replaced|journal\.json)$"]

#: The conversions the default run samples (about 8 s); ``-m slow`` refuses every operation of every one.
SAMPLED_CONVERSIONS = [("overwrite", errno.ENOSPC), ("new", errno.EACCES), ("existing-empty", errno.EACCES)]


@pytest.mark.parametrize(("kind", "code", "every"), [
    *(pytest.param(kind, code, False, id=f"sampled-{kind}-{errno.errorcode[code]}")
      for kind, code in SAMPLED_CONVERSIONS),
    *(pytest.param(kind, code, True, id=f"every-{kind}-{errno.errorcode[code]}", marks=pytest.mark.slow)
      for kind in CONVERSIONS for code in REFUSES)])
def test_convert_refused_by_the_system_at_any_operation_says_so_and_the_next_command_does_it(
        kind, code, every, native, tmp_path, no_fsync):
    """Every refusable operation of a conversion (``-m slow``; the default run every seventh) refused by a full
    disk or a permission: one sentence, true of the folder as left, and the command it names puts it right."""
    overwrite = kind == "overwrite"
    probe, _ = prepare_conversion(kind, native, tmp_path / "probe")
    seen, _, _ = under_refusal(code, tmp_path / "probe",
                               lambda: convert_checkpoint(native, probe, overwrite=overwrite))
    points = list(range(1, len(seen) + 1)) if every else \
        sorted({*range(1, len(seen) + 1, 7), *telling_points(seen, TELLING_CONVERSION)})
    sweep(points, tmp_path, kind, lambda n, where: check_convert_refusal(kind, code, n, native, where))


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
    true_of_the_folder(said, out, before)
    convert_checkpoint(native, out, overwrite=True)  # the command it names
    assert (out / "model.safetensors").is_file() and OutputFolder(out).changed() == []
    no_bookkeeping_left(out)
