"""Exact conversion between hf_vanilla models and the native transformers models they generalise.

``from_hf(model)`` turns a loaded Llama, GPT-2, BERT, BART, Marian or T5 model into the hf_vanilla model that
computes the same function; ``to_hf(model)`` goes back, or says which options have no native counterpart.
``convert_checkpoint(src, out)`` does the same for checkpoint directories (tokenizer and generation config
included), and ``hf-vanilla convert SRC OUT`` is its command line.

Each native architecture is described by data, not by code paths:

* a weight table (:class:`W` rows) naming, for every hf_vanilla tensor, the native tensor holding the same
  numbers and how it is laid out (GPT-2's transposed Conv1D and fused q|k|v, BART's (1, vocab) logits bias);
* a config mapping: the VanillaConfig values the architecture hard-codes (``fixed``; the options of the table of
  variants come from its rows' ``to_hf``), the fields that only change name (``renamed``), and two small
  functions for the few fields computed from several others.

Every architectural difference is a VanillaConfig option; nothing here special-cases a model beyond its tables.
A conversion asks them once: :func:`native_form` gives a config's form as one native class (the native config's
fields and the expanded weight table), or every reason it has none; ``to_hf`` and ``from_hf`` read that answer.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch
import transformers
from huggingface_hub import split_torch_state_dict_into_shards
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn
from transformers import GenerationConfig, PreTrainedConfig, PreTrainedModel
from transformers.modeling_utils import remove_tied_weights_from_state_dict
from transformers.utils import logging

from . import modeling_vanilla, variants
from .checkpoint import PICKLE_SUFFIXES, load_complete, weight_files
from .configuration_vanilla import VanillaConfig, field_default
from .errors import HfVanillaError, refuse
from .files.atomic import FileOperationError, staged_folder
from .files.output_folder import RECORD, OutputFolder
from .modeling_vanilla import VanillaPreTrainedModel
from .rules import field_is_active
from .variants import rows_of

# ----------------------------------------------------------------------------------------------
# The description format


class W(NamedTuple):
    """One row of a weight table: an hf_vanilla tensor and the native tensor(s) holding the same numbers.

    Base-model rows are relative to the base model on each side (``VanillaModel``; ``LlamaModel``,
    ``GPT2Model``, ...); head rows are absolute. ``{i}`` stands for every layer of the stack the hf_vanilla
    name starts with, a trailing ``*`` for both ``weight`` and ``bias``. A row applies where both models have
    the tensor, so optional biases and alternative layouts (T5's gated ``wi_0``/``wi_1`` or plain ``wi``)
    are simply more rows; afterwards every tensor on both sides must have been matched.
    """

    vanilla: str
    native: str | tuple[str, ...]  # several names: one tensor tied under each (shared embeddings)
    conv1d: bool = False  # GPT-2's Conv1D stores (in, out), nn.Linear (out, in): transposed
    part: tuple[int, int] | None = None  # (index, count): a slice of a fused projection (GPT-2's c_attn = q|k|v)
    row: bool = False  # a (1, n) buffer natively (final_logits_bias), (n,) in hf_vanilla
    computed: bool = False  # fixed sinusoids: checked on the way in, recomputed by the native model on the way out


@dataclass(frozen=True)
class Head:
    """A native class and the hf_vanilla class with the same head."""

    vanilla: str
    base: str  # where the native class keeps its base model: "model.", "transformer.", "bert." or ""
    weights: tuple[W, ...] = ()
    fixed: Mapping[str, Any] = field(default_factory=dict)  # VanillaConfig values this head implies (not options)
    init_kwargs: Mapping[str, Any] = field(default_factory=dict)  # for the native constructor
    dropped: tuple[str, ...] = ()  # native tensors hf_vanilla has no place for: dropped with a warning


@dataclass
class Problems:
    """Settings one side can express and the other cannot."""

    hard: list[str] = field(default_factory=list)  # the converted model would compute something else
    soft: list[str] = field(default_factory=list)  # only training would differ (dropout): a warning


@dataclass(frozen=True)
class Architecture:
    model_type: str
    config_class: str
    heads: Mapping[str, Head]  # native class name -> head; the first is the default for a bare checkpoint
    weights: tuple[W, ...]
    fixed: Mapping[str, Any]  # VanillaConfig values the native architecture hard-codes, beyond the table's options
    renamed: Mapping[str, str]  # VanillaConfig field -> native config field holding the same value
    derived: frozenset[str] = frozenset()  # VanillaConfig fields the two functions below compute
    # native config -> derived VanillaConfig fields
    to_vanilla: Callable[[Any], dict[str, Any]] = lambda native: {}
    # VanillaConfig -> derived native config fields; records what the native config cannot say
    to_native: Callable[[Any, Problems], dict[str, Any]] = lambda config, problems: {}
    # native settings with no VanillaConfig counterpart
    unsupported: Callable[[Any, Problems], None] = lambda native, problems: None

    @property
    def family(self) -> str:
        """The hf_vanilla architecture whose row of the table of variants names this target."""
        (family,) = variants.native_values("architecture", self.model_type)
        return family


# ----------------------------------------------------------------------------------------------
# Shared pieces of the tables

_LM_HEADS = ("VanillaForCausalLM", "VanillaForMaskedLM", "VanillaForSeq2SeqLM")
_POOLING_FIELDS = ("pooler", "classifier_pooling")
# Fields that change no computation of a trained model (ids, init, caching) or are settled elsewhere.
_BOOKKEEPING = frozenset({
    "architecture", "initializer_range", "initializer_factor", "use_cache", "is_encoder_decoder", "is_decoder", "add_cross_attention",
    "pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "native_config_extras",
})
# Fields that only matter while training: a mismatch is worth a warning, not a refusal.
_SOFT = frozenset({"hidden_dropout", "attention_dropout", "activation_dropout", "classifier_dropout"})
# Generation settings some native configs still declare; they travel in the generation config.
_GENERATION_FIELDS = ("forced_bos_token_id", "forced_eos_token_id")

# The VanillaConfig field keeping the native config's fields no table maps (a Llama's unk_token_id,
# pretraining_tp, attributes tools set): {"model_type": ..., "fields": {...}}, given back by to_hf.
NATIVE_EXTRAS = "native_config_extras"
_NOT_EXTRAS = frozenset({"architectures", "model_type", "transformers_version", "_name_or_path"})


def _attention(vanilla: str, native: str, q: str, k: str, v: str, o: str) -> tuple[W, ...]:
    return tuple(W(f"{vanilla}.{a}_proj.*", f"{native}.{b}.*") for a, b in zip("qkvo", (q, k, v, o), strict=True))


def _mha(config: VanillaConfig, problems: Problems, arch: str, free_head_dim: bool = False) -> None:
    """Architectures without grouped-query attention (and, most, without a free head width)."""
    if config.num_key_value_heads != config.num_attention_heads:
        problems.hard.append(
            f"num_key_value_heads={config.num_key_value_heads} (grouped-query attention; {arch} has one key/value "
            f"head per query head, {config.num_attention_heads})"
        )
    if not free_head_dim and config.head_dim * config.num_attention_heads != config.hidden_size:
        problems.hard.append(
            f"head_dim={config.head_dim} ({arch} needs hidden_size / num_attention_heads = "
            f"{config.hidden_size // config.num_attention_heads})"
        )


def _differs(native: Any, name: str, other: str, problems: Problems, soft: bool = False) -> None:
    """Two native fields hf_vanilla keeps as one (encoder and decoder widths, dropout rates)."""
    a, b = getattr(native, name), getattr(native, other)
    if a != b:
        (problems.soft if soft else problems.hard).append(
            f"{name}={a!r} differs from {other}={b!r} (hf_vanilla has one value for both)"
        )


# ----------------------------------------------------------------------------------------------
# Llama


def _llama_unsupported(native: Any, problems: Problems) -> None:
    # Llama's default RoPE rotates the whole head; hf_vanilla would honour a partial factor.
    # None without RoPE (a VanillaConfig's, which to_hf checks here too).
    factor = (getattr(native, "rope_parameters", None) or {}).get("partial_rotary_factor", 1.0)
    if factor != 1.0:
        problems.hard.append(f"rope_parameters['partial_rotary_factor']={factor} (Llama ignores it)")


def _llama_to_native(config: VanillaConfig, problems: Problems) -> dict[str, Any]:
    _llama_unsupported(config, problems)
    return {}


LLAMA = Architecture(
    model_type="llama",
    config_class="LlamaConfig",
    heads={
        "LlamaForCausalLM": Head("VanillaForCausalLM", "model.", (W("lm_head.weight", "lm_head.weight"),)),
        "LlamaModel": Head("VanillaModel", ""),
    },
    weights=(
        W("embed_tokens.weight", "embed_tokens.weight"),
        *_attention("layers.{i}.self_attn", "layers.{i}.self_attn", "q_proj", "k_proj", "v_proj", "o_proj"),
        W("layers.{i}.self_attn_norm.weight", "layers.{i}.input_layernorm.weight"),
        W("layers.{i}.mlp.gate_proj.*", "layers.{i}.mlp.gate_proj.*"),
        W("layers.{i}.mlp.up_proj.*", "layers.{i}.mlp.up_proj.*"),
        W("layers.{i}.mlp.down_proj.*", "layers.{i}.mlp.down_proj.*"),
        W("layers.{i}.mlp_norm.weight", "layers.{i}.post_attention_layernorm.weight"),
        W("final_norm.weight", "norm.weight"),
    ),
    fixed=dict(
        final_norm=True, embedding_norm=False, scale_embedding=False, attention_scale=None, type_vocab_size=0,
        hidden_dropout=0.0, activation_dropout=0.0,
    ),
    renamed=dict(
        vocab_size="vocab_size", hidden_size="hidden_size", intermediate_size="intermediate_size",
        num_hidden_layers="num_hidden_layers", num_attention_heads="num_attention_heads",
        num_key_value_heads="num_key_value_heads", head_dim="head_dim", hidden_act="hidden_act",
        max_position_embeddings="max_position_embeddings", rope_parameters="rope_parameters", norm_eps="rms_norm_eps",
        attention_bias="attention_bias", mlp_bias="mlp_bias", attention_dropout="attention_dropout",
        initializer_range="initializer_range", tie_word_embeddings="tie_word_embeddings",
    ),
    to_native=_llama_to_native,
    unsupported=_llama_unsupported,
)

# ----------------------------------------------------------------------------------------------
# GPT-2


def _effective_scale(config: VanillaConfig) -> float:
    return config.attention_scale if config.attention_scale is not None else config.head_dim**-0.5


def _gpt2_to_vanilla(native: Any) -> dict[str, Any]:
    return dict(
        intermediate_size=native.n_inner or 4 * native.n_embd,
        attention_scale=None if native.scale_attn_weights else 1.0,
        num_key_value_heads=native.n_head,
        head_dim=native.n_embd // native.n_head,
    )


def _gpt2_to_native(config: VanillaConfig, problems: Problems) -> dict[str, Any]:
    _mha(config, problems, "gpt2")
    scale = _effective_scale(config)
    if not (math.isclose(scale, config.head_dim**-0.5) or scale == 1.0):
        problems.hard.append(f"attention_scale={scale} (gpt2 scales by 1/sqrt(head_dim) or not at all)")
    return dict(
        # None is GPT-2's spelling of 4 * n_embd; keeping it makes the round trip give back the same config.
        n_inner=None if config.intermediate_size == 4 * config.hidden_size else config.intermediate_size,
        scale_attn_weights=scale != 1.0,
        embd_pdrop=config.hidden_dropout,
    )


def _gpt2_unsupported(native: Any, problems: Problems) -> None:
    if native.scale_attn_by_inverse_layer_idx:
        problems.hard.append("scale_attn_by_inverse_layer_idx=True (a per-layer attention scale)")
    if native.add_cross_attention:
        problems.hard.append("add_cross_attention=True (a decoder attending to an encoder: use an encoder-decoder)")
    _differs(native, "embd_pdrop", "resid_pdrop", problems, soft=True)


GPT2 = Architecture(
    model_type="gpt2",
    config_class="GPT2Config",
    heads={
        "GPT2LMHeadModel": Head("VanillaForCausalLM", "transformer.", (W("lm_head.weight", "lm_head.weight"),)),
        "GPT2Model": Head("VanillaModel", ""),
    },
    weights=(
        W("embed_tokens.weight", "wte.weight"),
        W("positions.embeddings.weight", "wpe.weight"),
        W("layers.{i}.self_attn_norm.*", "h.{i}.ln_1.*"),
        W("layers.{i}.self_attn.q_proj.*", "h.{i}.attn.c_attn.*", conv1d=True, part=(0, 3)),
        W("layers.{i}.self_attn.k_proj.*", "h.{i}.attn.c_attn.*", conv1d=True, part=(1, 3)),
        W("layers.{i}.self_attn.v_proj.*", "h.{i}.attn.c_attn.*", conv1d=True, part=(2, 3)),
        W("layers.{i}.self_attn.o_proj.*", "h.{i}.attn.c_proj.*", conv1d=True),
        W("layers.{i}.mlp_norm.*", "h.{i}.ln_2.*"),
        W("layers.{i}.mlp.up_proj.*", "h.{i}.mlp.c_fc.*", conv1d=True),
        W("layers.{i}.mlp.down_proj.*", "h.{i}.mlp.c_proj.*", conv1d=True),
        W("final_norm.*", "ln_f.*"),
    ),
    fixed=dict(
        position_offset=0, norm_bias=True, final_norm=True, embedding_norm=False, scale_embedding=False,
        attention_bias=True, mlp_bias=True, type_vocab_size=0, activation_dropout=0.0,
    ),
    renamed=dict(
        vocab_size="vocab_size", hidden_size="n_embd", num_hidden_layers="n_layer", num_attention_heads="n_head",
        max_position_embeddings="n_positions", hidden_act="activation_function", norm_eps="layer_norm_epsilon",
        hidden_dropout="resid_pdrop", attention_dropout="attn_pdrop", initializer_range="initializer_range",
        tie_word_embeddings="tie_word_embeddings",
    ),
    derived=frozenset({"intermediate_size", "attention_scale", "num_key_value_heads", "head_dim"}),
    to_vanilla=_gpt2_to_vanilla,
    to_native=_gpt2_to_native,
    unsupported=_gpt2_unsupported,
)

# ----------------------------------------------------------------------------------------------
# BERT


def _bert_to_native(config: VanillaConfig, problems: Problems) -> dict[str, Any]:
    _mha(config, problems, "bert")
    if config.type_vocab_size < 1:
        problems.hard.append("type_vocab_size=0 (bert always adds token-type embeddings)")
    return {}


def _bert_unsupported(native: Any, problems: Problems) -> None:
    if native.is_decoder or native.add_cross_attention:
        problems.hard.append("is_decoder/add_cross_attention=True (BERT as a causal decoder)")


_BERT_LAYER = "encoder.layer.{i}"
BERT = Architecture(
    model_type="bert",
    config_class="BertConfig",
    heads={
        "BertForMaskedLM": Head(
            "VanillaForMaskedLM",
            "bert.",
            (
                W("lm_head_transform.0.*", "cls.predictions.transform.dense.*"),
                W("lm_head_transform.2.*", "cls.predictions.transform.LayerNorm.*"),
                W("lm_head.weight", "cls.predictions.decoder.weight"),
                W("lm_head.bias", ("cls.predictions.decoder.bias", "cls.predictions.bias")),
            ),
        ),
        "BertForSequenceClassification": Head(
            "VanillaForSequenceClassification",
            "bert.",
            (W("pooler.dense.*", "bert.pooler.dense.*"), W("score.*", "classifier.*")),
            fixed=dict(pooler=True, classifier_pooling="first"),
        ),
        # VanillaModel returns hidden states only: BERT's pooled output belongs to the classification head.
        "BertModel": Head("VanillaModel", "", init_kwargs=dict(add_pooling_layer=False), dropped=("pooler.dense.*",)),
    },
    weights=(
        W("embed_tokens.weight", "embeddings.word_embeddings.weight"),
        W("encoder.positions.embeddings.weight", "embeddings.position_embeddings.weight"),
        W("encoder.token_type_embeddings.weight", "embeddings.token_type_embeddings.weight"),
        W("encoder.embedding_norm.*", "embeddings.LayerNorm.*"),
        *_attention("encoder.layers.{i}.self_attn", _BERT_LAYER + ".attention", "self.query", "self.key",
                    "self.value", "output.dense"),
        W("encoder.layers.{i}.self_attn_norm.*", _BERT_LAYER + ".attention.output.LayerNorm.*"),
        W("encoder.layers.{i}.mlp.up_proj.*", _BERT_LAYER + ".intermediate.dense.*"),
        W("encoder.layers.{i}.mlp.down_proj.*", _BERT_LAYER + ".output.dense.*"),
        W("encoder.layers.{i}.mlp_norm.*", _BERT_LAYER + ".output.LayerNorm.*"),
    ),
    fixed=dict(
        position_offset=0, norm_bias=True, embedding_norm=True, final_norm=False, scale_embedding=False,
        attention_scale=None, attention_bias=True, mlp_bias=True, activation_dropout=0.0,
    ),
    renamed=dict(
        vocab_size="vocab_size", hidden_size="hidden_size", intermediate_size="intermediate_size",
        num_hidden_layers="num_hidden_layers", num_attention_heads="num_attention_heads", hidden_act="hidden_act",
        max_position_embeddings="max_position_embeddings", type_vocab_size="type_vocab_size",
        norm_eps="layer_norm_eps", hidden_dropout="hidden_dropout_prob",
        attention_dropout="attention_probs_dropout_prob", classifier_dropout="classifier_dropout",
        initializer_range="initializer_range", tie_word_embeddings="tie_word_embeddings",
    ),
    derived=frozenset({"num_key_value_heads", "head_dim"}),
    to_vanilla=lambda native: dict(num_key_value_heads=native.num_attention_heads),
    to_native=_bert_to_native,
    unsupported=_bert_unsupported,
)

# ----------------------------------------------------------------------------------------------
# BART and Marian: the same post-norm encoder-decoder; they differ in positions and the embedding norm


def _seq2seq_layers() -> tuple[W, ...]:
    rows: list[W] = []
    for stack in ("encoder", "decoder"):
        layer, native = f"{stack}.layers.{{i}}", f"{stack}.layers.{{i}}"
        rows += _attention(f"{layer}.self_attn", f"{native}.self_attn", "q_proj", "k_proj", "v_proj", "out_proj")
        rows += [
            W(f"{layer}.self_attn_norm.*", f"{native}.self_attn_layer_norm.*"),
            W(f"{layer}.mlp.up_proj.*", f"{native}.fc1.*"),
            W(f"{layer}.mlp.down_proj.*", f"{native}.fc2.*"),
            W(f"{layer}.mlp_norm.*", f"{native}.final_layer_norm.*"),
        ]
    rows += _attention("decoder.layers.{i}.cross_attn", "decoder.layers.{i}.encoder_attn", "q_proj", "k_proj",
                       "v_proj", "out_proj")
    rows.append(W("decoder.layers.{i}.cross_attn_norm.*", "decoder.layers.{i}.encoder_attn_layer_norm.*"))
    return tuple(rows)


_SHARED_EMBEDDING = W("embed_tokens.weight", ("shared.weight", "encoder.embed_tokens.weight",
                                              "decoder.embed_tokens.weight"))
_SEQ2SEQ_LM_HEAD = (W("lm_head.weight", "lm_head.weight"), W("lm_head.bias", "final_logits_bias", row=True))
_SEQ2SEQ_FIXED = dict(
    norm_bias=True, norm_eps=1e-5, final_norm=False, attention_scale=None, attention_bias=True, mlp_bias=True,
    type_vocab_size=0,
)
_SEQ2SEQ_RENAMED = dict(
    vocab_size="vocab_size", hidden_size="d_model", intermediate_size="encoder_ffn_dim",
    num_hidden_layers="encoder_layers", num_decoder_layers="decoder_layers",
    num_attention_heads="encoder_attention_heads", hidden_act="activation_function",
    max_position_embeddings="max_position_embeddings", scale_embedding="scale_embedding", hidden_dropout="dropout",
    attention_dropout="attention_dropout", activation_dropout="activation_dropout", initializer_range="init_std",
    decoder_start_token_id="decoder_start_token_id", tie_word_embeddings="tie_word_embeddings",
)


def _seq2seq_to_native(config: VanillaConfig, problems: Problems, arch: str) -> dict[str, Any]:
    _mha(config, problems, arch)
    return dict(decoder_ffn_dim=config.intermediate_size, decoder_attention_heads=config.num_attention_heads)


def _seq2seq_unsupported(native: Any, problems: Problems) -> None:
    _differs(native, "encoder_ffn_dim", "decoder_ffn_dim", problems)
    _differs(native, "encoder_attention_heads", "decoder_attention_heads", problems)
    _differs(native, "encoder_layerdrop", "decoder_layerdrop", problems, soft=True)
    if native.encoder_layerdrop:
        problems.soft.append(f"encoder_layerdrop={native.encoder_layerdrop} (hf_vanilla has no LayerDrop)")


BART = Architecture(
    model_type="bart",
    config_class="BartConfig",
    heads={
        "BartForConditionalGeneration": Head("VanillaForSeq2SeqLM", "model.", _SEQ2SEQ_LM_HEAD),
        "BartModel": Head("VanillaModel", ""),
    },
    weights=(
        _SHARED_EMBEDDING,
        W("encoder.positions.embeddings.weight", "encoder.embed_positions.weight"),
        W("decoder.positions.embeddings.weight", "decoder.embed_positions.weight"),
        W("encoder.embedding_norm.*", "encoder.layernorm_embedding.*"),
        W("decoder.embedding_norm.*", "decoder.layernorm_embedding.*"),
        *_seq2seq_layers(),
    ),
    # BART's learned table reserves its first two rows (a fairseq legacy): position 0 sits at row 2.
    fixed=dict(_SEQ2SEQ_FIXED, position_offset=2, embedding_norm=True),
    renamed=dict(_SEQ2SEQ_RENAMED, classifier_dropout="classifier_dropout"),
    derived=frozenset({"num_key_value_heads", "head_dim"}),
    to_vanilla=lambda native: dict(num_key_value_heads=native.encoder_attention_heads),
    to_native=lambda config, problems: _seq2seq_to_native(config, problems, "bart"),
    unsupported=_seq2seq_unsupported,
)


def _marian_to_native(config: VanillaConfig, problems: Problems) -> dict[str, Any]:
    return dict(_seq2seq_to_native(config, problems, "marian"), decoder_vocab_size=config.vocab_size,
                share_encoder_decoder_embeddings=True)


def _marian_unsupported(native: Any, problems: Problems) -> None:
    _seq2seq_unsupported(native, problems)
    if not native.share_encoder_decoder_embeddings or native.decoder_vocab_size not in (None, native.vocab_size):
        problems.hard.append(
            "share_encoder_decoder_embeddings=False / decoder_vocab_size != vocab_size (separate source and target "
            "vocabularies; hf_vanilla shares one embedding)"
        )


MARIAN = Architecture(
    model_type="marian",
    config_class="MarianConfig",
    heads={
        "MarianMTModel": Head("VanillaForSeq2SeqLM", "model.", _SEQ2SEQ_LM_HEAD),
        "MarianModel": Head("VanillaModel", ""),
    },
    weights=(
        _SHARED_EMBEDDING,
        # Marian stores its fixed sinusoids as a frozen weight; hf_vanilla computes them.
        W("encoder.positions.table", "encoder.embed_positions.weight", computed=True),
        W("decoder.positions.table", "decoder.embed_positions.weight", computed=True),
        *_seq2seq_layers(),
    ),
    fixed=dict(_SEQ2SEQ_FIXED, sinusoidal_layout="concatenated", position_offset=0, embedding_norm=False),
    renamed=_SEQ2SEQ_RENAMED,
    derived=frozenset({"num_key_value_heads", "head_dim"}),
    to_vanilla=lambda native: dict(num_key_value_heads=native.encoder_attention_heads),
    to_native=_marian_to_native,
    unsupported=_marian_unsupported,
)

# ----------------------------------------------------------------------------------------------
# T5 (v1.0 and v1.1)


def _t5_to_vanilla(native: Any) -> dict[str, Any]:
    return dict(
        gated_ffn=native.is_gated_act,
        hidden_act=native.dense_act_fn,
        # transformers 5 always ties T5's embeddings in its config and keeps the v1.0/v1.1 difference, the
        # d_model**-0.5 rescaling before the output projection, in `scale_decoder_outputs`.
        lm_head_scale=native.d_model**-0.5 if native.scale_decoder_outputs else 1.0,
        # T5 applies its one dropout rate everywhere, attention weights and the FFN inside included.
        attention_dropout=native.dropout_rate,
        activation_dropout=native.dropout_rate,
        num_key_value_heads=native.num_heads,
        tie_word_embeddings=native.tie_word_embeddings,
    )


def _t5_to_native(config: VanillaConfig, problems: Problems) -> dict[str, Any]:
    _mha(config, problems, "t5", free_head_dim=True)
    act = config.hidden_act
    if config.gated_ffn:
        # T5Config reads "gated-gelu" as gelu_new (tanh approximation), for compatibility with v1.1 checkpoints.
        if act == "gelu":
            problems.hard.append("gated_ffn=True with hidden_act='gelu' (t5 reads 'gated-gelu' as gelu_new)")
        projection = "gated-gelu" if act == "gelu_new" else f"gated-{act}"
    else:
        projection = act
    scale = config.lm_head_scale
    rescaled = math.isclose(scale, config.hidden_size**-0.5)
    if not (rescaled or scale == 1.0):
        problems.hard.append(f"lm_head_scale={scale} (t5 uses d_model**-0.5 = {config.hidden_size**-0.5} or 1.0)")
    for name in ("attention_dropout", "activation_dropout"):
        if getattr(config, name) != config.hidden_dropout:
            problems.soft.append(f"{name}={getattr(config, name)} (t5 uses dropout_rate={config.hidden_dropout})")
    # T5Config turns `tie_word_embeddings` into `scale_decoder_outputs`; whether lm_head really shares the
    # embedding follows the weights (equal: tied), as when transformers loads a v1.1 checkpoint.
    return dict(feed_forward_proj=projection, tie_word_embeddings=rescaled)


def _t5_unsupported(native: Any, problems: Problems) -> None:
    if native.is_decoder:
        problems.hard.append("is_decoder=True (a T5 stack on its own)")


def _t5_layers() -> tuple[W, ...]:
    rows: list[W] = []
    for stack, mlp in (("encoder", 1), ("decoder", 2)):
        layer, block = f"{stack}.layers.{{i}}", f"{stack}.block.{{i}}.layer"
        rows += _attention(f"{layer}.self_attn", f"{block}.0.SelfAttention", "q", "k", "v", "o")
        rows += [
            W(f"{layer}.self_attn_norm.weight", f"{block}.0.layer_norm.weight"),
            W(f"{layer}.mlp.gate_proj.weight", f"{block}.{mlp}.DenseReluDense.wi_0.weight"),  # gated (v1.1)
            W(f"{layer}.mlp.up_proj.weight", f"{block}.{mlp}.DenseReluDense.wi_1.weight"),
            W(f"{layer}.mlp.up_proj.weight", f"{block}.{mlp}.DenseReluDense.wi.weight"),  # plain (v1.0)
            W(f"{layer}.mlp.down_proj.weight", f"{block}.{mlp}.DenseReluDense.wo.weight"),
            W(f"{layer}.mlp_norm.weight", f"{block}.{mlp}.layer_norm.weight"),
        ]
        # T5 keeps a stack's relative bias in its first layer and shares it with the others.
        rows.append(W(f"{stack}.positions.relative_attention_bias.weight",
                      f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"))
        rows.append(W(f"{stack}.final_norm.weight", f"{stack}.final_layer_norm.weight"))
    rows += _attention("decoder.layers.{i}.cross_attn", "decoder.block.{i}.layer.1.EncDecAttention", "q", "k", "v", "o")
    rows.append(W("decoder.layers.{i}.cross_attn_norm.weight", "decoder.block.{i}.layer.1.layer_norm.weight"))
    return tuple(rows)


T5 = Architecture(
    model_type="t5",
    config_class="T5Config",
    heads={
        "T5ForConditionalGeneration": Head("VanillaForSeq2SeqLM", "", (W("lm_head.weight", "lm_head.weight"),)),
        "T5Model": Head("VanillaModel", ""),
    },
    weights=(_SHARED_EMBEDDING, *_t5_layers()),
    fixed=dict(
        final_norm=True, embedding_norm=False, scale_embedding=False, attention_scale=1.0, attention_bias=False,
        mlp_bias=False, type_vocab_size=0,
    ),
    renamed=dict(
        vocab_size="vocab_size", hidden_size="d_model", head_dim="d_kv", intermediate_size="d_ff",
        num_hidden_layers="num_layers", num_decoder_layers="num_decoder_layers", num_attention_heads="num_heads",
        relative_attention_num_buckets="relative_attention_num_buckets",
        relative_attention_max_distance="relative_attention_max_distance", norm_eps="layer_norm_epsilon",
        hidden_dropout="dropout_rate", classifier_dropout="classifier_dropout",
        decoder_start_token_id="decoder_start_token_id", initializer_factor="initializer_factor",
    ),
    derived=frozenset({"gated_ffn", "hidden_act", "lm_head_scale", "attention_dropout", "activation_dropout",
                       "num_key_value_heads", "tie_word_embeddings"}),
    to_vanilla=_t5_to_vanilla,
    to_native=_t5_to_native,
    unsupported=_t5_unsupported,
)

#: The native architectures, by ``config.model_type``.
ARCHITECTURES: dict[str, Architecture] = {arch.model_type: arch for arch in (LLAMA, GPT2, BERT, BART, MARIAN, T5)}


def supported_classes() -> dict[str, str]:
    """Native class name -> the hf_vanilla class it converts to."""
    return {name: head.vanilla for arch in ARCHITECTURES.values() for name, head in arch.heads.items()}


# ----------------------------------------------------------------------------------------------
# Config translation


def _vanilla_config_fields() -> tuple[dataclasses.Field, ...]:
    inherited = {f.name for f in dataclasses.fields(PreTrainedConfig)}
    return tuple(f for f in dataclasses.fields(VanillaConfig) if f.name not in inherited)


def _output_layer_options() -> frozenset[str]:
    """The options of the table that shape the output layer: only the LM heads have one."""
    return frozenset(r.option for r in variants.VARIANTS if r.output_layer)


def _same(name: str, value: Any, expected: Any, config: VanillaConfig) -> bool:
    if name == "attention_scale":  # None means 1/sqrt(head_dim): compare what attention actually uses
        value = _effective_scale(config)
        expected = config.head_dim**-0.5 if expected is None else expected
    if isinstance(value, float) and isinstance(expected, float):
        return math.isclose(value, expected, rel_tol=1e-9)
    return value == expected


def _table_form(arch: Architecture, head: Head) -> dict[str, Any]:
    """The values of the table's options this target hard-codes: the one value whose row names it in ``to_hf``, or
    the default where it carries none of an option's non-default rows. An option it carries several values of (or
    a non-default one) its config says, through ``derived``; output-layer options belong to the LM heads alone."""
    form = {}
    skipped = _output_layer_options() if head.vanilla not in _LM_HEADS else frozenset()
    for option in variants.options():
        option_rows = variants.rows(option)
        if option in skipped or any(r.default_of for r in option_rows):  # a default_of: the tables check it
            continue
        carried = variants.native_values(option, arch.model_type)
        if len(carried) == 1 and carried[0] != variants.NON_DEFAULT:
            form[option] = carried[0]
        elif not carried and variants.NON_DEFAULT in variants.values(option):
            form[option] = field_default(option)
    return form


def hard_coded(arch: Architecture, head: Head) -> dict[str, Any]:
    """The VanillaConfig values this native class hard-codes: the table's options, the architecture's and head's."""
    return {**_table_form(arch, head), **arch.fixed, **head.fixed}


def covered_fields(arch: Architecture, head: Head) -> frozenset[str]:
    """The VanillaConfig fields the architecture's tables account for."""
    return _covered(arch, hard_coded(arch, head))


def _covered(arch: Architecture, expected: Mapping[str, Any]) -> frozenset[str]:
    """The fields a native class hard-codes (``expected``), renames or computes."""
    return frozenset(expected) | frozenset(arch.renamed) | arch.derived


def _to_vanilla_config(model: PreTrainedModel, arch: Architecture, head: Head) -> VanillaConfig:
    native = model.config
    fields: dict[str, Any] = hard_coded(arch, head)
    fields.update({ours: copy.deepcopy(getattr(native, theirs)) for ours, theirs in arch.renamed.items()
                   if hasattr(native, theirs)})
    fields.update(arch.to_vanilla(native))
    fields.update(
        architecture=arch.family,
        architectures=[head.vanilla],
        pad_token_id=native.pad_token_id,
        bos_token_id=getattr(native, "bos_token_id", None),
        eos_token_id=getattr(native, "eos_token_id", None),
        id2label=copy.deepcopy(native.id2label),
        label2id=copy.deepcopy(native.label2id),
        problem_type=native.problem_type,
        dtype=native.dtype,
    )
    if head.vanilla in _LM_HEADS:
        fields["tie_word_embeddings"] = _is_tied(model)
    if arch.family == "encoder-decoder" and fields.get("decoder_start_token_id") is None:
        # T5 keeps it in the generation config only, and by convention starts decoding with the pad token.
        generation = getattr(model, "generation_config", None)  # models that cannot generate have none
        start = generation.decoder_start_token_id if generation is not None else None
        fields["decoder_start_token_id"] = start if start is not None else native.pad_token_id
    if fields.get("head_dim") is None:
        fields.pop("head_dim", None)
    config = VanillaConfig(**fields)
    config._attn_implementation = native._attn_implementation
    return config


def _native_fields(config: VanillaConfig, arch: Architecture, problems: Problems) -> dict[str, Any]:
    # None in a VanillaConfig field means "the default" (classifier_dropout, decoder_start_token_id): leave the
    # native config its own default rather than a None its strict validation may refuse.
    # rope_parameters exists only with RoPE, so a missing field reads as None too.
    fields = {theirs: copy.deepcopy(getattr(config, ours)) for ours, theirs in arch.renamed.items()
              if getattr(config, ours, None) is not None}
    fields.update(arch.to_native(config, problems))
    fields.update(
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        id2label=copy.deepcopy(config.id2label),
        label2id=copy.deepcopy(config.label2id),
        problem_type=config.problem_type,
        dtype=config.dtype,
    )
    return fields


def _native_config(
    config: VanillaConfig, arch: Architecture, native_class: str, fields: dict[str, Any], generation: Any
) -> Any:
    config_class = getattr(transformers, arch.config_class)
    declared = {f.name for f in dataclasses.fields(config_class)}
    extras = getattr(config, NATIVE_EXTRAS, None) or {}
    if extras.get("model_type") == arch.model_type:  # what the tables map wins over what was set aside
        fields = {**copy.deepcopy(extras["fields"]), **fields}
    # a token id the native config does not declare (T5 has no bos_token_id) is not added as None
    fields = {name: value for name, value in fields.items() if value is not None or name in declared}
    for name in _GENERATION_FIELDS:  # BART and Marian still declare these; keep them in step
        if name in declared and generation is not None:
            fields[name] = getattr(generation, name, None)
    native = config_class(**fields, architectures=[native_class])
    native._attn_implementation = config._attn_implementation
    return native


def _native_extras(native: Any, config: VanillaConfig, form: NativeForm) -> dict[str, Any]:
    """The fields of the native config ``native`` that the tables neither map nor reproduce by default (``config``
    is what from_hf made of it, ``form`` that config's form as the native class)."""
    fields = form.fields
    rebuilt = _native_config(config, form.arch, form.native_class, dict(fields), None).to_dict()
    missing = object()
    return {
        name: copy.deepcopy(value)
        for name, value in native.to_dict().items()
        if name not in _NOT_EXTRAS and name not in fields and rebuilt.get(name, missing) != value
    }


# ----------------------------------------------------------------------------------------------
# Weight translation


def _is_tied(model: PreTrainedModel) -> bool:
    """Whether the output projection really is the input embedding (T5 v1.1 checkpoints load untied)."""
    output, embedding = model.get_output_embeddings(), model.get_input_embeddings()
    if output is None or embedding is None:
        return False
    a, b = output.weight, embedding.weight
    # On the meta device every data_ptr() is 0: only the same Parameter is a tie there.
    return a is b or (not a.is_meta and a.shape == b.shape and a.device == b.device and a.data_ptr() == b.data_ptr())


class _Pair(NamedTuple):
    vanilla: str
    native: tuple[str, ...]
    row: W


def _pairs(arch: Architecture, head: Head, config: VanillaConfig) -> Iterator[_Pair]:
    """The weight table with layers and ``*`` expanded and both base prefixes applied."""
    # by the first part of the row's name: a stack of an encoder(-decoder), or the decoder family's own ``layers``
    depth = {"encoder": config.num_hidden_layers, "decoder": config.num_decoder_layers,
             "layers": config.num_hidden_layers}
    vanilla_base = "" if head.vanilla == "VanillaModel" else "model."
    tables = [(row, vanilla_base, head.base) for row in arch.weights] + [(row, "", "") for row in head.weights]
    for row, ours_prefix, theirs_prefix in tables:
        natives = (row.native,) if isinstance(row.native, str) else row.native
        layers = range(depth[row.vanilla.split(".")[0]]) if "{i}" in row.vanilla else (None,)
        suffixes = ("weight", "bias") if row.vanilla.endswith("*") else ("",)
        for i in layers:
            for suffix in suffixes:

                def name(template: str, i: int | None = i, suffix: str = suffix) -> str:
                    text = template.format(i=i) if i is not None else template
                    return text[:-1] + suffix if suffix else text

                yield _Pair(ours_prefix + name(row.vanilla), tuple(theirs_prefix + name(n) for n in natives), row)


def _star(name: str) -> tuple[str, ...]:
    return (name[:-1] + "weight", name[:-1] + "bias") if name.endswith("*") else (name,)


def _into_vanilla(tensor: torch.Tensor, row: W) -> torch.Tensor:
    if row.part is not None:
        index, count = row.part
        tensor = tensor.chunk(count, dim=-1)[index]
    if row.conv1d and tensor.ndim == 2:
        tensor = tensor.T
    if row.row:
        tensor = tensor.squeeze(0)
    return tensor.detach()


def _into_native(tensor: torch.Tensor, row: W) -> torch.Tensor:
    if row.row:
        tensor = tensor.unsqueeze(0)
    if row.conv1d and tensor.ndim == 2:
        tensor = tensor.T
    return tensor.detach()


def _skeleton(model_class: type, config: Any, **kwargs: Any) -> Any:
    """The model on the meta device: its tensor names and shapes, without allocating or initialising weights."""
    with torch.device("meta"):
        return model_class(config, **kwargs)


def _untie(model: PreTrainedModel, target: str) -> None:
    """Give ``target`` a weight of its own on the meta device: tied by the config, apart in the weights (a T5
    v1.1 head), which is how loading keeps them."""
    module_name, _, attr = target.rpartition(".")
    module = model.get_submodule(module_name)
    tied = getattr(module, attr)
    setattr(module, attr, nn.Parameter(torch.empty_like(tied, device="meta"), requires_grad=tied.requires_grad))
    model.all_tied_weights_keys.pop(target, None)


def _fill(model: Any, state: dict[str, torch.Tensor]) -> None:
    """Give a meta skeleton the converted tensors, and let the model compute the rest itself.

    What the state lacks (non-persistent buffers: RoPE frequencies, sinusoid tables; Marian's fixed positions)
    is allocated and filled by the model's own initialisation, as ``from_pretrained`` does.
    """
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    if unexpected:
        raise RuntimeError(f"hf_vanilla.convert produced tensors {type(model).__name__} does not have: {unexpected}")
    loaded = model.state_dict(keep_vars=True)
    for name in state:
        loaded[name]._is_hf_initialized = True  # the model's init leaves these alone
    first = next(iter(state.values()))
    floats = [t.dtype for t in state.values() if t.is_floating_point()]
    dtype = max(set(floats), key=floats.count) if floats else first.dtype
    for module in model.modules():
        for name, buffer in list(module._buffers.items()):
            if buffer is not None and buffer.is_meta:  # buffers keep their own dtype (float32 frequencies)
                module._buffers[name] = torch.empty_like(buffer, device=first.device)
        for name, param in list(module._parameters.items()):
            if param is not None and param.is_meta:
                fresh = torch.empty_like(param, device=first.device, dtype=dtype)
                module._parameters[name] = nn.Parameter(fresh, requires_grad=param.requires_grad)
    model.initialize_weights()
    for target, source in list(model.all_tied_weights_keys.items()):
        # Tied by the config but different in the state (a T5 v1.1 lm_head): keep them apart, as loading does.
        if target in state and source in state and not torch.equal(state[target], state[source]):
            model.all_tied_weights_keys.pop(target)
    model.tie_weights(missing_keys=set(missing), recompute_mapping=False)


# ----------------------------------------------------------------------------------------------
# A config's native form: the table asked once per (config, native class)


@dataclass(frozen=True)
class NativeForm:
    """What one VanillaConfig is as one native class, decided before any weight is read: the native config's fields
    and the key map; or, in ``refusals``, every setting the native class cannot express (then it has no native
    form, and ``to_hf`` refuses it)."""

    arch: Architecture
    native_class: str
    head: Head
    fields: dict[str, Any]  # the native config's fields the tables map (token ids and labels included)
    pairs: tuple[_Pair, ...]  # the key map: each hf_vanilla tensor and its native name(s), layers expanded
    refusals: tuple[str, ...] = ()  # settings the native class cannot express: it would compute something else
    warnings: tuple[str, ...] = ()  # settings it expresses otherwise only while training (dropout)

    @property
    def exact(self) -> bool:
        return not self.refusals


#: Each native class hf_vanilla converts, by name: its architecture and head.
_NATIVE_CLASSES: dict[str, tuple[Architecture, Head]] = {
    name: (arch, head) for arch in ARCHITECTURES.values() for name, head in arch.heads.items()
}


def _idle_fields(config: VanillaConfig, head_class: str) -> frozenset[str]:
    """The VanillaConfig fields that change nothing a ``head_class`` of ``config`` computes: those its options leave
    idle (``rope_parameters`` without RoPE), the output layer's beyond the LM heads, the pooling's beyond the
    sequence classifier, and ``max_position_embeddings`` where neither a trained table nor RoPE's scaling reads it."""
    idle = {name for name in variants.fields_with_conditions() if not field_is_active(name, config)}
    if head_class not in _LM_HEADS:
        idle |= _output_layer_options()
    if head_class != "VanillaForSequenceClassification":
        idle |= set(_POOLING_FIELDS)
    scheme = variants.scheme_row(config)
    if not (scheme.adds_to_embeddings and scheme.parameters) and "rope_parameters" in idle:
        idle.add("max_position_embeddings")
    return frozenset(idle)


def _check_settings(config: VanillaConfig, arch: Architecture, expected: Mapping[str, Any], idle: frozenset[str],
                    problems: Problems) -> None:
    """Each field in effect against the value the native class hard-codes (``expected``); a field no table accounts
    for set away from its default is refused rather than silently dropped."""
    covered = _covered(arch, expected)
    for spec in _vanilla_config_fields():
        name = spec.name
        if name in _BOOKKEEPING or name in idle:
            continue
        value = getattr(config, name)
        if name in expected and not _same(name, value, expected[name], config):
            (problems.soft if name in _SOFT else problems.hard).append(
                f"{name}={value!r} ({arch.model_type} has {expected[name]!r})"
            )
        elif name not in covered and name not in _SOFT and value != spec.default:
            # An option newer than this converter's tables: refuse rather than silently drop it.
            problems.hard.append(f"{name}={value!r} (not mapped for {arch.model_type})")


def _check_rows(config: VanillaConfig, arch: Architecture, idle: frozenset[str], problems: Problems) -> None:
    """Every row of the table this config uses must name the target in ``to_hf``: a value the native model has no
    module for (an activation or norm added as a row) is refused here, in our words, not by a KeyError there."""
    for row in rows_of(config):
        named = any(problem.startswith(f"{row.option}=") for problem in problems.hard)
        if arch.model_type in row.to_hf or named or row.option in idle:
            continue
        carriers = ", ".join(row.to_hf) or "no target"
        problems.hard.append(f"{row.option}={getattr(config, row.option)!r} ({arch.model_type} has no such "
                             f"{row.option}; the table of variants converts it to {carriers})")


def native_form(config: VanillaConfig, native_class: str) -> NativeForm:
    """``config``'s form as ``native_class`` (``"LlamaForCausalLM"``, ...), holding the weights of its hf_vanilla
    counterpart (``supported_classes()``): the native config's fields and the key map, or every reason it has none."""
    if native_class not in _NATIVE_CLASSES:
        raise ValueError(f"hf_vanilla converts no {native_class}; it converts {', '.join(_NATIVE_CLASSES)}.")
    arch, head = _NATIVE_CLASSES[native_class]
    expected, idle, problems = hard_coded(arch, head), _idle_fields(config, head.vanilla), Problems()
    _check_settings(config, arch, expected, idle, problems)
    _check_rows(config, arch, idle, problems)
    fields = _native_fields(config, arch, problems)
    return NativeForm(arch, native_class, head, fields, tuple(_pairs(arch, head, config)), tuple(problems.hard),
                      tuple(problems.soft))


def native_forms(config: VanillaConfig, head_class: str, model_type: str | None = None) -> list[NativeForm]:
    """``config``'s form as each native class holding a ``head_class`` of its family (only ``model_type``'s, if
    given), in the order ``to_hf`` tries them; empty where no native architecture has such a class."""
    return [native_form(config, name) for name, (arch, head) in _NATIVE_CLASSES.items()
            if arch.family == config.architecture and (model_type is None or arch.model_type == model_type)
            and head.vanilla == head_class]


def _exact_form(config: VanillaConfig, head_class: str, model_type: str | None) -> NativeForm:
    """The first native form ``to_hf`` can write; else every candidate's reasons, fewest first."""
    forms = native_forms(config, head_class, model_type)
    if not forms:
        raise ValueError(
            f"No native architecture{f' {model_type!r}' if model_type else ''} has a counterpart for {head_class} "
            f"with architecture={config.architecture!r}; supported: {', '.join(sorted(set(supported_classes().values())))} "
            f"as {', '.join(supported_classes())}."
        )
    exact = [form for form in forms if form.exact]
    if not exact:
        lines = "\n".join(f"  as {form.arch.model_type} ({form.native_class}): {'; '.join(form.refusals)}"
                          for form in sorted(forms, key=lambda form: len(form.refusals)))
        raise ValueError(
            f"{head_class}(architecture={config.architecture!r}) has options with no native transformers "
            f"counterpart:\n{lines}\nKeep it as an hf_vanilla model (save_pretrained / push_to_hub), or change "
            "those options."
        )
    return exact[0]


# ----------------------------------------------------------------------------------------------
# The two directions


def _native_spec(model: PreTrainedModel) -> tuple[Architecture, Head]:
    model_type = getattr(model.config, "model_type", None)
    arch = ARCHITECTURES.get(model_type)
    head = arch.heads.get(type(model).__name__) if arch else None
    if head is None:
        supported = ", ".join(supported_classes())
        raise ValueError(f"No conversion for {type(model).__name__} (model_type={model_type!r}); supported: {supported}.")
    return arch, head


def _check_computed_positions(vanilla, computed: list, native_state: dict) -> None:
    """Positions hf_vanilla computes (sinusoid tables) must be the ones the checkpoint holds."""
    for pair in computed:
        ours, theirs = vanilla.get_buffer(pair.vanilla), native_state[pair.native[0]]
        tolerance = 2 * torch.finfo(theirs.dtype).eps
        if ours.shape[0] < theirs.shape[0] or not torch.allclose(
            ours[: theirs.shape[0]].to(theirs.device, torch.float32), theirs.float(), atol=tolerance, rtol=0
        ):
            raise ValueError(f"{pair.native[0]} is not the sinusoid table hf_vanilla computes; it was changed.")


class _Recipe(NamedTuple):
    """How one target tensor is made from source tensors: each source name with its table row, in order (several:
    the parts of a fused projection, joined on the last axis); ``aliases`` must hold the same numbers as the first
    (a native checkpoint's shared embeddings, which hf_vanilla keeps once)."""

    sources: tuple[tuple[str, W], ...]
    aliases: tuple[str, ...] = ()


class _Plan(NamedTuple):
    """A conversion decided before any weight is read: the target model on the meta device (config, generation
    config, tensor names and shapes) and, for each of its tensors, the recipe that makes it."""

    target: PreTrainedModel
    recipes: dict[str, _Recipe]
    into_vanilla: bool
    computed: tuple[_Pair, ...] = ()  # fixed sinusoid tables the source holds and the target computes itself


def _make(plan: _Plan, name: str, read: Callable[[str], torch.Tensor], fresh: bool = False) -> torch.Tensor:
    """The target tensor ``name``, contiguous and owning its storage, from the source tensors ``read`` gives.

    ``fresh``: ``read`` returns new tensors nothing else holds (read from a file), so one that already is the
    target tensor, whole and contiguous, is kept rather than copied (at size, a copy of the embedding is the
    largest allocation of a streamed conversion)."""
    recipe = plan.recipes[name]
    if plan.into_vanilla:
        ((source, row),) = recipe.sources
        tensor = read(source)
        for alias in recipe.aliases:
            if not torch.equal(read(alias), tensor):
                raise ValueError(f"{alias} differs from {source}; hf_vanilla holds a single {row.vanilla} for both.")
        made = _into_vanilla(tensor, row)
    else:
        pieces = [_into_native(read(source), row) for source, row in recipe.sources]
        made = torch.cat(pieces, dim=-1) if len(pieces) > 1 else pieces[0]
    whole = made.is_contiguous() and made.storage_offset() == 0 and made.untyped_storage().nbytes() == made.nbytes
    return made if fresh and whole else made.clone(memory_format=torch.contiguous_format)


def _plan_from_hf(model: PreTrainedModel, source_names: set[str]) -> _Plan:
    """What :func:`from_hf` makes of ``model`` (whose weights may be on the meta device), holding ``source_names``."""
    logger = logging.get_logger(__name__)
    arch, head = _native_spec(model)
    problems = Problems()
    arch.unsupported(model.config, problems)
    if problems.hard:
        raise ValueError(
            f"{type(model).__name__} uses settings hf_vanilla cannot express: {'; '.join(problems.hard)}."
        )
    for message in problems.soft:
        logger.warning(f"from_hf: {message}; only training is affected.")

    config = _to_vanilla_config(model, arch, head)
    form = native_form(config, type(model).__name__)  # the way back: its key map, and the fields it gives back
    extras = _native_extras(model.config, config, form)
    if extras:
        setattr(config, NATIVE_EXTRAS, {"model_type": arch.model_type, "fields": extras})
    vanilla = _skeleton(getattr(modeling_vanilla, head.vanilla), config)
    recipes, computed = _recipes_from_hf(form, source_names, vanilla)
    if vanilla.can_generate() and getattr(model, "generation_config", None) is not None:
        vanilla.generation_config = copy.deepcopy(model.generation_config)
        if config.is_encoder_decoder and vanilla.generation_config.decoder_start_token_id is None:
            vanilla.generation_config.decoder_start_token_id = config.decoder_start_token_id
    return _Plan(vanilla, recipes, into_vanilla=True, computed=computed)


def _recipes_from_hf(form: NativeForm, source_names: set[str], vanilla: VanillaPreTrainedModel
                     ) -> tuple[dict[str, _Recipe], tuple[_Pair, ...]]:
    """Each tensor of ``vanilla`` (on the meta device) and the native tensor it is made of, from the form's key map,
    and the fixed sinusoid tables the source holds and ``vanilla`` computes; every tensor on both sides must be
    matched, but for those the head drops (with one line)."""
    wanted = set(vanilla.state_dict())
    recipes: dict[str, _Recipe] = {}
    used: set[str] = set()
    computed: list[_Pair] = []
    for pair in form.pairs:
        source = pair.native[0]
        if source not in source_names:
            continue
        if pair.row.computed:
            computed.append(pair)
            used.add(source)
            continue
        if pair.vanilla not in wanted:
            continue
        aliases = tuple(alias for alias in pair.native[1:] if alias in source_names)
        used.update((source, *aliases))
        recipes[pair.vanilla] = _Recipe(((source, pair.row),), aliases)

    head = form.head
    dropped = {name for pattern in head.dropped for name in _star(pattern) if name in source_names}
    if dropped:  # an intended drop: one line, the outputs hf_vanilla keeps are unchanged
        logging.get_logger(__name__).warning(
            f"from_hf: dropped {', '.join(sorted(dropped))}: {head.vanilla} has no place for them (it returns the "
            "hidden states, which are unchanged).")
    unmatched = sorted(source_names - used - dropped)
    missing = sorted(wanted - set(recipes))
    if unmatched or missing:
        raise ValueError(
            f"Cannot convert {form.native_class} exactly: native tensors without a counterpart {unmatched}, "
            f"hf_vanilla tensors without a source {missing}."
        )
    return recipes, tuple(computed)


def _plan_to_hf(model: VanillaPreTrainedModel, source_names: set[str], model_type: str | None = None) -> _Plan:
    """What :func:`to_hf` makes of ``model`` (whose weights may be on the meta device), holding ``source_names``."""
    config, head_class = model.config, type(model).__name__
    form = _exact_form(config, head_class, model_type)
    for message in form.warnings:
        logging.get_logger(__name__).warning(f"to_hf: {message}; only training is affected.")
    native_config = _native_config(config, form.arch, form.native_class, dict(form.fields),
                                   model.generation_config if model.can_generate() else None)
    native = _skeleton(getattr(transformers, form.native_class), native_config, **form.head.init_kwargs)
    recipes = _recipes_to_hf(form, model, source_names, native)
    if native.can_generate() and model.can_generate():
        native.generation_config = copy.deepcopy(model.generation_config)
    return _Plan(native, recipes, into_vanilla=False)


def _recipes_to_hf(form: NativeForm, model: VanillaPreTrainedModel, source_names: set[str],
                   native: PreTrainedModel) -> dict[str, _Recipe]:
    """Each tensor of ``native`` (on the meta device) and the hf_vanilla tensors it is made of, from the form's key
    map; every tensor on both sides must be matched."""
    wanted = set(native.state_dict())
    parts: dict[str, dict[int, tuple[str, W]]] = {}
    counts: dict[str, int] = {}
    used: set[str] = set()
    computed: set[str] = set()
    for pair in form.pairs:
        if pair.row.computed:
            computed.update(pair.native)
            continue
        targets = [name for name in pair.native if name in wanted]
        if pair.vanilla not in source_names or not targets:
            continue
        used.add(pair.vanilla)
        index, count = pair.row.part or (0, 1)
        for name in targets:
            parts.setdefault(name, {})[index] = (pair.vanilla, pair.row)
            counts[name] = count
    for name, pieces in parts.items():
        if len(pieces) != counts[name]:
            raise RuntimeError(f"hf_vanilla.convert: {name} needs {counts[name]} parts, found {len(pieces)}.")
    recipes = {name: _Recipe(tuple(pieces[i] for i in sorted(pieces))) for name, pieces in parts.items()}

    def made_from(name: str) -> list[int]:
        return [id(model.get_parameter_or_buffer(source)) for source, _ in recipes[name].sources]

    for target, tied_to in list(native.all_tied_weights_keys.items()):
        # Made from different hf_vanilla tensors (an untied T5 v1.1 head): written apart, else the head is lost.
        if target in recipes and tied_to in recipes and made_from(target) != made_from(tied_to):
            _untie(native, target)
    unmatched = sorted(source_names - used)
    missing = sorted(wanted - set(recipes) - computed)
    if unmatched or missing:
        raise ValueError(
            f"Cannot convert {type(model).__name__} to {form.native_class} exactly: hf_vanilla tensors without a "
            f"counterpart {unmatched}, native tensors without a source {missing}."
        )
    return recipes


def from_hf(model: PreTrainedModel) -> VanillaPreTrainedModel:
    """The hf_vanilla model computing exactly what ``model`` (a native transformers model) computes.

    The weights are copied (the two models share no storage), the generation config comes along, and the
    result is in the same train/eval mode. Raises ``ValueError`` naming every native setting hf_vanilla
    cannot express (GPT-2's per-layer attention scaling, Marian's separate target vocabulary, ...).
    """
    native_state = model.state_dict()
    if any(tensor.is_meta for tensor in native_state.values()):
        raise ValueError(
            f"{type(model).__name__} has weights on the meta device (offloaded with device_map?); load it fully "
            "into memory before converting."
        )
    plan = _plan_from_hf(model, set(native_state))
    vanilla = plan.target
    _fill(vanilla, {name: _make(plan, name, native_state.__getitem__) for name in plan.recipes})
    _check_computed_positions(vanilla, list(plan.computed), native_state)
    return vanilla.train(model.training)


def to_hf(model: VanillaPreTrainedModel, model_type: str | None = None) -> PreTrainedModel:
    """The native transformers model computing exactly what ``model`` computes.

    The target architecture is the one whose tables match the config (``model_type`` forces one). When no
    native architecture can express the model, ``ValueError`` lists, per candidate, every option without a
    native counterpart (e.g. ``position_embedding_type='alibi'``); dropout differences only warn.
    """
    vanilla_state = model.state_dict()
    plan = _plan_to_hf(model, set(vanilla_state), model_type)
    native = plan.target
    _fill(native, {name: _make(plan, name, vanilla_state.__getitem__) for name in plan.recipes})
    return native.train(model.training)


# ----------------------------------------------------------------------------------------------
# Checking a conversion

#: Largest max |difference| a correct float32 conversion shows, relative to the largest |output|: rounding
#: differences grow with depth and with the outputs' scale, so the bound is relative (see docs/converting.md).
CHECK_RTOL = 1e-5


def check_conversion(
    original: PreTrainedModel, converted: PreTrainedModel, inputs: Mapping[str, Any], rtol: float = CHECK_RTOL
) -> float:
    """Assert that ``converted`` computes what ``original`` computes on ``inputs``; return max |difference|.

    Compares the logits (or last hidden states) at real positions (``attention_mask``, or
    ``decoder_attention_mask`` for the decoder side of a seq2seq model): the largest difference must be at most
    ``rtol`` times the largest |output|. Both models should run in float32 with the same attention backend.
    """
    with torch.no_grad():
        outputs = [model(**inputs) for model in (original, converted)]
    a, b = (out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state for out in outputs)
    mask = inputs.get("decoder_attention_mask", inputs.get("attention_mask")) if "decoder_input_ids" in inputs \
        else inputs.get("attention_mask")
    if mask is not None and a.ndim == 3 and mask.shape == a.shape[:2]:
        a, b = a[mask.bool()], b[mask.bool()]
    difference, scale = (a - b).abs().max().item(), a.abs().max().item()
    assert difference <= rtol * scale, (
        f"max |difference| {difference:.3g} exceeds {rtol:g} x max |output| {scale:.3g} = {rtol * scale:.3g}: "
        "the converted model computes something else"
    )
    return difference


# ----------------------------------------------------------------------------------------------
# Checkpoint directories


# Files a checkpoint directory holds that the conversion rewrites (weights, configs) or must not carry over
# (hf_vanilla's remote code would make a native checkpoint load foreign classes; the model card describes
# the source model). Everything else at the top level -- tokenizer, vocabularies, chat template, licence --
# is copied as is.
_NOT_COPIED_SUFFIXES = (*PICKLE_SUFFIXES, ".safetensors", ".h5", ".msgpack", ".onnx", ".gguf", ".ot", ".tflite",
                        ".pb", ".keras", ".index.json", ".py")
_NOT_COPIED_NAMES = frozenset({"config.json", "generation_config.json", "README.md", ".gitattributes"})


@dataclass
class ConversionReport:
    """What :func:`convert_checkpoint` did."""

    source_class: str
    target_class: str
    out_dir: Path
    copied: list[str]


def _read_model_type(src: Path) -> str:
    config_file = src / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"{config_file} not found: SRC_DIR must be a checkpoint directory (save_pretrained).")
    config = json.loads(config_file.read_text())
    model_type = config.get("model_type")
    if not model_type:
        raise ValueError(f"{config_file} names no model_type.")
    quantization = config.get("quantization_config")
    if quantization:  # quantised weights are not the model's: they would need a quantiser, or lose the scales
        method = quantization.get("quant_method", "?") if isinstance(quantization, dict) else quantization
        raise ValueError(f"{src} holds a quantised checkpoint ({config_file.name}: quantization_config, quant_method "
                         f"{method!r}); conversion is exact only from full-precision weights: convert the "
                         "unquantised checkpoint, then quantise the converted one.")
    return model_type


def _source_class(src: Path, model_type: str) -> tuple[type, PreTrainedConfig, dict[str, Any]]:
    """The class a checkpoint's model is, its config, and the keyword arguments it is built with."""
    if model_type == "vanilla":
        config = VanillaConfig.from_pretrained(src, local_files_only=True)
        default = {"encoder": "VanillaForMaskedLM", "decoder": "VanillaForCausalLM",
                   "encoder-decoder": "VanillaForSeq2SeqLM"}[config.architecture]
        name = next((n for n in (config.architectures or []) if hasattr(modeling_vanilla, n)), default)
        return getattr(modeling_vanilla, name), config, {}
    arch = ARCHITECTURES.get(model_type)
    if arch is None:
        raise ValueError(
            f"{src} holds a {model_type!r} model; hf_vanilla converts {', '.join(ARCHITECTURES)} (and 'vanilla')."
        )
    config = transformers.AutoConfig.from_pretrained(src, local_files_only=True)
    named = [name for name in (config.architectures or []) if name in arch.heads]
    if config.architectures and not named:
        raise ValueError(
            f"{src} holds a {config.architectures[0]}; for {model_type} hf_vanilla converts {', '.join(arch.heads)}."
        )
    name = named[0] if named else next(iter(arch.heads))
    head = arch.heads[name]
    # A BertModel is built with the pooler when the checkpoint holds one, so transformers loads every tensor
    # (no alarming "UNEXPECTED" load report) and from_hf drops it with one line; without one, without it
    # (init_kwargs), so nothing is randomly initialised either.
    holds_dropped = any(key in _tensor_names(src) for pattern in head.dropped for key in _star(pattern))
    return getattr(transformers, name), config, {} if holds_dropped else dict(head.init_kwargs)


def _load_source(src: Path, model_type: str) -> PreTrainedModel:
    """The checkpoint's model, loaded whole (the path for checkpoints :class:`_LazyCheckpoint` cannot stream)."""
    model_class, config, init_kwargs = _source_class(src, model_type)
    return load_complete(model_class, src, config=config, local_files_only=True, dtype="auto", **init_kwargs)


def _tensor_names(src: Path) -> set[str]:
    """The tensor names a safetensors checkpoint directory holds (read from the file headers only)."""
    index = src / "model.safetensors.index.json"
    if index.is_file():
        return set(json.loads(index.read_text())["weight_map"])
    names: set[str] = set()
    for path in src.glob("model*.safetensors"):
        with safe_open(path, framework="pt") as handle:
            names.update(handle.keys())
    return names


def _saved_tensors(model: PreTrainedModel) -> dict[str, torch.Tensor]:
    """The tensors ``save_pretrained`` writes for ``model`` (meta ones will do): no tied copies, nothing it skips."""
    state = model.state_dict()
    for name in model._keys_to_ignore_on_save or ():
        state.pop(name, None)
    return remove_tied_weights_from_state_dict(state, model)


class _LazyCheckpoint:
    """A safetensors checkpoint folder's tensors, read one at a time, each file opened for one read only (so the
    memory a read maps is released with it), under the names the model built on the meta device gives them."""

    def __init__(self, src: Path, skeleton: PreTrainedModel) -> None:
        files = [src / name for name in weight_files(src) if name.endswith(".safetensors")]
        self.shard_bytes = [_data_bytes(path) for path in files]
        self.file: dict[str, Path] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.dtypes: dict[str, str] = {}
        for path in files:
            with safe_open(path, framework="pt") as handle:
                for name in handle.keys():
                    tensor = handle.get_slice(name)
                    self.file[name], self.shapes[name], self.dtypes[name] = path, tuple(tensor.get_shape()), tensor.get_dtype()
        self._untie_as_loading_does(skeleton)
        # Every name of the model's state, tied copies included, and the saved tensor each one reads.
        self.saved_name: dict[str, str] = {}
        owner: dict[int, str] = {}
        saved = _saved_tensors(skeleton)
        for name in sorted(skeleton.state_dict(), key=lambda n: n not in saved):
            self.saved_name[name] = owner.setdefault(id(skeleton.get_parameter_or_buffer(name)), name)
        self.expected = {name: tuple(tensor.shape) for name, tensor in saved.items()}

    def _untie_as_loading_does(self, skeleton: PreTrainedModel) -> None:
        """A tie the config declares whose both ends the files hold (a T5 v1.1 head, whose config always ties):
        different values are kept apart, equal ones are one tensor, as ``from_pretrained`` decides."""
        for target, tied_to in list(skeleton.all_tied_weights_keys.items()):
            if target in self.file and tied_to in self.file:
                if torch.equal(self.read_file(target), self.read_file(tied_to)):
                    for table in (self.file, self.shapes, self.dtypes):
                        table.pop(target)
                else:
                    _untie(skeleton, target)

    def read_file(self, saved: str) -> torch.Tensor:
        with safe_open(self.file[saved], framework="pt") as handle:
            return handle.get_tensor(saved)

    @property
    def streamable(self) -> bool:
        """Whether the files hold exactly the tensors the model saves, in its shapes: nothing for transformers'
        loading to rename, fill in or drop (an older layout, a missing weight is loaded whole and checked there)."""
        return bool(self.file) and self.shapes == self.expected

    @property
    def names(self) -> set[str]:
        return set(self.saved_name)

    def dtype(self, config: PreTrainedConfig) -> torch.dtype:
        """The dtype ``from_pretrained(dtype="auto")`` loads in: the config's, else the files' commonest float."""
        if isinstance(getattr(config, "dtype", None), torch.dtype):
            return config.dtype
        floats = [getattr(torch, _SAFETENSORS_DTYPES[d]) for d in self.dtypes.values() if d in _SAFETENSORS_DTYPES]
        return max(set(floats), key=floats.count) if floats else torch.get_default_dtype()

    def read(self, name: str) -> torch.Tensor:
        return self.read_file(self.saved_name[name])


def _data_bytes(path: Path) -> int:
    """The bytes of tensor data a safetensors file holds (what ``max_shard_size`` counts): all but its header."""
    with path.open("rb") as handle:
        header = int.from_bytes(handle.read(8), "little")
    return path.stat().st_size - 8 - header


_SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16"}


def _shard_size(source_shards: list[int], max_shard_size: int | str | None) -> int | str:
    """Shards as large as the source's largest, unless the caller says otherwise; save_pretrained's default (one
    file up to 50 GB) for a source in one file."""
    if max_shard_size is not None:
        return max_shard_size
    return max(source_shards) if len(source_shards) > 1 else "50GB"


def _write_streamed(plan: _Plan, read: Callable[[str], torch.Tensor], out: Path, dtype: torch.dtype,
                    max_shard_size: int | str) -> None:
    """Save ``plan``'s target in ``out`` as ``save_pretrained`` would, making and writing one shard at a time."""
    target = plan.target.to(dtype)  # on the meta device: the dtype save_pretrained records and the shard sizes
    target.save_pretrained(out, state_dict={})  # the config, generation config and code, no weights
    saved = _saved_tensors(target)
    split = split_torch_state_dict_into_shards(saved, filename_pattern="model{suffix}.safetensors",
                                               max_shard_size=max_shard_size)
    with logging.tqdm(total=len(saved), desc="Converting weights", unit="tensor") as progress:
        for filename, names in split.filename_to_tensors.items():
            shard = {}
            for name in names:
                tensor = _make(plan, name, read, fresh=True)
                shard[name] = tensor.to(dtype) if tensor.is_floating_point() else tensor
                if shard[name].shape != saved[name].shape:
                    raise ValueError(f"{name} comes out {tuple(shard[name].shape)}, the converted model needs "
                                     f"{tuple(saved[name].shape)}: the checkpoint's config.json and weights disagree.")
                progress.update()
            save_file(shard, out / filename, metadata={"format": "pt"})
            del shard  # before the next shard is made
    if split.is_sharded:
        index = {"metadata": {"total_parameters": target.num_parameters(), **split.metadata},
                 "weight_map": split.tensor_to_filename}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")


def _convert_weights(src: Path, model_type: str, out: Path, max_shard_size: int | str | None) -> tuple[str, str]:
    """Write the conversion of the checkpoint in ``src`` into ``out``; return the source and target class names.

    Shard by shard when the source's safetensors hold exactly its model's tensors: the model is built on the meta
    device from the config, each target tensor is made from the source tensors it needs, read one at a time,
    and each shard is written as soon as it is made, so memory holds one shard, not the model. Any other
    checkpoint (an older layout transformers renames on loading, missing or extra weights) is loaded whole and
    checked by loading, as before.
    """
    model_class, config, init_kwargs = _source_class(src, model_type)
    source = _skeleton(model_class, config, **init_kwargs)
    if source.can_generate() and (src / "generation_config.json").is_file():
        source.generation_config = GenerationConfig.from_pretrained(src, local_files_only=True)
    lazy = _LazyCheckpoint(src, source)
    if lazy.streamable:
        plan = _plan_to_hf(source, lazy.names) if model_type == "vanilla" else _plan_from_hf(source, lazy.names)
        if not plan.computed and set(_saved_tensors(plan.target)) <= set(plan.recipes):
            _write_streamed(plan, lazy.read, out, lazy.dtype(config), _shard_size(lazy.shard_bytes, max_shard_size))
            return type(source).__name__, type(plan.target).__name__
    # Marian's sinusoids are checked against, or recomputed by, a real model: it is small enough to load whole.
    loaded = _load_source(src, model_type)
    target = to_hf(loaded) if model_type == "vanilla" else from_hf(loaded)
    target.save_pretrained(out, max_shard_size=_shard_size(lazy.shard_bytes, max_shard_size))
    return type(loaded).__name__, type(target).__name__


def _copy_side_files(src: Path, out: Path) -> list[str]:
    copied = []
    for path in sorted(src.iterdir()):
        name = path.name
        if (not path.is_file() or path.is_symlink() or name.startswith(".") or name in _NOT_COPIED_NAMES
                or name.endswith(_NOT_COPIED_SUFFIXES) or (out / name).exists()):
            continue
        shutil.copy2(path, out / name)
        copied.append(name)
    for name in _sentence_transformers_modules(src):  # whole: a Dense module's own weights belong to it
        shutil.copytree(src / name, out / name, ignore=_symlinks)  # never a link's target from outside SRC_DIR
        copied.append(name + "/")
    return copied


def _symlinks(folder: str, names: list[str]) -> list[str]:
    return [name for name in names if os.path.islink(os.path.join(folder, name))]


def _sentence_transformers_modules(src: Path) -> list[str]:
    """The module folders a sentence-transformers checkpoint's ``modules.json`` names (``1_Pooling``, ...)."""
    modules = src / "modules.json"
    if not modules.is_file():
        return []
    paths = [str(module.get("path") or "") for module in json.loads(modules.read_text())]
    inside = [path for path in paths if path and Path(path).name == path and path not in (".", "..")]  # no ../x
    return [path for path in inside if (src / path).is_dir() and not (src / path).is_symlink()]


def convert_checkpoint(
    src_dir: str | Path, out_dir: str | Path, to_native: bool | None = None, overwrite: bool = False,
    max_shard_size: int | str | None = None,
) -> ConversionReport:
    """Convert a checkpoint directory: native -> hf_vanilla, or hf_vanilla -> native.

    The direction follows the source's ``model_type`` (``"vanilla"`` goes to native); ``to_native`` makes it
    an assertion. Weights are saved as safetensors in the checkpoint's dtype; the generation config
    (decoder_start_token_id, forced_eos_token_id, beam settings ...) comes along with the model, and the
    tokenizer files (and any other non-weight files) are copied unchanged, and so are the module folders of a
    sentence-transformers checkpoint (``modules.json``: ``1_Pooling/``, ...). Everything is read from local
    files only.

    The weights stream shard by shard (memory holds about one shard, not the model), with a progress bar, into
    shards as large as the source's largest, or ``max_shard_size`` (``"2GB"``, as ``save_pretrained``), with an
    index when there are several.
    """
    src, out = Path(src_dir), Path(out_dir)
    model_type = _read_model_type(src)
    is_vanilla = model_type == "vanilla"
    if to_native is not None and to_native != is_vanilla:
        raise ValueError(
            f"{src} holds a {model_type!r} model, so it converts to {'native' if is_vanilla else 'hf_vanilla'}; "
            f"drop --to-{'vanilla' if is_vanilla else 'native'}."
        )
    if out.exists() and (out.resolve() == src.resolve() or out.resolve() in src.resolve().parents):
        raise ValueError(f"OUT_DIR {out} must neither be SRC_DIR nor hold it: choose a new folder for the result.")
    folder = OutputFolder(out, "conversion")
    folder.check(overwrite=overwrite)
    existed = os.path.lexists(out)
    try:
        if existed:  # an empty folder, a link to one, or an earlier conversion: only its own files go
            with folder.replacing(overwrite=overwrite) as staging:
                classes = _convert_weights(src, model_type, staging, max_shard_size)
                copied = _copy_side_files(src, staging)
        else:
            with staged_folder(out) as staging:  # a new OUT_DIR appears complete or not at all
                classes = _convert_weights(src, model_type, staging, max_shard_size)
                copied = _copy_side_files(src, staging)
                recorded = OutputFolder(staging, "conversion")
                recorded.add(path.name for path in staging.iterdir())
                recorded.seal(path.name for path in staging.iterdir() if path.name != RECORD)
    except FileOperationError as error:  # a full disk, a permission: what failed first, and what comes next
        again = "run the same command with --overwrite" if folder.write_is_complete() and not overwrite else \
            "run the same command again"  # a complete conversion is refused without --overwrite
        raise error.then(f"{again}: {folder.as_left(existed)}") from error
    return ConversionReport(*classes, out, copied)


# ----------------------------------------------------------------------------------------------
# Command line


def run_cli(args: argparse.Namespace) -> int:
    """``hf-vanilla convert`` (its arguments are in :mod:`hf_vanilla.commands`)."""
    to_native = True if args.to_native else False if args.to_vanilla else None
    try:
        report = convert_checkpoint(args.src_dir, args.out_dir, to_native=to_native, overwrite=args.overwrite,
                                    max_shard_size=args.max_shard_size)
    except (HfVanillaError, ValueError, OSError) as error:  # bad options, a busy folder, unreadable files: a sentence
        return refuse("convert", error)
    print(f"{report.source_class} -> {report.target_class}: wrote {report.out_dir}")
    if report.copied:
        print(f"copied: {', '.join(report.copied)}")
    return 0


__all__ = [
    "ARCHITECTURES",
    "Architecture",
    "ConversionReport",
    "Head",
    "W",
    "convert_checkpoint",
    "NativeForm",
    "covered_fields",
    "from_hf",
    "hard_coded",
    "native_form",
    "native_forms",
    "run_cli",
    "supported_classes",
    "to_hf",
]
