"""Named shapes for :meth:`VanillaConfig.from_preset`: the paper's base and big models, BERT, GPT-2, Llama, T5 and
BART as published, and tiny versions of each for tests and examples.

Presets are data the package ships; they do not travel with a saved model (a checkpoint's config.json holds every
field already). ``VanillaConfig.from_preset`` imports this module when it is called.
"""

import copy
from collections.abc import Callable
from typing import Any

_PAPER = dict(
    architecture="encoder-decoder", hidden_act="relu", norm_position="post", position_embedding_type="sinusoidal",
    scale_embedding=True, tie_word_embeddings=True, hidden_dropout=0.1,
)
_BERT = dict(
    architecture="encoder", position_embedding_type="learned", norm_position="post", hidden_act="gelu",
    embedding_norm=True, norm_eps=1e-12, scale_embedding=False, type_vocab_size=2, lm_head_transform=True,
    lm_head_bias=True, pooler=True, classifier_pooling="first",
)
_GPT2 = dict(
    architecture="decoder", position_embedding_type="learned", norm_position="pre", hidden_act="gelu_new",
    scale_embedding=False, hidden_dropout=0.1, attention_dropout=0.1,
)
_LLAMA = dict(
    architecture="decoder", position_embedding_type="rope", norm_position="pre", norm_type="rmsnorm",
    hidden_act="silu", gated_ffn=True, attention_bias=False, mlp_bias=False, scale_embedding=False,
    tie_word_embeddings=False, hidden_dropout=0.0, norm_eps=1e-6,
)
_T5 = dict(
    architecture="encoder-decoder", position_embedding_type="relative", norm_position="pre", norm_type="rmsnorm",
    norm_eps=1e-6, attention_bias=False, mlp_bias=False, scale_embedding=False, attention_scale=1.0,
    hidden_act="relu", pad_token_id=0, eos_token_id=1, bos_token_id=None, decoder_start_token_id=0,
    initializer_factor=1.0,
)
_BART = dict(
    architecture="encoder-decoder", position_embedding_type="learned", position_offset=2, norm_position="post",
    hidden_act="gelu", embedding_norm=True, scale_embedding=False, lm_head_bias=True,
    pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
)
_TINY = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=64)

#: Named shapes for :meth:`VanillaConfig.from_preset`.
PRESETS: dict[str, dict[str, Any]] = {
    "transformer-base": dict(_PAPER, vocab_size=37000, hidden_size=512, intermediate_size=2048, num_hidden_layers=6,
                             num_attention_heads=8),
    "transformer-big": dict(_PAPER, vocab_size=37000, hidden_size=1024, intermediate_size=4096, num_hidden_layers=6,
                            num_attention_heads=16, hidden_dropout=0.3),
    "bert-base": dict(_BERT, vocab_size=30522, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                      num_attention_heads=12, max_position_embeddings=512),
    "gpt2": dict(_GPT2, vocab_size=50257, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                 num_attention_heads=12, max_position_embeddings=1024, bos_token_id=50256, eos_token_id=50256,
                 pad_token_id=None),
    "llama": dict(_LLAMA, vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096),
    # T5 v1.0 as published: lm_head_scale = d_model**-0.5 comes from PRESET_DERIVED (to_hf refuses any other scale).
    "t5-base": dict(_T5, vocab_size=32128, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                    num_attention_heads=12, max_position_embeddings=512),
    "bart-base": dict(_BART, vocab_size=50265, hidden_size=768, intermediate_size=3072, num_hidden_layers=6,
                      num_attention_heads=12, max_position_embeddings=1024),
    "tiny-transformer": dict(_PAPER, **_TINY),
    "tiny-bert": dict(_BERT, **_TINY),
    "tiny-gpt2": dict(_GPT2, **_TINY),
    "tiny-llama": dict(_LLAMA, **{**_TINY, "num_key_value_heads": 2}),
    "tiny-t5": dict(_T5, **_TINY),
}

#: Preset fields computed from the others (after overrides): T5 v1.0's tied head reads the states times d_model**-0.5.
PRESET_DERIVED: dict[str, dict[str, Callable[[dict[str, Any]], Any]]] = {
    name: {"lm_head_scale": lambda fields: fields["hidden_size"] ** -0.5} for name in ("t5-base", "tiny-t5")
}


def preset_fields(name: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """A preset's fields with ``overrides`` applied; fields derived from others (PRESET_DERIVED) follow them."""
    if name not in PRESETS:
        raise ValueError(f"Unknown preset {name!r}; available: {', '.join(sorted(PRESETS))}.")
    fields = {**copy.deepcopy(PRESETS[name]), **overrides}
    for field, derive in PRESET_DERIVED.get(name, {}).items():
        if field not in overrides:
            fields[field] = derive(fields)
    return fields
