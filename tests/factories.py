"""Tiny models and inputs shared by the test modules: every family, scheme and norm in a few milliseconds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

import hf_vanilla as hv
from hf_vanilla import variants

FAMILIES = variants.values("architecture")
SCHEMES = variants.values("position_embedding_type")
NORM_POSITIONS = variants.values("norm_position")
NORM_TYPES = variants.values("norm_type")
BACKENDS = ("eager", "sdpa", "flex_attention")


def settings(option: str) -> list:
    """One concrete value per row of ``option`` (a row that stands for many values gives the one it is tested with)."""
    return [row.setting for row in variants.rows(option)]


HEAD_FOR_FAMILY = {
    "encoder": hv.VanillaForMaskedLM,
    "decoder": hv.VanillaForCausalLM,
    "encoder-decoder": hv.VanillaForSeq2SeqLM,
}

VOCAB = 97


def tiny_config(family: str = "decoder", scheme: str = "sinusoidal", **overrides) -> hv.VanillaConfig:
    fields = dict(
        architecture=family,
        position_embedding_type=scheme,
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        hidden_dropout=0.0,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    fields.update(overrides)
    return hv.VanillaConfig(**fields)


def tiny_model(family: str = "decoder", scheme: str = "sinusoidal", seed: int = 0, **overrides):
    torch.manual_seed(seed)
    return HEAD_FOR_FAMILY[family](tiny_config(family, scheme, **overrides)).eval()


def padded_batch(batch: int = 3, length: int = 9, seed: int = 0, left: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids in [3, VOCAB) and a mask whose rows have 0, 2, 4, ... padding tokens (right or left)."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (batch, length), generator=generator)
    mask = torch.ones_like(ids)
    for row in range(batch):
        pad = min(2 * row, length - 1)
        if pad:
            span = slice(0, pad) if left else slice(length - pad, length)
            mask[row, span] = 0
            ids[row, span] = 0
    return ids, mask


def model_inputs(family: str, ids: torch.Tensor, mask: torch.Tensor) -> dict:
    if family == "encoder-decoder":
        return dict(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :6], decoder_attention_mask=mask[:, :6])
    return dict(input_ids=ids, attention_mask=mask)


WORDS = "the king queen crown sword castle night day love war peace speak hear see thou thee".split()


def tiny_tokenizer(kind: str = "decoder"):
    """A word-level tokenizer over a few words; ids fit the tiny models' vocabulary."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<unk>", "<mask>"]
    vocab = {token: i for i, token in enumerate(specials + WORDS)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    from tokenizers import decoders

    tokenizer.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        mask_token="<mask>", padding_side="left" if kind == "decoder" else "right",
    )


def run_without_package(script: str, folder: Path) -> subprocess.CompletedProcess:
    """Run ``script`` in a fresh Python where hf_vanilla cannot be imported (as on a machine without it): not on
    ``sys.path`` (no PYTHONPATH, the working directory is ``folder``) and blocked in ``sys.modules`` for the
    editable install; the remote code transformers copies lands under ``folder``, offline."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_MODULES_CACHE=str(folder / "modules"), HF_HUB_OFFLINE="1")
    guarded = 'import sys\nsys.modules["hf_vanilla"] = None  # any import of the package fails\n' + script
    return subprocess.run([sys.executable, "-c", guarded], capture_output=True, text=True, env=env, cwd=folder,
                          timeout=600)


def config_for_row(row: variants.Variant, **overrides) -> hv.VanillaConfig:
    """The tiny config that uses ``row`` (a decoder with RoPE unless the row says otherwise)."""
    base = {"architecture": "decoder", "position_embedding_type": "rope", row.option: row.setting, **overrides}
    return tiny_config(base.pop("architecture"), base.pop("position_embedding_type"), **base)
