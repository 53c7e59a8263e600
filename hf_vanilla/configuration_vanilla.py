"""VanillaConfig: one configuration for the encoder, decoder and encoder-decoder transformer.

The defaults are the paper's base model (Vaswani et al. 2017, table 3): an encoder-decoder with
d_model=512, 6+6 layers, 8 heads, d_ff=2048, ReLU, post-norm residual blocks, sinusoidal positions,
dropout 0.1, embeddings scaled by sqrt(d_model) and shared with the output projection.

Every option is validated when the config is built (value and JSON type), so a bad combination fails
here, with the field and the allowed values named, and never deep inside a forward pass; an option the
chosen scheme, norm or family would ignore is refused. Keys that are not options are kept and saved, as
transformers' own configs do (tools add attributes), and named once in the log.

This file travels to the Hub with the model: it imports only transformers, the standard library and its siblings.
It imports transformers_releases.py first, which refuses a release older than the model files support, bridges the
differences between the supported ones and decides the attention implementation when it is set (an engine's, one
that drops a bias); modeling_vanilla.py and positional.py import this file first.
"""

# First: transformers_releases refuses a transformers release older than these files support.
from .transformers_releases import (
    PASSED_THROUGH,
    AttentionDecidedWhenSet,
    field_errors_as_value_errors,
    is_plan_given_back,
    refuse_attention_dropping_bias,
    rows_of,
)

# isort: split
import importlib
import math
from collections.abc import Callable
from typing import Any, ClassVar

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig
from transformers.utils import logging

from .variants import (
    NON_DEFAULT,
    TP_SPLIT,
    VARIANTS,
    Variant,
    activating_values,
    fields_with_conditions,
    options,
    row,
    values,
)

logger = logging.get_logger(__name__)

ARCHITECTURES = values("architecture")
#: Choice fields that are not in the table of variants (they change no engine's support).
OTHER_CHOICES: dict[str, tuple[str, ...]] = {
    "sinusoidal_layout": ("interleaved", "concatenated"),
    "classifier_pooling": ("first", "last", "mean", "eos"),
}
#: Plans transformers reads from a config's class; hf_vanilla derives them from the fields (see parallel plans below).
_DERIVED_PLANS = ("base_model_tp_plan", "base_model_pp_plan")

# Which families each task head can sit on; checked at config time (via `architectures`) and at model init.
HEAD_FAMILIES: dict[str, tuple[str, ...]] = {
    "VanillaModel": ARCHITECTURES,
    "VanillaForCausalLM": ("decoder",),
    "VanillaForMaskedLM": ("encoder",),
    "VanillaForSeq2SeqLM": ("encoder-decoder",),
    "VanillaForSequenceClassification": ARCHITECTURES,
    "VanillaForTokenClassification": ("encoder", "decoder"),
    "VanillaForQuestionAnswering": ("encoder", "decoder"),
}


#: The Auto class that loads each model class: ``hf_vanilla.register`` registers them so, and a saved config's
#: ``auto_map`` names every one that fits its family (:func:`auto_map_for`).
AUTO_CLASSES: dict[str, str] = {
    "VanillaModel": "AutoModel",
    "VanillaForCausalLM": "AutoModelForCausalLM",
    "VanillaForMaskedLM": "AutoModelForMaskedLM",
    "VanillaForSeq2SeqLM": "AutoModelForSeq2SeqLM",
    "VanillaForSequenceClassification": "AutoModelForSequenceClassification",
    "VanillaForTokenClassification": "AutoModelForTokenClassification",
    "VanillaForQuestionAnswering": "AutoModelForQuestionAnswering",
}


def auto_map_for(architecture: str) -> dict[str, str]:
    """``auto_map`` entries that load a saved model of this family through every Auto class that fits it.

    transformers writes only the saved class's own entry; engines build the bare model instead
    (``AutoModel.from_config``: vLLM), and a causal-LM folder should load as a sequence classifier too.
    The names are the files that travel with the checkpoint.
    """
    entries = {"AutoConfig": "configuration_vanilla.VanillaConfig"}
    for name, families in HEAD_FAMILIES.items():
        if architecture in families:
            entries[AUTO_CLASSES[name]] = f"modeling_vanilla.{name}"
    return entries


def _choice(field: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"VanillaConfig.{field}={value!r} is not supported; choose one of {', '.join(map(repr, allowed))}.")


@field_errors_as_value_errors
@strict(accept_kwargs=True)
class VanillaConfig(AttentionDecidedWhenSet, PreTrainedConfig):
    r"""Configuration of an hf_vanilla transformer.

    Args:
        architecture: ``"encoder"`` (BERT-like), ``"decoder"`` (GPT-like) or ``"encoder-decoder"``
            (the original transformer; BART/Marian/T5-like).
        vocab_size: token vocabulary, shared by encoder, decoder and output projection.
        hidden_size: d_model.
        intermediate_size: d_ff, the feed-forward width.
        num_hidden_layers: depth of the encoder (or of the only stack).
        num_decoder_layers: depth of the decoder of an encoder-decoder (defaults to ``num_hidden_layers``).
        num_attention_heads: query heads.
        num_key_value_heads: key/value heads; fewer than ``num_attention_heads`` gives grouped-query
            attention (1 = multi-query). Defaults to ``num_attention_heads``.
        head_dim: width of one head (defaults to ``hidden_size // num_attention_heads``).
        hidden_act: FFN activation, a ``hidden_act`` row of the table of variants (relu, gelu, gelu_new, silu, ...).
        gated_ffn: gated linear unit FFN, ``act(x W_gate) * (x W_up)``: SwiGLU with silu, GEGLU with gelu.
        position_embedding_type: ``"sinusoidal"``, ``"learned"``, ``"rope"``, ``"alibi"``, ``"relative"``
            (T5 bucketed bias) or ``"none"``.
        max_position_embeddings: learned positions available; for the other schemes the length the model
            is meant for (sinusoidal, RoPE, ALiBi and relative bias extrapolate beyond it).
        position_offset: index of position 0 in the position table (BART's learned table starts at 2).
        sinusoidal_layout: ``"interleaved"`` (the paper: sin, cos, sin, ...) or ``"concatenated"``
            (all sines then all cosines: tensor2tensor, Marian).
        rope_parameters: RoPE settings (``rope_theta``, ``rope_type`` and scaling keys as in transformers).
        relative_attention_num_buckets, relative_attention_max_distance: T5 relative bias buckets.
        norm_position: ``"post"`` (the paper: x = norm(x + f(x))) or ``"pre"`` (x = x + f(norm(x))).
        norm_type: ``"layernorm"`` or ``"rmsnorm"``.
        norm_eps: epsilon of every norm. norm_bias: LayerNorm with an additive bias.
        embedding_norm: a norm right after the embeddings (BERT, BART).
        final_norm: a norm after the last block (defaults to True for pre-norm, False for post-norm).
        scale_embedding: multiply token embeddings by sqrt(hidden_size), as in the paper.
        attention_scale: factor on q.k; ``None`` means 1/sqrt(head_dim). T5 uses 1.0.
        attention_bias: biases in the q/k/v/o projections. mlp_bias: biases in the FFN.
        type_vocab_size: token-type (segment) embeddings, 0 for none (BERT uses 2).
        hidden_dropout: residual, embedding and FFN-output dropout (the paper's P_drop).
        attention_dropout: dropout on attention probabilities. activation_dropout: inside the FFN.
        classifier_dropout: dropout before classification heads (defaults to ``hidden_dropout``).
        lm_head_bias: a bias on the output projection (BERT's decoder bias, Marian/BART final_logits_bias).
        lm_head_transform: BERT's dense + activation + norm between the last block and the output projection.
        lm_head_scale: factor on the last hidden states before the output projection (T5: d_model**-0.5).
        classifier_pooling: which token summarises a sequence for classification: ``"first"``
            (the [CLS] token), ``"last"`` (last non-padding token, for decoders), ``"mean"`` or ``"eos"`` (the
            last ``eos_token_id`` of each row, as BART does; the default for an encoder-decoder).
        pooler: BERT's dense + tanh over the pooled token before the classifier.
        initializer_range: std of the normal initialisation (token embeddings scaled by sqrt(hidden_size) start
            at N(0, hidden_size**-0.5) instead, as in the paper's reference code).
        initializer_factor: ``None``, or T5's initialisation (Mesh TensorFlow's) scaled by this factor, as
            ``T5Config.initializer_factor``: each projection N(0, factor * fan_in**-0.5), the query's also divided
            by sqrt(head_dim) (T5 attends unscaled), token embeddings and an untied output projection N(0, factor),
            norms at ``factor``. The t5 presets and converted T5 checkpoints set it (1.0).
        tie_word_embeddings: share the output projection with the token embeddings.
        use_cache: return a KV cache from decoder forwards.
        native_config_extras: set by ``hf_vanilla.convert.from_hf``: the converted native config's fields that
            no hf_vanilla option holds (``{"model_type": ..., "fields": {...}}``); ``to_hf`` gives them back.
    """

    model_type = "vanilla"
    keys_to_ignore_at_inference: ClassVar[list[str]] = ["cache", "past_key_values"]
    attribute_map: ClassVar[dict[str, str]] = {
        "d_model": "hidden_size",
        "n_layer": "num_hidden_layers",
        "n_head": "num_attention_heads",
        "dropout": "hidden_dropout",
        # the names engines read for an option they honour (vLLM multiplies its logits by `logit_scale`)
        **{variant.vllm_reads: variant.option for variant in VARIANTS if variant.vllm_reads},
    }

    architecture: str = "encoder-decoder"
    vocab_size: int = 37000
    hidden_size: int = 512
    intermediate_size: int = 2048
    num_hidden_layers: int = 6
    num_decoder_layers: int | None = None
    num_attention_heads: int = 8
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    hidden_act: str = "relu"
    gated_ffn: bool = False
    position_embedding_type: str = "sinusoidal"
    max_position_embeddings: int = 512
    position_offset: int = 0
    sinusoidal_layout: str = "interleaved"
    rope_parameters: dict | None = None
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    norm_position: str = "post"
    norm_type: str = "layernorm"
    norm_eps: float = 1e-5
    norm_bias: bool = True
    embedding_norm: bool = False
    final_norm: bool | None = None
    scale_embedding: bool = True
    attention_scale: float | None = None
    attention_bias: bool = True
    mlp_bias: bool = True
    type_vocab_size: int = 0
    hidden_dropout: int | float = 0.1
    attention_dropout: int | float = 0.0
    activation_dropout: int | float = 0.0
    classifier_dropout: int | float | None = None
    lm_head_bias: bool = False
    lm_head_transform: bool = False
    lm_head_scale: float = 1.0
    classifier_pooling: str | None = None
    pooler: bool = False
    initializer_range: float = 0.02
    initializer_factor: int | float | None = None
    tie_word_embeddings: bool = True
    use_cache: bool = True
    is_encoder_decoder: bool = False
    is_decoder: bool = False
    add_cross_attention: bool = False
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
    decoder_start_token_id: int | None = None
    native_config_extras: dict | None = None

    def __post_init__(self, **kwargs):
        ignore_saved_plans(kwargs)
        loaded_type = kwargs.get("model_type", self.model_type)
        if loaded_type != self.model_type:
            raise ValueError(
                f"This config describes a {loaded_type!r} model, not hf_vanilla's {self.model_type!r}. Convert the "
                "checkpoint first: `hf-vanilla convert SRC OUT` or hf_vanilla.convert.from_hf(model)."
            )
        unused = sorted(k for k in kwargs if k not in PASSED_THROUGH and k not in self.attribute_map)
        if unused:
            logger.warning_once(
                f"VanillaConfig keeps {unused} as attributes (they are saved with the config), but hf_vanilla does "
                "not use them; check the spelling against help(hf_vanilla.VanillaConfig) if they were meant as options."
            )
        _choice("architecture", self.architecture, ARCHITECTURES)
        # Derived from the family, never set independently: the three must agree.
        self.is_encoder_decoder = self.architecture == "encoder-decoder"
        self.is_decoder = self.architecture == "decoder"
        self.add_cross_attention = self.is_encoder_decoder
        if self.num_decoder_layers is None:
            self.num_decoder_layers = self.num_hidden_layers
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None and self.num_attention_heads > 0:
            if self.hidden_size % self.num_attention_heads:
                raise ValueError(
                    f"VanillaConfig.hidden_size={self.hidden_size} is not divisible by num_attention_heads="
                    f"{self.num_attention_heads}; pick a head count that divides it (or set head_dim explicitly)."
                )
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.final_norm is None:
            self.final_norm = self.norm_position == "pre"
        if self.classifier_pooling is None:
            self.classifier_pooling = {"decoder": "last", "encoder-decoder": "eos"}.get(self.architecture, "first")
        if self.decoder_start_token_id is None and self.is_encoder_decoder:
            self.decoder_start_token_id = self.bos_token_id
        check_inactive_options(self, rope_scaling=kwargs.get("rope_scaling"))
        super().__post_init__(**kwargs)
        if not field_is_active("rope_parameters", self):
            # The base class fills in RoPE defaults; without RoPE they would only mislead. The field stays (None), as
            # every field does: comparing, copying and validating a dataclass read every field.
            self.rope_parameters = None
        # Checked here as well as by `@strict` so the error is a plain ValueError naming the field.
        self.check_fields()

    def validate_architecture(self):
        """Run by `@strict` after __post_init__ and again before every save."""
        self.check_fields()
        check_rope_settings(self)

    def validate_rope(self):
        """transformers' RoPE checks, only where RoPE is in use (they would reject, e.g., odd head_dim otherwise)."""
        if field_is_active("rope_parameters", self):
            super().validate_rope()

    def check_fields(self) -> None:
        for field in options():
            if NON_DEFAULT not in values(field):  # a choice, not a setting with a special value
                _choice(field, getattr(self, field), values(field))
        for field, allowed in OTHER_CHOICES.items():
            _choice(field, getattr(self, field), allowed)
        for field in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_decoder_layers",
                      "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings"):
            value = getattr(self, field)
            if value < 1:
                raise ValueError(f"VanillaConfig.{field} must be a positive integer, got {value}.")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"VanillaConfig.num_attention_heads={self.num_attention_heads} is not divisible by "
                f"num_key_value_heads={self.num_key_value_heads}: each key/value head must serve a whole group "
                "of query heads."
            )
        if field_is_active("rope_parameters", self) and self.head_dim % 2:
            raise ValueError(f"VanillaConfig.head_dim={self.head_dim} must be even for position_embedding_type='rope'.")
        for field in ("hidden_dropout", "attention_dropout", "activation_dropout", "classifier_dropout"):
            value = getattr(self, field)
            if value is not None and not 0.0 <= value < 1.0:
                raise ValueError(f"VanillaConfig.{field} must be in [0, 1), got {value}.")
        if self.position_offset < 0 or self.type_vocab_size < 0:
            raise ValueError("VanillaConfig.position_offset and type_vocab_size must be >= 0.")
        if self.relative_attention_num_buckets < 2 or self.relative_attention_max_distance < 2:
            raise ValueError("VanillaConfig.relative_attention_num_buckets and _max_distance must be at least 2.")
        if self.initializer_factor is not None and not 0 < self.initializer_factor <= MAX_INIT_SPREAD:
            raise ValueError(
                f"VanillaConfig.initializer_factor must be in (0, {MAX_INIT_SPREAD:g}] (1.0 is T5's initialisation) or "
                f"None (the normal initialisation at initializer_range), got {self.initializer_factor}."
            )
        check_numbers(self)
        if field_is_active("rope_parameters", self):
            check_rope_parameters(self.rope_parameters)
        if field_is_active("relative_attention_num_buckets", self):
            check_relative_buckets(self)
        for field in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            value = getattr(self, field)
            for token_id in value if isinstance(value, list) else [value]:
                if token_id is not None and not 0 <= token_id < self.vocab_size:
                    raise ValueError(
                        f"VanillaConfig.{field}={value!r} is outside the vocabulary [0, {self.vocab_size}); set it to "
                        "the tokenizer's id for that token (or None), or raise vocab_size to the tokenizer's length."
                    )
        if self.is_encoder_decoder and self.decoder_start_token_id is None:
            raise ValueError(
                "VanillaConfig.decoder_start_token_id is needed by an encoder-decoder (it starts every target); "
                "set it or bos_token_id."
            )
        for name in self.architectures or ():
            families = HEAD_FAMILIES.get(name)
            if families is not None and self.architecture not in families:
                raise ValueError(
                    f"{name} does not fit architecture={self.architecture!r}; it needs "
                    f"{' or '.join(map(repr, families))}."
                )
        refuse_attention_dropping_bias(self, self._attn_implementation)

    def get_text_config(self, decoder: bool | None = None, encoder: bool | None = None) -> "VanillaConfig | DecoderSide":
        """The config itself, as for a config without sub-configs: what is written through it (RoPE scaling, by
        transformers' tests and tools) reaches the model. transformers would give a flat encoder-decoder a copy.

        The decoder's side of an encoder-decoder whose depths differ is a :class:`DecoderSide` instead: transformers
        sizes KV caches from ``get_text_config(decoder=True).num_hidden_layers``, which must count decoder layers.
        """
        if decoder and not encoder and self.is_encoder_decoder and self.num_decoder_layers != self.num_hidden_layers:
            return DecoderSide.of(self)
        return self

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: Any, **kwargs: Any) -> "VanillaConfig":
        try:
            return super().from_pretrained(pretrained_model_name_or_path, **kwargs)
        except ValueError as error:  # name the file: the message alone does not say which checkpoint is bad
            raise ValueError(f"{pretrained_model_name_or_path}/config.json: {error}") from error

    @property
    def base_model_tp_plan(self) -> dict[str, str]:
        """transformers' tensor-parallel plan for :class:`VanillaModel`'s modules, read by ``from_pretrained(...,
        tp_plan="auto")``; derived from the fields each time, so it always fits the config (and is never saved)."""
        return tensor_parallel_plan(self)

    @base_model_tp_plan.setter
    def base_model_tp_plan(self, plan: Any) -> None:
        if is_plan_given_back(plan, tensor_parallel_plan(self)):
            return
        refuse_plan_assignment("base_model_tp_plan")

    @property
    def base_model_pp_plan(self) -> dict[str, tuple[list[str], list[str]]] | None:
        """The pipeline-parallel plan (module -> its inputs and outputs), where splitting the layers is exact."""
        return pipeline_parallel_plan(self)

    @base_model_pp_plan.setter
    def base_model_pp_plan(self, plan: Any) -> None:
        refuse_plan_assignment("base_model_pp_plan")

    @property
    def encoder_layers(self) -> int:
        return self.num_hidden_layers

    @property
    def decoder_layers(self) -> int:
        return self.num_decoder_layers

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> "VanillaConfig":
        """A config shaped like a well-known model; ``overrides`` change any field.

        Presets: see ``hf_vanilla.PRESETS`` (``transformer-base``, ``transformer-big``, ``bert-base``,
        ``gpt2``, ``llama``, ``t5-base``, ``bart-base`` and ``tiny-*`` versions for tests). They live in the
        hf_vanilla package, not in the files that travel with a model.
        """
        try:  # by name, not a relative import: the presets are not among the files that travel with a model
            presets = importlib.import_module("hf_vanilla.presets")
        except ModuleNotFoundError as error:
            if error.name not in ("hf_vanilla", "hf_vanilla.presets"):
                raise
            raise ImportError("VanillaConfig.from_preset: presets need the hf_vanilla package (pip install hf_vanilla)") from None
        return cls(**presets.preset_fields(name, overrides))


class DecoderSide(VanillaConfig):
    """The decoder of an encoder-decoder seen as a config of its own: ``num_hidden_layers`` is the decoder's depth
    (``num_decoder_layers``). It shares the config's attributes, so what is written to it is written to the config."""

    @classmethod
    def of(cls, config: VanillaConfig) -> "DecoderSide":
        side = object.__new__(cls)
        object.__setattr__(side, "__dict__", config.__dict__)  # one set of attributes for both
        return side

    @property
    def num_hidden_layers(self) -> int:
        return self.num_decoder_layers

    @num_hidden_layers.setter
    def num_hidden_layers(self, value: int) -> None:
        self.num_decoder_layers = value


#: Largest initialisation spread accepted: weights drawn wider overflow float32 products within a layer or two.
MAX_INIT_SPREAD = 1e3

#: Float fields -> (the allowed range in words, its test). NaN and infinities fail every test.
NUMBER_RANGES: dict[str, tuple[str, Callable[[float], bool]]] = {
    "norm_eps": ("a finite number > 0", lambda v: 0 < v < math.inf),
    "attention_scale": ("a finite number > 0, or None for 1/sqrt(head_dim)", lambda v: v is None or 0 < v < math.inf),
    "lm_head_scale": ("a finite number > 0 (1.0 leaves the hidden states as they are)", lambda v: 0 < v < math.inf),
    "initializer_range": (f"a number in [0, {MAX_INIT_SPREAD:g}]", lambda v: 0 <= v <= MAX_INIT_SPREAD),
}


def check_numbers(config: "VanillaConfig") -> None:
    """Values that pass the type check but give NaN, a silent disagreement between backends or a late crash."""
    for field, (allowed, valid) in NUMBER_RANGES.items():
        value = getattr(config, field)
        if not valid(value):
            raise ValueError(f"VanillaConfig.{field}={value!r} is out of range: it must be {allowed}.")


def check_rope_parameters(rope_parameters: dict | None) -> None:
    """transformers only warns about these; the rotary tables would then be NaN, wrong or the wrong shape."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # imports torch: only for RoPE configs

    def refuse(problem: str) -> None:
        raise ValueError(f"VanillaConfig.rope_parameters={rope_parameters!r}: {problem}.")

    if not isinstance(rope_parameters, dict):
        refuse("position_embedding_type='rope' needs a dict such as {'rope_type': 'default', 'rope_theta': 10000.0}")
    rope_type = rope_parameters.get("rope_type", "default")
    known = ("default", *ROPE_INIT_FUNCTIONS)
    if rope_type not in known:
        refuse(f"rope_type {rope_type!r} is unknown; choose one of {', '.join(map(repr, known))}")
    for key, value in rope_parameters.items():
        numbers = value if isinstance(value, list) else [value]
        if key != "rope_type" and not all(is_finite_number(number) for number in numbers):
            refuse(f"{key} must be a finite number (or a list of them), got {value!r}")
    theta = rope_parameters.get("rope_theta")
    if theta is None or theta <= 0:
        refuse(f"rope_theta must be a number > 0 (10000.0 is the RoPE paper's), got {theta!r}")
    if "factor" in rope_parameters and rope_parameters["factor"] < 1:
        refuse(f"factor must be >= 1 (the factor by which the context is stretched), got {rope_parameters['factor']!r}")
    if rope_parameters.get("partial_rotary_factor", 1.0) != 1.0:
        refuse("partial_rotary_factor is not supported: hf_vanilla rotates every channel of a head; remove it")


def is_finite_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_relative_buckets(config: "VanillaConfig") -> None:
    """T5's buckets: half of a stack's buckets are exact, the rest logarithmic up to max_distance, so every stack
    needs at least one exact bucket and max_distance beyond the exact ones (else a division by zero or a negative
    bucket index). A bidirectional stack (encoder) splits its buckets between the two directions first."""
    buckets, max_distance = config.relative_attention_num_buckets, config.relative_attention_max_distance
    directions = {"encoder": (2,), "decoder": (1,), "encoder-decoder": (2, 1)}[config.architecture]
    for split in directions:
        exact = buckets // split // 2
        if exact < 1 or max_distance <= exact:
            raise ValueError(
                f"VanillaConfig.relative_attention_num_buckets={buckets} with relative_attention_max_distance="
                f"{max_distance} leaves {exact} exact bucket(s) in a {'bidirectional' if split == 2 else 'causal'} "
                f"stack: it needs at least 1 and max_distance above it. Use num_buckets >= {4 if split == 2 else 2} and "
                f"max_distance > num_buckets // {2 * split} (T5: 32 and 128)."
            )


def inactive_rule(name: str) -> tuple[str, Callable[["VanillaConfig"], bool], Any]:
    """A field that changes nothing unless an option has certain values (the table's ``active_fields``) ->
    (that condition in words, its test, the field's default). A setting that would be ignored is refused."""
    ((option, allowed),) = activating_values(name).items()
    words = f"{option}={allowed[0]!r}" if len(allowed) == 1 else f"{option} is {' or '.join(map(repr, allowed))}"
    return words, lambda config: getattr(config, option) in allowed, field_default(name)


def field_default(name: str) -> Any:
    """A field's default value."""
    return VanillaConfig.__dataclass_fields__[name].default


def field_is_active(name: str, config: "VanillaConfig") -> bool:
    """Whether ``name`` changes what this config computes (fields without a condition always do)."""
    return name not in fields_with_conditions() or inactive_rule(name)[1](config)


#: The RoPE settings PreTrainedConfig writes into every config that has the field (older saves carry them).
_BASE_ROPE_DEFAULTS = ({"rope_theta": 10000.0, "rope_type": "default"}, {"rope_theta": 10000, "rope_type": "default"})


def check_inactive_options(
    config: "VanillaConfig", rope_scaling: dict | None = None, names: tuple[str, ...] | None = None
) -> None:
    """Refuse a setting the chosen scheme, norm or family would silently ignore."""
    for name in fields_with_conditions() if names is None else names:
        condition, active, default = inactive_rule(name)
        if active(config):
            continue
        value = getattr(config, name)
        if name == "rope_parameters":
            value = rope_scaling or value
            ignored = value is not None and value not in _BASE_ROPE_DEFAULTS
        elif name == "num_decoder_layers":
            ignored = value != config.num_hidden_layers
        else:
            ignored = value != default
        if ignored:
            raise ValueError(
                f"VanillaConfig.{name}={value!r} has no effect unless {condition} (this config has "
                f"position_embedding_type={config.position_embedding_type!r}, norm_type={config.norm_type!r}, "
                f"architecture={config.architecture!r}); remove it, or choose the setting it belongs to."
            )


def check_rope_settings(config: "VanillaConfig") -> None:
    """RoPE settings given to a config without RoPE after it was built (tools probe ``rope_parameters``, which
    every config has, and assign it): refused when a model is built from the config or it is saved, as at
    construction. Other derived options (``num_decoder_layers``) follow their fields and are not checked here."""
    check_inactive_options(config, names=("rope_parameters",))


def scheme_row(config: "VanillaConfig") -> Variant:
    """The table's row for this config's positional scheme."""
    return row("position_embedding_type", config.position_embedding_type)


# ----------------------------------------------------------------------------------------------
# Parallelism plans: which modules of VanillaModel each rank shards (tensor) or holds (pipeline)


def attention_tp_plan(prefix: str) -> dict[str, str]:
    """Megatron's split of one attention: q, k, v by heads (columns), the output projection by rows (one all-reduce)."""
    return {f"{prefix}.{name}_proj": "colwise" for name in "qkv"} | {f"{prefix}.o_proj": "rowwise"}


def tensor_parallel_plan(config: "VanillaConfig") -> dict[str, str]:
    """``base_model_tp_plan``: module names of :class:`VanillaModel` -> transformers' parallel styles.

    Every rank computes the same result as one process, up to the order of the row-wise sums:
    * attention heads are split across ranks (q, k, v column-wise, o row-wise); the ranks must divide
      ``num_key_value_heads``. A single key/value head (multi-query) cannot be split: its attention stays whole.
    * a scheme's per-head parameters follow its row's plan (T5's relative bias: each rank keeps its heads'
      columns); a scheme whose row keeps heads whole (ALiBi: its slopes are not weights a plan can shard) leaves
      self-attention whole on every rank (cross-attention is split).
    * the feed-forward network (gate and up column-wise, down row-wise).
    transformers adds the token embedding (split by vocabulary) and the heads add their output projection.
    """
    stacks = {"encoder": ("encoder",), "decoder": ("decoder",), "encoder-decoder": ("encoder", "decoder")}
    split_heads = config.num_key_value_heads > 1
    scheme = scheme_row(config)
    plan: dict[str, str] = {}
    for stack in stacks[config.architecture]:
        layers = f"{stack}.layers.*"
        if split_heads and scheme.tensor_parallel == TP_SPLIT:
            plan |= attention_tp_plan(f"{layers}.self_attn")
            plan |= {f"{stack}.positions.{name}": style for name, style in scheme.tensor_parallel_plan}
        if split_heads and stack == "decoder" and config.is_encoder_decoder:
            plan |= attention_tp_plan(f"{layers}.cross_attn")
        if config.gated_ffn:
            plan[f"{layers}.mlp.gate_proj"] = "colwise"
        plan |= {f"{layers}.mlp.up_proj": "colwise", f"{layers}.mlp.down_proj": "rowwise"}
    return plan


def pipeline_parallel_plan(config: "VanillaConfig") -> dict[str, tuple[list[str], list[str]]] | None:
    """``base_model_pp_plan``: the embedding, the one list of layers and the final norm, in order, each with its
    inputs and outputs -- where a later stage may start from hidden states given as ``inputs_embeds``.

    None (no plan) for an encoder-decoder (two lists of layers) and for a stack that adds positions, token types
    or a norm to its input embeddings: those would be added again to the hidden states a stage receives.
    """
    adds_to_embeddings = (
        scheme_row(config).adds_to_embeddings or config.embedding_norm or config.type_vocab_size
    )
    if adds_to_embeddings or any(variant.pipeline_refusal for variant in rows_of(config)):
        return None
    stack = "decoder" if config.is_decoder else "encoder"
    plan = {
        "embed_tokens": (["input_ids"], ["inputs_embeds"]),
        f"{stack}.layers": (["hidden_states", "attention_mask"], ["hidden_states"]),
    }
    if config.final_norm:
        plan[f"{stack}.final_norm"] = (["hidden_states"], ["hidden_states"])
    return plan


def ignore_saved_plans(kwargs: dict[str, Any]) -> None:
    """A plan found in a config.json is dropped: the plans follow the fields, and a saved one could be stale."""
    saved = [name for name in _DERIVED_PLANS if kwargs.pop(name, None) is not None]
    if saved:
        logger.warning_once(
            f"VanillaConfig ignores {saved} from config.json: hf_vanilla derives them from the other fields. For "
            "another plan pass it at load time: from_pretrained(..., distributed_config=DistributedConfig(tp_plan={...}))."
        )


def refuse_plan_assignment(name: str) -> None:
    raise ValueError(
        f"VanillaConfig.{name} is derived from the fields (architecture, heads, FFN, positions) and cannot be set. "
        "For another tensor-parallel plan pass from_pretrained(..., distributed_config=DistributedConfig(tp_plan={...}))."
    )
