"""``hf-vanilla generate``: load a saved decoder or encoder-decoder with its tokenizer and generate from a prompt."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

#: Tokens generated when neither the option nor the saved generation config bounds the length.
DEFAULT_MAX_NEW_TOKENS = 50


def load_for_generation(run_dir: str | Path) -> tuple[Any, Any]:
    """The model (AutoModelForSeq2SeqLM for an encoder-decoder, AutoModelForCausalLM otherwise) and its tokenizer."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    import hf_vanilla  # noqa: F401  (registers the Vanilla classes with the Auto* factories)

    config = AutoConfig.from_pretrained(run_dir)
    if getattr(config, "architecture", "decoder") == "encoder":
        raise ValueError(f"{run_dir} holds an encoder-only model ({', '.join(config.architectures or ['?'])}), "
                         "which does not generate text; generate needs a causal LM (clm) or a translation model")
    auto = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
    return auto.from_pretrained(run_dir).eval(), AutoTokenizer.from_pretrained(run_dir)


def generate_text(model: Any, tokenizer: Any, prompt: str, *, seed: int = 0, return_full_text: bool = True,
                  **settings: Any) -> str:
    """The model's output for ``prompt``, as transformers' pipelines give it: a decoder's is the prompt and its
    continuation (only the continuation without ``return_full_text``), an encoder-decoder's the translation.
    ``settings`` left at None take the saved generation config's values."""
    import torch
    from transformers import set_seed

    chosen = {key: value for key, value in settings.items() if value is not None}
    saved = model.generation_config
    if "max_new_tokens" not in chosen and saved.max_new_tokens is None:
        chosen["max_new_tokens"] = DEFAULT_MAX_NEW_TOKENS
    inputs = tokenizer(prompt, return_tensors="pt")
    inputs.pop("token_type_ids", None)
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
        text = generate_text(model, tokenizer, args.prompt, seed=args.seed, max_new_tokens=args.max_new_tokens,
                             num_beams=args.num_beams, do_sample=args.do_sample, temperature=args.temperature,
                             top_k=args.top_k, return_full_text=args.return_full_text)
    except (ValueError, OSError) as error:
        print(f"hf-vanilla generate: {error}", file=sys.stderr)
        return 1
    print(text)
    return 0


__all__ = ["generate_text", "load_for_generation", "run_generate"]
