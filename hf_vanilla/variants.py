"""One table of variants: every value of every structural option, and what it needs of each engine.

A row says what one value of one config field *is* (does it add to the embeddings, add a bias to the attention
scores, hold parameters, which fields take effect only with it) and what each engine does with it (tensor
parallelism splits its heads or keeps them whole; vLLM serves it, serves it through another field, or is refused
with a reason; each exporter carries it or fails for a stated reason; which ``to_hf`` targets compute it natively).
Config validation, the inactive-options rule, the parallel plans, the engine refusals, convert's relevant fields
and native forms, scripts and the tests' grids read this table; nothing else lists option values.

A new value is one row here (``register``) and, for a positional scheme, one class in positional.py naming it; a new
norm or activation is one row and, where transformers has no such module (an activation outside ``ACT2FN``, any
norm), one class in modeling_vanilla.py naming it. A value is registered once: a second row or class for it is refused.

This file travels to the Hub with the model: it imports only the standard library.
"""

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

#: Tensor parallelism: a row's attention heads are split across ranks with their weights, or kept whole on each.
TP_SPLIT, TP_WHOLE = "split heads", "whole heads"

#: ``Variant.value`` for an option whose every non-default value behaves alike (a scale, a flag).
NON_DEFAULT = "non-default"

#: The exporters a row is checked against (docs/deploying.md), under ``torch.no_grad()``: ``torch.export.export`` of
#: the forward, and ``torch.onnx.export(..., dynamo=True)`` run by onnxruntime. A row exports with each exactly unless
#: it names the reason the exporter fails.
TORCH_EXPORT, ONNX = "torch.export", "ONNX"
EXPORTERS = (TORCH_EXPORT, ONNX)

#: The ``to_hf`` targets (transformers ``model_type``), in hf_vanilla.convert's order.
TO_HF_TARGETS = ("llama", "gpt2", "bert", "bart", "marian", "t5")


@dataclass(frozen=True)
class Variant:
    """One value of one config option and what it needs of every engine."""

    option: str
    value: Any
    summary: str
    #: Fields that change nothing unless the option has this value (set otherwise, they are refused).
    active_fields: tuple[str, ...] = ()
    #: Adds a vector to the token embeddings (a pipeline stage receiving hidden states would add it again).
    adds_to_embeddings: bool = False
    #: Adds a bias to the attention scores: only attention functions taking ``position_bias`` apply it.
    attention_bias: bool = False
    #: Holds trained parameters of its own (initialised by its module, loaded from checkpoints).
    parameters: bool = False
    #: Tensor parallelism: TP_SPLIT or TP_WHOLE (self-attention of every layer kept whole on each rank).
    tensor_parallel: str = TP_SPLIT
    #: Why a pipeline cannot split a model with this value into stages ("" when it can).
    pipeline_refusal: str = ""
    #: Extra entries of the tensor-parallel plan, relative to the module holding the row's parameters.
    tensor_parallel_plan: tuple[tuple[str, str], ...] = ()
    #: Part of the output layer: an engine that builds its own (vLLM generating) decides; pooling never reads it.
    output_layer: bool = False
    #: Why vLLM cannot serve this value ("" when it can).
    vllm_refusal: str = ""
    #: The config attribute vLLM reads to honour this value ("" when it needs none).
    vllm_reads: str = ""
    #: (option, why vLLM cannot serve this value together with a non-default value of that option), for a value
    #: vLLM serves alone but not in that combination.
    vllm_conflicts: tuple[tuple[str, str], ...] = ()
    #: (exporter, why it cannot carry this value) for each of EXPORTERS that fails; the others export it exactly.
    export_refusals: tuple[tuple[str, str], ...] = ()
    #: The ``to_hf`` targets whose native model computes this value exactly; every other target refuses it.
    to_hf: tuple[str, ...] = ()
    #: (target, the further condition under which it carries this value) for a target of ``to_hf`` with one.
    to_hf_conditions: tuple[tuple[str, str], ...] = ()
    #: For a NON_DEFAULT row, the value every check builds it with (a scale of 0.5, say).
    example: Any = None
    #: For a NON_DEFAULT row of a field that, left unset, follows other fields (``num_key_value_heads`` follows
    #: ``num_attention_heads``): that value, from the config; the row is in use where the field differs from it.
    default_of: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        exporters = [name for name, _ in self.export_refusals if name not in EXPORTERS]
        targets = [name for name in self.to_hf if name not in TO_HF_TARGETS]
        targets += [name for name, _ in self.to_hf_conditions if name not in self.to_hf]
        if (self.value == NON_DEFAULT) == (self.example is None) or self.default_of and self.value != NON_DEFAULT:
            raise ValueError(f"{self.option}={self.value!r}: a NON_DEFAULT row, and only such a row, names the "
                             "example value its checks build it with (example=...), and only it may name a default_of.")
        if exporters or targets:
            raise ValueError(f"{self.option}={self.value!r}: export_refusals names {exporters or 'no'} unknown "
                             f"exporter (known: {EXPORTERS}), to_hf / to_hf_conditions {targets or 'no'} unknown "
                             f"target (to_hf names targets of {TO_HF_TARGETS}; a condition, a target in to_hf).")

    @property
    def setting(self) -> Any:
        """The value a model built to show this row sets its option to."""
        return self.example if self.value == NON_DEFAULT else self.value

    @property
    def served_by_vllm(self) -> bool:
        return not self.vllm_refusal

    def export_refusal(self, exporter: str) -> str:
        """Why ``exporter`` cannot carry this value ("" when it exports it exactly)."""
        return dict(self.export_refusals).get(exporter, "")

    def to_hf_condition(self, target: str) -> str:
        """The condition under which ``target`` carries this value ("" when it always does)."""
        return dict(self.to_hf_conditions).get(target, "")


_BIAS_IN_VLLM = "vLLM's attention takes queries, keys and values only: the additive bias would be dropped"
_HEAD_IN_VLLM = "vLLM builds its own output layer (the projection, its bias, logit_scale)"

#: Why vLLM cannot serve a VanillaForSequenceClassification, of any family (it is refused when vLLM builds it).
VLLM_CLASSIFIER_REFUSAL = (
    "vLLM's Transformers backend classifies with its own pooler (the first token unless configured) and a head "
    "it looks up as `classifier` or `score`, loading `score.weight` into neither and dropping `score.bias`: "
    "hf_vanilla's pooling (classifier_pooling, pooler) and head would not run"
)

#: Every to_hf target: the value each native model can be configured with.
_EVERY_TARGET = TO_HF_TARGETS


def _query_heads(config: Any) -> int:
    return config.num_attention_heads


def _even_split(config: Any) -> int:
    return config.hidden_size // config.num_attention_heads


def _unscaled_rope(config: Any) -> dict[str, Any]:
    return {"rope_type": "default", "rope_theta": config.rope_parameters.get("rope_theta")}


def _activation(name: str, summary: str, **properties: Any) -> Variant:
    """An FFN activation: every target's native config names it (T5 as ``feed_forward_proj``), gated or not."""
    return Variant("hidden_act", name, summary, to_hf=properties.pop("to_hf", _EVERY_TARGET), **properties)


VARIANTS: list[Variant] = [
    Variant("architecture", "encoder", "bidirectional stack (BERT-like)", to_hf=("bert",)),
    Variant("architecture", "decoder", "causal stack (GPT-like)", to_hf=("llama", "gpt2")),
    Variant("architecture", "encoder-decoder", "encoder and decoder with cross-attention (the paper's)",
            active_fields=("num_decoder_layers",), pipeline_refusal="two lists of layers",
            vllm_refusal="vLLM serves hf_vanilla decoders (generation) and encoders (embedding) through its "
                         "Transformers backend, not encoder-decoders",
            to_hf=("bart", "marian", "t5")),
    Variant("position_embedding_type", "sinusoidal", "fixed sinusoids added to the embeddings (the paper's)",
            active_fields=("position_offset", "sinusoidal_layout"), adds_to_embeddings=True, to_hf=("marian",),
            to_hf_conditions=(("marian", "sinusoidal_layout='concatenated'"),)),
    Variant("position_embedding_type", "learned", "one trained vector per position (BERT, GPT-2, BART)",
            active_fields=("position_offset",), adds_to_embeddings=True, parameters=True,
            to_hf=("gpt2", "bert", "bart"), to_hf_conditions=(("bart", "position_offset=2"),)),
    Variant("position_embedding_type", "rope", "queries and keys rotated by position (Llama)",
            active_fields=("rope_parameters",), to_hf=("llama",)),
    Variant("position_embedding_type", "alibi", "linear distance penalty per head (Press et al.)",
            attention_bias=True, tensor_parallel=TP_WHOLE, vllm_refusal=_BIAS_IN_VLLM),
    Variant("position_embedding_type", "relative", "learned bucketed bias per head (T5)",
            active_fields=("relative_attention_num_buckets", "relative_attention_max_distance"),
            attention_bias=True, parameters=True, vllm_refusal=_BIAS_IN_VLLM,
            tensor_parallel_plan=(("relative_attention_bias.weight", "embedding_colwise"),
                                  ("relative_attention_bias", "local_params")),
            to_hf=("t5",)),
    Variant("position_embedding_type", "none", "no positional information"),
    Variant("rope_parameters", NON_DEFAULT, "RoPE with a scaling rule stretching its context (linear, dynamic NTK, "
            "YaRN, Llama 3: transformers' ROPE_INIT_FUNCTIONS)", default_of=_unscaled_rope,
            example={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}, to_hf=("llama",)),
    Variant("norm_type", "layernorm", "LayerNorm", active_fields=("norm_bias",), parameters=True,
            to_hf=("gpt2", "bert", "bart", "marian")),
    Variant("norm_type", "rmsnorm", "RMSNorm (T5, Llama)", parameters=True, to_hf=("llama", "t5")),
    Variant("norm_position", "pre", "x = x + f(norm(x)) (GPT-2, Llama, T5)", to_hf=("llama", "gpt2", "t5")),
    Variant("norm_position", "post", "x = norm(x + f(x)) (the paper's)", to_hf=("bert", "bart", "marian")),
    Variant("embedding_norm", True, "a norm right after the embeddings (BERT, BART)", parameters=True,
            pipeline_refusal="a norm on the embeddings: a later stage would norm its hidden states again",
            to_hf=("bert", "bart")),
    Variant("embedding_norm", False, "the embeddings go straight to the first block (the paper's, GPT-2, Llama, T5)",
            to_hf=("llama", "gpt2", "marian", "t5")),
    Variant("final_norm", True, "a norm after the last block (pre-norm stacks: GPT-2, Llama, T5)", parameters=True,
            to_hf=("llama", "gpt2", "t5")),
    Variant("final_norm", False, "the last block's output as it is (post-norm stacks: the paper's, BERT, BART)",
            to_hf=("bert", "bart", "marian")),
    _activation("relu", "max(0, x) (the paper's, T5 v1.0, OPT)"),
    _activation("gelu", "x * Phi(x), the exact GELU (BERT, BART)",
                to_hf_conditions=(("t5", "gated_ffn=False (T5 reads 'gated-gelu' as gelu_new)"),)),
    _activation("gelu_new", "GELU, tanh approximation, written out (GPT-2, T5 v1.1's GEGLU)"),
    _activation("gelu_fast", "GELU, tanh approximation, as gelu_new in another form (GPT-J's codebase)"),
    _activation("gelu_pytorch_tanh", "GELU, tanh approximation, torch's kernel (Gemma, StarCoder)"),
    _activation("quick_gelu", "x * sigmoid(1.702 x) (CLIP)"),
    _activation("silu", "x * sigmoid(x); with gated_ffn, SwiGLU (Llama)"),
    _activation("swish", "the same function as silu, under Marian's name"),
    _activation("relu2", "relu(x)^2 (Primer, Nemotron)"),
    Variant("gated_ffn", False, "act(x W_up) W_down (the paper's)", parameters=True,
            to_hf=("gpt2", "bert", "bart", "marian", "t5")),
    Variant("gated_ffn", True, "act(x W_gate) * (x W_up) W_down (SwiGLU, GEGLU)", parameters=True,
            to_hf=("llama", "t5"),
            to_hf_conditions=(("t5", "hidden_act other than 'gelu' (T5 reads 'gated-gelu' as gelu_new)"),)),
    Variant("num_key_value_heads", NON_DEFAULT, "grouped-query attention: fewer key/value heads than query heads, "
            "each shared by a group of them (Llama 2 70B, Mistral)", default_of=_query_heads, example=2,
            to_hf=("llama",)),
    Variant("num_key_value_heads", 1, "multi-query attention: one key/value head shared by every query head (PaLM)",
            tensor_parallel=TP_WHOLE, to_hf=("llama",)),
    Variant("head_dim", NON_DEFAULT, "a head width other than hidden_size / num_attention_heads (T5's d_kv, Gemma)",
            default_of=_even_split, example=64, to_hf=("llama", "t5")),
    Variant("attention_scale", NON_DEFAULT, "a factor on q.k other than 1/sqrt(head_dim) (T5 attends unscaled: 1.0)",
            example=1.0, to_hf=("gpt2", "t5"),
            to_hf_conditions=(("gpt2", "attention_scale=1.0 (scale_attn_weights=False)"),
                              ("t5", "attention_scale=1.0"))),
    Variant("attention_bias", True, "biases on the q, k, v and output projections (the paper's, GPT-2, BERT, BART)",
            parameters=True, to_hf=("llama", "gpt2", "bert", "bart", "marian")),
    Variant("attention_bias", False, "no biases on the attention projections (Llama, T5)", to_hf=("llama", "t5")),
    Variant("mlp_bias", True, "biases on the feed-forward projections (the paper's, GPT-2, BERT, BART)",
            parameters=True, to_hf=("llama", "gpt2", "bert", "bart", "marian")),
    Variant("mlp_bias", False, "no biases on the feed-forward projections (Llama, T5)", to_hf=("llama", "t5")),
    Variant("scale_embedding", True, "token embeddings times sqrt(hidden_size) (the paper's, BART, Marian)",
            to_hf=("bart", "marian")),
    Variant("scale_embedding", False, "token embeddings as they are (GPT-2, BERT, Llama, T5)", to_hf=_EVERY_TARGET),
    Variant("tie_word_embeddings", True, "the output projection is the token embedding matrix (the paper's, GPT-2, "
            "BERT, T5 v1.0)", output_layer=True, to_hf=_EVERY_TARGET),
    Variant("tie_word_embeddings", False, "an output projection of its own (Llama, T5 v1.1)", parameters=True,
            output_layer=True, to_hf=_EVERY_TARGET),
    Variant("lm_head_scale", NON_DEFAULT, "last hidden states times a factor before the output projection (T5)",
            output_layer=True, vllm_reads="logit_scale", to_hf=("t5",), example=0.5,
            to_hf_conditions=(("t5", "lm_head_scale=d_model**-0.5 (T5 v1.0)"),)),
    Variant("lm_head_bias", False, "no bias on the output projection (GPT-2, Llama, T5)",
            output_layer=True, to_hf=("llama", "gpt2", "t5")),
    Variant("lm_head_bias", True, "a bias on the output projection (BERT, BART, Marian)", parameters=True,
            output_layer=True, to_hf=("bert", "bart", "marian"),
            vllm_conflicts=(("lm_head_scale", "vLLM multiplies its logits, the output bias included, by "
                                              "logit_scale; hf_vanilla scales the hidden states before the "
                                              "projection and adds the bias unscaled"),)),
    Variant("lm_head_transform", False, "the last hidden states go straight to the output projection",
            output_layer=True, to_hf=("llama", "gpt2", "bart", "marian", "t5")),
    Variant("lm_head_transform", True, "dense + activation + norm before the output projection (BERT)",
            parameters=True, output_layer=True, vllm_refusal=_HEAD_IN_VLLM + ": it skips the transform",
            to_hf=("bert",)),
]


def register(variant: Variant) -> None:
    """Add a value of an option (a new positional scheme: this row and one class in positional.py)."""
    if any((row.option, row.value) == (variant.option, variant.value) for row in VARIANTS):
        raise ValueError(f"{variant.option}={variant.value!r} is already in the table of variants.")
    VARIANTS.append(variant)


@contextlib.contextmanager
def registered(variant: Variant) -> Iterator[Variant]:
    """The table with ``variant`` in it for the duration (tests of a scheme that is not shipped)."""
    register(variant)
    try:
        yield variant
    finally:
        VARIANTS.remove(variant)


def enter_class(registry: dict[Any, type], option: str, value: Any, cls: type) -> None:
    """Enter ``cls`` in ``registry`` (the module's own: positional.py's schemes, modeling_vanilla.py's norms and
    activations) as the class that builds ``option=value``. A value another class already builds is refused: the
    second definition would otherwise replace the shipped class for the rest of the process."""
    taken = registry.get(value)
    if taken is not None:
        raise ValueError(
            f"{option}={value!r} is already built by {taken.__module__}.{taken.__qualname__}; {cls.__qualname__} "
            f"cannot take its name. Give it a value of its own (one row in hf_vanilla/variants.py), or subclass "
            "without naming a value."
        )
    registry[value] = cls


def options() -> tuple[str, ...]:
    """The config fields the table has rows for, in table order."""
    return tuple(dict.fromkeys(row.option for row in VARIANTS))


def rows(option: str) -> tuple[Variant, ...]:
    return tuple(row for row in VARIANTS if row.option == option)


def values(option: str) -> tuple[Any, ...]:
    """Every value the table knows for ``option`` (the allowed choices of a choice field)."""
    return tuple(row.value for row in rows(option))


def row(option: str, value: Any) -> Variant:
    for candidate in rows(option):
        if candidate.value == value:
            return candidate
    raise KeyError(f"{option}={value!r} is not in the table of variants")


def values_where(option: str, **properties: Any) -> tuple[Any, ...]:
    """The values of ``option`` whose rows have these properties, e.g. ``values_where(scheme, attention_bias=True)``."""
    return tuple(r.value for r in rows(option) if all(getattr(r, k) == v for k, v in properties.items()))


def activating_values(field_name: str) -> dict[str, tuple[Any, ...]]:
    """{option: values} under which ``field_name`` takes effect; empty when it always does."""
    found: dict[str, tuple[Any, ...]] = {}
    for r in VARIANTS:
        if field_name in r.active_fields:
            found[r.option] = (*found.get(r.option, ()), r.value)
    return found


def native_values(option: str, target: str) -> tuple[Any, ...]:
    """The values of ``option`` whose rows ``target`` carries (``to_hf``)."""
    return tuple(r.value for r in rows(option) if target in r.to_hf)


def is_option_active(option: str, config: Any) -> bool:
    """Whether ``option`` takes effect in ``config`` (``rope_parameters`` only with RoPE)."""
    return all(getattr(config, other) in allowed for other, allowed in activating_values(option).items())


def rows_of(config: Any, field_default: Callable[[str], Any]) -> tuple[Variant, ...]:
    """The rows ``config`` uses, in table order: for each option in effect, the row naming its value, or else its
    NON_DEFAULT row where the value differs from the default (``default_of``, or ``field_default(option)``)."""
    used = []
    for option in options():
        if not is_option_active(option, config):
            continue
        value = getattr(config, option)
        named = [r for r in rows(option) if r.value != NON_DEFAULT and r.value == value]
        differing = [r for r in rows(option) if r.value == NON_DEFAULT
                     and value != (r.default_of(config) if r.default_of else field_default(option))]
        used += named or differing
    return tuple(sorted(used, key=VARIANTS.index))


def fields_with_conditions() -> tuple[str, ...]:
    """Every field that takes effect only under some option's value."""
    return tuple(dict.fromkeys(name for r in VARIANTS for name in r.active_fields))
