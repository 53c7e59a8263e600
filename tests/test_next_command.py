"""The next command is always the right one (issue 43): every command a run's message advises, run exactly as printed,
does what the message says. Each test stops a tiny run where a user meets the advice (Ctrl-C during training or the
final evaluation, a finished run, a time limit, a refused push), runs the advised command and checks the outcome: the
run trained to its planned step, evaluated, and its records say so; a finished run stays as it was.

The main job runs as scripts/main_job.py does (its main(), in process), on the tiny model and local files instead of
Shakespeare and its 4M-parameter decoder; its command line, messages and records are the real ones.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import re
import shlex
import signal
from pathlib import Path

import pytest

import hf_vanilla  # noqa: F401  (registers the Auto classes)
from hf_vanilla.training import callbacks as run_callbacks
from hf_vanilla.training.cli import run_command

ROOT = Path(__file__).resolve().parents[1]
WORDS = "the king queen crown sword castle night day love war peace my lord good sir noble heart".split()

#: The tiny model and run, for the main job's options and `hf-vanilla train`'s flags alike.
TINY = dict(preset="tiny", config={"hidden_size": 32, "intermediate_size": 64}, vocab_size=300, block_size=16,
            batch_size=4, use_cpu=True, disable_tqdm=True, max_new_tokens=4)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[str]:
    """train/validation/test text files: ``SPLIT=PATH`` entries for data_files."""
    root, rng = tmp_path_factory.mktemp("corpus"), random.Random(0)
    entries = []
    for split, n in (("train", 200), ("validation", 20), ("test", 20)):
        path = root / f"{split}.txt"
        path.write_text("".join(" ".join(rng.choices(WORDS, k=rng.randint(4, 12))) + ".\n\n" for _ in range(n)))
        entries.append(f"{split}={path}")
    return entries


@pytest.fixture(autouse=True)
def ctrl_c_raises_keyboard_interrupt():
    """Python's own Ctrl-C handler, as in a terminal (a shell may start pytest with SIGINT ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def train_flags(corpus: list[str]) -> list[str]:
    """`hf-vanilla train` flags of the tiny run (the rest given by each test)."""
    flags = ["--task", "clm", "--preset", "tiny", "--config", "hidden_size=32", "--config", "intermediate_size=64",
             "--vocab-size", "300", "--block-size", "16", "--batch-size", "4", "--use-cpu", "--disable-tqdm",
             "--num-samples", "0"]
    return flags + [word for entry in corpus for word in ("--data-files", entry)]


@pytest.fixture
def main_job(monkeypatch, corpus):
    """scripts/main_job.py as a module, its options those of the tiny run (its command line as the README's)."""
    spec = importlib.util.spec_from_file_location("main_job_under_test", ROOT / "scripts" / "main_job.py")
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    own = job.job_options
    monkeypatch.setattr(job, "job_options", lambda args: {**own(args), **TINY, "data_files": corpus})
    return job


def ctrl_c_at_step(monkeypatch, step: int) -> None:
    """Ctrl-C arrives while optimizer step ``step`` runs (the run's own handler then stops at its end)."""
    timer_end = run_callbacks.StepTimer.on_step_end

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == step:
            os.kill(os.getpid(), signal.SIGINT)
        return timer_end(self, args, state, control, **kwargs)

    monkeypatch.setattr(run_callbacks.StepTimer, "on_step_end", on_step_end)


def ctrl_c_during_evaluation(monkeypatch) -> None:
    """Ctrl-C arrives during the final evaluation (the first call of the task's evaluate), once."""
    task = type(hf_vanilla.training.get_task("clm"))
    evaluate = task.evaluate

    def interrupted(self, *args, **kwargs):
        monkeypatch.setattr(task, "evaluate", evaluate)
        raise KeyboardInterrupt

    monkeypatch.setattr(task, "evaluate", interrupted)


def advised(message: str) -> list[str]:
    """The last command a message names in backticks, as words (what a user would paste)."""
    commands = re.findall(r"`([^`]+)`", message)
    assert commands, message
    return shlex.split(commands[-1])


def run_advised(words: list[str], job) -> int:
    """Run an advised command in process: `hf-vanilla train ...` or `bash scripts/main_job.sh ...`."""
    if words[:2] == ["hf-vanilla", "train"]:
        return run_command(words[2:])
    assert words[:2] == ["bash", "scripts/main_job.sh"], words
    return job.main(words[2:])


def records(run_dir: Path) -> tuple[dict, dict | None]:
    run = json.loads((run_dir / "run.json").read_text())
    metrics = json.loads((run_dir / "metrics.json").read_text()) if (run_dir / "metrics.json").exists() else None
    return run, metrics


def finished(run_dir: Path, steps: int) -> None:
    """The outcome every finishing command promises: all planned steps trained, evaluated, recorded completed."""
    run, metrics = records(run_dir)
    assert run["status"] == "completed" and metrics is not None
    assert (metrics["planned_steps"], metrics["completed_steps"], metrics["stopped_early"]) == (steps, steps, False)
    assert metrics["metrics"]["test_perplexity"] > 1 and (run_dir / "model.safetensors").is_file()


# --------------------------------------------------------------------------------------------------
# hf-vanilla train


def test_ctrl_c_during_training_then_the_advised_command_trains_on_and_finishes(corpus, tmp_path, monkeypatch,
                                                                                capsys):
    run_dir = tmp_path / "run"
    argv = [*train_flags(corpus), "--output-dir", str(run_dir), "--max-steps", "4", "--time-limit", "30"]
    with monkeypatch.context() as patch:
        ctrl_c_at_step(patch, 2)
        assert run_command(argv) == 130
    words = advised(capsys.readouterr().err.strip().splitlines()[-1])
    assert "--time-limit" not in words  # to continue is to finish: no limit cuts it short again
    assert run_advised(words, None) == 0
    finished(run_dir, 4)
    assert records(run_dir)[0]["resumed_from"].endswith("checkpoint-2")


def test_a_time_limited_run_is_finished_by_the_command_it_names(corpus, tmp_path, capsys):
    """Issue 43: the command kept the limit, and following it added one more slice (step 11 -> 39 of 3000)."""
    run_dir = tmp_path / "run"
    argv = [*train_flags(corpus), "--output-dir", str(run_dir), "--max-steps", "5", "--time-limit-minutes", "1e-9"]
    assert run_command(argv) == 0
    capsys.readouterr()
    run, metrics = records(run_dir)
    assert metrics["completed_steps"] == 1 and metrics["stopped_early"]
    words = advised(metrics["how_to_finish"])
    assert run_advised(words, None) == 0
    finished(run_dir, 5)


def test_resume_with_options_the_run_did_not_record_is_refused_naming_the_option_before_tokenising(
        corpus, tmp_path, monkeypatch, capsys):
    """Issue 43: `hf-vanilla train --task clm --output-dir <main job's run> --resume` tokenised for 2 minutes and then
    failed on the optimizer's state; refused now in one sentence naming the option, before the data loads."""
    from hf_vanilla.training import run as run_module

    run_dir = tmp_path / "run"
    argv = [*train_flags(corpus), "--output-dir", str(run_dir), "--max-steps", "2"]
    assert run_command(argv) == 0
    capsys.readouterr()

    def no_data(*args, **kwargs):
        raise AssertionError("the data was loaded before the refusal")

    monkeypatch.setattr(run_module, "load_task_data", no_data)
    changed = [*argv, "--vocab-size", "500", "--resume"]
    assert run_command(changed) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "--vocab-size (vocab_size) 300, not 500" in error
    assert words_after_run(error)[-1] == "--resume"  # the run's own command
    with pytest.raises(ValueError, match=r"--block-size \(block_size\) 16, not 32"):  # train() refuses it too
        hf_vanilla.training.train("clm", run_dir, **dict(TINY, data_files=corpus, max_steps=2, num_samples=0,
                                                         block_size=32, resume=True))


def words_after_run(message: str) -> list[str]:
    return shlex.split(re.search(r"run `([^`]+)`", message).group(1))


# --------------------------------------------------------------------------------------------------
# The main job


def test_main_job_ctrl_c_during_evaluation_then_the_advised_command_finishes_with_the_training_time(
        main_job, tmp_path, monkeypatch, capsys):
    """Issue 43: the advised --resume ended in `TypeError: type NoneType doesn't define __round__`, exit 1, and
    metrics.json's timing said nulls."""
    run_dir = tmp_path / "main"
    with monkeypatch.context() as patch:
        ctrl_c_during_evaluation(patch)
        assert main_job.main(["--output-dir", str(run_dir), "--max-steps", "3"]) == 130
    err = capsys.readouterr().err
    assert "after training finished" in err
    words = advised(err)
    assert words[:2] == ["bash", "scripts/main_job.sh"] and "--output-dir" in words and words[-1] == "--resume"
    trained = records(run_dir)[0]["training_time"]
    assert trained["train_time_s"] > 0 and trained["time_per_step_s_median"] > 0

    status = run_advised(words, main_job)
    out, err = capsys.readouterr()
    finished(run_dir, 3)
    timing = records(run_dir)[1]["timing"]
    assert timing["train_time_s"] == trained["train_time_s"]
    assert timing["time_per_step_s_median"] == trained["time_per_step_s_median"]
    summary = json.loads(out[out.index("=== summary ===") + 15:out.index("held-out")])
    assert summary["train_time_s"] == round(trained["train_time_s"], 1) and summary["completed_steps"] == 3
    assert status == (1 if "main_job: exit 1:" in err else 0) and "Traceback" not in err


def test_main_job_resumed_when_finished_reports_the_run_as_recorded(main_job, tmp_path, capsys):
    """The refusal of a second run says "pass --resume to continue it"; followed, it must neither train nor
    overwrite the finished run's records (issue 43: metrics.json's timing became nulls and 0.33 s)."""
    run_dir = tmp_path / "main"
    first = main_job.main(["--output-dir", str(run_dir), "--max-steps", "2"])
    first_out = capsys.readouterr().out
    files = {name: (run_dir / name).read_bytes() for name in ("metrics.json", "run.json", "main_job.json",
                                                             "model.safetensors", "README.md")}
    assert main_job.main(["--output-dir", str(run_dir), "--max-steps", "2"]) == 2
    refusal = capsys.readouterr().err
    assert "pass --resume to continue it" in refusal
    again = main_job.main(["--output-dir", str(run_dir), "--max-steps", "2", "--resume"])
    out = capsys.readouterr().out
    assert again == first
    assert {name: (run_dir / name).read_bytes() for name in files} == files
    assert out.splitlines()[-1] == first_out.splitlines()[-1]  # the same last line, from the records


def test_main_job_cut_short_by_its_time_limit_is_finished_by_the_command_it_names(main_job, tmp_path, capsys):
    run_dir = tmp_path / "main"
    assert main_job.main(["--output-dir", str(run_dir), "--max-steps", "4", "--time-limit-minutes", "1e-9"]) == 1
    out, err = capsys.readouterr()
    assert "STOPPED EARLY" in out.splitlines()[-1] and "main_job: exit 1: " in err and "shorter run" in err
    words = advised(records(run_dir)[1]["how_to_finish"])
    assert words[:2] == ["bash", "scripts/main_job.sh"] and not {"--time-limit", "--time-limit-minutes"} & set(words)
    run_advised(words, main_job)
    finished(run_dir, 4)


def test_push_of_an_interrupted_main_job_names_the_main_jobs_command_and_it_finishes_the_run(
        main_job, tmp_path, monkeypatch, capsys):
    """Issue 43: push said `hf-vanilla train ... --resume` for a main-job run, and for a run stopped after training
    that it "has not saved its model yet (a run saves it when training finishes)"."""
    from hf_vanilla.cli import main as hf_vanilla_main
    from hf_vanilla.publishing.unfinished import check_before_upload

    run_dir = tmp_path / "main"
    with monkeypatch.context() as patch:
        ctrl_c_during_evaluation(patch)
        assert main_job.main(["--output-dir", str(run_dir), "--max-steps", "2"]) == 130
    capsys.readouterr()
    assert hf_vanilla_main(["push", str(run_dir), "someone/model"]) == 2
    refusal = capsys.readouterr().err
    assert refusal.startswith("hf-vanilla push: refusing to push") and "main_job.sh" in refusal
    assert hf_vanilla_main(["push", str(run_dir), "someone/model", "--allow-incomplete"]) == 2
    incomplete = capsys.readouterr().err
    assert "has not saved its model yet" not in incomplete and "training finished (step 2 of 2)" in incomplete
    assert advised(incomplete) == advised(refusal)

    run_advised(advised(refusal), main_job)
    finished(run_dir, 2)
    check_before_upload(run_dir, allow_incomplete=False)  # what refused the push lets it through now


def test_main_job_worse_than_its_baseline_says_so_and_why_it_exits_1(main_job, capsys):
    """Issue 43: "perplexity 565.13 vs unigram 563.04: 1.0x lower" and exit 1 without a word."""
    done = {"planned_steps": 24, "completed_steps": 24, "stopped_early": False, "stop_reason": None,
            "how_to_finish": None}
    line = main_job.final_line(565.13, 563.04, done)
    assert "565.13 vs unigram 563.04: higher than the unigram;" in line and "lower" not in line
    assert main_job.failures(565.13, 563.04, done) == [
        "the model predicts the held-out plays no better than the unigram baseline (word frequencies alone): it "
        "trained too few steps for its figures to mean anything, or diverged"]
    assert main_job.failures(124.6, 563.04, done) == []
    assert "1.01x lower" not in main_job.final_line(557.0, 563.04, done) and "barely" in main_job.final_line(
        557.0, 563.04, done)


def test_the_main_job_and_train_spell_the_time_limit_alike_and_take_the_other_spelling(main_job, capsys):
    from hf_vanilla.training.cli import build_parser, parse

    assert main_job.parse_args(["--time-limit-minutes", "3"]).time_limit == 3.0
    assert main_job.parse_args(["--time-limit", "3"]).time_limit == 3.0
    base = ["--task", "clm", "--output-dir", "x"]
    assert parse([*base, "--time-limit-minutes", "3"])[1].time_limit_minutes == 3.0
    assert parse([*base, "--time-limit", "3"])[1].time_limit_minutes == 3.0
    with pytest.raises(SystemExit):
        main_job.parse_args(["--help"])
    for text in (capsys.readouterr().out, build_parser().format_help()):
        assert "--time-limit-minutes MINUTES, --time-limit MINUTES" in text


@pytest.mark.parametrize("script", ["train_translation.py", "train_all_tasks.py"])
def test_the_other_training_scripts_spell_the_time_limit_as_the_main_job_does(script, capsys):
    spec = importlib.util.spec_from_file_location(f"{script[:-3]}_under_test", ROOT / "scripts" / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit):
        module.main(["--help"])
    assert "--time-limit-minutes MINUTES, --time-limit MINUTES" in capsys.readouterr().out
