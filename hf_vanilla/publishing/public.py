"""What of a training run may be published: run.json and metrics.json without local paths, and without samples
that quote data which may be private. The card and the push both publish through these functions."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

#: An absolute local path (POSIX, home-relative or Windows) inside a string: not after a word character, a dot, a
#: colon or a slash, so URLs (``https://...``) and relative paths (``data/x.txt``, ``./x``) are left alone.
_LOCAL_PATH = re.compile(r"(?<![\w.:/\\~-])(?:~|[A-Za-z]:)?[/\\][^\s,;]*")


def without_local_paths(value: Any) -> Any:
    """``value`` (run.json, metrics.json) with every absolute local path reduced to its base name
    (``/home/me/data/train.txt`` -> ``train.txt``, ``/home/me/.venv/bin/hf-vanilla`` -> ``hf-vanilla``): what a
    push publishes. The local run.json keeps the paths: ``--resume`` and ``hf-vanilla evaluate`` read the data
    from them."""
    if isinstance(value, dict):
        return {key: without_local_paths(item) for key, item in value.items()}
    if isinstance(value, list):
        return [without_local_paths(item) for item in value]
    if isinstance(value, str):
        return _LOCAL_PATH.sub(lambda match: re.split(r"[/\\]", match.group(0).rstrip("/\\"))[-1], value)
    return value


def local_paths(value: Any) -> set[str]:
    """The absolute local paths in the strings of ``value`` (what :func:`without_local_paths` reduces)."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return set().union(*(local_paths(item) for item in value))
    return set(_LOCAL_PATH.findall(value)) if isinstance(value, str) else set()


#: The fields of a sample (metrics.json) that quote the data: a causal LM's prompt, a masked block, a text to
#: classify, a sentence to translate and its reference; the rest is the model's output and scores.
QUOTED_FIELDS = ("prompt", "masked_text", "text", "source", "reference")


def quoted_data(record: dict[str, Any]) -> str | None:
    """What text of the training data a run's samples (metrics.json, the card) quote, or None when it is public:
    the built-in corpora ship in public packages, and a causal LM given ``--prompts`` quotes the user's prompts.
    Local files and ``datasets`` datasets (a private Hub dataset, a local folder) may be private."""
    dataset = record.get("dataset") or {}
    if dataset.get("source") == "hf_vanilla.corpora":
        return None
    if record.get("task") == "clm" and (record.get("options") or {}).get("prompts"):
        return None
    if dataset.get("source") == "local files":
        return "the local files " + ", ".join(Path(f).name for f in dataset.get("files", []))
    return f"the dataset {dataset.get('name')!r}" if dataset.get("name") else "the training data"


def public_run_files(run: dict[str, Any], metrics: dict[str, Any], *, samples: bool = False
                     ) -> tuple[dict[str, Any], dict[str, Any]]:
    """run.json and metrics.json as a push publishes them: no local paths (:func:`without_local_paths`), and the
    samples left out when they quote data that may be private (:func:`quoted_data`) unless ``samples``;
    ``samples_left_out`` then says what was left out."""
    run = without_local_paths(run)  # metrics.json's samples are text to keep as it is; its only path is in the command
    if metrics.get("how_to_finish"):
        metrics = {**metrics, "how_to_finish": without_local_paths(metrics["how_to_finish"])}
    quoted = quoted_data(run)
    count = len(metrics.get("samples") or [])
    if quoted and count and not samples:
        metrics = {**metrics, "samples": [], "samples_left_out": f"{count} sample(s) quoting texts of {quoted}"}
    return run, metrics
