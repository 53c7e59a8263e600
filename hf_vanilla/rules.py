"""The rules a VanillaConfig is held to, as functions of the config and the table of variants (variants.py): the
allowed values and ranges of its fields, the options that take effect only under another option's value, the checks
its rows declare, the tensor- and pipeline-parallel plans transformers reads from it, and what transformers may pass
it besides its fields. configuration_vanilla.py calls them when a config is built, assigned or saved; nothing here
holds a list of option values: each rule reads the table when it runs.

This file travels to the Hub with the model: it imports only the standard library, huggingface_hub's `@strict`
errors (a dependency of transformers) and its siblings.
"""

import math
from collections.abc import Callable
from typing import Any

from huggingface_hub.dataclasses import StrictDataclassFieldValidationError

from .variants import (
    NON_DEFAULT,
    TP_SPLIT,
    activating_values,
    check_rope,
    default_value,
    fields_with_conditions,
    is_option_active,
    options,
    rows_of,
    scheme_row,
    values,
)

# ----------------------------------------------------------------------------------------------
# The checks a config's rows declare


def check_rows(config: Any) -> None:
    """The checks the rows ``config`` uses declare (``check``): a scheme's settings, an activation's name."""
    for used in rows_of(config):
        if used.check is not None:
            used.check(config)


# ----------------------------------------------------------------------------------------------
# The allowed values of the fields no row lists: choices that change no engine's support, and number ranges

#: Choice fields that are not in the table of variants (they change no engine's support).
OTHER_CHOICES: dict[str, tuple[str, ...]] = {
    "sinusoidal_layout": ("interleaved", "concatenated"),
    "classifier_pooling": ("first", "last", "mean", "eos"),
}

#: Largest initialisation spread accepted: weights drawn wider overflow float32 products within a layer or two.
MAX_INIT_SPREAD = 1e3

_FINITE_POSITIVE = "a finite number > 0"
_DROPOUT = ("in [0, 1)", lambda v: v is None or 0 <= v < 1)

#: Number fields -> (the allowed range in words, its test). NaN and infinities fail every test.
NUMBER_RANGES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    **dict.fromkeys(("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_decoder_layers",
                     "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings"),
                    ("a positive integer", lambda v: v >= 1)),
    **dict.fromkeys(("position_offset", "type_vocab_size"), ("an integer >= 0", lambda v: v >= 0)),
    **dict.fromkeys(("hidden_dropout", "attention_dropout", "activation_dropout", "classifier_dropout"), _DROPOUT),
    "norm_eps": (_FINITE_POSITIVE, lambda v: 0 < v < math.inf),
    "attention_scale": (f"{_FINITE_POSITIVE}, or None for 1/sqrt(head_dim)", lambda v: v is None or 0 < v < math.inf),
    "lm_head_scale": (f"{_FINITE_POSITIVE} (1.0 leaves the hidden states as they are)", lambda v: 0 < v < math.inf),
    "initializer_range": (f"a number in [0, {MAX_INIT_SPREAD:g}]", lambda v: 0 <= v <= MAX_INIT_SPREAD),
    "initializer_factor": (f"in (0, {MAX_INIT_SPREAD:g}] (1.0 is T5's initialisation) or None (the normal "
                           "initialisation at initializer_range)", lambda v: v is None or 0 < v <= MAX_INIT_SPREAD),
}


def check_choice(field: str, value: Any, allowed: tuple[Any, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"VanillaConfig.{field}={value!r} is not supported; choose one of {', '.join(map(repr, allowed))}.")


def check_values(config: Any) -> None:
    """Each field's value is one its rows (a choice), :data:`OTHER_CHOICES` or :data:`NUMBER_RANGES` allow: a value
    that passes the type check but would give NaN, a silent disagreement between backends or a late crash is refused."""
    for option in options():
        if NON_DEFAULT not in values(option):  # a choice, not a setting with a special value
            check_choice(option, getattr(config, option), values(option))
    for field, allowed in OTHER_CHOICES.items():
        check_choice(field, getattr(config, field), allowed)
    for field, (allowed, valid) in NUMBER_RANGES.items():
        value = getattr(config, field)
        if not valid(value):
            raise ValueError(f"VanillaConfig.{field}={value!r} is out of range: it must be {allowed}.")


# ----------------------------------------------------------------------------------------------
# Options that take effect only under another option's value (``active_fields``): set otherwise, they are refused


def activation_condition(name: str) -> tuple[str, Callable[[Any], bool]]:
    """A field that changes nothing unless an option has certain values -> (that condition in words, its test)."""
    ((option, allowed),) = activating_values(name).items()
    words = f"{option}={allowed[0]!r}" if len(allowed) == 1 else f"{option} is {' or '.join(map(repr, allowed))}"
    return words, lambda config: getattr(config, option) in allowed


def field_is_active(name: str, config: Any) -> bool:
    """Whether ``name`` changes what this config computes (fields without a condition always do)."""
    return name not in fields_with_conditions() or activation_condition(name)[1](config)


#: The RoPE settings PreTrainedConfig writes into every config that has the field (older saves carry them).
_BASE_ROPE_DEFAULTS = ({"rope_theta": 10000.0, "rope_type": "default"}, {"rope_theta": 10000, "rope_type": "default"})


def check_inactive_options(config: Any, rope_scaling: dict | None = None, names: tuple[str, ...] | None = None) -> None:
    """Refuse a setting the chosen scheme, norm or family would silently ignore."""
    for name in fields_with_conditions() if names is None else names:
        condition, active = activation_condition(name)
        if active(config):
            continue
        value = getattr(config, name, None)  # rope_parameters exists only with RoPE (or once a tool assigns it)
        if name == "rope_parameters":
            value = rope_scaling or value
            ignored = value is not None and value not in _BASE_ROPE_DEFAULTS
        elif name == "num_decoder_layers":
            ignored = value != config.num_hidden_layers
        else:
            ignored = value != default_value(config, name)
        if ignored:
            raise ValueError(
                f"VanillaConfig.{name}={value!r} has no effect unless {condition} (this config has "
                f"position_embedding_type={config.position_embedding_type!r}, norm_type={config.norm_type!r}, "
                f"architecture={config.architecture!r}); remove it, or choose the setting it belongs to."
            )


def check_rope_settings(config: Any) -> None:
    """RoPE settings given to a config without RoPE after it was built (tools probe ``rope_parameters``, which
    every config has, and assign it): refused when a model is built from the config or it is saved, as at
    construction; RoPE chosen after it was built needs its settings. Other derived options (``num_decoder_layers``)
    follow their fields and are not checked here."""
    check_inactive_options(config, names=("rope_parameters",))
    if is_option_active("rope_parameters", config):
        check_rope(config)


# ----------------------------------------------------------------------------------------------
# Parallelism plans: which modules of VanillaModel each rank shards (tensor) or holds (pipeline), from the rows


def attention_tp_plan(prefix: str) -> dict[str, str]:
    """Megatron's split of one attention: q, k, v by heads (columns), the output projection by rows (one all-reduce)."""
    return {f"{prefix}.{name}_proj": "colwise" for name in "qkv"} | {f"{prefix}.o_proj": "rowwise"}


def stack_prefixes(config: Any) -> tuple[str, ...]:
    """Where the bare model holds its blocks, as prefixes of their names: an encoder-decoder's two stacks, the decoder
    family's own layers (its bare model is its own causal stack, ``layers.*``, as LlamaModel's), an encoder's."""
    if config.is_encoder_decoder:
        return ("encoder.", "decoder.")
    return ("",) if config.is_decoder else ("encoder.",)


def tensor_parallel_plan(config: Any) -> dict[str, str]:
    """``base_model_tp_plan``: module names of VanillaModel -> transformers' parallel styles.

    Every rank computes the same result as one process, up to the order of the row-wise sums:
    * attention heads are split across ranks (q, k, v column-wise, o row-wise); the ranks must divide
      ``num_key_value_heads``. A single key/value head (multi-query) cannot be split: its attention stays whole.
    * a scheme's per-head parameters follow its row's plan (T5's relative bias: each rank keeps its heads'
      columns); a scheme whose row keeps heads whole (ALiBi: its slopes are not weights a plan can shard) leaves
      self-attention whole on every rank (cross-attention is split).
    * the feed-forward network (gate and up column-wise, down row-wise).
    transformers adds the token embedding (split by vocabulary) and the heads add their output projection.
    """
    scheme = scheme_row(config)
    # Any other row that does not declare split heads (a new norm, say) keeps every attention whole: exact anyway.
    others_split = all(used.tensor_parallel == TP_SPLIT for used in rows_of(config) if used is not scheme)
    split_heads = config.num_key_value_heads > 1 and others_split
    plan: dict[str, str] = {}
    for stack in stack_prefixes(config):
        layers = f"{stack}layers.*"
        if split_heads and scheme.tensor_parallel == TP_SPLIT:
            plan |= attention_tp_plan(f"{layers}.self_attn")
            plan |= {f"{stack}{scheme.module_name}.{name}": style for name, style in scheme.tensor_parallel_plan}
        if split_heads and stack == "decoder." and config.is_encoder_decoder:
            plan |= attention_tp_plan(f"{layers}.cross_attn")
        if config.gated_ffn:
            plan[f"{layers}.mlp.gate_proj"] = "colwise"
        plan |= {f"{layers}.mlp.up_proj": "colwise", f"{layers}.mlp.down_proj": "rowwise"}
    return plan


def pipeline_parallel_plan(config: Any) -> dict[str, tuple[list[str], list[str]]] | None:
    """``base_model_pp_plan``: the embedding, the one list of layers and the final norm, in order, each with its
    inputs and outputs -- where a later stage may start from hidden states given as ``inputs_embeds``.

    None (no plan) for an encoder-decoder (two lists of layers) and for a stack that adds positions, token types
    or a norm to its input embeddings: those would be added again to the hidden states a stage receives.
    """
    adds_to_embeddings = scheme_row(config).adds_to_embeddings or config.embedding_norm or config.type_vocab_size
    if adds_to_embeddings or any(variant.pipeline_refusal for variant in rows_of(config)):
        return None
    (stack,) = stack_prefixes(config)
    plan = {
        "embed_tokens": (["input_ids"], ["inputs_embeds"]),
        f"{stack}layers": (["hidden_states", "attention_mask"], ["hidden_states"]),
    }
    if config.final_norm:
        plan[f"{stack}final_norm"] = (["hidden_states"], ["hidden_states"])
    return plan


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
