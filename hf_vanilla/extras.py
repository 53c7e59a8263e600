"""The optional layers and the extra each needs: ``pip install hf_vanilla`` gives the model core (torch,
transformers, safetensors, huggingface_hub); a layer above it checks its extra once, where it is entered, and
fails in one line that names the extra to install. A subcommand's parser names the module of its work with
:func:`load_when_run`, so the layer is entered only when the command runs.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
from collections.abc import Callable

#: Extra -> the modules it installs that its layers import (pyproject.toml's
#: ``[project.optional-dependencies]`` lists their distributions; tests/test_layers.py keeps the two equal).
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "train": ("accelerate", "datasets", "matplotlib", "sacrebleu", "scipy"),  # curves.png, BLEU, the sweep's fits
    "viz": ("matplotlib",),
    "eval": ("sacrebleu",),
}


class MissingExtraError(ImportError):
    """A layer was imported without the extra it needs; the message is the one line to show."""


def require_extra(extra: str, layer: str) -> None:
    """Raise :class:`MissingExtraError` when a module of ``extra`` is not installed; ``layer`` names what needs it."""
    missing = [name for name in EXTRA_MODULES[extra] if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingExtraError(
            f"{layer} needs the [{extra}] extra ({', '.join(missing)} not installed): "
            f"pip install 'hf_vanilla[{extra}]'"
        )



def load_when_run(module: str, function: str) -> Callable[[argparse.Namespace], int]:
    """A subcommand's ``func``: ``module.function(args)``, with the Auto classes registered and ``module`` imported
    when the command runs (not before: a refusal checked first answers without them)."""

    def run(args: argparse.Namespace) -> int:
        # torch and transformers when a subcommand runs, not for --help (start-up time)
        from . import register

        register()
        return getattr(importlib.import_module(module), function)(args)

    return run
