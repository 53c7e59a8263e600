"""Share hf_vanilla models on the Hugging Face Hub: ``push_run`` and ``hf-vanilla push``.

A pushed repo loads anywhere with ``trust_remote_code=True``, without hf_vanilla installed: ``config.json``
carries ``auto_map`` and the code files (``configuration_vanilla.py``, ``modeling_vanilla.py``,
``positional.py``) travel with the weights. ``model.push_to_hub(...)`` (transformers' own) does this for a
model alone; :func:`push_run` shares a whole run directory (see :mod:`hf_vanilla.training`): weights, config,
code, tokenizer, generation config, ``run.json`` / ``metrics.json`` / ``curves.png`` and the model card.

Files go up by allow-list (:func:`plan_upload`): what the checkpoint is made of
(:func:`hf_vanilla.checkpoint.loading_files`) and the run files, nothing else unless named with ``include``, never
through a link that leaves the folder; a stray ``token`` or ``id_rsa`` in a run folder stays local, and the push
lists what it left behind. The run files and card go up without local paths, and without texts of data that may be
private unless asked (:func:`hf_vanilla.publishing.public.public_run_files`).

Everything goes up in ONE commit: either the repo moves to a complete new checkpoint, or (rejected token,
interrupted upload, concurrent push) it stays exactly where it was. The Hub is ``HF_ENDPOINT`` (default
huggingface.co), so a private Hub works the same way. See docs/hub.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2  # huggingface_hub's HTTP client
from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi, ModelCard
from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError
from huggingface_hub.utils import get_session

from ..checkpoint import PICKLE_SUFFIXES, TOKENIZER_FILES, code_files, loading_files, shipped_auto_map
from ..configuration_vanilla import AUTO_CLASSES, VanillaConfig
from ..errors import HfVanillaError, refuse, sentence
from ..files.atomic import is_model_file, is_weight_file
from ..files.output_folder import ChangedFileError, OutputFolder
from ..files.schema import ConfigFile, RunFile, read_json
from .card import build_model_card, build_saved_model_card, note_edited_files
from .public import QUOTED_FIELDS, local_paths, public_run_files, quoted_data
from .push_cli import DEFAULT_TIMEOUT_S, ask_hub_first, check_timeout
from .secrets import refuse_secrets
from .unfinished import check_finished, check_model_saved

logger = logging.getLogger(__name__)

#: The run files a training run writes beside the model (see :mod:`hf_vanilla.train`); README.md is the card.
RUN_FILES = ("metrics.json", "run.json", "curves.png")
CARD_FILE = "README.md"



@dataclass(frozen=True)
class UploadPlan:
    """What a push of a folder uploads (path in the repo -> local file) and the top-level names it leaves local."""

    files: dict[str, Path]
    skipped: list[str]


def plan_upload(run_dir: str | os.PathLike[str], include: Sequence[str] = ()) -> UploadPlan:
    """The files of ``run_dir`` that a push uploads: what the checkpoint is made of
    (:func:`hf_vanilla.checkpoint.loading_files`: configs, the weights loading reads, the code ``auto_map`` names,
    the tokenizer's own files), the run files (:data:`RUN_FILES`) where the folder's record says hf_vanilla wrote
    them (:func:`hf_vanilla.files.output_folder.own_files`), and whatever ``include`` names (a file or a
    folder, relative to ``run_dir``). In a folder with a record (a run, a conversion) only the files the record
    lists go up besides ``include``: a ``chat_template.jinja`` placed there, which the tokenizer would load as its
    chat template, is the user's. Everything else is skipped and listed; the card (``README.md``) is chosen by
    :func:`model_card_text`. A file that is a link leaving ``run_dir`` is refused, never followed.
    """
    folder = Path(run_dir)
    files = loading_files(folder)
    owner = OutputFolder(folder)
    ours = {path.name for path in owner.own_files()}  # a run.json the user wrote is not the run's record
    files.update((name, folder / name) for name in RUN_FILES if name in ours and (folder / name).is_file())
    if owner.record() is not None:  # hf_vanilla wrote it: publish what it wrote (a chat_template.jinja put there stays)
        files = {name: path for name, path in files.items() if name in ours}
    for name in include:
        files.update(_included(folder, name))
    _refuse_links_out(folder, [*files.values(), folder / CARD_FILE])
    top_level = {path.split("/")[0] for path in files} | {CARD_FILE}
    skipped = sorted(
        path.name + ("/" if path.is_dir() else "") for path in folder.iterdir() if path.name not in top_level
    )
    return UploadPlan(files, skipped)


def _refuse_links_out(folder: Path, paths: Sequence[Path]) -> None:
    """A push uploads what is inside the folder it was given: a link to a file elsewhere (``vocab.txt ->
    ~/.ssh/id_rsa``) would publish that file. Refused before anything is sent, naming each link."""
    inside = folder.resolve()
    leaving = [
        f"{path.relative_to(folder)} -> {path.resolve()}"
        for path in paths
        if (path.is_symlink() or path.exists()) and not path.resolve().is_relative_to(inside)
    ]
    if leaving:
        raise ValueError(
            f"refusing to push {folder}: {', '.join(leaving)} leave{'s' if len(leaving) == 1 else ''} the folder, "
            "and a push uploads only files inside it. Remove the link, or copy the file in (cp -L) if you mean "
            "to publish it."
        )


def _included(folder: Path, name: str) -> dict[str, Path]:
    """The files ``--include NAME`` adds: one file, or every file under a folder, by their path in the repo
    (paths under ``folder`` as given, so a link among them is seen as one by :func:`_refuse_links_out`)."""
    given = folder / name
    path = given.resolve()
    if not path.is_relative_to(folder.resolve()) or path == folder.resolve():
        raise ValueError(f"--include {name!r} is not a file or folder inside {folder}")
    if not path.exists():
        raise FileNotFoundError(f"--include {name!r}: {given} does not exist")
    found = [given] if path.is_file() else sorted(p for p in given.rglob("*") if p.is_file())
    pickles = [p.name for p in found if p.name.endswith(PICKLE_SUFFIXES)]
    if pickles:
        raise ValueError(
            f"--include {name!r} holds pickled files ({', '.join(pickles)}): the Hub flags them as unsafe to "
            "open and loading does not need them; convert them to safetensors or leave them out"
        )
    return {Path(os.path.normpath(p.relative_to(folder))).as_posix(): p for p in found}


def _with_auto_map(config: dict[str, Any]) -> dict[str, Any] | None:
    """``config`` with hf_vanilla's own ``auto_map`` (:func:`hf_vanilla.checkpoint.shipped_auto_map`), or None if it
    has exactly that one.

    A folder saved through a wrapper (a plain state dict, FSDP) can lack it, and without it ``trust_remote_code``
    has nothing to load; an entry naming code that is not shipped (another repository's) is dropped with a warning.
    """
    if config.get("model_type") != VanillaConfig.model_type:
        raise ValueError(
            f"config.json has model_type={config.get('model_type')!r}, not {VanillaConfig.model_type!r}: "
            "this is not an hf_vanilla model, so hf_vanilla's code cannot be shipped with it."
        )
    if not config.get("auto_map") and not any(name in AUTO_CLASSES for name in config.get("architectures") or []):
        raise ValueError(
            f"config.json names no hf_vanilla model class in `architectures` ({config.get('architectures')})"
        )
    # config.json leaves out fields at their default (use_diff), the family included
    auto_map = shipped_auto_map(config.get("architecture", VanillaConfig.architecture), config.get("auto_map"))
    return None if config.get("auto_map") == auto_map else {**config, "auto_map": auto_map}


def model_card_text(
    run_dir: str | os.PathLike[str],
    repo_id: str,
    *,
    rebuild_card: bool | None = None,
    publish_samples: bool = False,
) -> str:
    """The ``README.md`` a push of ``run_dir`` to ``repo_id`` uploads (it must parse as a ``ModelCard``).

    ``rebuild_card``: True builds the card afresh with :func:`hf_vanilla.publishing.card.build_model_card` for
    ``repo_id`` (its title and loading snippet name the repo); False uploads the folder's README.md as it
    is; None (default) rebuilds when the folder has no README.md, or has exactly the card the run generated
    (which names the local folder), and keeps a README.md that was edited by hand. A built card is the public one
    (:func:`hf_vanilla.publishing.card.build_model_card` with ``public=True``): no local paths, and sample outputs that quote
    data that may be private only with ``publish_samples``.
    """

    folder = Path(run_dir)
    readme = folder / "README.md"
    existing = readme.read_text(encoding="utf-8") if readme.is_file() else None
    if rebuild_card is False and existing is None:
        raise FileNotFoundError(f"{readme} does not exist: there is no card to keep (rebuild it instead)")

    # A run file that is a link out of the folder is not this run's (plan_upload leaves it local): none to build from.
    inside = folder.resolve()
    has_run_files = all((folder / name).is_file() and (folder / name).resolve().is_relative_to(inside)
                        for name in ("run.json", "metrics.json"))
    if rebuild_card and not has_run_files:
        raise FileNotFoundError(
            f"cannot rebuild the model card: {folder} has no run.json and metrics.json of its own (not a training "
            "run, or they are links out of the folder); push with --keep-card, or copy the run's files in"
        )
    text = existing
    public = {"model_id": repo_id, "public": True, "samples": publish_samples}
    if rebuild_card is not False and has_run_files:
        if rebuild_card:
            try:
                text = str(build_model_card(folder, **public))
            except (KeyError, TypeError, AttributeError) as error:  # run.json/metrics.json edited or not a run's
                raise ValueError(
                    f"cannot rebuild the model card: {folder}'s run.json or metrics.json is not one hf_vanilla "
                    f"wrote ({sentence(error)}); restore them from the run, or push with --keep-card"
                ) from error
        else:
            try:  # only the run's own, unedited card is replaced: hand edits are never thrown away
                if existing is None or existing == str(build_model_card(folder, saved_at=_saved_at(existing))):
                    text = str(build_model_card(folder, **public))
            except Exception as error:  # a card is not worth failing the push for: say so and carry on
                logger.warning(
                    "could not build the model card from %s (%s); %s",
                    folder,
                    error,
                    "keeping its README.md" if existing is not None else "using a minimal card",
                )
    if existing is not None and text is existing and has_run_files:
        _check_kept_card(text, folder, publish_samples)
    if text is None:
        config = read_json(folder / "config.json", ConfigFile)
        # the card of a model saved without a run, naming the auto_map the push will upload
        text = str(build_saved_model_card(_with_auto_map(config) or config, repo_id))
    try:
        ModelCard(text)  # the Hub rejects a README.md whose YAML header does not parse
    except Exception as error:
        raise ValueError(
            f"the model card {readme if text is existing else '(built)'} is not valid: {error}"
        ) from error
    return text


#: An absolute path in quotes or backticks (a card's loading snippet names the run folder so); one that exists
#: here is a local path, ``/api/models`` in a hand-written note is not.
_QUOTED_PATH = re.compile(r"""["'`]((?:~|[A-Za-z]:)?[/\\][^"'`\s]+)["'`]""")


def _saved_at(card: str) -> str | None:
    """Where the run was when its local card was written: the path its loading snippet names (a run folder moved
    or copied since still has its own, unedited card)."""
    found = re.search(r'from_pretrained\("([^"]+)", trust_remote_code=True\)', card)
    return found.group(1) if found else None


def _check_kept_card(card: str, folder: Path, publish_samples: bool) -> None:
    """A README.md uploaded as it is (edited by hand, or ``--keep-card``) must not carry what the built public card
    leaves out: the run's local paths, or texts its samples quote from data that may be private. Refused, naming
    them, before anything is sent."""
    run = read_json(folder / "run.json", RunFile)
    metrics = read_json(folder / "metrics.json")
    quoted_paths = [path for path in _QUOTED_PATH.findall(card) if Path(path).expanduser().exists()]
    named = {str(folder.resolve()), *local_paths(run), *local_paths(_saved_at(card) or ""), *quoted_paths}
    paths = sorted(path for path in named if len(path) > 1 and path in card)
    quoted = quoted_data(run)
    texts = [
        text[:40]
        for sample in (metrics.get("samples") or [] if quoted and not publish_samples else [])
        for text in (sample.get(field) for field in QUOTED_FIELDS)
        if isinstance(text, str) and len(text) >= 12 and text[:40] in card
    ]
    if paths or texts:
        found = [f"local paths ({', '.join(paths)})"] * bool(paths) + [
            f"texts of {quoted} quoted by its samples ({', '.join(repr(t) for t in texts)})"
        ] * bool(texts)
        raise ValueError(
            f"{folder / CARD_FILE} is uploaded as it is (edited by hand) and holds {' and '.join(found)}. Edit "
            "them out, or pass rebuild_card=True (--rebuild-card) to publish the built card without them"
            + (", or publish_samples=True (--publish-samples) to publish the samples" if texts else "")
            + "."
        )


def _check_run_dir(folder: Path, files: dict[str, Path]) -> None:
    if "config.json" not in files and "run.json" in files:  # stopped before it saved its model (--allow-incomplete)
        check_model_saved(read_json(files["run.json"], RunFile), folder)
    if "config.json" not in files:
        raise FileNotFoundError(
            f"{folder} has no config.json: is it a saved model or a training run directory?"
        )
    if not any(is_weight_file(name) for name in files):
        raise FileNotFoundError(
            f"{folder} has no safetensors weights (model.safetensors or model-*.safetensors); "
            "save the model with save_pretrained first"
        )
    if not any(name in files for name in TOKENIZER_FILES):
        logger.warning("%s has no tokenizer files: the repo will hold the model only", folder)


@dataclass(frozen=True)
class PushResult:
    """A finished push: the Hub's ``CommitInfo`` (``.oid``, ``.commit_url``, ``.repo_url``), the paths uploaded,
    the top-level names of the folder that stayed local and which sample outputs were left out (None: none).
    ``unchanged``: the branch already held exactly these files, so huggingface_hub made no commit (and dropped the
    commit message); ``commit`` is then the commit the branch was already at."""

    commit: Any
    uploaded: list[str]
    skipped: list[str]
    samples_left_out: str | None = None
    unchanged: bool = False


def edited_files(folder: Path, plan: UploadPlan, rebuild_card: bool | None, allow_changed: bool) -> list[str]:
    """The recorded files a push would publish that changed since hf_vanilla wrote them (their size or sha256
    differs from the folder's record; the README.md too when it may go up as it is): refused, naming them, unless
    ``allow_changed``, and then returned for the card to name. Files recorded without a seal (an older
    hf_vanilla's run) cannot be checked: a warning names them."""
    owner = OutputFolder(folder)
    if owner.record() is None:
        return []  # not written by hf_vanilla (a save_pretrained folder): nothing to compare with
    published = [name for name in plan.files if "/" not in name]
    published += [CARD_FILE] if rebuild_card is not True else []
    if unsealed := owner.unsealed(published):
        logger.warning("%s: %s recorded without a checksum (an older hf_vanilla, or a write cut short): not "
                       "checked for changes", folder, ", ".join(unsealed))
    edited = owner.changed(published)
    if edited and not allow_changed:
        card = " (or --rebuild-card to publish a card built afresh)" if CARD_FILE in edited else ""
        raise ChangedFileError(
            f"refusing to push {folder}: {', '.join(edited)} changed since the run wrote "
            f"{'it' if len(edited) == 1 else 'them'} (size or sha256 differs from {folder.name}'s record), so the "
            f"repo would not hold what the run made; put back the run's file{card}, or pass allow_changed=True "
            "(--allow-changed) to publish it as edited, which the card then says. Nothing was sent."
        )
    return edited


def _local_upload(folder: Path, include: Sequence[str], allow_incomplete: bool,
                  publish_samples: bool) -> tuple[UploadPlan, dict[str, Any], str | None]:
    """The push's plan and its operations (path in the repo -> local file or bytes), checked and prepared
    locally: the folder, a finished run, config.json with ``auto_map``, the run files made public, the code."""
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a directory")
    plan = plan_upload(folder, include)
    # How the run ended first: a run stopped before it saved its model has no config.json, and that is why.
    if "run.json" in plan.files and not allow_incomplete:
        check_finished(read_json(plan.files["run.json"], RunFile), folder)
    _check_run_dir(folder, plan.files)
    patched_config = _with_auto_map(read_json(plan.files["config.json"], ConfigFile))
    operations: dict[str, Any] = dict(plan.files)
    if patched_config is not None:
        operations["config.json"] = (json.dumps(patched_config, indent=2, sort_keys=True) + "\n").encode()
    samples_note = _public_run_files(operations, publish_samples)
    for source in code_files():  # code already in the folder is the code the weights were trained with: kept
        operations.setdefault(source.name, source)
    return plan, operations, samples_note


def push_run(
    run_dir: str | os.PathLike[str],
    repo_id: str,
    *,
    revision: str | None = None,
    private: bool | None = None,
    token: str | bool | None = None,
    commit_message: str | None = None,
    rebuild_card: bool | None = None,
    include: Sequence[str] = (),
    allow_incomplete: bool = False,
    publish_samples: bool = False,
    allow_changed: bool = False,
    timeout: float = DEFAULT_TIMEOUT_S,
    api: Any = None,
) -> PushResult:
    """Upload a training run directory (or any ``save_pretrained`` folder) to the Hub in one commit.

    Creates ``repo_id`` (and the branch ``revision``, from ``main``) when needed. Uploads what
    :func:`plan_upload` allows: the safetensors weights, ``config.json`` (with ``auto_map``), the model code,
    tokenizer, generation config, run files, anything named in ``include``, and the model card (see
    :func:`model_card_text` for ``rebuild_card``); everything else stays local and is listed in the result.
    Model files of an older push that this one does not replace are deleted in the same commit, so the repo
    never mixes two checkpoints. ``private=True`` refuses to push to an existing public repo. A training run whose
    ``run.json`` does not say ``completed`` (still running, diverged, interrupted) is refused unless
    ``allow_incomplete``. ``run.json`` and ``metrics.json`` go up without local paths (the local copies keep them),
    and the sample outputs of a run trained on data that may be private (local files, a ``datasets`` dataset) are
    left out of them and of the card unless ``publish_samples`` (see
    :func:`hf_vanilla.publishing.public.public_run_files`). A file the run's record lists that was changed since
    the run wrote it (edited metrics, swapped weights, a hand-edited card kept as it is) is refused, naming it,
    unless ``allow_changed``; the card then names it (:func:`edited_files`). A Hub silent for ``timeout`` seconds ends the push with
    a ``TimeoutError``; nothing is committed then, and the same push run again starts afresh (files the Hub already
    holds are not sent twice). ``api`` is the ``huggingface_hub.HfApi`` to talk through (default:
    ``HfApi(token=token)``).
    """
    check_timeout(timeout)
    folder = Path(run_dir)
    # Everything that can be checked locally is, before the first request: a bad folder creates no repo.
    plan, operations, samples_note = _local_upload(folder, include, allow_incomplete, publish_samples)
    # A credential first (it matters more than anything a card lacks), in every file, weights and images included,
    # --allow-changed or not: a README.md that may be kept is checked too.
    readme = {CARD_FILE: folder / CARD_FILE} if rebuild_card is not True and (folder / CARD_FILE).is_file() else {}
    refuse_secrets({**operations, **readme})
    edited = edited_files(folder, plan, rebuild_card, allow_changed)
    card = model_card_text(folder, repo_id, rebuild_card=rebuild_card, publish_samples=publish_samples)
    card = note_edited_files(card, edited) if edited else card
    refuse_secrets({CARD_FILE: card})
    if plan.skipped:
        logger.info(  # PushResult.skipped has them too, and the command prints them: said once
            "not uploading %s (not needed to load the model; name a file with include=/--include to upload it)",
            ", ".join(plan.skipped),
        )

    api = api if api is not None else HfApi(token=token)
    ask_hub_first(api, timeout)  # an unreachable Hub or a refused token is said in one sentence, before any upload
    try:
        with requests_time_out(timeout):
            commit, unchanged = _commit(
                api, folder, repo_id, operations, card, revision, private, commit_message, rebuild_card, edited
            )
    except HfHubHTTPError as error:
        status = error.response.status_code if error.response is not None else None
        if status not in (401, 403) or isinstance(error, RepositoryNotFoundError):
            raise
        reason = (
            "401: the token is invalid or expired" if status == 401 else "403: the token cannot write there"
        )
        raise PermissionError(
            f"The Hub at {api.endpoint} refused the push to {repo_id!r} ({reason}). Log in with `hf auth login`, "
            "set HF_TOKEN or pass a write token. Nothing was committed."
        ) from error
    except httpx2.TimeoutException as error:
        raise TimeoutError(
            f"The Hub at {api.endpoint} did not answer within {timeout:g} s ({type(error).__name__}). Nothing was "
            "committed: run the push again (it starts afresh), or allow longer with timeout=/--timeout SECONDS."
        ) from error
    return PushResult(commit, sorted([*operations, CARD_FILE]), plan.skipped, samples_note, unchanged)


def _public_run_files(operations: dict[str, Any], publish_samples: bool) -> str | None:
    """Put the public run.json and metrics.json (no local paths; samples of private data left out unless
    ``publish_samples``) in ``operations``; say what data the published samples quote. Returns what was left out."""
    if "run.json" not in operations or "metrics.json" not in operations:
        return None
    run = read_json(operations["run.json"], RunFile)
    metrics = read_json(operations["metrics.json"])
    public_run, public_metrics = public_run_files(run, metrics, samples=publish_samples)
    for name, record in (("run.json", public_run), ("metrics.json", public_metrics)):
        operations[name] = (json.dumps(record, indent=2) + "\n").encode()
    quoted, count = quoted_data(run), len(metrics.get("samples") or [])
    if quoted and count and publish_samples:
        logger.warning("publishing %d sample output(s) that quote texts of %s (publish_samples)", count, quoted)
    return public_metrics.get("samples_left_out")


@contextlib.contextmanager
def requests_time_out(seconds: float) -> Iterator[None]:
    """Give up on a Hub silent for ``seconds`` during the block: huggingface_hub sends every request through one
    shared client whose timeout is None (wait forever) and offers no per-call timeout for create_repo or
    create_commit, so the shared client's timeout is set for the block and restored after it."""
    session = get_session()
    before = session.timeout
    session.timeout = seconds
    try:
        yield
    finally:
        session.timeout = before


def _commit(
    api: Any,
    folder: Path,
    repo_id: str,
    operations: dict[str, Any],
    card: str,
    revision: str | None,
    private: bool | None,
    commit_message: str | None,
    rebuild_card: bool | None,
    edited: Sequence[str] = (),
) -> tuple[Any, bool]:
    """The commit made (or, when nothing changed, the head found) and whether nothing changed."""
    created = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
    if created != repo_id:  # "name" became "user/name": the card names the repo, so it names the full id
        repo_id, card = created, model_card_text(folder, created, rebuild_card=rebuild_card)
        card = note_edited_files(card, edited) if edited else card
    if private and not api.repo_info(repo_id).private:
        raise PermissionError(f"{repo_id} already exists and is public; refusing a push meant to be private")
    if revision is not None and revision != "main":
        api.create_branch(repo_id, branch=revision, exist_ok=True)

    # Commit on top of the head whose files were listed: a concurrent push then fails the commit instead of
    # leaving its shards next to ours. Weight files this push does not replace go in the same commit, so the
    # repo never mixes two checkpoints (transformers would load a stale model.safetensors before new shards).
    head = api.repo_info(repo_id, revision=revision).sha
    adds = {**operations, "README.md": card.encode()}
    stale = [
        name
        for name in api.list_repo_files(repo_id, revision=head)
        if is_model_file(name) and name not in adds
    ]
    commit = api.create_commit(
        repo_id,
        operations=[
            *(CommitOperationAdd(path_in_repo=name, path_or_fileobj=source) for name, source in adds.items()),
            *(CommitOperationDelete(path_in_repo=name) for name in stale),
        ],
        commit_message=commit_message or f"Upload {folder.resolve().name} with hf_vanilla",
        revision=revision,
        parent_commit=head,
    )
    unchanged = commit.oid == head  # huggingface_hub skips a commit that changes no file and returns the head
    if not unchanged:
        logger.info("pushed %d files to %s@%s (%s)", len(adds), repo_id, revision or "main", commit.oid)
    return commit, unchanged


def push_summary(result: PushResult, run_dir: str, revision: str | None, commit_message: str | None) -> str:
    """What the push changed on the Hub, in one line: the commit made, or that none was needed."""
    commit, where = result.commit, f"{result.commit.repo_url.repo_id}@{revision or 'main'}"
    if not result.unchanged:
        return f"pushed {len(result.uploaded)} files of {run_dir} to {where}: {commit.commit_url}"
    unused = f' (the commit message "{commit_message}" was not used)' if commit_message else ""
    return (f"nothing changed: {where} already holds these {len(result.uploaded)} files of {run_dir} since commit "
            f"{commit.oid}; no new commit made{unused}")


def run_cli(args: argparse.Namespace) -> int:
    """``hf-vanilla push`` (its arguments are in :mod:`hf_vanilla.publishing.push_cli`)."""
    try:
        result = push_run(
            args.run_dir,
            args.repo_id,
            revision=args.revision,
            private=args.private or None,
            token=args.token,
            commit_message=args.commit_message,
            rebuild_card=args.rebuild_card,
            include=args.include,
            allow_incomplete=args.allow_incomplete,
            publish_samples=args.publish_samples,
            allow_changed=args.allow_changed,
            timeout=args.timeout,
        )
    except (HfVanillaError, ValueError, OSError, RuntimeError) as error:  # refused token, missing files, Hub or upload errors
        cause = (
            f" ({error.__cause__})"
            if error.__cause__ is not None and not isinstance(error, PermissionError | TimeoutError)
            else ""
        )
        # huggingface_hub raises RuntimeError when an upload fails; the commit was never made.
        retry = " Nothing was committed; run the push again." if isinstance(error, RuntimeError) else ""
        return refuse("push", f"{error}{cause}{retry}")
    print(push_summary(result, args.run_dir, args.revision, args.commit_message))
    if result.skipped:
        print(f"left local (not needed to load; --include NAME to upload): {', '.join(result.skipped)}")
    if result.samples_left_out:
        print(f"left out of the card and metrics.json: {result.samples_left_out} (--publish-samples to publish them)")
    return 0


__all__ = ["RUN_FILES", "PushResult", "UploadPlan", "edited_files", "model_card_text", "plan_upload", "push_run",
           "run_cli"]
