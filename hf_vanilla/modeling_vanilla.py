"""The transformer of "Attention Is All You Need" as Hugging Face models.

Reads top to bottom: norms and the feed-forward network, attention, the block (one residual step
per sub-layer, pre- or post-norm), the stacks (encoder, decoder), the bare model of each family, then
the task heads. Positional schemes live in ``positional.py`` behind one interface; the options in
``configuration_vanilla.py``.

This file travels to the Hub with the model: it imports only torch, transformers and its siblings, and runs on
every transformers release from 5.16.1 (the differences between them are bridged in transformers_releases.py).
"""

# First: the configuration module refuses a transformers release older than these files support.
from .configuration_vanilla import VanillaConfig, auto_map_for

# isort: split
import inspect
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn
from transformers import PreTrainedConfig
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.generation import GenerationMixin
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPast,
    BaseModelOutputWithPastAndCrossAttentions,
    CausalLMOutputWithPast,
    MaskedLMOutput,
    QuestionAnsweringModelOutput,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
    Seq2SeqSequenceClassifierOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel
from transformers.processing_utils import Unpack
from transformers.utils import ModelOutput, TransformersKwargs, can_return_tuple
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .engines import refuse_attention_dropping_bias, refuse_engine_classifier, refuse_engine_options
from .positional import (
    NO_POSITIONAL_INPUTS,
    InitialisesItself,
    PositionalAttentionInputs,
    PositionalScheme,
    build_positional_scheme,
    key_positions,
    rotate_folded,
)
from .rules import check_rope_settings
from .transformers_releases import CACHE_NAME, accepts_past_key_values, cache_field
from .variants import enter_class, head_families, scheme_row

#: The projections LoRA adapts when ``LoraConfig()`` names none (as PEFT's defaults for Llama).
LORA_TARGET_MODULES = ("q_proj", "v_proj")


def tell_peft_lora_targets() -> None:
    """PEFT finds LoRA's default targets only in its own table keyed by ``model_type``, and reads nothing from the
    model: enter this model type there when PEFT is already imported (this file imports nothing beyond torch and
    transformers), so a model loaded through remote code alone takes a bare ``LoraConfig()``."""
    constants = sys.modules.get("peft.utils.constants")
    if constants is not None:
        constants.TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING.setdefault(VanillaConfig.model_type,
                                                                                list(LORA_TARGET_MODULES))


# ----------------------------------------------------------------------------------------------
# Norms and the position-wise feed-forward network


#: norm_type -> the class that builds it; hidden_act -> the class that builds it where ACT2FN's module is not used.
#: Each class registers itself by naming its rows (``norm_type = ...``, ``activations = (...)``); a taken name is refused.
NORM_CLASSES: dict[str, type["VanillaNorm"]] = {}
ACTIVATION_CLASSES: dict[str, type[nn.Module]] = {}


class VanillaNorm(InitialisesItself):
    """A norm: the class of one ``norm_type`` row of the table of variants, built from the config.

    Its weight starts at 1, or at T5's ``initializer_factor``, and its bias at 0: drawn here, whatever the class is
    called (transformers initialises only norms whose class name holds "LayerNorm" or "RMSNorm"). A norm with other
    parameters draws them in its own ``init_own_weights``.
    """

    #: The value of ``norm_type`` this class builds.
    norm_type: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("norm_type") is not None:
            enter_class(NORM_CLASSES, "norm_type", cls.norm_type, cls)

    @classmethod
    def from_config(cls, config: VanillaConfig) -> nn.Module:
        raise NotImplementedError(f"{cls.__qualname__} names norm_type={cls.norm_type!r} but defines no from_config")

    def init_own_weights(self, config: VanillaConfig) -> None:
        if getattr(self, "weight", None) is not None:
            init.constant_(self.weight, 1.0 if config.initializer_factor is None else config.initializer_factor)
        if getattr(self, "bias", None) is not None:
            init.zeros_(self.bias)


class VanillaRMSNorm(VanillaNorm, nn.Module):
    """Root-mean-square norm (Zhang & Sennrich): no centring, no bias.

    Written as LlamaRMSNorm is, and rounding where it (and T5's) does: normalised in float32, cast back to the
    input's dtype, then scaled by the weight, so a converted checkpoint computes the same bfloat16 numbers as its
    source. vLLM recognises this dataflow (x * rsqrt(mean(x^2) + eps), times the weight) and runs its fused kernel.
    """

    norm_type = "rmsnorm"

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    @classmethod
    def from_config(cls, config: VanillaConfig) -> "VanillaRMSNorm":
        return cls(config.hidden_size, config.norm_eps)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.eps)
        return self.weight * hidden_states.to(input_dtype)


class VanillaLayerNorm(VanillaNorm, nn.LayerNorm):
    """LayerNorm with an optional bias (T5-like stacks drop it)."""

    norm_type = "layernorm"

    def __init__(self, hidden_size: int, eps: float, bias: bool):
        super().__init__(hidden_size, eps=eps, bias=bias)

    @classmethod
    def from_config(cls, config: VanillaConfig) -> "VanillaLayerNorm":
        return cls(config.hidden_size, config.norm_eps, config.norm_bias)


def build_norm(config: VanillaConfig) -> nn.Module:
    """The norm of the class that names ``config.norm_type``."""
    norm_class = NORM_CLASSES.get(config.norm_type)
    if norm_class is None:
        raise ValueError(
            f"norm_type={config.norm_type!r} is in the table of variants but no norm class names it: define one with "
            f"`norm_type = {config.norm_type!r}` (a VanillaNorm subclass, hf_vanilla/modeling_vanilla.py) before "
            "building the model."
        )
    return norm_class.from_config(config)


def active_dropout(states: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Dropout with probability ``p`` when it does something; otherwise the states as they are, without a call
    (cached decoding runs this a few times per layer and token, and the calls add up when the work is small).

    A probability held as an attribute, not an ``nn.Dropout`` module, as Llama holds ``attention_dropout``: the
    module tree stays as small as the twin's, and building and loading walk fewer modules."""
    return nn.functional.dropout(states, p, training=True) if training and p > 0 else states


class RowActivation(nn.Module):
    """The class of one or more ``hidden_act`` rows, for an activation not taken from transformers' ``ACT2FN``
    as it is (one with parameters, or one computed another way); built from the config."""

    #: The values of ``hidden_act`` this class builds.
    activations: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in cls.__dict__.get("activations", ()):
            enter_class(ACTIVATION_CLASSES, "hidden_act", name, cls)


class FusedTanhGELU(RowActivation):
    """GPT-2's ``gelu_new`` (and ``gelu_fast``, the same polynomial), 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))).

    transformers writes it out in Python: about nine element-wise passes forward, more backward. In float32
    torch's tanh-approximated GELU computes the same function (to float32 rounding) in one kernel; in lower
    precision the native module runs, so a converted checkpoint rounds where its source does.
    """

    activations = ("gelu_new", "gelu_fast")

    def __init__(self, config: VanillaConfig):
        super().__init__()
        # The module's function, not a child module: parameter-free, and building and loading walk every module.
        self.native = ACT2FN[config.hidden_act].forward

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if hidden_states.dtype == torch.float32:
            return nn.functional.gelu(hidden_states, approximate="tanh")
        return self.native(hidden_states)


def build_activation(config: VanillaConfig) -> nn.Module:
    """The activation ``config.hidden_act`` names: its class's, or else transformers' ``ACT2FN`` module."""
    name = config.hidden_act
    if name in ACTIVATION_CLASSES:
        return ACTIVATION_CLASSES[name](config)
    if name in ACT2FN:
        return ACT2FN[name]
    raise ValueError(
        f"hidden_act={name!r} is in the table of variants but neither transformers' ACT2FN nor an activation class "
        f"names it: define one with `activations = ({name!r},)` (a RowActivation subclass, "
        "hf_vanilla/modeling_vanilla.py) before building the model."
    )


class VanillaFeedForward(InitialisesItself, nn.Module):
    """FFN(x) = act(x W_up) W_down: the paper's position-wise network."""

    gated = False

    def __init__(self, config: VanillaConfig):
        super().__init__()
        width, hidden = config.intermediate_size, config.hidden_size
        self.gate_proj = nn.Linear(hidden, width, bias=config.mlp_bias) if self.gated else None
        self.up_proj = nn.Linear(hidden, width, bias=config.mlp_bias)
        self.down_proj = nn.Linear(width, hidden, bias=config.mlp_bias)
        self.act_fn = build_activation(config)
        self.activation_dropout = config.activation_dropout

    def init_own_weights(self, config: VanillaConfig) -> None:
        if config.initializer_factor is None:
            return
        factor = config.initializer_factor  # T5's: each projection N(0, factor / sqrt(fan_in))
        for projection in (self.gate_proj, self.up_proj):
            if projection is not None:
                init.normal_(projection.weight, std=factor * config.hidden_size**-0.5)
        init.normal_(self.down_proj.weight, std=factor * config.intermediate_size**-0.5)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.act_fn(self.up_proj(hidden_states))
        return self.down_proj(active_dropout(hidden_states, self.activation_dropout, self.training))


class VanillaGatedFeedForward(VanillaFeedForward):
    """FFN(x) = (act(x W_gate) * x W_up) W_down: the GLU variants (SwiGLU with silu, GEGLU with gelu).

    The product is written as LlamaMLP writes it, ``act_fn(gate_proj(x)) * up_proj(x)`` in one expression: vLLM
    recognises that dataflow and source and runs gate and up as one product with a fused activation-and-multiply.
    """

    gated = True

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.act_fn(self.gate_proj(hidden_states)) * self.up_proj(hidden_states)
        return self.down_proj(active_dropout(hidden_states, self.activation_dropout, self.training))


def build_feed_forward(config: VanillaConfig) -> VanillaFeedForward:
    return VanillaGatedFeedForward(config) if config.gated_ffn else VanillaFeedForward(config)


# ----------------------------------------------------------------------------------------------
# Attention


def repeat_kv(states: torch.Tensor, groups: int) -> torch.Tensor:
    """(batch, kv_heads, seq, dim) -> (batch, kv_heads * groups, seq, dim): each KV head serves a group of queries."""
    if groups == 1:
        return states
    batch, heads, length, dim = states.shape
    return states[:, :, None].expand(batch, heads, groups, length, dim).reshape(batch, heads * groups, length, dim)


def softmax_in_place(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension, overwriting ``scores``: at long lengths eager attention's peak memory
    is its (seq, seq) tensors, and this keeps one instead of two."""
    scores -= scores.amax(dim=-1, keepdim=True)
    scores.exp_()
    scores /= scores.sum(dim=-1, keepdim=True)
    return scores


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    position_bias: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T * scaling + bias + mask) V, written out: the reference every backend must match."""
    key = repeat_kv(key, module.num_key_value_groups)
    value = repeat_kv(value, module.num_key_value_groups)
    # Scaled after the product, as transformers' eager attention does (the same bfloat16 roundings), and in place
    # like the bias and mask: one (seq, seq) score tensor exists before the softmax, not three.
    scores = torch.matmul(query, key.transpose(2, 3))
    if scaling != 1.0:
        scores *= scaling
    if position_bias is not None:
        scores += position_bias
    if attention_mask is not None:
        scores += attention_mask[:, :, :, : key.shape[-2]]
    if torch.is_grad_enabled() or scores.dtype != torch.float32:
        weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    else:  # float32 inference: nothing reads the scores again, so normalise them where they are
        weights = softmax_in_place(scores)
    del scores  # the scores die here, not when the function returns
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return output, weights


class VanillaAttention(InitialisesItself, nn.Module):
    """Multi-head (optionally grouped-query) self-attention, dispatched through transformers' attention interface.

    The forward is written as Llama's is, in one piece and undecorated: engines (vLLM) trace it and read its source
    to fuse the q, k and v projections and to find the one attention-interface call (a wrapper taking ``*args``
    stops the trace). The block above passes the cache as ``cache``.
    """

    def __init__(self, config: VanillaConfig, layer_idx: int, is_causal: bool):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.is_causal = is_causal
        self.head_dim = config.head_dim
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.scaling = config.attention_scale if config.attention_scale is not None else self.head_dim**-0.5
        self.attention_dropout = config.attention_dropout
        bias = config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, self.num_key_value_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, self.num_key_value_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=bias)

    def init_own_weights(self, config: VanillaConfig) -> None:
        if config.initializer_factor is None:
            return
        factor, d_model = config.initializer_factor, config.hidden_size  # T5's: N(0, factor / sqrt(fan_in))
        # The query also carries the 1/sqrt(head_dim) T5's unscaled attention leaves out.
        init.normal_(self.q_proj.weight, std=factor * (d_model * self.head_dim) ** -0.5)
        init.normal_(self.k_proj.weight, std=factor * d_model**-0.5)
        init.normal_(self.v_proj.weight, std=factor * d_model**-0.5)
        init.normal_(self.o_proj.weight, std=factor * (self.num_heads * self.head_dim) ** -0.5)

    def _split_heads(self, states: torch.Tensor) -> torch.Tensor:
        return states.view(*states.shape[:-1], -1, self.head_dim).transpose(1, 2)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        positional: PositionalAttentionInputs = NO_POSITIONAL_INPUTS,
        cache: Cache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        query, key, value = self.q_proj(hidden_states), self.k_proj(hidden_states), self.v_proj(hidden_states)
        query, key, value = self._split_heads(query), self._split_heads(key), self._split_heads(value)
        if positional.rotary is not None:  # keys rotated before caching: a cached key keeps its own position
            cos, signed_sin = positional.rotary
            query, key = rotate_folded(query, cos, signed_sin), rotate_folded(key, cos, signed_sin)
        if cache is not None:
            layer_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
            key, value = layer_cache.update(key, value, self.layer_idx, kwargs=kwargs)

        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        if positional.bias is not None:  # the config refused any function that would drop it when it was set
            kwargs["position_bias"] = positional.bias
        output, weights = attention_interface(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.attention_dropout if self.training else 0.0,
            scaling=self.scaling,
            **kwargs,
        )
        output = self.o_proj(output.reshape(*hidden_states.shape[:-1], -1).contiguous())
        return output, weights


class VanillaCrossAttention(VanillaAttention):
    """Decoder-to-encoder attention: queries from the decoder, keys and values from the encoder's states.

    No positional term (the two sequences share no positions), so any attention function serves.
    """

    def __init__(self, config: VanillaConfig, layer_idx: int):
        super().__init__(config, layer_idx, is_causal=False)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        key_value_states: torch.Tensor | None = None,
        cache: Cache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        query = self._split_heads(self.q_proj(hidden_states))
        if cache is not None and cache.is_updated.get(self.layer_idx):  # projected once per generation
            layer = cache.cross_attention_cache.layers[self.layer_idx]
            key, value = layer.keys, layer.values
        else:
            key = self._split_heads(self.k_proj(key_value_states))
            value = self._split_heads(self.v_proj(key_value_states))
            if cache is not None:
                cache.is_updated[self.layer_idx] = True
                key, value = cache.cross_attention_cache.update(key, value, self.layer_idx)

        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        output, weights = attention_interface(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.attention_dropout if self.training else 0.0,
            scaling=self.scaling,
            **kwargs,
        )
        output = self.o_proj(output.reshape(*hidden_states.shape[:-1], -1).contiguous())
        return output, weights


# ----------------------------------------------------------------------------------------------
# The block: self-attention, (cross-attention,) feed-forward, each inside a residual connection with its norm


#: Checkpoint names of folders saved before the block held its norms itself (one ``ResidualStep`` module a sub-layer
#: held each, ``layers.0.self_attn_step.norm.weight``): read by ``from_pretrained`` through transformers' weight
#: renaming and by ``load_state_dict`` (Trainer's resume, PEFT) through :func:`read_legacy_names`,
#: never written. One pattern: loading tries each renaming on every tensor name.
LEGACY_KEY_NAMES = {r"\.(self_attn|cross_attn|mlp)_step\.norm\.": r".\1_norm."}
#: The decoder family's names from before its bare model was its own causal stack (``model.decoder.layers.0...``;
#: a bare model's folder ``decoder.layers.0...``): read as LEGACY_KEY_NAMES are, for that family only (an
#: encoder-decoder's decoder keeps the name), by :func:`read_legacy_stack_names` and ``from_pretrained``.
LEGACY_DECODER_FAMILY_NAMES = {r"^model\.decoder\.": "model.", r"^decoder\.": ""}


def legacy_key_names(is_decoder: bool) -> dict[str, str]:
    """The renamings that read older checkpoints: the decoder family's (the config's ``is_decoder``) and everyone's."""
    return {**LEGACY_KEY_NAMES, **(LEGACY_DECODER_FAMILY_NAMES if is_decoder else {})}


def legacy_renamed(name: str) -> str:
    """``name`` with LEGACY_KEY_NAMES' renamings applied: today's name of an older checkpoint's tensor."""
    for old, new in LEGACY_KEY_NAMES.items():
        name = re.sub(old, new, name)
    return name


def read_legacy_names(module: nn.Module, state_dict: dict, prefix: str, *args: Any) -> None:
    """A load_state_dict pre-hook of each stack: its blocks' tensors under an older checkpoint's names take today's,
    before torch loads the blocks from the same dict."""
    for old in [name for name in state_dict if name.startswith(prefix)]:
        new = prefix + legacy_renamed("." + old[len(prefix):])[1:]
        if new != old:
            state_dict[new] = state_dict.pop(old)


def read_legacy_stack_names(module: nn.Module, state_dict: dict, prefix: str, *args: Any) -> None:
    """The decoder family's bare model's load_state_dict pre-hook: the tensors of the decoder stack it held before
    (``decoder.layers.0...``) take the names of its own parts (``layers.0...``), then read_legacy_names's."""
    held = prefix + "decoder."
    for old in [name for name in state_dict if name.startswith(held)]:
        state_dict[prefix + old[len(held):]] = state_dict.pop(old)
    read_legacy_names(module, state_dict, prefix, *args)


def is_legacy_renaming(transform: object) -> bool:
    """Whether a transform transformers made from ``key_mapping`` is one of the legacy renamings."""
    legacy = legacy_key_names(is_decoder=True)  # every renaming: the decoder family reads them all
    return getattr(transform, "_original_source_patterns", None) in [[old] for old in legacy]


#: What ``from_pretrained`` passes on when it reads a folder's config (the download's own arguments).
CONFIG_READING_ARGUMENTS = (
    "cache_dir", "force_download", "proxies", "local_files_only", "token", "revision", "subfolder", "gguf_file"
)


def checkpoint_is_decoder(config_class: type, location: Any, kwargs: dict) -> bool:
    """Whether the folder ``from_pretrained`` was given holds the decoder family, by its config's ``is_decoder``: the
    config given, or its config.json (every config saves the flag it derives), read as transformers reads it. False
    where none can be read: transformers says why."""
    config = kwargs.get("config")
    if isinstance(config, PreTrainedConfig):
        return config.is_decoder
    source = config if config is not None else location  # a config given as a folder's name or path
    if source is None:
        return False
    reading = {name: kwargs[name] for name in CONFIG_READING_ARGUMENTS if name in kwargs}
    try:
        config_dict, _ = config_class.get_config_dict(source, **reading)
    except (OSError, ValueError):
        return False
    return bool(config_dict.get("is_decoder"))


class VanillaBlock(GradientCheckpointingLayer):
    """One encoder or decoder layer: each sub-layer (``self_attn``, ``cross_attn``, ``mlp``) inside a residual
    connection with its own norm, named for the sub-layer (``self_attn_norm``, ...) whether it comes before the
    sub-layer or after the sum, as BART and mBART name one set of norms for both positions.

    Tensors that may need gradients come as positional arguments: reentrant gradient checkpointing only
    backpropagates through those (a learned position bias shared by all layers included).
    """

    def __init__(self, config: VanillaConfig, layer_idx: int, is_causal: bool, has_cross_attention: bool):
        super().__init__()
        self.pre_norm = config.norm_position == "pre"
        self.hidden_dropout = config.hidden_dropout
        self.self_attn = VanillaAttention(config, layer_idx, is_causal=is_causal)
        self.self_attn_norm = build_norm(config)
        if has_cross_attention:
            self.cross_attn = VanillaCrossAttention(config, layer_idx)
            self.cross_attn_norm = build_norm(config)
        else:
            self.cross_attn = self.cross_attn_norm = None
        self.mlp = build_feed_forward(config)
        self.mlp_norm = build_norm(config)

    def residual(
        self, hidden_states: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor], norm: nn.Module
    ) -> torch.Tensor:
        """post-norm (the paper): x = Norm(x + Dropout(f(x)));  pre-norm: x = x + Dropout(f(Norm(x)))."""
        if self.pre_norm:
            return hidden_states + active_dropout(sublayer(norm(hidden_states)), self.hidden_dropout, self.training)
        return norm(hidden_states + active_dropout(sublayer(hidden_states), self.hidden_dropout, self.training))

    @accepts_past_key_values
    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        position_bias: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
        cache: Cache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        positional = PositionalAttentionInputs(rotary=rotary, bias=position_bias)

        def self_attention(x: torch.Tensor) -> torch.Tensor:
            return self.self_attn(x, attention_mask, positional, cache=cache, **kwargs)[0]

        hidden_states = self.residual(hidden_states, self_attention, self.self_attn_norm)
        if self.cross_attn is not None:

            def cross_attention(x: torch.Tensor) -> torch.Tensor:
                return self.cross_attn(
                    x, encoder_attention_mask, key_value_states=encoder_hidden_states, cache=cache, **kwargs
                )[0]

            hidden_states = self.residual(hidden_states, cross_attention, self.cross_attn_norm)
        return self.residual(hidden_states, self.mlp, self.mlp_norm)


# ----------------------------------------------------------------------------------------------
# Shared model plumbing


class VanillaTokenEmbedding(InitialisesItself, nn.Embedding):
    """Token embeddings, multiplied by sqrt(d_model) when ``scale_embedding`` (paper, section 3.4)."""

    def __init__(self, config: VanillaConfig):
        super().__init__(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        # Named as transformers' scaled embeddings name it: engines that replace the embedding (vLLM) keep the factor.
        self.embed_scale = math.sqrt(config.hidden_size) if config.scale_embedding else None

    def init_own_weights(self, config: VanillaConfig) -> None:
        if config.initializer_factor is not None:  # T5's: N(0, factor)
            init_embedding(self, std=config.initializer_factor)
        elif self.embed_scale is not None:
            # The paper's reference code (tensor2tensor, fairseq): N(0, d^-1/2), so the sqrt(d)-scaled embeddings
            # have unit variance, as the sinusoids added to them do (std 0.02 leaves tokens swamped by positions).
            init_embedding(self, std=self.embedding_dim**-0.5)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if input_ids.device.type == "cpu" and not torch.compiler.is_compiling() and input_ids.numel():
            # Free on CPU (no device sync); on accelerators the embedding kernel's own bounds check reports it.
            # Under tensor parallelism the ids come as a replicated DTensor: every rank holds them all.
            ids = input_ids.to_local() if hasattr(input_ids, "to_local") else input_ids
            low, high = torch.stack(torch.aminmax(ids)).tolist()
            if low < 0 or high >= self.num_embeddings:
                raise ValueError(
                    f"Token id {low if low < 0 else high} is outside the vocabulary [0, {self.num_embeddings}). "
                    "Check that the tokenizer matches the model (config.vocab_size) or resize the embeddings "
                    "with model.resize_token_embeddings(len(tokenizer))."
                )
        embeddings = super().forward(input_ids)
        return embeddings * self.embed_scale if self.embed_scale is not None else embeddings


def check_input_shape(input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None, what: str) -> None:
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError(f"Pass exactly one of {what}input_ids or {what}inputs_embeds.")
    shape = input_ids.shape if input_ids is not None else inputs_embeds.shape[:-1]
    if len(shape) != 2:
        raise ValueError(f"{what}input_ids must be (batch, sequence); got shape {tuple(shape)}.")
    if shape[0] == 0 or shape[1] == 0:
        raise ValueError(
            f"{what}input_ids is empty (shape {tuple(shape)}): a forward pass needs at least one sequence of "
            "at least one token."
        )


class VanillaPreTrainedModel(InitialisesItself, PreTrainedModel):
    config: VanillaConfig
    config_class = VanillaConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["VanillaBlock"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _can_compile_fullgraph = True
    _supports_attention_backend = True
    # BERT-shaped checkpoints carry a pooler that only the sequence classifier uses (as BertForMaskedLM drops it).
    _keys_to_ignore_on_load_unexpected = [r"^pooler\."]

    def __init__(self, config: VanillaConfig, *args, checked: bool = False, **kwargs):
        """``checked``: built as a part of a model that checked ``config`` already (its base model, its stacks)."""
        if not checked:
            self.check_config(config)
        super().__init__(config, *args, **kwargs)
        # PEFT reads a decoder's adapter saved under the older stack names through this mapping (transformers' own
        # renamed models' way); an adapter holds projections, never the norms LEGACY_KEY_NAMES renames
        self._checkpoint_conversion_mapping = dict(LEGACY_DECODER_FAMILY_NAMES) if config.is_decoder else {}

    def check_config(self, config: VanillaConfig) -> None:
        """What building a model from ``config`` refuses, once a build: a class of another family, an attention
        function that would drop the scheme's bias, RoPE settings the config would ignore."""
        family_heads = head_families(type(self).__name__)
        if family_heads and config.architecture not in family_heads:
            raise ValueError(
                f"{type(self).__name__} does not fit architecture={config.architecture!r}; it needs "
                f"{' or '.join(map(repr, family_heads))}. Build the config with a matching `architecture`."
            )
        # from_pretrained / from_config set the requested backend on the config before building the model.
        refuse_attention_dropping_bias(config, config._attn_implementation)
        check_rope_settings(config)  # a RoPE option assigned after the config was built would be ignored
        tell_peft_lora_targets()  # here, not at import: PEFT may be imported after this file, before the model

    @classmethod
    def from_pretrained(cls, *args, key_mapping: dict[str, str] | None = None, **kwargs):
        """transformers' ``from_pretrained``, reading the checkpoint names of older folders too (legacy_key_names).

        The old names are read, not written back: transformers re-saves a renamed checkpoint in the layout it was
        loaded from, so the renaming is dropped from what the model remembers, and every folder it saves holds the
        names of its modules (the names vLLM and the conversions read)."""
        location = args[0] if args else kwargs.get("pretrained_model_name_or_path")
        legacy = legacy_key_names(checkpoint_is_decoder(cls.config_class, location, kwargs))
        loaded = super().from_pretrained(*args, key_mapping={**legacy, **(key_mapping or {})}, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded  # (model, loading_info) when asked for it
        remembered = getattr(model, "_weight_conversions", None) or []
        model._weight_conversions = [c for c in remembered if not is_legacy_renaming(c)] or None
        return loaded

    def save_pretrained(self, *args, **kwargs) -> None:
        if type(self)._auto_class is not None:  # saved with its code: every Auto class that fits the family loads
            # it, not only this class's (engines build the bare model: AutoModel); entries already there are kept
            known = getattr(self.config, "auto_map", None) or {}
            self.config.auto_map = {**auto_map_for(self.config.architecture), **known}
        super().save_pretrained(*args, **kwargs)

    def set_attn_implementation(self, attn_implementation: str | dict, allow_all_kernels: bool = False):
        requested = attn_implementation.get("") if isinstance(attn_implementation, dict) else attn_implementation
        refuse_attention_dropping_bias(self.config, requested)
        return super().set_attn_implementation(attn_implementation, allow_all_kernels=allow_all_kernels)

    def parts_drawn_first(self) -> list[nn.Module]:
        """The modules a seed initialises before the rest of this model (none: VanillaModel names its own)."""
        return []

    @torch.no_grad()
    def initialize_weights(self) -> None:
        first = self.parts_drawn_first()
        if first:
            is_custom_code = self.is_custom_code()
            self.initialise_with_own_draws(first, lambda: [part.apply(lambda module: self._initialize_weights(module, is_custom_code))
                                      for part in first])
        self.initialise_with_own_draws([self], super().initialize_weights)

    def initialise_with_own_draws(self, roots: list[nn.Module], initialise: Callable[[], Any]) -> None:
        """Run ``initialise`` over ``roots``, then the own draws transformers leaves out.

        transformers never calls _init_weights for a custom-code module without parameters of its own (attention,
        FFN), where T5 sets each projection's spread: those draw here, each once (the stack's, the base model's and
        the head's post_init each run this; transformers flags a module once it is done, loaded tensors too)."""
        skipped = [module for root in roots for module in root.modules() if isinstance(module, InitialisesItself)
                   and not getattr(module, "_is_hf_initialized", False)
                   and next(module.parameters(recurse=False), None) is None] \
            if self.config.initializer_factor is not None else []
        initialise()
        for module in skipped:
            module.init_own_weights(self.config)

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)  # linears and embeddings N(0, initializer_range), biases at 0
        if isinstance(module, InitialisesItself):  # each module draws what it needs beyond that, norms their weights
            module.init_own_weights(self.config)
        elif any(True for _ in module.parameters(recurse=False)) and not isinstance(module, GENERICALLY_INITIALISED):
            raise TypeError(
                f"{type(module).__qualname__} holds parameters that nothing initialises: transformers draws only "
                "linears, embeddings and modules it recognises by class name. Subclass "
                "hf_vanilla.positional.InitialisesItself (a norm: VanillaNorm) and draw them in init_own_weights."
            )


#: Modules whose parameters transformers' generic ``_init_weights`` draws by type (not by class name).
GENERICALLY_INITIALISED = (nn.Linear, nn.Embedding)


def init_embedding(embedding: nn.Embedding, std: float) -> None:
    init.normal_(embedding.weight, std=std)
    if embedding.padding_idx is not None and not getattr(embedding.weight, "_is_hf_initialized", False):
        init.zeros_(embedding.weight[embedding.padding_idx])  # as nn.Embedding: the padding row starts (and stays) 0


def refuse_flex_generation_on_cpu(config: VanillaConfig, device: torch.device, model_kwargs: dict) -> None:
    """torch 2.13's inductor emits CPU flex kernels that do not compile (``'cur_kvSplitSize0' was not declared``)
    once generation recompiles them for growing lengths while score_mod/mask_mod read a captured tensor of that
    length: the ALiBi/relative bias, or transformers' padding mask. Say so before generating, not mid-way."""
    if config._attn_implementation != "flex_attention" or device.type != "cpu":
        return
    masks = {key: model_kwargs.get(key) for key in ("attention_mask", "decoder_attention_mask")}
    padded = [key for key, mask in masks.items() if mask is not None and mask.dim() == 2 and not bool(mask.all())]
    scheme = scheme_row(config)
    if scheme.attention_bias or padded:
        reason = f"the {scheme.value} attention bias" if scheme.attention_bias else f"a padded {padded[0]}"
        raise ValueError(
            f"generate() with attn_implementation='flex_attention' on CPU cannot use {reason}: torch's inductor "
            "fails to compile the CPU flex kernel for a captured bias or padding mask once generation changes the "
            "sequence length. Generate on CPU with model.set_attn_implementation('sdpa') or 'eager' (the same tokens)."
        )


# ----------------------------------------------------------------------------------------------
# Stacks


class StackParts:
    """What a stack of blocks holds and runs around its blocks: the token embedding (its own, or one it borrows),
    token types, the positional scheme, an embedding norm, the blocks and a final norm.

    Held by the encoder and decoder stacks, and by the decoder family's bare model, which is its own decoder stack
    (``model.layers.N``, as LlamaModel holds its layers).
    """

    def build_stack(
        self, config: VanillaConfig, *, causal: bool, num_layers: int, token_embedding: VanillaTokenEmbedding | None
    ) -> None:
        """Build the parts on this module; ``token_embedding`` given, the stack borrows it (not registered here)."""
        self.has_cross_attention = causal and config.is_encoder_decoder
        if token_embedding is None:
            self.embed_tokens = token_embedding = VanillaTokenEmbedding(config)
        self._token_embedding = (token_embedding,)
        self.token_type_embeddings = (
            nn.Embedding(config.type_vocab_size, config.hidden_size) if config.type_vocab_size else None
        )
        positions = build_positional_scheme(config, causal=causal)
        self.positions_name = positions.module_name
        self.add_module(self.positions_name, positions)
        self.keys_positioned = positions.uses_attention_bias  # only a bias reads the keys' positions (a forward's work)
        self.embedding_norm = build_norm(config) if config.embedding_norm else None
        self.hidden_dropout = config.hidden_dropout
        self.layers = nn.ModuleList(
            VanillaBlock(config, i, is_causal=causal, has_cross_attention=self.has_cross_attention)
            for i in range(num_layers)
        )
        self.final_norm = build_norm(config) if config.final_norm else None
        self.gradient_checkpointing = False

    @property
    def positional_scheme(self) -> PositionalScheme:
        """The positional scheme, held under its own name (RoPE's ``rotary_emb``, as Llama's; the others'
        ``positions``)."""
        return self._modules[self.positions_name]

    def get_input_embeddings(self) -> VanillaTokenEmbedding:
        return self._token_embedding[0]

    def set_input_embeddings(self, embedding: VanillaTokenEmbedding) -> None:
        if "embed_tokens" in self._modules:  # owned, not borrowed: the module holds it
            self.embed_tokens = embedding
        self._token_embedding = (embedding,)

    def embed(
        self,
        input_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
        position_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if inputs_embeds is None:
            inputs_embeds = self.get_input_embeddings()(input_ids)
        if self.token_type_embeddings is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(position_ids).expand(inputs_embeds.shape[:2])
            inputs_embeds = inputs_embeds + self.token_type_embeddings(token_type_ids)
        hidden_states = self.positional_scheme.embed(inputs_embeds, position_ids)
        if self.embedding_norm is not None:
            hidden_states = self.embedding_norm(hidden_states)
        return active_dropout(hidden_states, self.hidden_dropout, self.training)

    def finish(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.final_norm(hidden_states) if self.final_norm is not None else hidden_states


def stacks_of(model: nn.Module) -> dict[str, StackParts]:
    """A model's stacks of blocks by kind, ``"encoder"`` and/or ``"decoder"`` (the causal one): the modules holding
    ``layers``, the decoder family's bare model itself among them."""
    return {"encoder" if isinstance(module, VanillaEncoder) else "decoder": module
            for module in model.modules() if isinstance(module, StackParts) and "layers" in module._modules}


class VanillaStack(StackParts, VanillaPreTrainedModel):
    """Embeddings, positions and a stack of blocks, a part of an encoder-decoder or of the encoder family's bare
    model. Subclasses fix the direction (bidirectional or causal).

    Built from the config alone (``VanillaDecoder(config)``), as engines that wrap the class ``get_decoder()``
    returns build it (vLLM's compile decorator accepts no other positional argument); a stack built alone owns
    its token embedding. :class:`VanillaModel` lends its own instead (the encoder and decoder share one matrix,
    stored once): a borrowed embedding is kept out of the stack's parameters so nothing is registered twice.
    """

    is_causal = False

    def __init__(
        self,
        config: VanillaConfig,
        *,
        token_embedding: VanillaTokenEmbedding | None = None,
        num_layers: int | None = None,
        checked: bool = False,
    ):
        super().__init__(config, checked=checked)
        depth = num_layers if num_layers is not None else self.default_depth(config)
        self.build_stack(config, causal=self.is_causal, num_layers=depth, token_embedding=token_embedding)
        self.register_load_state_dict_pre_hook(read_legacy_names)  # once for all its blocks, not once a block
        self.post_init()

    def init_parallel_plans(self) -> None:
        # The config's plans name VanillaModel's modules ("encoder.layers.*"): a stack is a part of that base model,
        # not a base model of its own, so it holds none of them (VanillaModel would prefix them again), and derives
        # none from the table only to drop it (transformers' method would, a stack being its own base model).
        self._tp_plan, self._ep_plan, self._pp_plan, self._fsdp_plan = {}, {}, {}, {}

    @staticmethod
    def default_depth(config: VanillaConfig) -> int:
        return config.num_hidden_layers


class VanillaEncoder(VanillaStack):
    """Bidirectional stack: every token attends to every (unpadded) token."""

    _can_record_outputs = {
        "hidden_states": VanillaBlock,
        "attentions": OutputRecorder(VanillaAttention, index=1, layer_name="self_attn"),
    }

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutput:
        check_input_shape(input_ids, inputs_embeds, "")
        length = (input_ids if input_ids is not None else inputs_embeds).shape[1]
        device = (input_ids if input_ids is not None else inputs_embeds).device
        if position_ids is None:
            position_ids = torch.arange(length, device=device)[None]
        hidden_states = self.embed(input_ids, inputs_embeds, position_ids, token_type_ids)
        mask = create_bidirectional_mask(config=self.config, inputs_embeds=hidden_states, attention_mask=attention_mask)
        positional = self.positional_scheme.attention_inputs(hidden_states, position_ids, position_ids)
        for layer in self.layers:
            hidden_states = layer(hidden_states, mask, None, positional.bias, rotary=positional.rotary, **kwargs)
        return BaseModelOutput(last_hidden_state=self.finish(hidden_states))


class CausalStack(StackParts):
    """The causal stack's forward: position t attends to positions <= t (and, in an encoder-decoder, to the
    encoder). Run by the encoder-decoder's decoder and by the decoder family's bare model over their own parts."""

    _can_record_outputs = {
        "hidden_states": VanillaBlock,
        "attentions": OutputRecorder(VanillaAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(VanillaAttention, index=1, layer_name="cross_attn"),
    }

    @accepts_past_key_values
    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        token_type_ids: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        check_input_shape(input_ids, inputs_embeds, "decoder_" if self.has_cross_attention else "")
        if self.has_cross_attention and encoder_hidden_states is None:
            raise ValueError("This decoder attends to an encoder: pass encoder_hidden_states (or encoder_outputs).")
        reference = input_ids if input_ids is not None else inputs_embeds
        length, device = reference.shape[1], reference.device
        # A training step never reuses its keys: building a cache would only copy them. generate() and callers
        # that want one in training mode pass a cache object.
        if use_cache and cache is None and not self.training:
            cache = EncoderDecoderCache(DynamicCache(), DynamicCache()) if self.has_cross_attention else DynamicCache()
        self_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
        past_length = self_cache.get_seq_length() if self_cache is not None else 0
        # Cached keys' positions are read from the mask only where the caller's positions follow it (positional.py)
        positions_mask = attention_mask if position_ids is not None else None
        if position_ids is None:
            position_ids = (torch.arange(length, device=device) + past_length)[None]

        hidden_states = self.embed(input_ids, inputs_embeds, position_ids, token_type_ids)
        mask = create_causal_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=attention_mask,
            **cache_field(self_cache),
            position_ids=position_ids,
        )
        key_length = self_cache.get_mask_sizes(length, 0)[0] if self_cache is not None else length
        keys = key_positions(position_ids, past_length, key_length, positions_mask) if self.keys_positioned else None
        positional = self.positional_scheme.attention_inputs(hidden_states, position_ids, keys)
        cross_mask = None
        if self.has_cross_attention:
            cross_mask = create_bidirectional_mask(
                config=self.config,
                inputs_embeds=hidden_states,
                attention_mask=encoder_attention_mask,
                encoder_hidden_states=encoder_hidden_states,
            )
        for layer in self.layers:
            hidden_states = layer(
                hidden_states,
                mask,
                encoder_hidden_states,
                positional.bias,
                encoder_attention_mask=cross_mask,
                rotary=positional.rotary,
                **cache_field(cache),  # the name GradientCheckpointingLayer drops while checkpointing
                **kwargs,
            )
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=self.finish(hidden_states), **cache_field(cache)
        )


class VanillaDecoder(CausalStack, VanillaStack):
    """The causal stack of an encoder-decoder, attending to the encoder (the decoder family's bare model is its own
    causal stack)."""

    is_causal = True

    @staticmethod
    def default_depth(config: VanillaConfig) -> int:
        return config.num_decoder_layers if config.is_encoder_decoder else config.num_hidden_layers


# ----------------------------------------------------------------------------------------------
# The bare model: one class, three families


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int | None, decoder_start_token_id: int) -> torch.Tensor:
    """Teacher forcing: the decoder sees <start> y_1 ... y_{n-1} and predicts y_1 ... y_n."""
    if pad_token_id is None:
        raise ValueError("config.pad_token_id must be set to build decoder inputs from labels.")
    shifted = labels.new_zeros(labels.shape)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


def refuse_decoder_inputs(family: str, **inputs: object) -> None:
    """An encoder- or decoder-only model takes no decoder inputs: name the ones given."""
    given = [name for name, value in inputs.items() if value is not None]
    if given:
        raise ValueError(
            f"{', '.join(given)} given to a {family}-only model; only architecture='encoder-decoder' takes "
            "decoder inputs. Pass input_ids (and attention_mask) instead."
        )


class VanillaModel(CausalStack, VanillaPreTrainedModel):
    """The bare transformer of any family, returning hidden states.

    * ``encoder``: the encoder stack (``encoder.layers.N``, as BertModel) -> :class:`BaseModelOutput`
    * ``decoder``: its own causal stack (``layers.N``, as LlamaModel), with its cache -> :class:`BaseModelOutputWithPast`
    * ``encoder-decoder``: the encoder, then the decoder attending to it, composed as BART and T5 compose them
      -> :class:`Seq2SeqModelOutput`
    """

    def __init__(self, config: VanillaConfig, *, under_head: bool = False):
        super().__init__(config, checked=under_head)  # a head checked the config before building it
        if not under_head:  # built alone, as an engine builds it under its own output layer: refuse what it would drop
            refuse_engine_options(config, config._attn_implementation)
            if VanillaForMaskedLM.__name__ in (config.architectures or ()):  # vLLM pools a masked-LM folder's encoder:
                # the head's weights are there but unread (vLLM drops these keys too, as it builds this class alone)
                self._keys_to_ignore_on_load_unexpected = list(VanillaForMaskedLM.head_weights)
        self.encoder = self.decoder = None
        if config.is_decoder:  # its own causal stack, as LlamaModel
            self.build_stack(config, causal=True, num_layers=config.num_hidden_layers, token_embedding=None)
            self.register_load_state_dict_pre_hook(read_legacy_stack_names)
        else:
            self.embed_tokens = VanillaTokenEmbedding(config)
            # Keyword arguments only: an engine may wrap the stack classes in a constructor that refuses any other
            # positional argument than the config.
            stack = {"token_embedding": self.embed_tokens, "checked": True}
            self.encoder = VanillaEncoder(config, **stack)
            self.decoder = VanillaDecoder(config, **stack) if config.is_encoder_decoder else None
        self.post_init()

    def parts_drawn_first(self) -> list[nn.Module]:
        # The decoder family's stack parts before its token embedding, as when they were a stack with a post_init of
        # its own: a seed gives every weight the values it gave then.
        own_stack = self.config.is_decoder
        return [module for name, module in self.named_children() if name != "embed_tokens"] if own_stack else []

    def get_input_embeddings(self) -> VanillaTokenEmbedding:
        return self.embed_tokens

    def set_input_embeddings(self, embedding: nn.Embedding) -> None:
        super().set_input_embeddings(embedding)
        for stack in (self.encoder, self.decoder):
            if stack is not None:
                stack.set_input_embeddings(embedding)

    def get_encoder(self, modality: str | None = None):
        return self.encoder if self.encoder is not None else self

    def get_decoder(self):
        return self.decoder if self.decoder is not None else self

    def default_decoder_input_ids(self, input_ids: torch.Tensor | None) -> torch.Tensor:
        """BartModel's default decoder inputs: the source itself, shifted right behind the start token (so the
        feature-extraction pipeline and classification heads can pass input_ids alone)."""
        if input_ids is None:
            raise ValueError(
                "An encoder-decoder given neither decoder_input_ids nor decoder_inputs_embeds builds its decoder "
                "inputs from input_ids shifted right (as BartModel does); inputs_embeds alone are not enough. Pass "
                "input_ids, or the decoder inputs."
            )
        return shift_tokens_right(input_ids, self.config.pad_token_id, self.config.decoder_start_token_id)

    @accepts_past_key_values
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        decoder_position_ids: torch.LongTensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutput | BaseModelOutputWithPast | Seq2SeqModelOutput:
        source = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids,
                  "position_ids": position_ids, "inputs_embeds": inputs_embeds}
        if self.config.is_encoder_decoder:
            target = {"input_ids": decoder_input_ids, "attention_mask": decoder_attention_mask,
                      "position_ids": decoder_position_ids, "inputs_embeds": decoder_inputs_embeds}
            return self.encode_then_decode(source, target, encoder_outputs, cache, use_cache, **kwargs)
        refuse_decoder_inputs(self.config.architecture, decoder_input_ids=decoder_input_ids,
                              decoder_inputs_embeds=decoder_inputs_embeds, encoder_outputs=encoder_outputs)
        if self.encoder is not None:  # the encoder family: nothing to cache, `cache` and `use_cache` do not apply
            return self.encoder(**source, **kwargs)
        return self.decode(source, cache, use_cache, **kwargs)

    def decode(self, source: dict, cache: Cache | None, use_cache: bool | None, **kwargs) -> BaseModelOutputWithPast:
        """The decoder family: this model's own causal stack, its cache passed on."""
        outputs = super().forward(**source, cache=cache, use_cache=use_cache, **kwargs)
        return BaseModelOutputWithPast(
            last_hidden_state=outputs.last_hidden_state,
            **cache_field(getattr(outputs, CACHE_NAME)),
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )

    def encode_then_decode(
        self,
        source: dict,
        target: dict,
        encoder_outputs: BaseModelOutput | tuple | None,
        cache: Cache | None,
        use_cache: bool | None,
        **kwargs,
    ) -> Seq2SeqModelOutput:
        """The encoder-decoder family: the source encoded (unless its encoding is given), the target decoded
        attending to it."""
        if target["input_ids"] is None and target["inputs_embeds"] is None:
            target["input_ids"] = self.default_decoder_input_ids(source["input_ids"])
        if encoder_outputs is None:
            encoder_outputs = self.encoder(**source, **kwargs)
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(*encoder_outputs)
        decoder_outputs = self.decoder(
            **target,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=source["attention_mask"],
            cache=cache,
            use_cache=use_cache,
            **kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            **cache_field(getattr(decoder_outputs, CACHE_NAME)),
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )


# ----------------------------------------------------------------------------------------------
# Task heads: the bare model of any family as ``self.model``, one forward for all, and each head's own output layer
#
# transformers' GenericForSequenceClassification, ...ForTokenClassification and ...ForQuestionAnswering do not fit:
# they build the backbone with AutoModel.from_config (remote code then needs trust_remote_code, and no head may
# build it), their forward leaves token_type_ids out of its signature (Trainer drops that column), the token loss
# drops Trainer's num_items_in_batch, and the sequence score has no bias and pools only the last non-pad token.


#: The bare model's inputs, by name: a head hands these to it, and the rest of its arguments (Trainer's
#: ``num_items_in_batch`` and such) to its loss too.
VANILLA_MODEL_INPUTS = frozenset(inspect.signature(VanillaModel.forward).parameters) - {"self", "kwargs"}


@dataclass(frozen=True)
class HeadInputs:
    """What a head's :meth:`VanillaHead.predict` reads beside the bare model's output: the targets, and what
    pooling and generation need."""

    input_ids: torch.Tensor | None
    attention_mask: torch.Tensor | None
    labels: torch.Tensor | None
    logits_to_keep: int | torch.Tensor
    start_positions: torch.Tensor | None
    end_positions: torch.Tensor | None


def head_output(output_class: type[ModelOutput], outputs: ModelOutput, **computed) -> ModelOutput:
    """The head's output: what it computed (loss, logits), and the bare model's states it has a field for (cache,
    hidden states, attentions; a Seq2Seq output's encoder and decoder states) passed on under the same names."""
    carried = {name: getattr(outputs, name, None) for name in output_class.__dataclass_fields__ if name not in computed}
    return output_class(**computed, **carried)


class VanillaHead(VanillaPreTrainedModel):
    """What every task head holds and runs: the bare model of the config's family, then the head's :meth:`predict`
    over its last hidden state. A head states only what differs: its layers, ``predict`` and the two flags."""

    #: A head that generates keeps a KV cache; the others run the bare model over whole sequences without one.
    generates: ClassVar[bool] = False
    #: Labels given without decoder inputs become the decoder's inputs, shifted right (Seq2Seq language modelling).
    labels_feed_decoder: ClassVar[bool] = False

    def __init__(self, config: VanillaConfig):
        super().__init__(config)
        self.model = VanillaModel(config, under_head=True)

    def predict(self, outputs: ModelOutput, inputs: HeadInputs, **kwargs) -> ModelOutput:
        raise NotImplementedError(f"{type(self).__name__} defines no predict: what it computes from the model's output")

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> ModelOutput:
        """BERT's signature (masked LM, token classification); a head whose twin takes other inputs states its own
        signature and hands them to :meth:`run` by name, so positional calls and signature readers (Trainer's
        columns, generate's argument check) see the twin's inputs in the twin's order."""
        return self.run(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                        position_ids=position_ids, inputs_embeds=inputs_embeds, labels=labels, **kwargs)

    def run(
        self,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        start_positions: torch.LongTensor | None = None,
        end_positions: torch.LongTensor | None = None,
        **inputs: Any,
    ) -> ModelOutput:
        """Every head's forward: the bare model over ``inputs`` (any of its arguments, by name), then :meth:`predict`."""
        if self.labels_feed_decoder and labels is not None and inputs.get("decoder_input_ids") is None \
                and inputs.get("decoder_inputs_embeds") is None:
            inputs["decoder_input_ids"] = self.prepare_decoder_input_ids_from_labels(labels)
        # pipelines may ask for a cache; a head that generates nothing runs without one
        outputs = self.model(use_cache=use_cache if self.generates else False, **inputs)
        targets = HeadInputs(inputs.get("input_ids"), inputs.get("attention_mask"), labels, logits_to_keep,
                             start_positions, end_positions)
        kwargs = {name: value for name, value in inputs.items() if name not in VANILLA_MODEL_INPUTS}
        return self.predict(outputs, targets, **kwargs)


class VanillaLMHeadMixin(InitialisesItself):
    """The output projection (tied to the token embeddings by default) with BERT's optional transform."""

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}
    # Split by vocabulary like the token embedding transformers shards (so a tied head stays one matrix), then gathered.
    _tp_plan = {"lm_head": "colwise_gather_output"}
    _pp_plan = {"lm_head": (["hidden_states"], ["logits"])}
    #: The output class the head returns.
    output_class: ClassVar[type[ModelOutput]]

    def __init__(self, config: VanillaConfig):
        super().__init__(config)
        self._build_lm_head(config)
        self.post_init()

    def _build_lm_head(self, config: VanillaConfig) -> None:
        self.lm_head_transform = (
            nn.Sequential(
                nn.Linear(config.hidden_size, config.hidden_size), build_activation(config), build_norm(config)
            )
            if config.lm_head_transform
            else None
        )
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=config.lm_head_bias)

    def init_own_weights(self, config: VanillaConfig) -> None:
        if config.initializer_factor is not None and not config.tie_word_embeddings:  # T5's untied head: N(0, factor)
            init.normal_(self.lm_head.weight, std=config.initializer_factor)
        if self.lm_head.bias is not None:
            init.zeros_(self.lm_head.bias)

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, projection: nn.Linear) -> None:
        self.lm_head = projection

    def predict(self, outputs: ModelOutput, inputs: HeadInputs, **kwargs) -> ModelOutput:
        logits = self._logits(keep_last_logits(outputs.last_hidden_state, inputs.logits_to_keep))
        return head_output(self.output_class, outputs, loss=self._lm_loss(logits, inputs.labels, **kwargs), logits=logits)

    def _lm_loss(self, logits: torch.Tensor, labels: torch.Tensor | None, **kwargs) -> torch.Tensor | None:
        if labels is None:
            return None
        # contiguous: transformers' token losses `view` the labels, which fails on sliced tensors.
        return self.loss_function(logits=logits, labels=labels.contiguous(), vocab_size=self.config.vocab_size, **kwargs)

    def _logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if self.lm_head_transform is not None:
            hidden_states = self.lm_head_transform(hidden_states)
        if self.config.lm_head_scale != 1.0:
            hidden_states = hidden_states * self.config.lm_head_scale
        return self.lm_head(hidden_states)


def keep_last_logits(hidden_states: torch.Tensor, logits_to_keep: int | torch.Tensor) -> torch.Tensor:
    """Generation needs only the last position's logits; computing all of them wastes a vocab-sized matmul."""
    if isinstance(logits_to_keep, int):
        return hidden_states if logits_to_keep == 0 else hidden_states[:, -logits_to_keep:]
    return hidden_states[:, logits_to_keep]


class VanillaForCausalLM(VanillaLMHeadMixin, VanillaHead, GenerationMixin):
    """Decoder-only language model (GPT-like): predicts token t+1 from tokens <= t."""

    output_class = CausalLMOutputWithPast
    generates = True

    @accepts_past_key_values
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs: Unpack[TransformersKwargs],
    ) -> CausalLMOutputWithPast:
        """LlamaForCausalLM's signature over the heads' one body."""
        return self.run(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, cache=cache,
                        inputs_embeds=inputs_embeds, labels=labels, use_cache=use_cache,
                        logits_to_keep=logits_to_keep, **kwargs)

    def generate(self, *args, **kwargs):
        refuse_flex_generation_on_cpu(self.config, self.device, kwargs)  # before anything compiles
        return super().generate(*args, **kwargs)


class VanillaForMaskedLM(VanillaLMHeadMixin, VanillaHead):
    """Encoder with a masked-language-model head (BERT-like): predicts the tokens hidden behind [MASK]."""

    #: The head's weights: the bare model of a folder this class saved leaves them unread (an embedding model).
    head_weights = (r"^lm_head\.", r"^lm_head_transform\.")

    output_class = MaskedLMOutput


class VanillaForSeq2SeqLM(VanillaLMHeadMixin, VanillaHead, GenerationMixin):
    """Encoder-decoder with a language-model head: the paper's translation model."""

    output_class = Seq2SeqLMOutput
    generates = True
    labels_feed_decoder = True
    # Labels are already aligned with decoder inputs (shifted right), so the loss must not shift again.
    loss_type = "ForMaskedLM"

    def __init__(self, config: VanillaConfig):
        super().__init__(config)
        self.loss_type = "ForMaskedLM"

    @accepts_past_key_values
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        decoder_position_ids: torch.LongTensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqLMOutput:
        """BartForConditionalGeneration's signature over the heads' one body."""
        return self.run(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                        decoder_attention_mask=decoder_attention_mask, decoder_position_ids=decoder_position_ids,
                        encoder_outputs=encoder_outputs, cache=cache, inputs_embeds=inputs_embeds,
                        decoder_inputs_embeds=decoder_inputs_embeds, labels=labels, use_cache=use_cache,
                        logits_to_keep=logits_to_keep, **kwargs)

    def generate(self, *args, **kwargs):
        refuse_flex_generation_on_cpu(self.config, self.device, kwargs)  # before anything compiles
        return super().generate(*args, **kwargs)

    def get_encoder(self, modality: str | None = None):
        return self.model.encoder

    def get_decoder(self):
        return self.model.decoder

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)


# ----------------------------------------------------------------------------------------------
# Understanding heads (encoder or decoder; sequence classification in any family)


def last_eos_positions(
    input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None, eos_token_id: int | list[int] | None
) -> torch.Tensor:
    """Each row's last EOS, as BartForSequenceClassification pools; rows must hold the same number, as BART requires."""
    if input_ids is None:
        raise ValueError(
            "classifier_pooling='eos' finds each row's EOS token in input_ids; pass input_ids (inputs_embeds alone "
            "cannot be pooled this way, as in BartForSequenceClassification)."
        )
    if eos_token_id is None:
        raise ValueError("classifier_pooling='eos' needs config.eos_token_id; set it, or pick another classifier_pooling.")
    is_eos = torch.isin(input_ids, torch.tensor(eos_token_id, device=input_ids.device))
    if attention_mask is not None:  # a pad token that doubles as EOS (GPT-2 style) is not a sentence end
        is_eos &= attention_mask.bool()
    counts = is_eos.sum(-1)
    if (counts == 0).any() or (counts != counts[0]).any():
        raise ValueError(
            f"All rows must hold the same number of EOS tokens (eos_token_id={eos_token_id}), at least one; got "
            f"{counts.tolist()} per row. End every sequence with EOS, as BART's tokenizer does."
        )
    positions = torch.arange(input_ids.shape[-1], device=input_ids.device)
    return (is_eos * positions).argmax(-1)


class VanillaPooler(InitialisesItself, nn.Module):
    """One vector per sequence: the first token, the last real token, the mean or the last EOS; BERT's dense + tanh optional."""

    def __init__(self, config: VanillaConfig):
        super().__init__()
        self.strategy = config.classifier_pooling
        self.pad_token_id = config.pad_token_id
        self.eos_token_id = config.eos_token_id
        self.dense = nn.Linear(config.hidden_size, config.hidden_size) if config.pooler else None

    def init_own_weights(self, config: VanillaConfig) -> None:
        if config.initializer_factor is not None and self.dense is not None:  # T5ClassificationHead.dense
            init.normal_(self.dense.weight, std=config.initializer_factor * config.hidden_size**-0.5)

    def forward(
        self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None, input_ids: torch.Tensor | None
    ) -> torch.Tensor:
        pooled = self.select(hidden_states, attention_mask, input_ids)
        return torch.tanh(self.dense(pooled)) if self.dense is not None else pooled

    def select(
        self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None, input_ids: torch.Tensor | None
    ) -> torch.Tensor:
        rows = torch.arange(hidden_states.shape[0], device=hidden_states.device)
        if self.strategy == "eos":
            return hidden_states[rows, last_eos_positions(input_ids, attention_mask, self.eos_token_id)]
        if attention_mask is None and input_ids is not None and self.pad_token_id is not None:
            attention_mask = input_ids.ne(self.pad_token_id)
        if self.strategy == "first":
            return hidden_states[:, 0]
        if self.strategy == "mean":
            if attention_mask is None:
                return hidden_states.mean(1)
            weights = attention_mask.to(hidden_states.dtype)[..., None]
            return (hidden_states * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        # last real token: the rightmost position the mask keeps (works for left and right padding)
        if attention_mask is None:
            return hidden_states[:, -1]
        positions = torch.arange(hidden_states.shape[1], device=hidden_states.device)
        return hidden_states[rows, (attention_mask.bool() * positions).argmax(-1)]


def classifier_layers(config: VanillaConfig) -> tuple[nn.Dropout, nn.Linear]:
    """The dropout and the label scores of the classification heads (BERT's: classifier_dropout, else hidden_dropout)."""
    dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout
    return nn.Dropout(dropout), nn.Linear(config.hidden_size, config.num_labels)


class VanillaForSequenceClassification(VanillaHead):
    """A label (or a regression value) per sequence; an encoder-decoder reads it as BartForSequenceClassification
    does: the decoder takes input_ids shifted right and the label comes from its state at the last EOS."""

    def __init__(self, config: VanillaConfig):
        refuse_engine_classifier(config)  # vLLM builds this class for its own pooler and head: refuse first
        super().__init__(config)
        self.num_labels = config.num_labels
        self.pooler = VanillaPooler(config)
        self.dropout, self.score = classifier_layers(config)
        self.post_init()

    def init_own_weights(self, config: VanillaConfig) -> None:
        if config.initializer_factor is not None:  # T5ClassificationHead.out_proj
            init.normal_(self.score.weight, std=config.initializer_factor * config.hidden_size**-0.5)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> SequenceClassifierOutput | Seq2SeqSequenceClassifierOutput:
        """BERT's signature, and BartForSequenceClassification's decoder inputs for the encoder-decoder family."""
        return self.run(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                        position_ids=position_ids, inputs_embeds=inputs_embeds, labels=labels,
                        decoder_input_ids=decoder_input_ids, decoder_attention_mask=decoder_attention_mask,
                        encoder_outputs=encoder_outputs, decoder_inputs_embeds=decoder_inputs_embeds, **kwargs)

    def predict(self, outputs: ModelOutput, inputs: HeadInputs, **kwargs) -> ModelOutput:
        pooled = self.pooler(outputs.last_hidden_state, inputs.attention_mask, inputs.input_ids)
        logits = self.score(self.dropout(pooled))
        loss = None
        if inputs.labels is not None:
            loss = self.loss_function(labels=inputs.labels, pooled_logits=logits, config=self.config, **kwargs)
        output_class = Seq2SeqSequenceClassifierOutput if self.config.is_encoder_decoder else SequenceClassifierOutput
        return head_output(output_class, outputs, loss=loss, logits=logits)


class VanillaForTokenClassification(VanillaHead):
    """A label per token (tagging, NER)."""

    def __init__(self, config: VanillaConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.dropout, self.score = classifier_layers(config)
        self.post_init()

    def init_own_weights(self, config: VanillaConfig) -> None:
        if config.initializer_factor is not None:  # T5ForTokenClassification's classifier: N(0, factor)
            init.normal_(self.score.weight, std=config.initializer_factor)

    def predict(self, outputs: ModelOutput, inputs: HeadInputs, **kwargs) -> TokenClassifierOutput:
        logits = self.score(self.dropout(outputs.last_hidden_state))
        loss = None
        if inputs.labels is not None:
            loss = self.loss_function(logits, inputs.labels, self.config, **kwargs)
        return head_output(TokenClassifierOutput, outputs, loss=loss, logits=logits)


class VanillaForQuestionAnswering(VanillaHead):
    """Extractive QA: a start and an end score per token."""

    def __init__(self, config: VanillaConfig):
        super().__init__(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def init_own_weights(self, config: VanillaConfig) -> None:
        if config.initializer_factor is not None:  # T5ForQuestionAnswering's qa_outputs
            init.normal_(self.qa_outputs.weight, std=config.initializer_factor * config.hidden_size**-0.5)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        start_positions: torch.LongTensor | None = None,
        end_positions: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> QuestionAnsweringModelOutput:
        """The heads' forward under this head's own signature: Trainer finds a QA head's targets there
        (``transformers.utils.find_labels``), and a ``labels`` beside them would make it wait for all three."""
        return self.run(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                        position_ids=position_ids, inputs_embeds=inputs_embeds, start_positions=start_positions,
                        end_positions=end_positions, **kwargs)

    def predict(self, outputs: ModelOutput, inputs: HeadInputs, **kwargs) -> QuestionAnsweringModelOutput:
        start_logits, end_logits = self.qa_outputs(outputs.last_hidden_state).unbind(-1)
        start_logits, end_logits = start_logits.contiguous(), end_logits.contiguous()
        loss = None
        if inputs.start_positions is not None and inputs.end_positions is not None:
            loss = self.loss_function(start_logits, end_logits, inputs.start_positions, inputs.end_positions, **kwargs)
        return head_output(
            QuestionAnsweringModelOutput, outputs, loss=loss, start_logits=start_logits, end_logits=end_logits
        )


__all__ = [
    "VanillaPreTrainedModel",
    "VanillaModel",
    "VanillaEncoder",
    "VanillaDecoder",
    "VanillaForCausalLM",
    "VanillaForMaskedLM",
    "VanillaForSeq2SeqLM",
    "VanillaForSequenceClassification",
    "VanillaForTokenClassification",
    "VanillaForQuestionAnswering",
]
