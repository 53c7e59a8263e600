"""One table of variants: every value of every structural option, what it needs of each engine, and the lookups
that read it.

A row says what one value of one config field *is* (does it add to the embeddings, add a bias to the attention
scores, hold parameters, which fields take effect only with it, what else a config using it must satisfy, which
model classes sit on a family) and what each engine does with it (tensor parallelism splits its heads or keeps them
whole; vLLM serves it, serves it through another field, or is refused with a reason; each exporter carries it or
fails for a stated reason; which ``to_hf`` targets compute it natively). Below the table, the lookups (which rows a
config uses, which values an option has, which targets carry it) that everything else reads when asked (nothing
copies the table at import): rules.py's validation, ranges, inactive options and parallel plans; engines.py's
refusals; convert's relevant fields and native forms; scripts and the tests' grids. Nothing else lists option values.

A new value is one row here (``register``) and, for a positional scheme, one class in positional.py naming it; a new
norm or activation is one row and, where transformers has no such module (an activation outside ``ACT2FN``, any
norm), one class in modeling_vanilla.py naming it. Any other parameter-free activation of ``ACT2FN`` is taken by name,
as built-in configs take it (one row stands for them). A value is registered once: a second row or class for it is
refused.

This file travels to the Hub with the model: it imports only the standard library (the RoPE and activation checks
read transformers' tables when they run).
"""

import contextlib
import math
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

#: The engines a row declares it runs on exactly (``engines``): vLLM's Transformers backend, transformers' tensor
#: parallelism splitting attention heads across ranks, its pipeline parallelism splitting the layers into stages,
#: and the exporters. A row refuses every engine it does not name: rows fail closed.
VLLM, TENSOR_PARALLEL, PIPELINE_PARALLEL = "vLLM", "tensor parallel (split heads)", "pipeline parallel"
ENGINES = (VLLM, TENSOR_PARALLEL, PIPELINE_PARALLEL, *EXPORTERS)


def undeclared(engine: str) -> str:
    """The refusal of an engine a row does not name (said after ``option=value: ``)."""
    return (f"its row in hf_vanilla/variants.py does not declare {engine} (engines=...), so nothing has checked that "
            f"{engine} computes it exactly; check it, then name {engine!r} in the row")


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
    #: The engines of :data:`ENGINES` this row was checked with; every other one refuses it (a row fails closed),
    #: with the row's reason below where it gives one, else :func:`undeclared`'s.
    engines: tuple[str, ...] = ()
    #: Tensor parallelism: TP_SPLIT (``engines`` names TENSOR_PARALLEL) or TP_WHOLE (self-attention of every layer
    #: kept whole on each rank, exact for any row); follows ``engines`` unless given.
    tensor_parallel: str | None = None
    #: Why a pipeline cannot split a model with this value into stages ("" when it can; follows ``engines``).
    pipeline_refusal: str | None = None
    #: Extra entries of the tensor-parallel plan, relative to the module holding the row's parameters.
    tensor_parallel_plan: tuple[tuple[str, str], ...] = ()
    #: For a positional scheme: the name each stack holds its module under, where its tensors' checkpoint names and
    #: its ``tensor_parallel_plan`` entries start (stated here alone: its class and the plans read it).
    module_name: str = "positions"
    #: Part of the output layer: an engine that builds its own (vLLM generating) decides; pooling never reads it.
    output_layer: bool = False
    #: Why vLLM cannot serve this value ("" when it can; follows ``engines`` unless given).
    vllm_refusal: str | None = None
    #: The config attribute vLLM reads to honour this value ("" when it needs none).
    vllm_reads: str = ""
    #: (option, why vLLM cannot serve this value together with a non-default value of that option), for a value
    #: vLLM serves alone but not in that combination.
    vllm_conflicts: tuple[tuple[str, str], ...] = ()
    #: (exporter, why it cannot carry this value) for each of EXPORTERS that fails; the others ``engines`` names
    #: export it exactly, and those it does not name are refused as undeclared.
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
    #: What a config using this row must also satisfy (its settings' ranges): raises a ValueError saying the fix.
    check: Callable[[Any], None] | None = None
    #: For an ``architecture`` row: the model classes (of :data:`AUTO_CLASSES`) that sit on this family.
    heads: tuple[str, ...] = ()

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
        self._refuse_undeclared_engines()

    def _refuse_undeclared_engines(self) -> None:
        """Each engine the row does not name refuses it: its stated reason, or that it was never checked."""
        unknown = [name for name in self.engines if name not in ENGINES]
        reasons = {VLLM: self.vllm_refusal, PIPELINE_PARALLEL: self.pipeline_refusal, **dict(self.export_refusals)}
        contradicted = [name for name in self.engines if reasons.get(name)]
        split = self.tensor_parallel is not None and (self.tensor_parallel == TP_SPLIT) != (TENSOR_PARALLEL in self.engines)
        if unknown or contradicted or split:
            raise ValueError(f"{self.option}={self.value!r}: engines names {unknown or 'no'} unknown engine (known: "
                             f"{ENGINES}) and {contradicted or 'no'} engine it also gives a refusal for; "
                             f"tensor_parallel=TP_SPLIT goes with {TENSOR_PARALLEL!r} in engines, TP_WHOLE without it.")
        for name, field in ((VLLM, "vllm_refusal"), (PIPELINE_PARALLEL, "pipeline_refusal")):
            if getattr(self, field) is None:  # frozen: set once, here
                object.__setattr__(self, field, "" if name in self.engines else undeclared(name))
        if self.tensor_parallel is None:
            object.__setattr__(self, "tensor_parallel", TP_SPLIT if TENSOR_PARALLEL in self.engines else TP_WHOLE)
        missing = [name for name in EXPORTERS if name not in self.engines and name not in reasons]
        object.__setattr__(self, "export_refusals", (*self.export_refusals, *((n, undeclared(n)) for n in missing)))

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


#: What vLLM 0.32 does without each refusal, as `python scripts/vllm_check.py rows` measures it with that refusal alone
#: lifted in a copy of the folder (docs/support-matrix.md quotes the run).
_BIAS_IN_VLLM = ("vLLM's attention takes queries, keys and values only: it drops the additive bias and serves wrong "
                 "numbers")
_HEAD_IN_VLLM = ("vLLM builds its own output layer (the projection, its bias, logit_scale) and has no transform: it "
                 "fails at load (\"There is no module or parameter named 'lm_head_transform' in "
                 "TransformersForCausalLM\")")

#: Every to_hf target: the value each native model can be configured with (every native config names each of
#: the shipped activations, T5's as ``feed_forward_proj``, gated or not).
_EVERY_TARGET = TO_HF_TARGETS
#: Every engine: what a row that each engine was checked with declares.
_EVERY_ENGINE = ENGINES


def _every_engine_but(*refused: str) -> tuple[str, ...]:
    return tuple(name for name in ENGINES if name not in refused)


def _query_heads(config: Any) -> int:
    return config.num_attention_heads


def _even_split(config: Any) -> int:
    return config.hidden_size // config.num_attention_heads


def _unscaled_rope(config: Any) -> dict[str, Any]:
    given = getattr(config, "rope_parameters", None)
    given = given if isinstance(given, dict) else {}  # its row's check refuses it
    return {"rope_type": "default", "rope_theta": given.get("rope_theta")}


#: Each model class hf_vanilla offers and the Auto class that loads it; the ``architecture`` rows name which of them
#: sit on each family (``heads``).
AUTO_CLASSES: dict[str, str] = {
    "VanillaModel": "AutoModel",
    "VanillaForCausalLM": "AutoModelForCausalLM",
    "VanillaForMaskedLM": "AutoModelForMaskedLM",
    "VanillaForSeq2SeqLM": "AutoModelForSeq2SeqLM",
    "VanillaForSequenceClassification": "AutoModelForSequenceClassification",
    "VanillaForTokenClassification": "AutoModelForTokenClassification",
    "VanillaForQuestionAnswering": "AutoModelForQuestionAnswering",
}
_EVERY_FAMILY_HEADS = ("VanillaModel", "VanillaForSequenceClassification")
_TOKEN_HEADS = ("VanillaForTokenClassification", "VanillaForQuestionAnswering")


def is_finite_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_rope(config: Any) -> None:
    """transformers only warns about these; the rotary tables would then be NaN, wrong or the wrong shape."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # imports torch: only for RoPE configs

    rope_parameters = getattr(config, "rope_parameters", None)  # absent where RoPE was chosen after the config was built

    def refuse(problem: str) -> None:
        raise ValueError(f"VanillaConfig.rope_parameters={rope_parameters!r}: {problem}.")

    if config.head_dim % 2:
        raise ValueError(f"VanillaConfig.head_dim={config.head_dim} must be even for position_embedding_type='rope'.")
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


def _check_relative_buckets(config: Any) -> None:
    """T5's buckets: half of a stack's buckets are exact, the rest logarithmic up to max_distance, so every stack
    needs at least one exact bucket and max_distance beyond the exact ones (else a division by zero or a negative
    bucket index). A bidirectional stack (encoder) splits its buckets between the two directions first."""
    buckets, max_distance = config.relative_attention_num_buckets, config.relative_attention_max_distance
    if buckets < 2 or max_distance < 2:
        raise ValueError("VanillaConfig.relative_attention_num_buckets and _max_distance must be at least 2.")
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


def _check_act2fn_activation(config: Any) -> None:
    """An activation no row names is taken from transformers' ``ACT2FN`` as built-in configs take it; one with
    parameters of its own (prelu, xielu) would be left uninitialised and dropped by every converter: it needs a row."""
    from transformers.activations import ACT2FN  # imports torch: only for such an activation

    name, named = config.hidden_act, ", ".join(repr(v) for v in values("hidden_act") if v != NON_DEFAULT)
    if name not in ACT2FN:
        raise ValueError(
            f"VanillaConfig.hidden_act={name!r} is not an activation hf_vanilla or transformers knows; choose one of "
            f"{named}, or another parameter-free name of transformers.activations.ACT2FN ('mish', 'tanh', ...: "
            "`sorted(ACT2FN)` lists them)."
        )
    if any(True for _ in ACT2FN[name].parameters()):
        raise ValueError(
            f"VanillaConfig.hidden_act={name!r} has trained parameters of its own, which hf_vanilla neither "
            "initialises nor converts unless a row of hf_vanilla/variants.py and a RowActivation class name it; "
            f"choose a parameter-free activation: {named}, or another of ACT2FN such as 'mish' or 'tanh'."
        )


def _activation(name: str, summary: str, **properties: Any) -> Variant:
    """An FFN activation: no target and no engine unless the row names them (``to_hf=``, ``engines=``)."""
    return Variant("hidden_act", name, summary, **properties)


VARIANTS: list[Variant] = [
    Variant("architecture", "encoder", "bidirectional stack (BERT-like)", to_hf=("bert",),
            heads=(*_EVERY_FAMILY_HEADS, "VanillaForMaskedLM", *_TOKEN_HEADS), engines=_EVERY_ENGINE),
    Variant("architecture", "decoder", "causal stack (GPT-like)", to_hf=("llama", "gpt2"),
            heads=(*_EVERY_FAMILY_HEADS, "VanillaForCausalLM", *_TOKEN_HEADS), engines=_EVERY_ENGINE),
    Variant("architecture", "encoder-decoder", "encoder and decoder with cross-attention (the paper's)",
            heads=(*_EVERY_FAMILY_HEADS, "VanillaForSeq2SeqLM"),
            active_fields=("num_decoder_layers",), pipeline_refusal="two lists of layers",
            vllm_refusal="vLLM serves hf_vanilla decoders (generation) and encoders (embedding) through its "
                         "Transformers backend, not encoder-decoders: it fails at load (\"Layer 0 dispatches "
                         "attention from more than one module\")",
            to_hf=("bart", "marian", "t5"), engines=_every_engine_but(VLLM, PIPELINE_PARALLEL)),
    Variant("position_embedding_type", "sinusoidal", "fixed sinusoids added to the embeddings (the paper's)",
            active_fields=("position_offset", "sinusoidal_layout"), adds_to_embeddings=True, to_hf=("marian",),
            to_hf_conditions=(("marian", "sinusoidal_layout='concatenated'"),), engines=_EVERY_ENGINE),
    Variant("position_embedding_type", "learned", "one trained vector per position (BERT, GPT-2, BART)",
            active_fields=("position_offset",), adds_to_embeddings=True, parameters=True,
            to_hf=("gpt2", "bert", "bart"), to_hf_conditions=(("bart", "position_offset=2"),), engines=_EVERY_ENGINE),
    # held as Llama holds it, `rotary_emb`: tools that look for a model's RoPE module (transformers' RoPE-scaling
    # tests) find it by name
    Variant("position_embedding_type", "rope", "queries and keys rotated by position (Llama)",
            active_fields=("rope_parameters",), check=check_rope, module_name="rotary_emb", to_hf=("llama",),
            engines=_EVERY_ENGINE),
    Variant("position_embedding_type", "alibi", "linear distance penalty per head (Press et al.)",
            attention_bias=True, vllm_refusal=_BIAS_IN_VLLM, engines=_every_engine_but(VLLM, TENSOR_PARALLEL)),
    Variant("position_embedding_type", "relative", "learned bucketed bias per head (T5)",
            active_fields=("relative_attention_num_buckets", "relative_attention_max_distance"),
            attention_bias=True, parameters=True, vllm_refusal=_BIAS_IN_VLLM, check=_check_relative_buckets,
            tensor_parallel_plan=(("relative_attention_bias.weight", "embedding_colwise"),
                                  ("relative_attention_bias", "local_params")),
            to_hf=("t5",), engines=_every_engine_but(VLLM)),
    Variant("position_embedding_type", "none", "no positional information", engines=_EVERY_ENGINE),
    Variant("rope_parameters", NON_DEFAULT, "RoPE with a scaling rule stretching its context (linear, dynamic NTK, "
            "YaRN, Llama 3: transformers' ROPE_INIT_FUNCTIONS)", default_of=_unscaled_rope,
            example={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}, to_hf=("llama",),
            engines=_EVERY_ENGINE),
    Variant("norm_type", "layernorm", "LayerNorm", active_fields=("norm_bias",), parameters=True,
            to_hf=("gpt2", "bert", "bart", "marian"), engines=_EVERY_ENGINE),
    Variant("norm_type", "rmsnorm", "RMSNorm (T5, Llama)", parameters=True, to_hf=("llama", "t5"),
            engines=_EVERY_ENGINE),
    Variant("norm_position", "pre", "x = x + f(norm(x)) (GPT-2, Llama, T5)", to_hf=("llama", "gpt2", "t5"),
            engines=_EVERY_ENGINE),
    Variant("norm_position", "post", "x = norm(x + f(x)) (the paper's)", to_hf=("bert", "bart", "marian"),
            engines=_EVERY_ENGINE),
    Variant("embedding_norm", True, "a norm right after the embeddings (BERT, BART)", parameters=True,
            pipeline_refusal="a norm on the embeddings: a later stage would norm its hidden states again",
            to_hf=("bert", "bart"), engines=_every_engine_but(PIPELINE_PARALLEL)),
    Variant("embedding_norm", False, "the embeddings go straight to the first block (the paper's, GPT-2, Llama, T5)",
            to_hf=("llama", "gpt2", "marian", "t5"), engines=_EVERY_ENGINE),
    Variant("final_norm", True, "a norm after the last block (pre-norm stacks: GPT-2, Llama, T5)", parameters=True,
            to_hf=("llama", "gpt2", "t5"), engines=_EVERY_ENGINE),
    Variant("final_norm", False, "the last block's output as it is (post-norm stacks: the paper's, BERT, BART)",
            to_hf=("bert", "bart", "marian"), engines=_EVERY_ENGINE),
    _activation("relu", "max(0, x) (the paper's, T5 v1.0, OPT)", to_hf=_EVERY_TARGET, engines=_EVERY_ENGINE),
    _activation("gelu", "x * Phi(x), the exact GELU (BERT, BART)",
                to_hf_conditions=(("t5", "gated_ffn=False (T5 reads 'gated-gelu' as gelu_new)"),),
                to_hf=_EVERY_TARGET, engines=_EVERY_ENGINE),
    _activation("gelu_new", "GELU, tanh approximation, written out (GPT-2, T5 v1.1's GEGLU)",
                to_hf=_EVERY_TARGET, engines=_EVERY_ENGINE),
    _activation("gelu_fast", "GELU, tanh approximation, as gelu_new in another form (GPT-J's codebase)",
                to_hf=_EVERY_TARGET, engines=_EVERY_ENGINE),
    _activation("gelu_pytorch_tanh", "GELU, tanh approximation, torch's kernel (Gemma, StarCoder)",
                to_hf=_EVERY_TARGET, engines=_EVERY_ENGINE),
    _activation("quick_gelu", "x * sigmoid(1.702 x) (CLIP)", to_hf=_EVERY_TARGET, engines=_EVERY_ENGINE),
    _activation("silu", "x * sigmoid(x); with gated_ffn, SwiGLU (Llama)", to_hf=_EVERY_TARGET, engines=_EVERY_ENGINE),
    _activation("swish", "the same function as silu, under Marian's name",
                to_hf=_EVERY_TARGET, engines=_EVERY_ENGINE),
    _activation("relu2", "relu(x)^2 (Primer, Nemotron)", to_hf=_EVERY_TARGET, engines=_EVERY_ENGINE),
    _activation(NON_DEFAULT, "any other parameter-free activation of transformers' ACT2FN (mish, tanh, leaky_relu, "
                "...), taken by name as built-in configs take it", example="mish", check=_check_act2fn_activation,
                to_hf=_EVERY_TARGET, engines=_EVERY_ENGINE),
    Variant("gated_ffn", False, "act(x W_up) W_down (the paper's)", parameters=True,
            to_hf=("gpt2", "bert", "bart", "marian", "t5"), engines=_EVERY_ENGINE),
    Variant("gated_ffn", True, "act(x W_gate) * (x W_up) W_down (SwiGLU, GEGLU)", parameters=True,
            to_hf=("llama", "t5"),
            to_hf_conditions=(("t5", "hidden_act other than 'gelu' (T5 reads 'gated-gelu' as gelu_new)"),),
            engines=_EVERY_ENGINE),
    Variant("num_key_value_heads", NON_DEFAULT, "grouped-query attention: fewer key/value heads than query heads, "
            "each shared by a group of them (Llama 2 70B, Mistral)", default_of=_query_heads, example=2,
            to_hf=("llama",), engines=_EVERY_ENGINE),
    Variant("num_key_value_heads", 1, "multi-query attention: one key/value head shared by every query head (PaLM)",
            to_hf=("llama",), engines=_every_engine_but(TENSOR_PARALLEL)),
    Variant("head_dim", NON_DEFAULT, "a head width other than hidden_size / num_attention_heads (T5's d_kv, Gemma)",
            default_of=_even_split, example=64, to_hf=("llama", "t5"), engines=_EVERY_ENGINE),
    Variant("attention_scale", NON_DEFAULT, "a factor on q.k other than 1/sqrt(head_dim) (T5 attends unscaled: 1.0)",
            example=1.0, to_hf=("gpt2", "t5"),
            to_hf_conditions=(("gpt2", "attention_scale=1.0 (scale_attn_weights=False)"),
                              ("t5", "attention_scale=1.0")), engines=_EVERY_ENGINE),
    Variant("attention_bias", True, "biases on the q, k, v and output projections (the paper's, GPT-2, BERT, BART)",
            parameters=True, to_hf=("llama", "gpt2", "bert", "bart", "marian"), engines=_EVERY_ENGINE),
    Variant("attention_bias", False, "no biases on the attention projections (Llama, T5)", to_hf=("llama", "t5"),
            engines=_EVERY_ENGINE),
    Variant("mlp_bias", True, "biases on the feed-forward projections (the paper's, GPT-2, BERT, BART)",
            parameters=True, to_hf=("llama", "gpt2", "bert", "bart", "marian"), engines=_EVERY_ENGINE),
    Variant("mlp_bias", False, "no biases on the feed-forward projections (Llama, T5)", to_hf=("llama", "t5"),
            engines=_EVERY_ENGINE),
    Variant("scale_embedding", True, "token embeddings times sqrt(hidden_size) (the paper's, BART, Marian)",
            to_hf=("bart", "marian"), engines=_EVERY_ENGINE),
    Variant("scale_embedding", False, "token embeddings as they are (GPT-2, BERT, Llama, T5)",
            to_hf=_EVERY_TARGET, engines=_EVERY_ENGINE),
    Variant("tie_word_embeddings", True, "the output projection is the token embedding matrix (the paper's, GPT-2, "
            "BERT, T5 v1.0)", output_layer=True, to_hf=_EVERY_TARGET, engines=_EVERY_ENGINE),
    Variant("tie_word_embeddings", False, "an output projection of its own (Llama, T5 v1.1)", parameters=True,
            output_layer=True, to_hf=_EVERY_TARGET, engines=_EVERY_ENGINE),
    Variant("lm_head_scale", NON_DEFAULT, "last hidden states times a factor before the output projection (T5)",
            output_layer=True, vllm_reads="logit_scale", to_hf=("t5",), example=0.5,
            to_hf_conditions=(("t5", "lm_head_scale=d_model**-0.5 (T5 v1.0)"),), engines=_EVERY_ENGINE),
    Variant("lm_head_bias", False, "no bias on the output projection (GPT-2, Llama, T5)",
            output_layer=True, to_hf=("llama", "gpt2", "t5"), engines=_EVERY_ENGINE),
    Variant("lm_head_bias", True, "a bias on the output projection (BERT, BART, Marian)", parameters=True,
            output_layer=True, to_hf=("bert", "bart", "marian"),
            vllm_conflicts=(("lm_head_scale", "vLLM multiplies its logits, the output bias included, by "
                                              "logit_scale; hf_vanilla scales the hidden states before the "
                                              "projection and adds the bias unscaled"),), engines=_EVERY_ENGINE),
    Variant("lm_head_transform", False, "the last hidden states go straight to the output projection",
            output_layer=True, to_hf=("llama", "gpt2", "bart", "marian", "t5"), engines=_EVERY_ENGINE),
    Variant("lm_head_transform", True, "dense + activation + norm before the output projection (BERT)",
            parameters=True, output_layer=True, vllm_refusal=_HEAD_IN_VLLM,
            to_hf=("bert",), engines=_every_engine_but(VLLM)),
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


def activating_conditions() -> dict[str, dict[str, tuple[Any, ...]]]:
    """Every field that takes effect only under some option's values -> {option: those values}, read from the
    table in one pass."""
    conditions: dict[str, dict[str, tuple[Any, ...]]] = {}
    for r in VARIANTS:
        for name in r.active_fields:
            found = conditions.setdefault(name, {})
            found[r.option] = (*found.get(r.option, ()), r.value)
    return conditions


def activating_values(field_name: str) -> dict[str, tuple[Any, ...]]:
    """{option: values} under which ``field_name`` takes effect; empty when it always does."""
    return activating_conditions().get(field_name, {})


def native_values(option: str, target: str) -> tuple[Any, ...]:
    """The values of ``option`` whose rows ``target`` carries (``to_hf``)."""
    return tuple(r.value for r in rows(option) if target in r.to_hf)


#: An option that takes no effect in a config (:func:`rows_of`).
_IDLE = object()


def holds(condition: dict[str, tuple[Any, ...]], config: Any) -> bool:
    """Whether ``config`` meets a condition of :func:`activating_values` (each option at one of its values)."""
    return all(getattr(config, other) in allowed for other, allowed in condition.items())


def is_option_active(option: str, config: Any) -> bool:
    """Whether ``option`` takes effect in ``config`` (``rope_parameters`` only with RoPE)."""
    return holds(activating_values(option), config)


def rows_of(config: Any) -> tuple[Variant, ...]:
    """The rows ``config`` uses, in table order: for each option in effect, the row naming its value, or else its
    NON_DEFAULT row where the value differs from the default (``default_of``, or the field's default)."""
    conditions = activating_conditions()
    values_in_effect: dict[str, Any] = {}  # option -> its value, or _IDLE where it takes no effect
    picked, named = [], set()
    for r in VARIANTS:  # one pass: every build asks (its two parallel plans)
        if r.option not in values_in_effect:
            in_effect = r.option not in conditions or holds(conditions[r.option], config)
            # rope_parameters is absent where RoPE was chosen after building
            values_in_effect[r.option] = getattr(config, r.option, None) if in_effect else _IDLE
        value = values_in_effect[r.option]
        if value is _IDLE:
            continue
        if r.value != NON_DEFAULT and r.value == value:
            picked.append(r)
            named.add(r.option)
        elif r.value == NON_DEFAULT and value != (r.default_of(config) if r.default_of else default_value(config, r.option)):
            picked.append(r)
    return tuple([r for r in picked if r.value != NON_DEFAULT or r.option not in named])


def default_value(config: Any, name: str) -> Any:
    """The default of field ``name`` of ``config``'s class (a dataclass: VanillaConfig)."""
    return type(config).__dataclass_fields__[name].default


def fields_with_conditions() -> tuple[str, ...]:
    """Every field that takes effect only under some option's value."""
    return tuple(dict.fromkeys(name for r in VARIANTS for name in r.active_fields))


def head_families(head: str) -> tuple[str, ...]:
    """The families a model class sits on, as the ``architecture`` rows name it (none for a class they do not name)."""
    return tuple(r.value for r in rows("architecture") if head in r.heads)


def engine_alias(name: str) -> str | None:
    """The option an engine reads under the attribute ``name`` (a row's ``vllm_reads``), or None."""
    return next((r.option for r in VARIANTS if r.vllm_reads == name), None)


def scheme_row(config: Any) -> Variant:
    """The table's row for this config's positional scheme."""
    return row("position_embedding_type", config.position_embedding_type)
