"""`hf-vanilla` command line: thin dispatch to the modules that do the work.

Each subcommand lives with its module, which exposes ``add_cli(subparsers)``: it adds its parser and
sets ``func`` (a callable taking the parsed arguments and returning an exit code). Modules import
their heavy dependencies inside functions, so ``hf-vanilla --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Subcommand modules, in the order `--help` lists them; a module missing from an install is skipped.
COMMAND_MODULES = (
    "hf_vanilla.train",
    "hf_vanilla.convert",
    "hf_vanilla.hub",
    "hf_vanilla.bench",
    "hf_vanilla.viz",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hf-vanilla",
        description="The transformer of 'Attention Is All You Need' as Hugging Face models.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name != name:  # the module exists but something it needs does not
                raise
            continue
        module.add_cli(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
