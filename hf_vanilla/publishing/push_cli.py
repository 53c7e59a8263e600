"""`hf-vanilla push`: the command's arguments, without huggingface_hub or torch, so ``hf-vanilla push --help``
answers at once; the push itself, :mod:`hf_vanilla.publishing.hub`, is imported when the command runs."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from ..arguments import existing_folder, hub_repo_id
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


def check_timeout(timeout: object) -> None:
    """``timeout`` (--timeout) is a finite number of seconds above 0."""
    if not (isinstance(timeout, int | float) and math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout (--timeout) must be a positive number of seconds, got {timeout!r}")


class HubUnusableError(HfVanillaError):
    """The Hub cannot take a push now (offline, unreachable, silent, or refusing the token); nothing was uploaded."""


#: What every refusal of the Hub check ends with: the push stopped before its first upload.
NOTHING_SENT = "Nothing was uploaded."


def check_hub_answers(token: str | None, timeout: float, endpoint: str | None = None) -> None:
    """Ask the Hub who ``token`` (else HF_TOKEN, else the saved login) belongs to, before anything is uploaded: an
    offline setting, no token, an address that does not answer, a Hub silent for ``timeout`` seconds or one that
    refuses the token is :class:`HubUnusableError`, one sentence saying what to do. ``endpoint``: HF_ENDPOINT's."""
    # huggingface_hub (and its HTTP client) once a push is about to send: the refusals before it answer without them
    import httpx2
    from huggingface_hub import constants, get_token
    from huggingface_hub.utils import get_session

    endpoint = (endpoint or constants.ENDPOINT).rstrip("/")
    if constants.HF_HUB_OFFLINE:
        raise HubUnusableError(f"HF_HUB_OFFLINE is set, so the Hub at {endpoint} was not asked: unset it (or set "
                               f"HF_HUB_OFFLINE=0) to push. {NOTHING_SENT}")
    token = token or get_token()
    if not token:
        raise HubUnusableError(f"No Hub token for {endpoint}: log in with `hf auth login`, set HF_TOKEN or pass "
                               f"--token (a write token). {NOTHING_SENT}")
    try:
        answer = get_session().get(f"{endpoint}/api/whoami-v2", headers={"authorization": f"Bearer {token}"},
                                   timeout=timeout)
    except httpx2.TimeoutException:
        raise HubUnusableError(f"The Hub at {endpoint} did not answer within {timeout:g} s. Nothing was committed: "
                               "check the network and HF_ENDPOINT, then run the push again, or allow longer with "
                               "--timeout SECONDS.") from None
    except httpx2.TransportError as error:
        reason = " ".join(str(error).split()) or type(error).__name__
        raise HubUnusableError(f"Cannot reach the Hub at {endpoint} ({reason}): check the network connection and "
                               f"HF_ENDPOINT (unset, it is https://huggingface.co), then run the push again. "
                               f"{NOTHING_SENT}") from None
    if answer.status_code == 401:
        raise HubUnusableError(f"The Hub at {endpoint} refused the token (401: invalid or expired, or a token of "
                               "another Hub): log in with `hf auth login`, set HF_TOKEN or pass --token with a write "
                               f"token. {NOTHING_SENT}")
    if not answer.is_success:
        raise HubUnusableError(f"The Hub at {endpoint} answered {answer.status_code} {answer.reason_phrase} when "
                               f"asked whose the token is: try again later, or check HF_ENDPOINT. {NOTHING_SENT}")


def ask_hub_first(api: object, timeout: float) -> None:
    """:func:`check_hub_answers` for the Hub ``api`` talks to, when it is huggingface_hub's client (a stand-in that
    speaks no HTTP, as the tests pass, has no Hub to ask)."""
    # huggingface_hub once a push is about to send (start-up time of the refusals before it)
    from huggingface_hub import HfApi

    if isinstance(api, HfApi):
        check_hub_answers(api.token if isinstance(api.token, str) else None, timeout, api.endpoint)


def run(args: argparse.Namespace) -> int:
    """Refuse what the folder and the arguments alone refuse (no folder, an unfinished run, a malformed repo id) at
    once, then push."""
    try:
        existing_folder(args.run_dir, "RUN_DIR", "give a training run or a save_pretrained folder (local files only)")
        hub_repo_id(args.repo_id)
        check_timeout(args.timeout)
        check_before_upload(Path(args.run_dir), args.allow_incomplete)
    except (HfVanillaError, ValueError, OSError) as error:
        return refuse("push", error)
    return load_when_run("hf_vanilla.publishing.hub", "run_cli")(args)



__all__ = ["DEFAULT_TIMEOUT_S", "HubUnusableError", "add_cli", "ask_hub_first", "check_hub_answers", "check_timeout"]
