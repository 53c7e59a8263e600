"""What a checkpoint is made of: the one list of checkpoint files (stand-in for the lead's hf_vanilla/checkpoint.py).

This branch (issue 15) was written before checkpoint.py landed on main; this file holds exactly the
"What a checkpoint is" section of the lead's module, unchanged, so hub.py and convert.py already use its API.
At merge, take main's checkpoint.py: it is a superset of this file.
"""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path

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

#: The configuration files ``save_pretrained`` writes beside the weights.
CONFIG_FILES = ("config.json", "generation_config.json")

STAGING_PREFIX = ".staging-"


def code_files() -> list[Path]:
    """The model code that travels with a checkpoint: the modeling module and everything it imports relatively."""
    from transformers.dynamic_module_utils import get_relative_import_files

    from . import modeling_vanilla

    module = Path(inspect.getfile(modeling_vanilla))
    return [module, *sorted(Path(p) for p in get_relative_import_files(str(module)))]


def is_weight_file(name: str) -> bool:
    """Safetensors weights, whole or sharded, and their index."""
    return name.startswith("model") and (name.endswith(".safetensors") or name == "model.safetensors.index.json")


def is_model_file(name: str) -> bool:
    """Files that ``save_pretrained`` writes or supersedes: stale shards of an older save must not survive a new one."""
    return name in CONFIG_FILES or is_weight_file(name) or name.startswith("pytorch_model")


def loading_files(folder: str | os.PathLike[str]) -> dict[str, Path]:
    """What loading the model in ``folder`` needs, by file name: weights (and index), configs, the code files its
    ``config.json`` names in ``auto_map``, and the tokenizer files. Only files that exist are listed."""
    folder = Path(folder)
    wanted = set(CONFIG_FILES) | set(TOKENIZER_FILES) | set(auto_map_modules(folder / "config.json"))
    return {
        path.name: path
        for path in sorted(folder.iterdir())
        if path.is_file() and (path.name in wanted or is_weight_file(path.name))
    }


def auto_map_modules(config_file: Path) -> list[str]:
    """The Python files a config's ``auto_map`` loads code from (``module.py``), with the files those import
    relatively when they are present beside the config (hf_vanilla's modeling file imports its siblings)."""
    from transformers.dynamic_module_utils import get_relative_import_files

    try:
        auto_map = json.loads(config_file.read_text(encoding="utf-8")).get("auto_map") or {}
    except (OSError, ValueError):
        return []
    references = [ref for value in auto_map.values() for ref in (value if isinstance(value, list) else [value]) if ref]
    names = {ref.split("--")[-1].rsplit(".", 1)[0] + ".py" for ref in references}
    for name in list(names):
        module = config_file.parent / name
        if module.is_file():
            names.update(Path(path).name for path in get_relative_import_files(str(module)))
    return sorted(names)
