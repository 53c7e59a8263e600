"""The `hf-vanilla` command line: every --help (and --version) answers without importing the heavy libraries,
and `train`'s parser, built from TrainOptions without transformers, is the one HfArgumentParser builds."""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from hf_vanilla.cli import COMMANDS

ROOT = Path(__file__).resolve().parent.parent
HEAVY = {"torch", "transformers", "matplotlib", "datasets"}


def _run_cli(*argv: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """``python -X importtime -m hf_vanilla.cli ARGV`` from the repository root: its output and every module it imported."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "hf_vanilla.cli", *argv], capture_output=True,
                          text=True, timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    return proc, imported


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_imports_no_heavy_library(command):
    """Issue 24: `attention --help` took minutes, `train --help` 28 s (torch, matplotlib, transformers imported)."""
    proc, imported = _run_cli(*([command] if command else []), "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {"hf_vanilla", "argparse"} <= imported  # the measurement saw the imports
    assert not {name.split(".")[0] for name in imported} & HEAVY, sorted(HEAVY & {n.split(".")[0] for n in imported})
    assert proc.stdout.startswith(f"usage: hf-vanilla {command or ''}".rstrip())


def test_top_level_help_lists_every_command():
    proc, _ = _run_cli("--help")
    assert all(name in proc.stdout for name in COMMANDS) and "--version" in proc.stdout


def test_version_prints_the_package_version_without_torch():
    from hf_vanilla import __version__

    proc, imported = _run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"hf-vanilla {__version__}"
    assert "torch" not in imported


def test_train_help_shows_examples_and_real_defaults():
    proc, _ = _run_cli("train", "--help")
    assert "examples:" in proc.stdout and "(default: small)" in " ".join(proc.stdout.split())


def test_train_help_spells_flags_as_the_docs_do_and_both_spellings_work():
    """--help (and its usage line) show --output-dir, as every doc writes it; --output_dir still parses."""
    from hf_vanilla.training.cli import build_parser, parse

    text = build_parser().format_help()
    assert "--output-dir OUTPUT_DIR" in text and "--max-steps MAX_STEPS" in text and "--max_steps" not in text
    assert "--output_dir" not in text and "--task {clm,mlm,translation,classification}" in text
    old, new = (parse(["--task", "clm", f"--output{sep}dir", "x", f"--max{sep}steps", "3"]) for sep in "_-")
    assert old == new and new[0].output_dir == "x" and new[1].max_steps == 3


def _described(parser: argparse.ArgumentParser) -> list[tuple]:
    """What a user sees and gets of each option (converters of bools and choices compared by what they return)."""
    rows = []
    for action in parser._actions:
        kind = action.type
        if action.choices and kind is not None:
            kind = tuple(kind(str(choice)) for choice in action.choices)
        elif callable(kind) and kind not in (str, int, float):
            kind = (kind("yes"), kind("0"))
        rows.append((tuple(action.option_strings), action.dest, action.default, action.required, action.nargs,
                     action.const, tuple(action.choices or ()), action.help, action.metavar, type(action).__name__,
                     kind))
    return rows


def test_train_parser_is_the_one_hf_argument_parser_builds():
    """The hand-built parser must not drift from transformers' reading of the same dataclasses."""
    from transformers import HfArgumentParser

    from hf_vanilla.training.cli import RunArguments, build_parser
    from hf_vanilla.training.options import TrainOptions

    reference = HfArgumentParser((RunArguments, TrainOptions), prog="hf-vanilla train")
    assert _described(build_parser()) == _described(reference)


def test_train_parser_reads_bools_as_hf_argument_parser_does():
    from hf_vanilla.training.cli import parse

    argv = ["--task", "clm", "--output-dir", "x"]
    assert parse([*argv, "--bf16"])[1].bf16 is True and parse([*argv, "--bf16", "false"])[1].bf16 is False
    assert parse([*argv, "--group-by-length", "no"])[1].group_by_length is False
    assert parse(argv)[1].group_by_length is None
    with pytest.raises(SystemExit):
        parse([*argv, "--bf16", "maybe"])


# --------------------------------------------------------------------------------------------------
# Refusals that depend only on the folder and the arguments come before the heavy imports (issue 43: the main
# job's "already holds" / "in progress" took 58-127 s under load, push's 33-77 s).


def _recorded_run(folder: Path, **record) -> Path:
    """A run folder as hf_vanilla records it (run.json naming its task, in the folder's record)."""
    from hf_vanilla.files.output_folder import OutputFolder

    folder.mkdir(parents=True)
    OutputFolder(folder).add(["run.json"])
    (folder / "run.json").write_text(json.dumps({"task": "clm", **record}))
    return folder


def _timed(*argv: str) -> tuple[subprocess.CompletedProcess, float, set[str]]:
    """``python -X importtime ARGV`` from the repository root: its output, the smaller of two runs' CPU seconds
    (user + system: what the command costs, which other jobs on the machine barely move), and the modules it
    imported."""
    seconds = []
    for _ in range(2):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True,
                              timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        seconds.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    return proc, min(seconds), imported


def test_refusals_from_the_folder_and_arguments_alone_come_as_fast_as_help(tmp_path):
    from hf_vanilla.files.output_folder import OutputFolder

    finished = _recorded_run(tmp_path / "finished", status="completed",
                             options={"vocab_size": 4096, "seed": 0})
    interrupted = _recorded_run(tmp_path / "interrupted", status="interrupted", interrupted_at_step=50,
                                command=["scripts/main_job.py", "--output-dir", "runs/x"])
    busy = _recorded_run(tmp_path / "busy", status="running")
    _, help_s, _ = _timed("-m", "hf_vanilla.cli", "--help")
    refusals = {  # command -> (exit status, what its one line says)
        ("scripts/main_job.py", "--output-dir", str(finished)): (2, "already holds a training run"),
        ("scripts/main_job.py", "--output-dir", str(busy)): (2, "in progress"),
        ("scripts/main_job.py", "--output-dir", str(finished), "--resume", "--seed", "9"): (2, "--seed (seed) 0, not 9"),
        ("scripts/main_job.py", "--output-dir", str(tmp_path / "new"), "--config", '{"hidden_size": 65536}'):
            (2, "--config '{\"hidden_size\": 65536}' over the main job's model describes"),  # the user's words
        ("-m", "hf_vanilla.cli", "train", "--task", "clm", "--output-dir", str(finished)):
            (2, "already holds a training run"),
        ("-m", "hf_vanilla.cli", "train", "--task", "clm", "--output-dir", str(busy)): (2, "in progress"),
        ("-m", "hf_vanilla.cli", "train", "--task", "clm", "--output-dir", str(finished), "--resume"):
            (2, "--vocab-size (vocab_size) 4096, not 8000"),
        ("-m", "hf_vanilla.cli", "push", str(interrupted), "someone/run"):
            (2, "bash scripts/main_job.sh --output-dir runs/x --resume"),
    }
    ratios = {}
    with OutputFolder(busy).locked():
        for argv, (status, says) in refusals.items():
            proc, seconds, imported = _timed(*argv)
            assert proc.returncode == status and says in proc.stderr, (argv, proc.stderr[-2000:])
            assert not {name.split(".")[0] for name in imported} & HEAVY, (argv, HEAVY & imported)
            ratios[" ".join(argv)] = seconds / help_s
    # CPU time, not wall time (a wall-time ratio reached 12 at load 14): importing torch and transformers alone costs
    # 20x `--help` and more, so a bound of 10 tells one from the other.
    assert max(ratios.values()) < 10, ratios


def test_required_options_show_as_required_in_help():
    """Issue 43: `train --help` showed "(default: None)" for --task and --output-dir."""
    text = " ".join(_run_cli("train", "--help")[0].stdout.split())
    assert "(default: None)" not in text
    assert "what to train (required)" in text and "card) (required)" in text


# --------------------------------------------------------------------------------------------------
# Every subcommand's refusals of bad input are decided before torch, transformers, datasets or matplotlib load,
# in one sentence naming the input (issue 51: `generate MISSING "To be"` took 236 s and answered with
# huggingface_hub's "Repo id must be in the form ..."; `train --data-files train=missing.txt` 157 s).


def _said(proc: subprocess.CompletedProcess) -> list[str]:
    """What a command printed on stderr, less the ``-X importtime`` lines."""
    return [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("import time:")]


def _bad_input_folders(tmp: Path) -> tuple[Path, ...]:
    """What the bad inputs point at: a file, an empty folder, a model folder with an empty config, two run folders
    (run.json's options edited out of shape, and recorded) and an hf_vanilla decoder's config (2 layers, 4 heads)."""
    a_file, empty, model = tmp / "a-file", tmp / "empty", tmp / "model"
    a_file.write_text("not a folder")
    empty.mkdir()
    model.mkdir()
    (model / "config.json").write_text("{}")
    edited, recorded = tmp / "edited", tmp / "recorded"
    for folder, options in ((edited, ["not", "a", "mapping"]), (recorded, {"seed": 1})):
        folder.mkdir()
        (folder / "config.json").write_text("{}")
        (folder / "run.json").write_text(json.dumps({"task": "clm", "options": options}))
    decoder, defaults = tmp / "decoder", tmp / "defaults"
    decoder.mkdir()
    (decoder / "config.json").write_text(json.dumps(
        {"model_type": "vanilla", "architecture": "decoder", "num_hidden_layers": 2, "num_attention_heads": 4}))
    defaults.mkdir()  # save_pretrained writes only what differs from VanillaConfig's defaults: here, nothing
    (defaults / "config.json").write_text(json.dumps({"model_type": "vanilla"}))
    return a_file, empty, model, edited, recorded, decoder, defaults


def _bad_inputs(tmp: Path) -> dict[str, list[tuple[tuple[str, ...], tuple[str, ...]]]]:
    """subcommand -> [(its arguments, words its one sentence must hold)]."""
    a_file, empty, model, edited, recorded, decoder, defaults = _bad_input_folders(tmp)
    missing = str(tmp / "missing")
    train = ("train", "--task", "clm", "--output-dir", str(tmp / "run"))
    return {
        "train": [
            ((*train, "--data-files", "train=missing.txt"), ("--data-files missing.txt does not exist",)),
            ((*train, "--data-files", str(empty)), ("--data-files", "is a folder, not a file")),
            ((*train, "--init-from", missing), ("--init-from", "no such folder")),
            ((*train, "--resume", missing), ("--resume", "no such checkpoint folder")),
            ((*train, "--preset", "huge"), ("--preset 'huge'", "tiny, small, base")),
            ((*train, "--warmup-steps", "-3"), ("--warmup-steps", "0 or more")),
            (("train", "--task", "clm", "--output-dir", str(a_file)), (str(a_file), "is a file")),
        ],
        "convert": [
            (("convert", missing, str(tmp / "out")), ("SRC_DIR", "no such folder")),
            (("convert", str(empty), str(tmp / "out")), ("SRC_DIR", "no config.json")),
            (("convert", str(model), str(a_file)), ("OUT_DIR", "is a file")),
        ],
        "push": [
            (("push", missing, "user/x"), ("RUN_DIR", "no such folder")),
            (("push", str(model), "user/bad..name"), ("REPO_ID 'user/bad..name' is not a Hub repo id",)),
            (("push", str(model), "user/x", "--timeout", "0"), ("--timeout", "must be a positive number of seconds, got 0.0")),
        ],
        "bench": [
            (("bench", "--repeats", "0"), ("--repeats must be at least 1",)),
            (("bench", "--json", str(tmp / "nowhere" / "rows.json")), ("--json", "does not exist")),
            (("bench", "--size", "124m", "--work", str(a_file)), ("--work", "is a file")),
        ],
        "attention": [
            (("attention", missing, "the king", "--out", str(tmp / "a.png")), ("MODEL_DIR", "no such folder")),
            (("attention", str(model), "the king", "--out", str(tmp / "nowhere" / "a.png")), ("--out", "does not exist")),
            (("attention", str(model), "the king", "--out", str(tmp / "a.png"), "--layer", "-1"), ("--layer", "at least 0")),
            (("attention", str(decoder), "the king", "--out", str(tmp / "a.png"), "--layer", "2"),
             ("--layer 2", "2 layers", "0 to 1")),
            (("attention", str(decoder), "the king", "--out", str(tmp / "a.png"), "--head", "4"), ("--head 4", "4 heads")),
            (("attention", str(decoder), "the king", "--out", str(tmp / "a.png"), "--cross"),
             ("--cross needs an encoder-decoder", "decoder model")),
            (("attention", str(decoder), "the king", "--out", str(tmp / "a.png"), "--stack", "encoder"),
             ("--stack encoder", "only its decoder stack")),
            (("attention", str(defaults), "the king", "--out", str(tmp / "a.png"), "--cross", "--layer", "6"),
             ("--layer 6", "6 layers", "0 to 5")),
        ],
        "compare": [
            (("compare", "--output-dir", str(tmp / "lab"), "--task", "clm", "--preset", "tiny", "--vary",
              "position_embedding_type=sinusoidal,rope"), ("give the budget of every run", "--max-steps")),
            (("compare", "--output-dir", str(tmp / "lab"), "--task", "clm", "--preset", "tiny", "--max-steps", "9"),
             ("give at least one --vary",)),
            (("compare", "--output-dir", str(tmp / "lab"), "--task", "clm", "--preset", "tiny", "--max-steps", "9",
              "--seeds", "0", "--vary", "position_embedding_type=sinusoidal,rope"), ("--seeds must be at least 1",)),
            (("compare", "--output-dir", str(tmp / "lab"), "--task", "mlm", "--preset", "tiny", "--max-steps", "9",
              "--measure", "extrapolation", "--vary", "position_embedding_type=sinusoidal,rope"),
             ("--measure extrapolation",)),
        ],
        "positions": [
            (("positions", "--out", str(a_file)), ("--out", "is a file")),
            (("positions", "--out", str(tmp / "pictures"), "--model", missing), ("--model", "no such folder")),
        ],
        "generate": [
            (("generate", missing, "To be"), ("RUN", "no such folder")),
            (("generate", str(a_file), "To be"), ("RUN", "is a file, not a folder")),
            (("generate", str(empty), "To be"), ("RUN", "no config.json")),
            (("generate", str(model), "To be", "--max-new-tokens", "0"), ("--max-new-tokens", "at least 1")),
            (("generate", str(model), "To be", "--do-sample", "--temperature", "0"), ("--temperature", "above 0")),
            (("generate", str(model)), ("required", "PROMPT")),
        ],
        "evaluate": [
            (("evaluate", missing), ("RUN", "no such folder")),
            (("evaluate", str(model)), ("RUN", "no run.json")),
            (("evaluate", str(model), "--batch-size", "x"), ("--batch-size", "invalid int value")),
            (("evaluate", str(edited)), ("run.json", "options must be a JSON object", "got a list")),
            (("evaluate", str(recorded), "--batch-size", str(10**9)), ("eval_batch_size", "at most 65536")),
        ],
    }


def test_the_early_checks_read_vanillaconfigs_own_defaults_and_each_familys_stacks_from_the_table():
    """attention's check runs before transformers loads, so it reads the defaults save_pretrained leaves out from
    VanillaConfig's declaration and the families from the table: no copy of either to fall behind."""
    import dataclasses
    import inspect

    import hf_vanilla as hv
    from hf_vanilla import variants
    from hf_vanilla.commands import declared_default, family_stacks
    from hf_vanilla.modeling_vanilla import stacks_of
    from tests.factories import tiny_config

    own = inspect.get_annotations(hv.VanillaConfig)
    declared = {f.name: f.default for f in dataclasses.fields(hv.VanillaConfig)
                if f.name in own and f.default is not dataclasses.MISSING}
    assert len(declared) > 40 and {name: declared_default(name) for name in declared} == declared
    for family in variants.values("architecture"):
        model = hv.VanillaModel(tiny_config(family))
        assert family_stacks(family) == tuple(stacks_of(model)), family


@pytest.mark.parametrize("command", COMMANDS)
def test_every_refusal_of_bad_input_is_one_sentence_before_the_heavy_libraries(command, tmp_path):
    cases = _bad_inputs(tmp_path)[command]
    assert cases, f"{command}: no bad input tried"
    for argv, says in cases:
        proc, imported = _run_cli(*argv)
        lines = _said(proc)
        assert proc.returncode == 2 and len(lines) == 1, (argv, proc.returncode, lines)
        assert lines[0].startswith(f"hf-vanilla {command}: ") and all(word in lines[0] for word in says), (argv, lines)
        assert {"hf_vanilla"} <= imported and not {name.split(".")[0] for name in imported} & HEAVY, (
            argv, sorted(HEAVY & {name.split(".")[0] for name in imported}))
    assert not (tmp_path / "run").exists() and not (tmp_path / "out").exists()  # refused before anything was written


def test_a_usage_error_is_one_sentence_not_the_whole_usage(tmp_path):
    """Issue 51: `train`'s usage alone is 50 lines, printed before the one sentence that mattered."""
    for argv, says in [(("train", "--task", "clm"), "--output-dir"), (("train", "--task", "clm", "--output-dir", "x",
                       "--max-steps", "x"), "--max-steps"), (("nonsense",), "invalid choice: 'nonsense'")]:
        proc, _ = _run_cli(*argv)
        lines = _said(proc)
        assert proc.returncode == 2 and len(lines) == 1 and says in lines[0], lines
        assert lines[0].endswith(f"(see `hf-vanilla {argv[0] if argv[0] in COMMANDS else ''}".rstrip() + " --help`)")


def test_each_subcommands_refusal_costs_about_what_help_costs(tmp_path):
    """CPU seconds of the first bad input of each subcommand against `--help`'s (see the folder refusals above)."""
    _, help_s, _ = _timed("-m", "hf_vanilla.cli", "--help")
    ratios = {}
    for command, cases in _bad_inputs(tmp_path).items():
        argv, says = cases[0]
        proc, seconds, _ = _timed("-m", "hf_vanilla.cli", *argv)
        assert proc.returncode == 2 and all(word in proc.stderr for word in says), (argv, _said(proc))
        ratios[command] = seconds / help_s
    assert max(ratios.values()) < 10, ratios


def _venv_without_torch_imports(tmp: Path) -> Path:
    """A venv for scripts/setup.sh: its python is this test's interpreter, and its stamp says hf_vanilla[dev] is
    installed for this pyproject.toml, so setup.sh installs nothing."""
    import hashlib

    venv = tmp / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (venv / "bin" / "python").chmod(0o755)
    (venv / ".hf_vanilla-installed").write_text(hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest() + "\n")
    return venv


def test_the_main_job_script_refuses_bad_input_without_importing_torch_even_in_its_set_up(tmp_path):
    """Issue 51: `bash scripts/main_job.sh --bogus` took 95-108 s at load 32, because setup.sh imported torch on
    every call to decide whether to install it. Every python the script starts runs with PYTHONPROFILEIMPORTTIME,
    so setup.sh's own checks are watched too."""
    venv = _venv_without_torch_imports(tmp_path)
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_VANILLA_VENV": str(venv), "PYTHONPROFILEIMPORTTIME": "1"}
    _, help_s, _ = _timed("-m", "hf_vanilla.cli", "--help")
    for argv, says in [(("--bogus",), "unrecognized arguments: --bogus"), (("--output-dir", str(a_file)), "is a file"),
                       (("--max-steps", "0"), "--max-steps: must be at least 1")]:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run(["bash", str(ROOT / "scripts" / "main_job.sh"), *argv], capture_output=True, text=True,
                              timeout=300, cwd=tmp_path, env=env)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        imported = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines()
                    if line.startswith("import time:")}
        lines = _said(proc)
        assert proc.returncode == 2 and len(lines) == 1 and says in lines[0], (argv, lines)
        assert "--num-train-epochs" not in lines[0] and "(max_steps)" not in lines[0]  # only the job's own options
        assert "importlib" in imported and not imported & HEAVY, (argv, sorted(imported & HEAVY))
        seconds = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        assert seconds / help_s < 10, (argv, seconds, help_s)


# --------------------------------------------------------------------------------------------------
# The main job says what it costs before it trains (issue 51: hours on a busy machine, with no warning).


def _main_job_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("main_job_estimate", ROOT / "scripts" / "main_job.py")
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    return job


def test_the_estimate_says_minutes_at_this_speed_in_words():
    job = _main_job_module()
    assert "400 training steps take about 80 minutes at this machine's current speed (12.00 s a step" in \
        job.estimate_line(12.0, 400)
    assert "take about 1 minute at" in job.estimate_line(0.15, 400)
    assert "take under a minute at" in job.estimate_line(0.1, 400)
    assert "--time-limit-minutes MINUTES" in job.estimate_line(0.1, 400)


@pytest.mark.parametrize(("argv", "checkpoints", "steps"), [
    ([], [], 400), (["--max-steps", "1000"], [], 1000), (["--resume", "--max-steps", "1000"], ["checkpoint-600", "checkpoint-300"], 400),
    (["--resume"], ["checkpoint-400"], None),  # nothing left to train: no estimate
], ids=["the job", "fewer steps", "resumed", "finished"])  # fmt: skip
def test_the_main_job_prints_its_estimate_before_training_starts(tmp_path, monkeypatch, capsys, argv, checkpoints,
                                                                 steps):
    job = _main_job_module()
    out = tmp_path / "run"
    for name in checkpoints:
        (out / name).mkdir(parents=True)
    probed: list[int] = []
    monkeypatch.setattr(job, "check_first", lambda args: None)  # the folder's own checks: tested above
    monkeypatch.setattr(job, "probe_seconds_per_step", lambda args: probed.append(args.max_steps) or 0.3)

    def training_starts(args, finish_command=None):
        raise SystemExit(f"training starts; said before: {capsys.readouterr().out!r}")

    monkeypatch.setattr(job, "run_job", training_starts)
    with pytest.raises(SystemExit) as started:
        job.main(["--output-dir", str(out), *argv])
    said = str(started.value)
    if steps is None:
        assert probed == [] and "training steps take" not in said
    else:
        assert f"main_job: {steps} training steps take about {0.3 * steps / 60:g} minutes" in said, said


def test_the_probe_times_steps_of_the_jobs_model():
    """A real probe, of the job's model made small by --config (the job's own takes 3 steps: ~1 s quiet)."""
    job = _main_job_module()
    tiny = json.dumps({"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2})
    args = job.parse_args(["--config", tiny])
    seconds = job.probe_seconds_per_step(args, repeats=1)
    assert 0 < seconds < 60


def test_a_config_value_only_the_model_can_judge_is_still_one_sentence_from_the_main_job(tmp_path, capsys):
    """A --config value VanillaConfig refuses is known only once transformers loads (the estimate's probe builds the
    model first): one sentence, exit 2, no traceback, nothing written."""
    job = _main_job_module()
    status = job.main(["--config", '{"norm_position": "sideways"}', "--output-dir", str(tmp_path / "run")])
    said = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert status == 2 and said == ["main_job: VanillaConfig.norm_position='sideways' is not supported; choose one "
                                    "of 'pre', 'post'."], said
    assert not (tmp_path / "run").exists()
