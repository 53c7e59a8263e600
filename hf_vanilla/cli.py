"""`hf-vanilla` command line: thin dispatch to the modules that do the work.

A subcommand's module is imported only when that subcommand is named, and defines its arguments without
importing torch, transformers, matplotlib or datasets, so every ``--help`` answers at once; the work is
imported when the command runs. A module either exposes ``run_command(argv) -> int`` (it parses its own arguments) or
``add_cli(subparsers)`` (it adds its parser and sets ``func``, a callable taking the parsed arguments
and returning an exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from . import __version__, register
from .arguments import OneSentenceParser
from .errors import HfVanillaError, refuse
from .extras import MissingExtraError

#: name -> (module, one-line help), in the order `--help` lists them.
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("hf_vanilla.training.cli", "train a model on real text (clm, mlm, translation, classification)"),
    "convert": ("hf_vanilla.commands", "convert a checkpoint between native transformers and hf_vanilla"),
    "push": ("hf_vanilla.publishing.push_cli", "upload a training run (model, code, tokenizer, card) to the Hub in one commit"),
    "compare": ("hf_vanilla.experiments.command", "compare rows of the table of variants on your data, with seeds and intervals"),
    "bench": ("hf_vanilla.tools.bench_cli", "benchmark against transformers' Llama, GPT-2, BERT and BART"),
    "attention": ("hf_vanilla.commands", "draw a model's attention on a text"),
    "positions": ("hf_vanilla.commands", "draw the positional schemes"),
    "generate": ("hf_vanilla.commands", "generate text with a trained causal LM or translation model"),
    "evaluate": ("hf_vanilla.commands", "held-out metrics of a saved training run"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser; only ``command``'s module is imported (and adds its real parser)."""
    parser = OneSentenceParser(  # its subcommands' parsers are of its class: every refusal in one sentence
        prog="hf-vanilla",
        description="The transformer of 'Attention Is All You Need' as Hugging Face models.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = COMMANDS[command][0] if command in COMMANDS else None
    for name, (module, help_text) in COMMANDS.items():
        if name in subparsers.choices:
            continue
        if module == chosen:
            importlib.import_module(module).add_cli(subparsers)
        else:
            subparsers.add_parser(name, help=help_text)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``hf-vanilla ARGV``; Ctrl-C anywhere (while the libraries import, too) ends it in one line, exit 130;
    an error of ours (:class:`hf_vanilla.errors.HfVanillaError`) in one sentence, exit 2."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return dispatch(argv)
    except KeyboardInterrupt:
        print("hf-vanilla: interrupted (Ctrl-C)", file=sys.stderr)
        return 130
    except MissingExtraError as error:  # the subcommand's layer is not installed: its one line says which extra
        print(f"hf-vanilla: {error}", file=sys.stderr)
        return 1
    except HfVanillaError as error:  # a busy folder, a model too big, a secret in the card: what and how to fix it
        return refuse(argv[0] if argv and argv[0] in COMMANDS else "", error)


def dispatch(argv: list[str]) -> int:
    command = argv[0] if argv and argv[0] in COMMANDS else None
    if command is not None:
        module = importlib.import_module(COMMANDS[command][0])
        if hasattr(module, "run_command"):
            return int(module.run_command(argv[1:], before_run=register) or 0)
    parser = build_parser(command)
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    return int(args.func(args) or 0)  # the work registers the Auto classes when it loads (extras.load_when_run)


if __name__ == "__main__":
    sys.exit(main())
