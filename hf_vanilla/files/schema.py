"""The JSON files hf_vanilla reads back from a folder (its record and journal, a run's run.json, a model's
config.json), read as untrusted input: bounded in size and nesting before they are parsed, then checked against a
declared schema, so that a hand-edited or hostile value is one sentence naming the file and the field, never a
traceback (a ``kind`` that is a list, ``options`` that is a list, a document nested 100,000 levels deep).

The schemas are ``TypedDict`` classes: each names the fields its readers use and their types; other fields pass
unchecked (a newer hf_vanilla's, or transformers' own in config.json). :func:`read_json` checks them with the
standard library alone (this layer is in the base install and on every command's refusal path: a validation
library would add a compiled dependency and its import time there, for the handful of types below).
"""

from __future__ import annotations

import json
import os
import re
import types
from pathlib import Path
from typing import Any, Literal, TypedDict, Union, get_args, get_origin, get_type_hints

from ..errors import HfVanillaError

#: The most bytes a bookkeeping or model JSON file of ours may hold, and the deepest nesting: hf_vanilla writes
#: them a few levels deep (a run.json's options hold a config's nested fields) and far below these sizes.
MAX_BYTES = 64 * 2**20
MAX_DEPTH = 64


class InvalidFileError(HfVanillaError, ValueError):
    """A JSON file hf_vanilla reads back is not what it writes there: too large, too deep, not JSON, or a field of the
    wrong type."""


class Seal(TypedDict):
    size: int
    sha256: str


class _Record(TypedDict):
    kind: str
    files: dict[str, Seal | None] | list[str]


class RecordFile(_Record, total=False):
    """``.hf_vanilla.json``: the files hf_vanilla wrote into a folder (a plain list of names before seals), and
    those of them an older hf_vanilla wrote, unsealed."""

    older: list[str]


class _Journal(TypedDict):
    phase: Literal["aside", "new", "discarding"]
    names: list[str]
    record: str | None


class JournalFile(_Journal, total=False):
    """``.hf_vanilla-journal.json``: what a write in progress moved aside, and how far it got."""

    committing_by: str | None


class _Run(TypedDict):
    task: str


class RunFile(_Run, total=False):
    """A run's ``run.json``: the fields its readers (resume, push, the card) use."""

    status: str
    options: dict[str, Any]
    effective: dict[str, Any]
    dataset: dict[str, Any]
    tokenizer: dict[str, Any]
    config: dict[str, Any]
    environment: dict[str, Any]
    training_time: dict[str, float | None] | None
    command: list[str]
    resume_command: str | None
    resumed_from: str | None
    last_checkpoint: str | None
    last_good_checkpoint: str | None


class ConfigFile(TypedDict, total=False):
    """A model's ``config.json``: the fields push, the card and the code files read before transformers does."""

    model_type: str
    architecture: str
    architectures: list[str] | None
    auto_map: dict[str, str | list[str | None]] | None


#: What each kind of file is, and what its reader is told to do about an invalid one.
FIXES = {
    RecordFile: "hf_vanilla did not write it and will neither trust nor rewrite it: restore it, or move it out of "
                "the folder (the folder is then yours, and nothing in it hf_vanilla's)",
    JournalFile: "hf_vanilla did not write it and will not act on it: restore it, or move it out of the folder",
    RunFile: "hf_vanilla writes it as the run goes: restore the run's own run.json (or start a new run in another "
             "folder)",
    ConfigFile: "set that field as transformers writes it (or save the model again with save_pretrained)",
}


def read_json(path: str | os.PathLike[str], schema: type | None = None) -> Any:
    """The JSON in ``path``, refused in one sentence naming the file (and the field) when it is larger than
    :data:`MAX_BYTES`, nested deeper than :data:`MAX_DEPTH`, not JSON, or (``schema``) not of the declared types.
    ``FileNotFoundError`` passes as it is: a missing file is its reader's to judge."""
    path = Path(path)
    with open(path, "rb") as handle:
        data = handle.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise InvalidFileError(f"{path} holds more than {MAX_BYTES // 2**20} MiB, far more than hf_vanilla writes "
                               f"there; {FIXES.get(schema, 'restore it')}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidFileError(f"{path} is not UTF-8 text ({error.reason} at byte {error.start}); "
                               f"{FIXES.get(schema, 'restore it')}") from None
    return parse_json(text, path, schema)


def parse_json(text: str, path: str | os.PathLike[str], schema: type | None = None) -> Any:
    """:func:`read_json` of ``text`` already read (``path`` names where it came from in the sentence)."""
    fix = FIXES.get(schema, "restore it")
    if (depth := nesting(text)) > MAX_DEPTH:
        raise InvalidFileError(f"{path} is nested {depth} levels deep, more than the {MAX_DEPTH} hf_vanilla reads "
                               f"(it writes a few); {fix}")
    try:
        value = json.loads(text)
    except ValueError as error:
        raise InvalidFileError(f"{path} does not read as JSON ({error}); {fix}") from None
    if schema is not None and (problem := mismatch(value, schema)) is not None:
        raise InvalidFileError(f"{path}: {problem}; {fix}")
    return value


_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")


def nesting(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON ``text`` (strings skipped), without recursing."""
    depth = deepest = 0
    for bracket in _BRACKETS.finditer(_STRINGS.sub("", text)):
        depth += 1 if bracket.group() in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def mismatch(value: Any, schema: type, where: str = "") -> str | None:
    """What in ``value`` is not of the type ``schema`` declares (``options must be a JSON object, got a list``), or
    None. ``schema`` is a TypedDict, a ``list[...]``/``dict[str, ...]``, a Union, a Literal, a plain type or Any."""
    origin, args = get_origin(schema), get_args(schema)
    if schema is Any:
        return None
    if origin in (Union, types.UnionType):
        if any(mismatch(value, arg, where) is None for arg in args):
            return None
        shaped = next((arg for arg in args if isinstance(value, _outer(arg))), None)  # say what is wrong inside it
        return mismatch(value, shaped, where) if shaped is not None else \
            _wrong(value, " or ".join(_name(arg) for arg in args), where)
    if origin is Literal:
        return None if value in args else f"{_field(where)} must be one of {list(args)}, got {json.dumps(value)[:40]}"
    if isinstance(schema, type) and hasattr(schema, "__required_keys__"):  # a TypedDict
        if not isinstance(value, dict):
            return _wrong(value, "a JSON object", where)
        for key in schema.__required_keys__:
            if key not in value:
                return f"{_field(where + '.' + key if where else key)} is missing"
        for key, hint in _hints(schema).items():
            if key in value and (problem := mismatch(value[key], hint, f"{where}.{key}" if where else key)):
                return problem
        return None
    if origin is list:
        if not isinstance(value, list):
            return _wrong(value, "a list", where)
        return next((p for i, item in enumerate(value) if (p := mismatch(item, args[0], f"{where}[{i}]"))), None)
    if origin is dict:
        if not isinstance(value, dict):
            return _wrong(value, "a JSON object", where)
        return next((p for key, item in value.items() if (p := mismatch(item, args[1], f"{where}.{key}"))), None)
    if schema is type(None):
        return None if value is None else _wrong(value, "null", where)
    if schema is float:
        return None if type(value) in (int, float) else _wrong(value, "a number", where)
    return None if type(value) is schema else _wrong(value, _name(schema), where)


def _hints(schema: type) -> dict[str, Any]:
    return get_type_hints(schema)


def _outer(schema: Any) -> type:
    """The Python type of a JSON value ``schema`` can describe (an object for a TypedDict)."""
    origin = get_origin(schema) or schema
    if isinstance(origin, type) and hasattr(origin, "__required_keys__"):
        return dict
    return origin if isinstance(origin, type) else object


_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", type(None): "null",
          list: "a list", dict: "a JSON object"}


def _name(schema: Any) -> str:
    origin = get_origin(schema) or schema
    if isinstance(origin, type) and hasattr(origin, "__required_keys__"):
        return "a JSON object"
    return _NAMES.get(origin, getattr(origin, "__name__", str(origin)))


def _field(where: str) -> str:
    return where or "its content"


def _wrong(value: Any, wanted: str, where: str) -> str:
    found = _NAMES.get(type(value), type(value).__name__)
    return f"{_field(where)} must be {wanted}, got {found}"
