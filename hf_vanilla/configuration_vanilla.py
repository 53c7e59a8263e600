"""VanillaConfig: one configuration for the encoder, decoder and encoder-decoder transformer.

The defaults are the paper's base model (Vaswani et al. 2017, table 3): an encoder-decoder with
d_model=512, 6+6 layers, 8 heads, d_ff=2048, ReLU, post-norm residual blocks, sinusoidal positions,
dropout 0.1, embeddings scaled by sqrt(d_model) and shared with the output projection.

Every option is validated when the config is built (value and JSON type) by the rules of rules.py, read from the
table of variants.py (its rows, the other fields' allowed values), so a bad combination fails here, with the field
and the allowed values named, and never deep inside a forward pass; an option the chosen scheme, norm or family would
ignore is refused. Keys that are not options are kept and saved, as transformers' own configs do (tools add
attributes), and named once in the log. The attention implementation is decided when it is set (engines.py: an
engine's, one that drops a bias).

This file travels to the Hub with the model: it imports only transformers, the standard library and its siblings.
It imports transformers_releases.py first, which refuses a release older than the model files support and bridges
the differences between the supported ones; modeling_vanilla.py and positional.py import this file first.
"""

# First: transformers_releases refuses a transformers release older than these files support.
from .transformers_releases import is_plan_given_back

# isort: split
import dataclasses
import importlib
from typing import Any, ClassVar

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig
from transformers.utils import logging

from .engines import AttentionDecidedWhenSet, refuse_attention_dropping_bias
from .rules import (
    PASSED_THROUGH,
    check_choice,
    check_inactive_options,
    check_rope_settings,
    check_rows,
    check_values,
    field_errors_as_value_errors,
    field_is_active,
    pipeline_parallel_plan,
    tensor_parallel_plan,
)
from .variants import AUTO_CLASSES, engine_alias, head_families, row, values

logger = logging.get_logger(__name__)

#: Plans transformers reads from a config's class; hf_vanilla derives them from the fields (variants.py).
_DERIVED_PLANS = ("base_model_tp_plan", "base_model_pp_plan")


def auto_map_for(architecture: str) -> dict[str, str]:
    """``auto_map`` entries that load a saved model of this family through every Auto class that fits it.

    transformers writes only the saved class's own entry; engines build the bare model instead
    (``AutoModel.from_config``: vLLM), and a causal-LM folder should load as a sequence classifier too.
    The names are the files that travel with the checkpoint.
    """
    heads = row("architecture", architecture).heads
    return {"AutoConfig": "configuration_vanilla.VanillaConfig"} | {
        AUTO_CLASSES[name]: f"modeling_vanilla.{name}" for name in heads
    }


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
        hidden_act: FFN activation, a ``hidden_act`` row of the table of variants (relu, gelu, gelu_new, silu, ...)
            or any other parameter-free name of transformers' ``ACT2FN`` (mish, tanh, ...), as built-in configs take.
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
    # The names engines read for an option they honour (vLLM's `logit_scale`) are the table's: see __getattr__.
    attribute_map: ClassVar[dict[str, str]] = {
        "d_model": "hidden_size", "n_layer": "num_hidden_layers", "n_head": "num_attention_heads",
        "dropout": "hidden_dropout",
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
    rope_parameters: dict | None = None  # the class holds no such attribute: see below the class
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
        known = PASSED_THROUGH.union(self.attribute_map)
        unused = sorted(k for k in kwargs if k not in known and not engine_alias(k))
        if unused:
            logger.warning_once(
                f"VanillaConfig keeps {unused} as attributes (they are saved with the config), but hf_vanilla does "
                "not use them; check the spelling against help(hf_vanilla.VanillaConfig) if they were meant as options."
            )
        check_choice("architecture", self.architecture, values("architecture"))
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
            # As GPT-2's, BERT's and BART's configs: tools (transformers' common tests among them) take
            # hasattr(config, "rope_parameters") to mean RoPE; the base class's defaults would only mislead.
            self.__dict__.pop("rope_parameters", None)
        # Checked here as well as by `@strict` so the error is a plain ValueError naming the field.
        self.check_fields()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)  # transformers makes each subclass a dataclass again, with a new __eq__
        cls.__eq__ = VanillaConfig.__eq__

    def __eq__(self, other: object) -> bool:
        """dataclass's comparison (transformers makes every config class a dataclass, GPT-2's too: the same class and
        equal fields), reading a field the instance lacks as absent: the generated one reads every field as an
        attribute and raised AttributeError on a config without RoPE (vLLM compares configs of encoders)."""
        if other.__class__ is not self.__class__:
            return NotImplemented
        return _field_values(self) == _field_values(other)

    def validate_architecture(self):
        """Run by `@strict` after __post_init__ and again before every save."""
        self.check_fields()
        check_rope_settings(self)

    def validate_rope(self):
        """transformers' RoPE checks, only where RoPE is in use (they would reject, e.g., odd head_dim otherwise)."""
        if field_is_active("rope_parameters", self):
            super().validate_rope()

    def check_fields(self) -> None:
        check_values(self)
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"VanillaConfig.num_attention_heads={self.num_attention_heads} is not divisible by "
                f"num_key_value_heads={self.num_key_value_heads}: each key/value head must serve a whole group "
                "of query heads."
            )
        check_rows(self)
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
            families = head_families(name)
            if families and self.architecture not in families:
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

    def __getattr__(self, name: str) -> Any:
        """Only for a name that is no attribute: the option an engine reads under it (the table's ``vllm_reads``:
        vLLM multiplies its logits by ``logit_scale``), looked up in the table when read."""
        option = engine_alias(name)
        if option is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(self, option)

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(engine_alias(name) or name, value)

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


# __init__ keeps the field's default (None), but the class drops the attribute, so that a config without RoPE has no
# rope_parameters at all, as GPT-2's: transformers' tests and vLLM take hasattr(config, "rope_parameters") for RoPE.
del VanillaConfig.rope_parameters


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


_ABSENT = object()


def _field_values(config: VanillaConfig) -> tuple:
    """Each dataclass field's value, or a marker for a field the config lacks (rope_parameters without RoPE)."""
    return tuple(getattr(config, field.name, _ABSENT) for field in dataclasses.fields(config))


def field_default(name: str) -> Any:
    """A field's default value."""
    return VanillaConfig.__dataclass_fields__[name].default


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
