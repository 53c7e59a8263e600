"""The transformers release the model files run on, decided here once: from 5.16.1 (the oldest vLLM supports) to the
newest, with every difference between releases bridged (the KV cache's name, the tensor-parallel plan handed back).
What the model does with engines is engines.py's; the rules a config is held to, rules.py's.

This file travels to the Hub with the model. It refuses a release older than :data:`MINIMUM_TRANSFORMERS` before
importing anything that release may lack; configuration_vanilla.py imports it first, and the other files import
configuration_vanilla.py first, so no model file runs on a release it does not support.
"""

import functools
import itertools
from collections.abc import Callable
from typing import Any

import transformers

#: The oldest transformers release the model files run on (and are tested on: scripts/oldest_transformers.sh).
MINIMUM_TRANSFORMERS = "5.16.1"


def release_numbers(version: str) -> tuple[int, ...]:
    """(5, 16, 1) from "5.16.1", "5.16.1.dev0" or "5.16.1rc1": the leading numbers of a version."""
    return tuple(int("".join(itertools.takewhile(str.isdigit, part)) or 0) for part in version.split(".")[:3])


if release_numbers(transformers.__version__) < release_numbers(MINIMUM_TRANSFORMERS):
    raise ImportError(
        f"hf_vanilla's model files need transformers>={MINIMUM_TRANSFORMERS} (found {transformers.__version__}); "
        f"pip install -U 'transformers>={MINIMUM_TRANSFORMERS}'"
    )

# Imported after the check: an older release may lack them, and would fail here with a less useful message.
from transformers.cache_utils import Cache  # noqa: E402
from transformers.modeling_outputs import BaseModelOutputWithPast  # noqa: E402
from transformers.utils.deprecation import deprecate_kwarg  # noqa: E402

# ----------------------------------------------------------------------------------------------
# The KV cache's name: transformers 5.24 renamed it `past_key_values` -> `cache` in model outputs, in the arguments
# generate() passes, and in the mask functions. The model files say `cache`; these translate it for older releases.

#: The name model outputs give the cache, and that generate() reads it back by (and passes it to forward with).
CACHE_NAME = "cache" if "cache" in BaseModelOutputWithPast.__dataclass_fields__ else "past_key_values"


def cache_field(cache: Cache | None) -> dict[str, Cache | None]:
    """The cache as a keyword argument under this release's name: ``Output(..., **cache_field(cache))``."""
    return {CACHE_NAME: cache}


if CACHE_NAME == "cache":
    #: forward() takes the cache as `cache`; the old name still works, with transformers' deprecation warning.
    accepts_past_key_values = deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
else:

    def accepts_past_key_values(forward: Callable) -> Callable:
        """forward() takes the cache as `cache`; this release's generate() passes it as `past_key_values`, its
        current name here, so it is renamed without a deprecation warning."""

        @functools.wraps(forward)
        def renamed(*args, **kwargs):
            if "past_key_values" in kwargs:
                if kwargs.get("cache") is not None:
                    raise ValueError("Pass the KV cache once, as `cache` or as `past_key_values`, not both.")
                kwargs["cache"] = kwargs.pop("past_key_values")
            return forward(*args, **kwargs)

        return renamed


# ----------------------------------------------------------------------------------------------
# The tensor-parallel plan: transformers before 5.24 assigns a config's `base_model_tp_plan` back, with its own
# rule for a tied token embedding added, when a model is built.


def is_plan_given_back(plan: Any, derived: dict[str, str]) -> bool:
    """Whether ``plan`` is the config's own derived plan handed back by transformers (before 5.24), not a user's."""
    return isinstance(plan, dict) and {k: v for k, v in plan.items() if k != "embed_tokens"} == derived
