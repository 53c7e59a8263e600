"""What a checkpoint of hf_vanilla is made of: its code files, ``auto_map``, weights and tokenizer files, and
loading one completely. Writing is :mod:`hf_vanilla.files.atomic`'s; this module adds what needs the model.

transformers and the model are imported inside the functions that use them: ``convert`` and ``push`` define their
command-line arguments beside their work, and ``hf-vanilla convert --help`` must not wait for torch.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from safetensors import SafetensorError, safe_open
from transformers import AutoTokenizer
from transformers.dynamic_module_utils import get_relative_import_files

from . import modeling_vanilla
from .configuration_vanilla import VanillaConfig, auto_map_for
from .errors import HfVanillaError
from .files.atomic import CONFIG_FILES, SAFE_WEIGHTS, SAFE_WEIGHTS_INDEX, atomic_write_bytes
from .files.schema import ConfigFile, read_json

logger = logging.getLogger(__name__)


class TokenizerRegexError(HfVanillaError, ValueError):
    """A tokenizer's regular expression fails or takes too long on short texts."""

# ----------------------------------------------------------------------------------------------
# What a checkpoint is

#: Pickled files are never needed to load a model (optimizer and RNG states, training_args.bin) and the Hub
#: flags them as unsafe to open: nothing in the package uploads or reads them as weights.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")

#: The files a saved tokenizer may consist of (fast tokenizers write the first two; the rest are legacy formats).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
)




def code_files() -> list[Path]:
    """The model code that travels with a checkpoint: the modeling module and everything it imports relatively."""

    module = Path(inspect.getfile(modeling_vanilla))
    return [module, *sorted({Path(p) for p in get_relative_import_files(str(module))})]  # the walk repeats shared imports


def loading_files(folder: str | os.PathLike[str]) -> dict[str, Path]:
    """What the model in ``folder`` is made of, by file name: the configs, the weights loading reads
    (:func:`weight_files`), the code files its ``config.json`` names in ``auto_map`` and the files its tokenizer
    consists of (:func:`tokenizer_files`). Decided by the folder's contents, not by names alone: a ``vocab.txt`` the
    tokenizer does not use or a shard no index names is not part of the checkpoint. Only files that exist."""
    folder = Path(folder)
    present = {path.name: path for path in sorted(folder.iterdir()) if path.is_file()}
    wanted = {*CONFIG_FILES, *auto_map_modules(folder / "config.json"), *weight_files(folder), *tokenizer_files(folder)}
    return {name: path for name, path in present.items() if name in wanted}


def weight_files(folder: str | os.PathLike[str]) -> list[str]:
    """The safetensors files ``from_pretrained`` reads from ``folder``: ``model.safetensors`` when there is one
    (transformers prefers it to an index), else the index and exactly the shards its ``weight_map`` names. Each
    must open as safetensors; an index naming a shard that is missing, outside the folder or not safetensors is
    an error that names it."""
    folder = Path(folder)
    if (folder / SAFE_WEIGHTS).is_file():
        check_weight_files(folder, [SAFE_WEIGHTS])
        return [SAFE_WEIGHTS]
    index = folder / SAFE_WEIGHTS_INDEX
    if not index.is_file():
        return []
    try:
        shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"{index} is not a safetensors index (a JSON object with a weight_map): {error}") from error
    strays = [shard for shard in shards if not isinstance(shard, str) or Path(shard).name != shard]
    if strays:
        raise ValueError(f"{index} names shards that are not files beside it: {strays}")
    missing = [shard for shard in shards if not (folder / shard).is_file()]
    if missing:
        raise FileNotFoundError(f"{index} names shards that are missing: {missing}; save the model again")
    check_weight_files(folder, shards)
    return [SAFE_WEIGHTS_INDEX, *shards]


def tokenizer_files(folder: str | os.PathLike[str]) -> list[str]:
    """The files the tokenizer saved in ``folder`` consists of: those it writes when loaded and saved again (a
    ``tokenizer.json`` tokenizer writes no ``vocab.txt`` or ``special_tokens_map.json``, so such files beside it are
    not part of it). Empty when the folder holds no tokenizer files; an error when they do not load."""
    folder = Path(folder)
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        return []
    try:  # no remote code: a tokenizer that needs it is not one this package saved
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    except Exception as error:
        found = [name for name in TOKENIZER_FILES if (folder / name).is_file()]
        raise ValueError(
            f"the tokenizer files in {folder} ({', '.join(found)}) do not load as a tokenizer ({error}); fix them, "
            "or move the files that are not the tokenizer's out of the folder"
        ) from error
    with tempfile.TemporaryDirectory() as scratch:
        return sorted(Path(path).name for path in tokenizer.save_pretrained(scratch))


def shipped_auto_map(architecture: str, incoming: Mapping[str, Any] | None) -> dict[str, str]:
    """The ``auto_map`` a saved hf_vanilla config carries: :func:`~hf_vanilla.configuration_vanilla.auto_map_for`
    its family, naming exactly the code files that travel with it. Every other entry of ``incoming`` (another
    repository's ``repo--module.Class``, a module hf_vanilla did not write) is dropped with a warning naming it:
    ``trust_remote_code=True`` would fetch and run that code."""
    ours, foreign = _split_auto_map(architecture, incoming)
    if foreign:
        logger.warning("dropping auto_map entries that are not hf_vanilla's own code (loading with "
                       "trust_remote_code=True would run them): %s",
                       ", ".join(f"{key}={value!r}" for key, value in foreign.items()))
    return ours


def _split_auto_map(architecture: str, incoming: Mapping[str, Any] | None) -> tuple[dict[str, str], dict[str, Any]]:
    """(hf_vanilla's own ``auto_map`` for ``architecture``, the entries of ``incoming`` that differ from it)."""
    ours = auto_map_for(architecture)
    return ours, {key: value for key, value in (incoming or {}).items() if ours.get(key) != value}


def auto_map_modules(config_file: Path) -> list[str]:
    """The Python files a config's ``auto_map`` loads hf_vanilla's code from (``module.py``), with the files those
    import relatively when they are present beside the config (hf_vanilla's modeling file imports its siblings).
    Entries that are not hf_vanilla's own (:func:`shipped_auto_map`) name no file: their code never travels."""

    try:
        config = read_json(config_file, ConfigFile)
        auto_map = config.get("auto_map") or {}
        architecture = config.get("architecture", VanillaConfig.architecture)
        ours, foreign = _split_auto_map(architecture, auto_map)
    except (OSError, ValueError, AttributeError, TypeError):
        return []
    references = [ours[key] for key in auto_map if key not in foreign]
    names = {ref.rsplit(".", 1)[0] + ".py" for ref in references}
    for name in list(names):
        module = config_file.parent / name
        if module.is_file():
            names.update(Path(path).name for path in get_relative_import_files(str(module)))
    return sorted(names)


def ensure_code_files(folder: str | os.PathLike[str]) -> list[str]:
    """Copy the model code next to a saved config whose ``auto_map`` needs it; return the names copied.

    ``save_pretrained`` does this (``register_for_auto_class``), but a model saved through a wrapper (FSDP, a
    plain state dict) can miss it, and then resuming or ``trust_remote_code`` loading fails (transformers#46455).
    Code already in the folder is the code the weights were saved with: it is kept.
    """
    folder = Path(folder)
    if not auto_map_modules(folder / "config.json"):
        return []
    copied = []
    for source in code_files():
        destination = folder / source.name
        if not destination.exists():
            atomic_write_bytes(destination, source.read_bytes())
            copied.append(source.name)
    return copied


# ----------------------------------------------------------------------------------------------
# Loading, where the package's own tools need more than transformers' warnings


def check_weight_files(folder: str | os.PathLike[str], names: Iterable[str] | None = None) -> None:
    """Open the header of every safetensors file in ``folder`` (or of those ``names``); a truncated or corrupted one
    is an error that names the file (safetensors' own message, which ``from_pretrained`` passes on, does not say
    which file it read)."""
    paths = sorted(Path(folder).glob("*.safetensors")) if names is None else [Path(folder) / n for n in names]
    for path in paths:
        try:
            with safe_open(str(path), "pt"):
                pass
        except SafetensorError as error:
            raise OSError(
                f"Cannot read the weights in {path}: {error}. The file is truncated or corrupted (an interrupted "
                "download or copy?); fetch or save the checkpoint again."
            ) from error


def load_complete(model_class: Any, folder: str | os.PathLike[str], *, exact: bool = False, **kwargs: Any) -> Any:
    """``model_class.from_pretrained(folder, **kwargs)``, refusing a checkpoint that lacks weights the model needs
    (and, with ``exact``, one holding weights the model does not use).

    transformers initialises missing weights at random and logs a warning, which is right for a new task head;
    a tool that converts or inspects a checkpoint (convert, viz) would hand on random weights as trained ones.
    ``exact`` is for the commands that use the saved model as it is (attention, generate, evaluate): an unexpected
    weight means the checkpoint is not the model its config describes.
    """
    check_weight_files(folder)
    check_size_before_loading(folder)
    check_tokenizer_regexes(folder)
    model, info = model_class.from_pretrained(folder, output_loading_info=True, **kwargs)
    missing = sorted(info["missing_keys"])
    unexpected = sorted(info["unexpected_keys"]) if exact else []
    if missing or unexpected:
        found = [f"lacks weights {type(model).__name__} needs: {_some(missing)}"] * bool(missing) + [
            f"holds weights {type(model).__name__} does not use: {_some(unexpected)}"] * bool(unexpected)
        raise ValueError(
            f"The checkpoint in {folder} {' and '.join(found)}. It was saved by another architecture, or its "
            "config.json or weights were edited; loading it would leave weights random."
        )
    return model


def check_size_before_loading(folder: str | os.PathLike[str]) -> None:
    """Before a model is built from ``folder``: its config.json must fit this machine and match the parameters its
    safetensors headers hold (:mod:`hf_vanilla.sizing`), or the build would allocate what a hand-edited config says."""
    # safetensors' headers, read only when a folder is loaded
    from .sizing import check_fits, check_matches_weights

    folder = Path(folder)
    try:
        fields = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # from_pretrained says what is wrong with a missing or broken config.json
    if not isinstance(fields, dict) or fields.get("model_type") != "vanilla":
        return
    source = str(folder / "config.json")
    check_fits(fields, source=source, purpose="load")
    stored = 0
    for name in weight_files(folder):
        if name.endswith(".safetensors"):
            with safe_open(str(folder / name), "pt") as weights:
                stored += sum(math.prod(weights.get_slice(key).get_shape()) for key in weights.keys())  # noqa: SIM118
    if stored:
        check_matches_weights(fields, stored, source=source)


#: Texts a tokenizer's own regular expressions must get through: the runs of one character and the near-matches
#: on which a backtracking pattern (``(a|a)+b``) takes exponential time, and ordinary text.
REGEX_PROBES = ("The king's 3 crowns, and 12.5% of the night!", "a" * 40 + "!", " " * 40 + "x", "1" * 40 + "a",
                "ab" * 20 + "\n", "\u00e9" * 40 + "?")
#: Seconds the probes may take: tens of milliseconds for any sane tokenizer, for ever for a catastrophic pattern.
REGEX_TIME_LIMIT_S = 10.0

_PROBE = """
import sys
from tokenizers import Tokenizer
tokenizer = Tokenizer.from_file(sys.argv[1])
print("loaded", flush=True)
for text in sys.argv[2:]:
    tokenizer.encode(text)
"""


def check_tokenizer_regexes(folder: str | os.PathLike[str], limit_s: float = REGEX_TIME_LIMIT_S) -> None:
    """A ``tokenizer.json`` holding regular expressions (a ``Split`` pre-tokenizer, a ``Replace`` normalizer) must
    tokenize :data:`REGEX_PROBES` within ``limit_s`` in a separate process, which is killed when it does not: a
    pattern that backtracks catastrophically would hang every command on its first text (or, past Oniguruma's
    retry limit, end it in a Rust panic). Refused otherwise."""
    path = Path(folder) / "tokenizer.json"
    try:
        if '"Regex"' not in path.read_text(encoding="utf-8"):
            return  # no pattern of the file's own: the library's built-in ones are safe
    except (OSError, UnicodeDecodeError):
        return  # loading the tokenizer says what is wrong with the file
    # a child process only for a tokenizer with patterns of its own (start-up time of every other load)
    import subprocess
    import sys

    why = f"did not get through {len(REGEX_PROBES)} short probe texts"
    try:
        probe = subprocess.run([sys.executable, "-c", _PROBE, str(path), *REGEX_PROBES], capture_output=True,
                               text=True, timeout=limit_s, check=False)
    except subprocess.TimeoutExpired:
        why += f" in {limit_s:g} s"
    else:
        if probe.returncode == 0 or not probe.stdout.startswith("loaded"):
            return  # tokenized them all, or the file does not load at all: loading it says what is wrong
        failure = [line for line in probe.stderr.splitlines() if "Error" in line or "error" in line]
        why += f" ({failure[-1].strip() if failure else f'the tokenizer failed, exit {probe.returncode}'})"
    raise TokenizerRegexError(
        f"{path} holds a regular expression that {why}: it backtracks catastrophically and would fail or hang on "
        "real text; fix the pattern or save the tokenizer again"
    )


def _some(names: list[str]) -> str:
    return f"{names[:8]}{' ...' if len(names) > 8 else ''}"
