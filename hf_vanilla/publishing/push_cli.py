"""`hf-vanilla push`: the command's arguments, without huggingface_hub or torch, so ``hf-vanilla push --help``
answers at once; the push itself, :mod:`hf_vanilla.publishing.hub`, is imported when the command runs."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import HfVanillaError, refuse
from ..extras import load_when_run
from .unfinished import check_before_upload

#: Seconds a push waits for the Hub to send anything (connect, each read, each write) before giving up:
#: huggingface_hub's own client waits forever, so a Hub that takes the connection and never answers would hang
#: the push. Long enough for the Hub to process a large commit; it bounds silence, not an upload's length.
DEFAULT_TIMEOUT_S = 120.0


def add_cli(subparsers: argparse._SubParsersAction) -> None:
    """``hf-vanilla push RUN_DIR REPO_ID [--revision BRANCH] [--private] [--token TOKEN] [--commit-message MSG]``."""
    parser = subparsers.add_parser(
        "push",
        help="upload a training run (model, code, tokenizer, card) to the Hub in one commit",
        description=(
            "Upload RUN_DIR (a training run directory or any save_pretrained folder) to the Hub repo REPO_ID in "
            "one commit: safetensors weights, config.json with auto_map, the model code, tokenizer, generation "
            "config, run.json/metrics.json/curves.png and the model card. The repo (and branch) are created if "
            "needed. The Hub is HF_ENDPOINT (default huggingface.co); the token is --token, HF_TOKEN or the one "
            "saved by `hf auth login`. The model then loads with trust_remote_code=True, without hf_vanilla."
        ),
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="folder to upload (local files only)")
    parser.add_argument(
        "repo_id", metavar="REPO_ID", help="'user/name' or 'org/name' ('name' alone: your namespace)"
    )
    parser.add_argument(
        "--revision", metavar="BRANCH", help="branch to commit to (created from main if missing)"
    )
    parser.add_argument(
        "--private", action="store_true", help="create the repo private (refused if it is public)"
    )
    parser.add_argument(
        "--token", help="Hub token (prefer HF_TOKEN: a token on the command line shows in `ps`)"
    )
    parser.add_argument("--commit-message", metavar="MSG", help="message of the commit")
    parser.add_argument(
        "--include",
        metavar="NAME",
        action="append",
        default=[],
        help="also upload this file or folder of RUN_DIR (repeatable); only what loading needs and the run "
        "files are uploaded otherwise, and the rest is listed as skipped",
    )
    parser.add_argument(
        "--allow-incomplete",
        action="store_true",
        help="push a run whose run.json says it is still running, diverged or was interrupted (refused otherwise)",
    )
    parser.add_argument(
        "--publish-samples",
        action="store_true",
        help="publish the sample outputs of a run trained on local files or a datasets dataset: they quote its "
        "texts, so they are left out of the card and metrics.json otherwise (built-in corpora are public)",
    )
    parser.add_argument(
        "--allow-changed",
        action="store_true",
        help="publish files the run's record lists although they were changed after the run wrote them (refused "
        "otherwise, naming them); the card then names them as edited after training",
    )
    parser.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help=f"give up when the Hub sends nothing for this long (default {DEFAULT_TIMEOUT_S:g}); nothing is committed",
    )
    card = parser.add_mutually_exclusive_group()
    card.add_argument(
        "--rebuild-card",
        dest="rebuild_card",
        action="store_true",
        default=None,
        help="build README.md afresh for REPO_ID from run.json/metrics.json",
    )
    card.add_argument(
        "--keep-card", dest="rebuild_card", action="store_false", help="upload README.md as it is"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Refuse what the folder alone refuses (an unfinished run, no folder) at once, then push."""
    try:
        check_before_upload(Path(args.run_dir), args.allow_incomplete)
    except (HfVanillaError, ValueError, OSError) as error:
        return refuse("push", error)
    return load_when_run("hf_vanilla.publishing.hub", "run_cli")(args)



__all__ = ["DEFAULT_TIMEOUT_S", "add_cli"]
