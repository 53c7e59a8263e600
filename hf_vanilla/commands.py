"""The arguments of the commands whose work needs torch: ``convert``, ``attention``, ``positions``, ``generate``, ``evaluate``.

This module imports nothing heavy, so ``hf-vanilla COMMAND --help`` answers at once; each parser's ``func`` first
refuses what the arguments and the file system alone refuse (a missing folder, a number out of range: ``check_*``
below), then imports the module that does the work.
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib
from pathlib import Path
from typing import Any

from . import variants
from .arguments import (
    BadArgumentError,
    above_zero,
    at_least,
    check_first,
    existing_folder,
    model_folder,
    writable_file,
    writable_folder,
)
from .extras import load_when_run
from .files.schema import ConfigFile, read_json


def add_attention(subparsers: argparse._SubParsersAction) -> None:
    attention = subparsers.add_parser(
        "attention",
        help="draw a model's attention on a text",
        description="Run TEXT through the model in MODEL_DIR and draw its attention: all layers x heads by "
        "default, one layer with --layer, one head across layers with --head, one head with both.",
    )
    attention.add_argument("model_dir", metavar="MODEL_DIR", help="a directory written by save_pretrained (model and tokenizer)")
    attention.add_argument("text", help="the input text")
    attention.add_argument("--out", required=True, type=Path, help="PNG file to write")
    attention.add_argument("--layer", type=int, help="only this layer (0-based)")
    attention.add_argument("--head", type=int, help="only this head (0-based)")
    attention.add_argument("--cross", action="store_true", help="cross-attention (encoder-decoder models)")
    attention.add_argument("--average", action="store_true",
                           help="one map: the mean of the selected layers and heads (with --cross: the alignment)")
    attention.add_argument("--stack", choices=("encoder", "decoder"),
                           help="which self-attention of an encoder-decoder (default: encoder)")
    attention.add_argument("--target", help="decoder text of an encoder-decoder (default: the model's greedy output)")
    attention.add_argument("--max-new-tokens", type=int, default=32, help="length of that greedy output")
    attention.add_argument("--max-tokens", type=int, metavar="N",
                           help="draw only the first N tokens of the text (and of --target); a text whose maps "
                           "would not fit in half the free memory is refused with the N that fits")
    attention.set_defaults(func=check_first(check_attention, load_when_run("hf_vanilla.tools.viz", "run_attention")))


def add_positions(subparsers: argparse._SubParsersAction) -> None:
    positions = subparsers.add_parser(
        "positions",
        help="draw the positional schemes",
        description="Write pictures of the sinusoidal table, RoPE, ALiBi, T5 relative bias and how each changes "
        "scores with distance into DIR (positions-*.png).",
    )
    positions.add_argument("--out", required=True, type=Path, metavar="DIR", help="directory for the PNG files")
    positions.add_argument("--model", metavar="MODEL_DIR", help="size the pictures like this model (and draw its trained relative bias)")
    positions.set_defaults(func=check_first(check_positions, load_when_run("hf_vanilla.tools.viz", "run_positions")))


def add_generate(subparsers: argparse._SubParsersAction) -> None:
    generate = subparsers.add_parser(
        "generate",
        help="generate text with a trained causal LM or translation model",
        description="Load RUN (a training run or any save_pretrained folder of a decoder or encoder-decoder model, "
        "with its tokenizer) and print PROMPT followed by its continuation (decoder; --no-return-full-text: the "
        "continuation alone), as transformers' text-generation pipeline returns it, or PROMPT's translation "
        "(encoder-decoder). "
        "Unset options take the values saved in RUN's generation_config.json.",
    )
    generate.add_argument("run_dir", metavar="RUN", help="the model folder (local files only)")
    generate.add_argument("prompt", metavar="PROMPT", help="the text to continue or translate")
    generate.add_argument("--max-new-tokens", type=int, help="tokens to generate (unset: the saved value, else 50)")
    generate.add_argument("--num-beams", type=int, help="beam search with this many beams (unset: the saved value)")
    generate.add_argument("--do-sample", action=argparse.BooleanOptionalAction,
                          help="sample (--do-sample) or decode greedily / by beam search (--no-do-sample) "
                          "(unset: the saved value)")
    generate.add_argument("--temperature", type=float, help="sampling temperature (with --do-sample)")
    generate.add_argument("--top-k", type=int, help="sample from the k likeliest tokens (with --do-sample)")
    generate.add_argument("--seed", type=int, default=0, help="seed of the sampling")
    generate.add_argument("--return-full-text", action=argparse.BooleanOptionalAction, default=True,
                          help="print the prompt before a decoder's continuation (the text-generation pipeline's "
                               "default); --no-return-full-text prints the continuation alone")
    generate.set_defaults(func=check_first(check_generate, load_when_run("hf_vanilla.inference", "run_generate")))


def add_evaluate(subparsers: argparse._SubParsersAction) -> None:
    evaluate = subparsers.add_parser(
        "evaluate",
        help="held-out metrics of a saved training run",
        description="Score the model of RUN (a folder written by `hf-vanilla train`) on the validation and test "
        "splits its run.json records, with the task's own metrics (perplexity, accuracy, BLEU, macro-F1): the "
        "figures of its metrics.json, recomputed. Prints them as JSON.",
    )
    evaluate.add_argument("run_dir", metavar="RUN", help="the training run folder")
    evaluate.add_argument("--batch-size", type=int, help="evaluation batch (unset: the run's)")
    evaluate.set_defaults(func=check_first(check_evaluate,
                                           load_when_run("hf_vanilla.training.evaluation", "run_evaluate")))


def add_convert(subparsers: argparse._SubParsersAction) -> None:
    """``hf-vanilla convert SRC_DIR OUT_DIR [--to-native | --to-vanilla] [--overwrite] [--max-shard-size SIZE]``."""
    parser = subparsers.add_parser(
        "convert",
        help="convert a checkpoint between native transformers and hf_vanilla",
        description=(
            "Convert a checkpoint directory exactly: a native checkpoint (model_type "
            f"{', '.join(variants.TO_HF_TARGETS[:-1])} or {variants.TO_HF_TARGETS[-1]}) becomes an hf_vanilla one, "
            "and an hf_vanilla checkpoint becomes native when its options allow. The direction follows SRC_DIR's "
            "model_type; tokenizer files and the generation config are carried over."
        ),
    )
    parser.add_argument("src_dir", metavar="SRC_DIR", help="checkpoint directory to read (local files only)")
    parser.add_argument("out_dir", metavar="OUT_DIR", help="directory to write (new, empty, or an earlier conversion)")
    direction = parser.add_mutually_exclusive_group()
    direction.add_argument("--to-native", action="store_true", help="require SRC_DIR to be an hf_vanilla checkpoint")
    direction.add_argument("--to-vanilla", action="store_true", help="require SRC_DIR to be a native checkpoint")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier conversion in OUT_DIR (only the files convert wrote there)")
    parser.add_argument("--max-shard-size", default=None, metavar="SIZE",
                        help="largest weight file to write, e.g. 2GB (default: as large as SRC_DIR's largest shard)")
    parser.set_defaults(func=check_first(check_convert, load_when_run("hf_vanilla.convert", "run_cli")))


# What each command refuses from its arguments and the file system alone, before torch loads.


def check_attention(args: argparse.Namespace) -> None:
    folder = model_folder(args.model_dir, "MODEL_DIR")
    writable_file(args.out, "--out")
    at_least(0, args, "layer", "head")
    at_least(1, args, "max_new_tokens", "max_tokens")
    config = read_json(folder / "config.json", ConfigFile)
    if config.get("model_type") == "vanilla":  # a native model's fields have other names: judged once it loads
        check_attention_selection(args, config)


def check_attention_selection(args: argparse.Namespace, config: dict[str, Any]) -> None:
    """--cross, --stack, --layer and --head against the saved hf_vanilla config, as the drawing would judge them."""
    family = config.get("architecture", declared_default("architecture"))  # save_pretrained omits defaults
    if family not in variants.values("architecture"):
        return  # not a family: the config's own check refuses it, in its words, when the model loads
    stacks = family_stacks(family)
    if args.cross and len(stacks) == 1:
        (with_cross,) = (name for name in variants.values("architecture") if len(family_stacks(name)) > 1)
        raise BadArgumentError(f"--cross needs an {with_cross}; {args.model_dir} is a {family} model")
    if args.stack is not None and not args.cross and args.stack not in stacks:
        raise BadArgumentError(f"--stack {args.stack}: this {family} model has only its {family} stack")
    encoder_layers = config.get("num_hidden_layers", declared_default("num_hidden_layers"))
    decoder_layers = config.get("num_decoder_layers") or encoder_layers
    drawn = "decoder" if args.cross else args.stack or stacks[0]
    layers = encoder_layers if drawn == "encoder" else decoder_layers
    for name, count, what in (("layer", layers, "layers"), ("head", config.get("num_attention_heads"), "heads")):
        value = getattr(args, name)
        if value is not None and isinstance(count, int) and value >= count:
            raise BadArgumentError(
                f"--{name} {value} is out of range: this model has {count} {what} (0-based: give 0 to {count - 1})")


def family_stacks(family: str) -> tuple[str, ...]:
    """The self-attention stacks of a family, as ``--stack`` names them: an encoder and a decoder where the family
    has a decoder depth of its own (its row of the table activates ``num_decoder_layers``), else its one stack."""
    two = "num_decoder_layers" in variants.row("architecture", family).active_fields
    return ("encoder", "decoder") if two else (family,)


@functools.cache
def declared_default(field: str) -> Any:
    """VanillaConfig's default of ``field``, read from its declaration in configuration_vanilla.py, not imported:
    that imports transformers, and these checks run before anything heavy loads."""
    source = Path(__file__).with_name("configuration_vanilla.py").read_text(encoding="utf-8")
    (declaration,) = (node for node in ast.parse(source).body if isinstance(node, ast.ClassDef)
                      and node.name == "VanillaConfig")
    for node in declaration.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == field:
            return ast.literal_eval(node.value)
    raise KeyError(f"VanillaConfig declares no field {field!r}")


def check_positions(args: argparse.Namespace) -> None:
    writable_folder(args.out, "--out")
    if args.model is not None:
        model_folder(args.model, "--model")


def check_generate(args: argparse.Namespace) -> None:
    model_folder(args.run_dir, "RUN")
    at_least(1, args, "max_new_tokens", "num_beams", "top_k")
    above_zero(args, "temperature")


def check_evaluate(args: argparse.Namespace) -> None:
    fix = "give the folder `hf-vanilla train --output-dir` wrote"
    if not (existing_folder(args.run_dir, "RUN", fix) / "run.json").is_file():
        raise BadArgumentError(f"RUN {args.run_dir} holds no run.json, so it is no training run; {fix}")
    folder = model_folder(args.run_dir, "RUN", fix)
    at_least(1, args, "batch_size")
    # Its run.json checked as a schema, the batch against its range: named like the work, by the dispatch's rule
    # (a subcommand's layer is entered when it runs), and light (the standard library and the run folder only).
    importlib.import_module("hf_vanilla.training.preflight").recorded_options(folder, args.batch_size)


def check_convert(args: argparse.Namespace) -> None:
    model_folder(args.src_dir, "SRC_DIR", "give a checkpoint folder (config.json and its weights; local files only)")
    writable_folder(args.out_dir, "OUT_DIR")


def add_cli(subparsers: argparse._SubParsersAction) -> None:
    """``hf-vanilla convert``, ``attention``, ``positions``, ``generate`` and ``evaluate``."""
    for add in (add_convert, add_attention, add_positions, add_generate, add_evaluate):
        add(subparsers)


__all__ = ["add_attention", "add_cli", "add_convert", "add_evaluate", "add_generate", "add_positions", "check_attention",
           "check_convert", "check_evaluate", "check_generate", "check_positions", "declared_default", "family_stacks"]
