#!/usr/bin/env python
"""GPU benchmark of a GPT-2-small-sized hf_vanilla decoder: bf16, SDPA / FlashAttention, torch.compile.

What it reports (one row per measurement, the same schema as `hf-vanilla bench`):

* ``train/<attn>[+compile]``: training-step tokens/s of ours against transformers' GPT2LMHeadModel at the
  same sizes, and ``mfu-train/...``: model FLOP utilisation against a large bf16 matmul timed in the same run
  (FLOPs: 6·N per token, N = non-embedding parameters + output head, plus attention's 12·L·d·T).
* ``generate-b1/...`` and ``generate-b8/...``: greedy generate() tokens/s with the KV cache (static cache
  when compiled).
* ``memory-train/...``: peak ``torch.cuda.max_memory_allocated`` of a training step.
* ``numerics/flash-vs-sdpa`` and ``numerics/sdpa-vs-eager``: the largest logit difference between backends on
  the same weights and inputs (``ours`` column; ``reference`` is the bf16 tolerance it must stay under).

Usage:

    python scripts/gpu_bench.py                     # on a CUDA machine: everything it can run
    python scripts/gpu_bench.py --no-compile --json gpu.json
    python scripts/gpu_bench.py --dry-run           # tiny float32 sizes on CPU: checks the script itself

Without a GPU only ``--dry-run`` is meaningful; FlashAttention rows need the ``flash-attn`` package.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402

from hf_vanilla.tools import bench


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(runs: dict[str, Callable[[], object]], repeats: int, device: torch.device, warmup: int = 2) -> dict[str, list[float]]:
    """bench.alternate with a device sync after every call, so the clock sees the kernels finish."""

    def synced(run: Callable[[], object]) -> Callable[[], None]:
        def call() -> None:
            run()
            synchronize(device)

        return call

    return bench.alternate({name: synced(run) for name, run in runs.items()}, repeats, warmup)


def matmul_peak(device: torch.device, dtype: torch.dtype, side: int) -> float:
    a = torch.randn(side, side, device=device, dtype=dtype)
    b = torch.randn(side, side, device=device, dtype=dtype)
    seconds = timed({"mm": lambda: a @ b}, 10, device)["mm"]
    return 2 * side**3 / statistics.median(seconds)


def build_models(sizes: bench.Sizes, attn: str, device: torch.device, dtype: torch.dtype):
    pair = bench.build_pair("gpt2", sizes, "sdpa")
    for model in (pair.ours, pair.reference):
        model.to(device=device, dtype=dtype)
    if attn != "sdpa":
        pair.ours.set_attn_implementation(attn)
        pair.reference.set_attn_implementation(attn)
    return pair


def flash_available(device: torch.device) -> bool:
    return device.type == "cuda" and importlib.util.find_spec("flash_attn") is not None


def peak_memory_mib(run: Callable[[], object], device: torch.device) -> float:
    if device.type != "cuda":
        return bench.peak_memory_mib(run)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    start = torch.cuda.memory_allocated(device)
    run()
    synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - start) / 2**20


def largest_logit_difference(pair_a: bench.Pair, pair_b: bench.Pair, inputs: dict) -> float:
    pair_b.ours.load_state_dict(pair_a.ours.state_dict())
    with torch.inference_mode():
        a = pair_a.ours.eval()(**inputs).logits.float()
        b = pair_b.ours.eval()(**inputs).logits.float()
    return (a - b).abs().max().item()


def run(args: argparse.Namespace) -> list[bench.Row]:
    device = torch.device("cpu" if args.dry_run or not torch.cuda.is_available() else "cuda")
    if device.type == "cpu" and not args.dry_run:
        raise SystemExit("No CUDA device: run with --dry-run to check the script on CPU.")
    dtype = torch.float32 if args.dry_run else torch.bfloat16
    sizes = bench.TINY if args.dry_run else bench.Sizes(
        vocab=50257, hidden=768, layers=12, heads=12, kv_heads=12, ffn=3072, seq=args.seq, batch=args.batch,
        prompt=64, new_tokens=args.new_tokens, matmul=8192,
    )
    repeats = 2 if args.dry_run else args.repeats
    torch.backends.cuda.matmul.allow_tf32 = True
    peak = matmul_peak(device, dtype, sizes.matmul)
    rows = [bench.Row(f"peak/matmul-{str(dtype).removeprefix('torch.')}", peak / 1e12, peak / 1e12, "TFLOP/s", 1.0)]
    bench.log_message(rows[-1])
    backends = ["sdpa"] + (["flash_attention_2"] if flash_available(device) else [])
    compile_modes = [False] + ([True] if args.compile and not args.dry_run else [])
    for attn in backends:
        pair = build_models(sizes, attn, device, dtype)
        step_flops = bench.train_flops_per_step(pair.ours, sizes)
        tokens = sizes.batch * sizes.seq
        train_inputs = {k: v.to(device) for k, v in bench.make_inputs("causal", sizes.batch, sizes.seq, sizes.vocab,
                                                                       labels=True).items()}
        for compiled in compile_modes:
            tag = attn + ("+compile" if compiled else "")
            models = {"ours": pair.ours, "reference": pair.reference}
            for model in models.values():
                model.train()
            if compiled:
                models = {name: torch.compile(model) for name, model in models.items()}
            steps = {name: bench.train_step(model, train_inputs) for name, model in models.items()}
            if not compiled:
                ours = peak_memory_mib(steps["ours"], device)
                reference = peak_memory_mib(steps["reference"], device)
                rows.append(bench.Row(f"memory-train/{tag}", ours, reference, "MiB", bench.memory_ratio(ours, reference)))
                bench.log_message(rows[-1])
            times = timed(steps, repeats, device, warmup=3 if compiled else 1)
            row = bench.throughput_row(f"train/{tag}", times, tokens, "tokens/s")
            mfu = {side: 100 * getattr(row, side) / tokens * step_flops / peak for side in ("ours", "reference")}
            rows += [row, bench.Row(f"mfu-train/{tag}", mfu["ours"], mfu["reference"], "% of matmul", row.ratio)]
            bench.log_message(rows[-2])
            bench.log_message(rows[-1])
            for batch in (1, 8):
                prompt = {k: v.to(device) for k, v in bench.make_inputs("causal", batch, sizes.prompt, sizes.vocab,
                                                                         labels=False).items()}
                settings = {"cache_implementation": "static"} if compiled else {}
                runs = {}
                for name, model in (("ours", pair.ours), ("reference", pair.reference)):
                    model.eval()
                    if compiled:
                        model.forward = torch.compile(model.forward, dynamic=False)
                    runs[name] = bench.generation(model, prompt, sizes.new_tokens, **settings)
                times = timed(runs, repeats, device, warmup=2 if compiled else 1)
                rows.append(bench.throughput_row(f"generate-b{batch}/{tag}", times, batch * sizes.new_tokens, "tokens/s"))
                bench.log_message(rows[-1])
                for model in (pair.ours, pair.reference):
                    model.__dict__.pop("forward", None)
    # Numerics: the same weights and inputs through each backend of ours.
    inputs = {k: v.to(device) for k, v in bench.make_inputs("causal", 2, sizes.seq, sizes.vocab, labels=False).items()}
    tolerance = 1e-4 if dtype == torch.float32 else 0.1  # bf16 logits: a few units in the last of 8 mantissa bits
    sdpa = build_models(sizes, "sdpa", device, dtype)
    if flash_available(device):
        difference = largest_logit_difference(sdpa, build_models(sizes, "flash_attention_2", device, dtype), inputs)
        rows.append(bench.Row("numerics/flash-vs-sdpa", difference, tolerance, "max abs logit diff",
                              tolerance / max(difference, 1e-12)))
        bench.log_message(rows[-1])
    difference = largest_logit_difference(sdpa, build_models(sizes, "eager", device, dtype), inputs)
    rows.append(bench.Row("numerics/sdpa-vs-eager", difference, tolerance, "max abs logit diff",
                          tolerance / max(difference, 1e-12)))
    bench.log_message(rows[-1])
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="tiny float32 models on CPU: checks the script runs")
    parser.add_argument("--no-compile", dest="compile", action="store_false", help="skip the torch.compile rows")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json", metavar="FILE", help="write the rows as JSON (same schema as hf-vanilla bench)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    rows = run(args)
    print(bench.format_table(rows))
    print(f"({time.perf_counter() - start:.0f} s)", file=sys.stderr)
    if args.json:
        bench.write_json(rows, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
