"""What the model files need to know of the code around them, decided here once: the transformers release they run
on, from 5.16.1 (the oldest vLLM supports) to the newest, with every difference between releases bridged; the
attention function a config is set to (an engine's, or one that would drop a positional bias), decided when the
implementation is set; and transformers' private corners the config meets (the attribute holding the
implementation, `@strict`'s errors).

This file travels to the Hub with the model. It refuses a release older than :data:`MINIMUM_TRANSFORMERS` before
importing anything that release may lack; configuration_vanilla.py imports it first, and the other files import
configuration_vanilla.py first, so no model file runs on a release it does not support.
"""

import functools
import inspect
import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

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
from huggingface_hub.dataclasses import StrictDataclassFieldValidationError  # noqa: E402
from transformers.cache_utils import Cache  # noqa: E402
from transformers.modeling_outputs import BaseModelOutputWithPast  # noqa: E402
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS  # noqa: E402
from transformers.utils.deprecation import deprecate_kwarg  # noqa: E402

from .variants import VLLM_HEAD_REFUSALS, row, rows_of, values  # noqa: E402

if TYPE_CHECKING:
    from .configuration_vanilla import VanillaConfig

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


# ----------------------------------------------------------------------------------------------
# What transformers passes to a config and what `@strict`, which its configs use, checks on assignment.

# Keyword arguments transformers itself passes to a config besides its fields (loading, legacy, runtime): kept
# without comment. Any other unknown key is kept too (as PreTrainedConfig does), and named once in the log.
PASSED_THROUGH = frozenset(
    {
        "num_labels", "auto_map", "model_type", "name_or_path", "_name_or_path", "torch_dtype", "attn_implementation",
        "output_attentions", "experts_implementation", "per_layer_config", "_commit_hash", "rope_scaling",
        "rope_theta", "partial_rotary_factor", "_attn_implementation_internal", "_experts_implementation_internal",
        "transformers_version",
        # generation settings older checkpoints stored in config.json; transformers moves them out
        "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "temperature", "top_k", "top_p",
        "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size",
        "bad_words_ids", "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
        "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
        "begin_suppress_tokens", "num_beam_groups", "diversity_penalty",
    }
)


def field_errors_as_value_errors(cls: type) -> type:
    """`@strict` checks each field's type on assignment (JSON gives "512", 2.7 or "false" as readily as 512);
    its error becomes a ValueError naming the field and the fix, like every other config error."""
    strict_setattr = cls.__setattr__

    def __setattr__(self, name: str, value: Any) -> None:
        try:
            strict_setattr(self, name, value)
        except StrictDataclassFieldValidationError as error:
            expected = cls.__dataclass_fields__[name].type
            raise ValueError(
                f"VanillaConfig.{name}={value!r} has the wrong type: {name} takes "
                f"{getattr(expected, '__name__', expected)}. In config.json write numbers and booleans unquoted "
                "(512, 0.1, true), integers without a fraction, and floats with a decimal point."
            ) from error

    cls.__setattr__ = __setattr__
    return cls


# ----------------------------------------------------------------------------------------------
# The attention implementation: transformers' own, hf_vanilla's eager, or an engine's (vLLM registers its own).


class AttentionDecidedWhenSet:
    """Mixed into VanillaConfig: whatever sets the attention implementation (the config's argument, transformers'
    property, a model's init or ``set_attn_implementation``) writes one private attribute; an attention function
    that would drop the positional bias is refused there, so the attention forward dispatches without asking."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == ATTENTION_IMPLEMENTATION_ATTRIBUTE and is_known_scheme(self):
            refuse_attention_dropping_bias(self, value)
        super().__setattr__(name, value)


#: Where PreTrainedConfig stores the attention implementation: its ``_attn_implementation`` property, the config's
#: ``attn_implementation`` argument and PreTrainedModel (init, ``set_attn_implementation``) all write this attribute.
ATTENTION_IMPLEMENTATION_ATTRIBUTE = "_attn_implementation_internal"


def vllm_refusals(config: "VanillaConfig") -> list[str]:
    """Why vLLM cannot serve this config, one line per reason (empty when it can): the class that saved it (its
    ``architectures``), then each option. Output-layer options count for a decoder only: vLLM generates with its
    own output layer, and pools an encoder's hidden states."""
    head = saved_head(config)
    refusals = [f"{head}: {VLLM_HEAD_REFUSALS[head]}"] if VLLM_HEAD_REFUSALS.get(head) else []
    for variant, other, why in vllm_refused_rows(config):
        beside = f" with {other}={getattr(config, other)!r}" if other else ""
        refusals.append(f"{variant.option}={getattr(config, variant.option)!r}{beside}: {why}")
    return refusals


def vllm_refused_rows(config: "VanillaConfig") -> list[tuple[Any, str, str]]:
    """(row, the other option it is refused beside or "", why) for each refusal of the table this config meets."""
    used = [variant for variant in rows_of(config) if config.is_decoder or not variant.output_layer]
    options = {variant.option for variant in used}
    return [(variant, "", variant.vllm_refusal) for variant in used if variant.vllm_refusal] + [
        (variant, other, why) for variant in used for other, why in variant.vllm_conflicts if other in options]


def saved_head(config: "VanillaConfig") -> str:
    """The class that saved this config's folder (the first of ``architectures``), or "" before any save."""
    return (getattr(config, "architectures", None) or [""])[0]


#: Where transformers' and hf_vanilla's own attention functions live; a function from elsewhere is an engine's.
_OWN_ATTENTION_PACKAGES = frozenset({"transformers", "hf_vanilla", __name__.partition(".")[0]})


def is_engine_attention(implementation: str | None) -> bool:
    """Whether ``implementation`` dispatches to a serving engine's attention (vLLM registers its own function):
    such an engine builds the bare model and its own output layer from the config."""
    try:
        function = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, None) if implementation else None
    except KeyError:
        return False
    return function is not None and function.__module__.partition(".")[0] not in _OWN_ATTENTION_PACKAGES


def refuse_engine_options(config: "VanillaConfig", implementation: str | None) -> None:
    """Before an engine's first token: refuse every option of this config its table row says vLLM cannot carry."""
    refusals = vllm_refusals(config) if is_engine_attention(implementation) else []
    if refusals:
        raise ValueError(
            f"attn_implementation={implementation!r} is a serving engine's attention (vLLM's): it cannot serve this "
            f"model as configured. " + " | ".join(refusals) +
            ". Serve it with transformers (generate / pipeline), or train a model without these options "
            "(docs/support-matrix.md lists what vLLM serves)."
        )


def refuse_engine_classifier(config: "VanillaConfig") -> None:
    """Before an engine's first label: vLLM builds VanillaForSequenceClassification for its own pooler and head (for
    a folder saved by the sequence or the token classifier), whose pooling and head run in hf_vanilla's code only."""
    implementation = config._attn_implementation
    head = saved_head(config) or "VanillaForSequenceClassification"
    why = VLLM_HEAD_REFUSALS.get(head, "")  # declared in the table's file: "" serves
    if why and is_engine_attention(implementation):
        raise ValueError(
            f"attn_implementation={implementation!r} is a serving engine's attention (vLLM's): it cannot serve "
            f"{head}: {why}. Classify with transformers (the model's forward or a pipeline), or serve the bare "
            "encoder as an embedding model (docs/support-matrix.md lists what vLLM serves)."
        )


def is_known_scheme(config: "VanillaConfig") -> bool:
    """Whether the config's positional scheme is a row of the table yet (an unknown one is refused by name later)."""
    return getattr(config, "position_embedding_type", None) in values("position_embedding_type")


def refuse_attention_dropping_bias(config: "VanillaConfig", implementation: str | None) -> None:
    """Refuse an attention function that would silently drop a bias scheme's additive bias.

    The rule: an attention function applies the bias if it takes a ``position_bias`` parameter, as hf_vanilla's
    eager attention and transformers' ``"sdpa"`` and ``"flex_attention"`` do. One that takes queries, keys and
    values alone (FlashAttention, the ``paged|`` kernels, an engine's own such as vLLM's) is refused, as is a Hub
    kernel (``"org/name"``), registered only once transformers loads it. A name transformers knows nowhere is left
    to transformers, which refuses it in its own words when the model is built or switched (as for any model). A
    function of one's own declares that it applies the bias by naming the parameter. Decided when the
    implementation is set on the config (and when a model is built from it), so the attention forward dispatches
    without asking.
    """
    scheme = config.position_embedding_type
    if not implementation or not row("position_embedding_type", scheme).attention_bias:
        return
    try:
        function = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, None)
    except KeyError:
        if "/" not in implementation:  # no such function: transformers' own "is not supported" names the choices
            return
        raise ValueError(bias_refusal(scheme, implementation)) from None  # a Hub kernel, not loaded yet
    if function is not None and "position_bias" not in inspect.signature(function).parameters:
        raise ValueError(bias_refusal(scheme, implementation))


def bias_refusal(scheme: str, impl: str) -> str:
    return (
        f"attn_implementation={impl!r} cannot be used with position_embedding_type={scheme!r}: the attention "
        f"function registered as {impl!r} takes no additive attention bias (it has no `position_bias` parameter), "
        f"so the {scheme} bias this scheme needs would be silently dropped. Use attn_implementation='eager', 'sdpa' "
        "or 'flex_attention', or a scheme without a bias ('rope', 'sinusoidal', 'learned', 'none'). Engines whose "
        "attention takes only queries, keys and values (vLLM's) cannot serve this scheme."
    )
