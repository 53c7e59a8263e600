"""``hf-vanilla generate``: load a saved decoder or encoder-decoder with its tokenizer and generate from a prompt."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer, set_seed

from . import register
from .checkpoint import load_complete
from .errors import HfVanillaError, refuse
from .positional import PositionalScheme

logger = logging.getLogger(__name__)

#: Tokens generated when neither the option nor the saved generation config bounds the length.
DEFAULT_MAX_NEW_TOKENS = 50

#: How far a scheme that extrapolates (sinusoidal, RoPE, ALiBi, relative, none) is generated from: this many times
#: ``max_position_embeddings``, the length it was trained for. A learned table ends at its own length.
EXTRAPOLATION_FACTOR = 4


def load_for_generation(run_dir: str | Path) -> tuple[Any, Any]:
    """The model (AutoModelForSeq2SeqLM for an encoder-decoder, AutoModelForCausalLM otherwise) and its tokenizer."""
    register()  # the Auto classes must know hf_vanilla's model type before they read the config
    config = AutoConfig.from_pretrained(run_dir)
    if getattr(config, "architecture", "decoder") == "encoder":
        raise ValueError(f"{run_dir} holds an encoder-only model ({', '.join(config.architectures or ['?'])}), "
                         "which does not generate text; generate needs a causal LM (clm) or a translation model")
    auto = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
    return load_complete(auto, run_dir, exact=True).eval(), AutoTokenizer.from_pretrained(run_dir)


def position_reach(model: Any) -> tuple[int, str]:
    """The most positions ``model`` is run on, and why: its learned table's length, or for a scheme that
    extrapolates :data:`EXTRAPOLATION_FACTOR` times ``max_position_embeddings``."""
    tables = [module.hard_max_positions for module in model.modules()
              if isinstance(module, PositionalScheme) and module.hard_max_positions is not None]
    if tables:
        return min(tables), f"its learned position table ends at {min(tables)}"
    length = model.config.max_position_embeddings
    return EXTRAPOLATION_FACTOR * length, (
        f"its {model.config.position_embedding_type} positions are generated from up to {EXTRAPOLATION_FACTOR} x "
        f"max_position_embeddings = {EXTRAPOLATION_FACTOR * length}")


def bounded_max_new_tokens(model: Any, wanted: int, prompt_length: int) -> tuple[int, str | None]:
    """``wanted`` new tokens cut to what fits within :func:`position_reach`, with the message saying so (None when
    nothing was cut). The last token generated is never fed back: a decoder's ``n`` tokens use ``prompt + n - 1``
    positions, an encoder-decoder's ``n`` (its start token first)."""
    reach, why = position_reach(model)
    room = reach if model.config.is_encoder_decoder else reach - prompt_length + 1
    if room < 1:
        raise ValueError(f"the prompt is {prompt_length} tokens and {why}: no room to generate; shorten the prompt")
    if wanted <= room:
        return wanted, None
    return room, f"max_new_tokens={wanted} cut to {room}: {why}"


def generate_text(model: Any, tokenizer: Any, prompt: str, *, seed: int = 0, return_full_text: bool = True,
                  say: Callable[[str], None] = logger.warning, **settings: Any) -> str:
    """The model's output for ``prompt``, as transformers' pipelines give it: a decoder's is the prompt and its
    continuation (only the continuation without ``return_full_text``), an encoder-decoder's the translation.
    ``settings`` left at None take the saved generation config's values; the length is bounded by the model's
    reach (:func:`bounded_max_new_tokens`), and ``say`` is told when it is cut."""
    chosen = {key: value for key, value in settings.items() if value is not None}
    saved = model.generation_config
    wanted = chosen.get("max_new_tokens", saved.max_new_tokens or DEFAULT_MAX_NEW_TOKENS)
    inputs = tokenizer(prompt, return_tensors="pt")
    inputs.pop("token_type_ids", None)
    chosen["max_new_tokens"], cut = bounded_max_new_tokens(model, wanted, inputs["input_ids"].shape[1])
    if cut:
        say(cut)
    set_seed(seed)
    with torch.no_grad():
        output = model.generate(**inputs, **chosen)
    if model.config.is_encoder_decoder:
        return tokenizer.decode(output[0], skip_special_tokens=True)
    prompt_ids = inputs["input_ids"].shape[1]
    if not return_full_text:
        return tokenizer.decode(output[0, prompt_ids:], skip_special_tokens=True)
    # The text-generation pipeline's way: the prompt as typed, then what decoding added after the prompt's tokens.
    decoded_prompt = tokenizer.decode(output[0, :prompt_ids], skip_special_tokens=True)
    return prompt + tokenizer.decode(output[0], skip_special_tokens=True)[len(decoded_prompt):]


def run_generate(args: argparse.Namespace) -> int:
    """``hf-vanilla generate RUN PROMPT`` (its arguments: :mod:`hf_vanilla.commands`)."""
    try:
        model, tokenizer = load_for_generation(args.run_dir)
        text = generate_text(model, tokenizer, args.prompt, seed=args.seed, say=_note,
                             max_new_tokens=args.max_new_tokens, num_beams=args.num_beams, do_sample=args.do_sample,
                             temperature=args.temperature, top_k=args.top_k, return_full_text=args.return_full_text)
    except (HfVanillaError, ValueError, OSError) as error:
        return refuse("generate", error)
    print(text)
    return 0


def _note(message: str) -> None:
    print(f"hf-vanilla generate: {message}", file=sys.stderr)


__all__ = ["bounded_max_new_tokens", "generate_text", "load_for_generation", "position_reach", "run_generate"]
