#!/usr/bin/env python
"""The experiments of docs/experiments.md as commands: a door to ``hf-vanilla compare`` and the scaling sweep.

    python scripts/experiments.py extrapolation [--out docs/figures] [--runs runs/experiments] [--tiny] [COMPARE FLAGS]
    python scripts/experiments.py warmup        [--out docs/figures] [--runs runs/experiments] [--tiny] [COMPARE FLAGS]
    python scripts/experiments.py scaling       [--out docs/figures] [--runs runs/scaling] [--workers 2] [--tiny]
                                                [--plan cpu|gpu] [--estimate]
                                                [--reanalyse RECORD [--add-runs ...] [--rerun]]

``extrapolation`` and ``warmup`` are ``hf-vanilla compare --study NAME --name NAME --output-dir OUT --runs RUNS/NAME``
(hf_vanilla/experiments/recipes.py states each study; docs/compare.md shows what it measures): the report is
``OUT/NAME.md``, ``NAME.json``, ``NAME-curves.png`` (``NAME-extrapolation.png``), kept and refused as compare keeps
and refuses it. Any further flag is compare's (``--seeds 5``, ``--vary ...``, ``--data-files ...``); ``--tiny``
runs the same code in seconds. ``scaling`` is the IsoFLOP sweep of ``hf_vanilla/experiments/scaling.py`` (its
docstring).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

from hf_vanilla import register  # noqa: E402
from hf_vanilla.errors import REFUSED, HfVanillaError, sentence  # noqa: E402
from hf_vanilla.experiments import compare  # noqa: E402
from hf_vanilla.experiments.experiment import run_plan  # noqa: E402

#: ``--tiny``: a model and budget the tests run in seconds (compare's flags, after the study's).
TINY = ("--preset", "tiny", "--config", "hidden_size=32", "--config", "intermediate_size=64", "--config",
        "num_hidden_layers=2", "--config", "num_attention_heads=2", "--block-size", "8", "--batch-size", "4",
        "--vocab-size", "300", "--max-steps", "4", "--seeds", "2", "--max-eval-samples", "4", "--max-test-samples", "8")


def compare_argv(name: str, out: Path, runs: Path, tiny: bool, rest: list[str]) -> list[str]:
    """The ``hf-vanilla compare`` flags of ``scripts/experiments.py NAME``."""
    return ["--study", name, "--name", name, "--output-dir", str(out), "--runs", str(runs / name),
            *(TINY if tiny else ()), *rest]


def run_study(name: str, argv: list[str], command: str) -> int:
    """``hf-vanilla compare`` with ``argv`` (``command``: this one, for the report); a refusal is one sentence
    naming this command, exit 2."""
    argv = compare.with_study(argv)
    args = compare.build_parser(f"experiments.py {name}").parse_args(argv)
    try:
        plan = compare.make_plan(args, command)
        register()
        return run_plan(plan, workers=args.workers, threads=args.threads, estimate_only=args.estimate,
                        time_limit_minutes=args.time_limit_minutes)
    except (HfVanillaError, OSError, ValueError) as error:  # a refused or busy folder, a full disk: one sentence
        print(f"experiments.py {name}: {sentence(error)}", file=sys.stderr)
        return REFUSED


def scaling_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    # the sweep's module loads torch at import: only when the sweep runs (start-up time of --help)
    from hf_vanilla.experiments import scaling

    if (args.add_runs or args.rerun) and args.reanalyse is None:
        parser.error("--add-runs and --rerun need --reanalyse RECORD: they add runs to a written record's")
    try:
        scaling.check_device(args.device, args.dtype)
        if args.reanalyse is not None:
            scaling.reanalyse(args.out, args.reanalyse, tuple(args.add_runs), args.runs if args.rerun else None,
                              args.workers)
            return 0
    except ValueError as error:
        parser.error(str(error))
    plan = scaling.choose_plan(args.plan, args.device, args.tiny)
    if args.estimate:
        widths = sorted(scaling.home_budgets(plan, scaling.family(plan)))
        print(json.dumps(scaling.estimate(plan, scaling.step_seconds(plan, widths), args.workers), indent=1))
        return 0
    scaling.sweep(args.out, args.runs, plan, data_files=tuple(args.data_files), workers=args.workers,
                  device=args.device, dtype=args.dtype, train=not args.no_train)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment", choices=["extrapolation", "warmup", "scaling"])
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "experiments", help="where the report goes")
    parser.add_argument("--runs", type=Path, default=REPO / "runs" / "experiments", help="where the runs go")
    parser.add_argument("--tiny", action="store_true", help="a tiny model for a few steps: seconds, for the tests")
    parser.add_argument("--data-files", nargs="*", default=[], metavar="[SPLIT=]PATH", help="local text instead")
    parser.add_argument("--workers", type=int, default=None, help="runs trained at once (scaling: default 1)")
    parser.add_argument("--device", default="cpu", help="scaling: where to train (cpu, cuda, cuda:1, ...)")
    parser.add_argument("--dtype", default="float32", help="scaling: float32, or bfloat16 (autocast)")
    parser.add_argument("--no-train", action="store_true", help="scaling: fit and draw the finished budgets only")
    parser.add_argument("--plan", choices=["cpu", "gpu"], default=None, help="scaling: which sweep")
    parser.add_argument("--estimate", action="store_true", help="print the time the experiment takes; train nothing")
    parser.add_argument("--reanalyse", type=Path, default=None, metavar="RECORD", help="scaling: refit a record")
    parser.add_argument("--add-runs", type=Path, nargs="*", default=[], metavar="RESULT",
                        help="scaling, with --reanalyse: result.json files of more runs to fit too")
    parser.add_argument("--rerun", action="store_true", help="scaling, with --reanalyse: first train in --runs the "
                        "IsoFLOP runs the record names as not rerun at their width's chosen rate")
    argv = sys.argv[1:] if argv is None else list(argv)
    args, rest = parser.parse_known_args(argv)
    if args.experiment == "scaling":
        args = parser.parse_args(argv)  # the sweep takes only its own flags
        args.workers = args.workers or 1
        return scaling_command(parser, args)
    rest += ["--data-files", *args.data_files] * bool(args.data_files) + ["--estimate"] * args.estimate
    rest += ["--workers", str(args.workers)] * (args.workers is not None)
    return run_study(args.experiment, compare_argv(args.experiment, args.out, args.runs, args.tiny, rest),
                     "python scripts/experiments.py " + shlex.join(argv))


if __name__ == "__main__":
    sys.exit(main())
