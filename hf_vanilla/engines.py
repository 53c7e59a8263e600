"""What each engine does with a model, decided here once: the attention function a config is set to (an engine's,
such as vLLM's, or one that would drop a positional bias), checked when the implementation is set; the engine told
apart from transformers and hf_vanilla by where its attention function lives (``__module__``); and vLLM's refusals,
of the model class that saved a folder and of the table's rows (variants.py declares what vLLM does with each row),
said before its first token.

This file travels to the Hub with the model: it imports only transformers, the standard library and its siblings.
A config is annotated ``Any`` here: this file sits below configuration_vanilla.py, which mixes
:class:`AttentionDecidedWhenSet` into VanillaConfig.
"""

import inspect
from typing import Any

from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from .variants import row, rows_of, values

# ----------------------------------------------------------------------------------------------
# vLLM and the model classes: what it builds from a folder each class saved.

#: What vLLM 0.32 does with a classifier's folder, its refusal lifted, as `python scripts/vllm_check.py rows`
#: measures it (docs/support-matrix.md quotes the run).
_NO_SCORE_IN_VLLM = ("it registers the head it finds (`classifier` or `score`) as `classifier`, and fails at load "
                     "(\"There is no module or parameter named 'score' in TransformersForSequenceClassification\")")

#: Why vLLM cannot serve a VanillaForSequenceClassification, of any family (it is refused when vLLM builds it).
VLLM_CLASSIFIER_REFUSAL = (
    "vLLM's Transformers backend classifies with its own pooler and head, not hf_vanilla's (classifier_pooling, "
    f"pooler, score): {_NO_SCORE_IN_VLLM}"
)

#: The classes a user saves that vLLM has no path for, and why, by name (refused when vLLM builds the model from a
#: folder one of them saved). vLLM serves the others: a decoder's VanillaForCausalLM generates, and the bare model
#: and VanillaForMaskedLM are embedding models (vLLM pools the encoder; a masked-LM folder's head is left unread).
VLLM_HEAD_REFUSALS: dict[str, str] = {
    "VanillaForSequenceClassification": VLLM_CLASSIFIER_REFUSAL,
    "VanillaForTokenClassification": (
        "vLLM's Transformers backend has no token classifier: it reads a folder saved by this class as a sequence "
        f"classifier, and {_NO_SCORE_IN_VLLM}"),
    "VanillaForQuestionAnswering": (
        "vLLM's Transformers backend has no question-answering head: it reads this folder as a language model and "
        "fails at load (\"There is no module or parameter named 'qa_outputs' in TransformersForCausalLM\")"),
}


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


def vllm_refusals(config: Any) -> list[str]:
    """Why vLLM cannot serve this config, one line per reason (empty when it can): the class that saved it (its
    ``architectures``), then each option. Output-layer options count for a decoder only: vLLM generates with its
    own output layer, and pools an encoder's hidden states."""
    head = saved_head(config)
    refusals = [f"{head}: {VLLM_HEAD_REFUSALS[head]}"] if VLLM_HEAD_REFUSALS.get(head) else []
    for variant, other, why in vllm_refused_rows(config):
        beside = f" with {other}={getattr(config, other)!r}" if other else ""
        refusals.append(f"{variant.option}={getattr(config, variant.option)!r}{beside}: {why}")
    return refusals


def vllm_refused_rows(config: Any) -> list[tuple[Any, str, str]]:
    """(row, the other option it is refused beside or "", why) for each refusal of the table this config meets."""
    used = [variant for variant in rows_of(config) if config.is_decoder or not variant.output_layer]
    options = {variant.option for variant in used}
    return [(variant, "", variant.vllm_refusal) for variant in used if variant.vllm_refusal] + [
        (variant, other, why) for variant in used for other, why in variant.vllm_conflicts if other in options]


def saved_head(config: Any) -> str:
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


def refuse_engine_options(config: Any, implementation: str | None) -> None:
    """Before an engine's first token: refuse every option of this config its table row says vLLM cannot carry."""
    refusals = vllm_refusals(config) if is_engine_attention(implementation) else []
    if refusals:
        raise ValueError(
            f"attn_implementation={implementation!r} is a serving engine's attention (vLLM's): it cannot serve this "
            f"model as configured. " + " | ".join(refusals) +
            ". Serve it with transformers (generate / pipeline), or train a model without these options "
            "(docs/support-matrix.md lists what vLLM serves)."
        )


def refuse_engine_classifier(config: Any) -> None:
    """Before an engine's first label: vLLM builds VanillaForSequenceClassification for its own pooler and head (for
    a folder saved by the sequence or the token classifier), whose pooling and head run in hf_vanilla's code only."""
    implementation = config._attn_implementation
    head = saved_head(config) or "VanillaForSequenceClassification"
    why = VLLM_HEAD_REFUSALS.get(head, "")  # "" serves
    if why and is_engine_attention(implementation):
        raise ValueError(
            f"attn_implementation={implementation!r} is a serving engine's attention (vLLM's): it cannot serve "
            f"{head}: {why}. Classify with transformers (the model's forward or a pipeline), or serve the bare "
            "encoder as an embedding model (docs/support-matrix.md lists what vLLM serves)."
        )


def is_known_scheme(config: Any) -> bool:
    """Whether the config's positional scheme is a row of the table yet (an unknown one is refused by name later)."""
    return getattr(config, "position_embedding_type", None) in values("position_embedding_type")


def refuse_attention_dropping_bias(config: Any, implementation: str | None) -> None:
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
