"""`hf-vanilla bench`: hf_vanilla against transformers' own models, built at matched sizes.

The command's arguments and the names they choose from, without torch (so ``hf-vanilla bench --help`` answers at
once); the benchmark itself, :mod:`hf_vanilla.tools.bench`, is imported when the command runs.
"""

from __future__ import annotations

import argparse

from ..arguments import at_least, check_first, writable_file, writable_folder
from ..extras import load_when_run

PAIRS = ("llama", "gpt2", "bert", "bart")
MEASURES = ("train", "forward", "generate", "memory", "attention-memory")
SIZES = ("124m", "350m", "1b")  # the ladder's rungs (hf_vanilla.tools.ladder.SIZES)
DESCRIPTION = __doc__.split("\n\n")[0]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pairs", nargs="+", choices=PAIRS, default=list(PAIRS), help="which pairs (default: all)")
    parser.add_argument("--measure", nargs="+", choices=MEASURES, default=list(MEASURES), dest="measures",
                        help="which measurements (default: all)")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes and few repeats: a smoke test, not a benchmark")
    parser.add_argument("--repeats", type=int, default=None, help="rounds per measurement (default 7; tiny 3)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--compile", action="store_true", help="also time both models under torch.compile (slow)")
    parser.add_argument("--attn", default="sdpa", choices=("sdpa", "eager"), help="attention backend of both models")
    parser.add_argument("--control", action="store_true",
                        help="also time an identical copy of ours: the A/A column, how far noise alone moves a ratio")
    parser.add_argument("--size", nargs="+", choices=SIZES, default=None,
                        help="instead: the size ladder at the user's size (GPT-2 124M, Llama 350M, TinyLlama 1.1B), "
                        "each measurement in a fresh process against the twin (see hf_vanilla.tools.ladder)")
    parser.add_argument("--estimate", action="store_true",
                        help="with --size: print the plan, each process's estimated seconds from this machine's rates "
                        "now and the memory it needs; build nothing")
    parser.add_argument("--rows", choices=("all", "build-load"), default="all",
                        help="with --size: every row of the ladder, or only the code import, meta build and load rows "
                        "(minutes instead of tens of minutes: nothing converts back, saves, runs or trains)")
    parser.add_argument("--work", metavar="DIR", default=None,
                        help="with --size: where the checkpoints are written (default: the system's temporary folder)")
    parser.add_argument("--json", metavar="FILE", help="write the rows as JSON: "
                        "[{name, ours, reference, unit, ratio, control_ratio}]")


def add_cli(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bench", help="benchmark against transformers' Llama, GPT-2, BERT and BART",
                                   description=DESCRIPTION)
    add_arguments(parser)
    parser.set_defaults(func=check_first(check_arguments, load_when_run("hf_vanilla.tools.bench", "run_from_args")))


def check_arguments(args: argparse.Namespace) -> None:
    """What the arguments alone refuse, before torch loads."""
    at_least(1, args, "repeats", "threads")
    if args.work is not None:
        writable_folder(args.work, "--work")
    if args.json is not None:
        writable_file(args.json, "--json")


__all__ = ["DESCRIPTION", "MEASURES", "PAIRS", "SIZES", "add_arguments", "add_cli", "check_arguments"]
