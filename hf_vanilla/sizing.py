"""How big a model's config makes it, checked against the machine before anything is allocated.

A config field is a number a user types (``--config hidden_size=1000000000``) or a JSON file states
(``"max_position_embeddings": 1e15``); torch would try to allocate what it says, for minutes, then fail with a
traceback or take the machine down. Each place that chooses a size (the train options, ``--init-from``, the
config of a folder that ``generate``/``evaluate``/``attention`` load) asks :func:`check_fits` first.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

from .errors import HfVanillaError

#: Bytes a parameter takes: float32 weights to load; to train, its gradient and Adam's two moments too.
BYTES_PER_PARAMETER = {"load": 4, "train": 16}
#: The fields whose values the estimate reads, with the value a config that leaves one out has.
SIZE_FIELDS = {"vocab_size": 0, "hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 6,
               "num_decoder_layers": None, "max_position_embeddings": 512}


class ModelTooLargeError(HfVanillaError, ValueError):
    """A config describes a model that cannot fit the memory of this machine."""


def available_memory() -> int:
    """Bytes of memory this process could still allocate: MemAvailable on Linux, else the physical memory."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _size(fields: Mapping[str, Any], name: str) -> float:
    value = fields.get(name, SIZE_FIELDS[name])
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return 0.0  # not a size at all: the config's own validation names it
    return float(value)


def parameter_terms(fields: Mapping[str, Any]) -> dict[str, float]:
    """The parameters (a lower bound: biases, norms and grouped heads left out) each field's term adds: the
    embedding (vocabulary x width), the position table, and the layers (attention 4 h^2, feed-forward 2 h i)."""
    hidden, inner = _size(fields, "hidden_size"), _size(fields, "intermediate_size")
    layers = _size(fields, "num_hidden_layers")
    if fields.get("architecture", "encoder-decoder") == "encoder-decoder":
        decoder = _size(fields, "num_decoder_layers") or layers
        layers += decoder * 1.25  # a decoder layer adds cross-attention (its 4 h^2 over the 4 h^2 + 2 h i)
    return {
        "vocab_size": _size(fields, "vocab_size") * hidden,
        "max_position_embeddings": _size(fields, "max_position_embeddings") * hidden
        if fields.get("position_embedding_type", "sinusoidal") in ("learned", "sinusoidal") else 0.0,
        "num_hidden_layers": layers * (4 * hidden * hidden + 2 * hidden * inner),
    }


def _culprit(fields: Mapping[str, Any], terms: Mapping[str, float]) -> str:
    """The field to lower: the biggest term's own field, or the width (or feed-forward width) inside the layers."""
    largest = max(terms, key=terms.__getitem__)
    if largest == "num_hidden_layers":
        hidden, inner = _size(fields, "hidden_size"), _size(fields, "intermediate_size")
        if _size(fields, "num_hidden_layers") <= 1000:  # a usual depth: the width makes the layers big
            largest = "hidden_size" if 2 * hidden >= inner else "intermediate_size"
    return f"{largest}={fields.get(largest, SIZE_FIELDS.get(largest))}"


def check_matches_weights(fields: Mapping[str, Any], stored: int, *, source: str) -> None:
    """Refuse a config that describes a model far bigger than the ``stored`` parameters of its weights (a config
    edited after saving: building it would allocate what it says before loading could find the mismatch)."""
    terms = parameter_terms(fields)
    if fields.get("position_embedding_type", "sinusoidal") != "learned":
        terms.pop("max_position_embeddings")  # a computed table: a buffer, not in the weights
    described = sum(terms.values())
    if described > 2 * stored + 1_000_000:
        raise ModelTooLargeError(
            f"{source} describes a model of about {described:.3g} parameters but its weights hold {stored:,}: the "
            f"config does not match the weights ({_culprit(fields, terms)}?); restore the config.json saved with them"
        )


def _bytes(count: float) -> str:
    for unit, size in (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if count >= size:
            return f"{count / size:.3g} {unit}"
    return f"{count / 2**10:.3g} KiB"


def check_fits(fields: Mapping[str, Any], *, source: str, purpose: str = "train", memory: int | None = None) -> float:
    """Refuse a config (``fields``: a config's dict or the overrides on a preset) whose model cannot fit this
    machine's memory for ``purpose`` ("train" or "load"), naming the estimate, the memory and the field to lower;
    ``source`` says where the config came from. Returns the estimated parameter count."""
    terms = parameter_terms(fields)
    parameters = sum(terms.values())
    needed = parameters * BYTES_PER_PARAMETER[purpose]
    available = available_memory() if memory is None else memory
    if needed > available:
        doing = "to train (float32 weights, gradients and Adam's two moments)" if purpose == "train" else "to load in float32"
        raise ModelTooLargeError(
            f"{source} describes a model of about {parameters:.3g} parameters, which needs {_bytes(needed)} {doing}, "
            f"more than the {_bytes(available)} of memory available here; {_culprit(fields, terms)} makes most of "
            "it: lower it"
        )
    return parameters


__all__ = [
    "BYTES_PER_PARAMETER", "ModelTooLargeError", "available_memory", "check_fits", "check_matches_weights",
    "parameter_terms",
]
