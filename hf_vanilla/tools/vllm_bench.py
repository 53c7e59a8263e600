#!/usr/bin/env python
"""Time an hf_vanilla decoder in vLLM against the same-shape Llama, after checking both as ``vllm_check.py`` does.

    python scripts/vllm_bench.py bench --out DIR      # same-shape hf_vanilla and Llama: check both, then time
    python scripts/vllm_bench.py profile --out DIR    # where the Transformers backend's time goes (Llama vs Llama)

The vLLM side is hf_vanilla.tools.vllm_check's worker in its own venv (see that module).

``bench``: an hf_vanilla decoder in Llama's shape (RoPE, RMSNorm, SwiGLU, grouped-query attention) and the
``LlamaForCausalLM`` that ``hf_vanilla.convert.to_hf`` makes of it (identical weights), both checked as
``vllm_check.py check`` does, then new tokens/s at batch 1 and 16, the engines taking turns round by round (the order
flips every round):

* ``vllm/vanilla (transformers backend)``: hf_vanilla served by vLLM's Transformers backend;
* ``vllm/llama (transformers backend)``: the Llama served by the same backend;
* ``vllm/llama (vllm's own)``: the Llama served by vLLM's own implementation (``model_impl="vllm"``);
* ``transformers/vanilla generate()`` and ``transformers/llama generate()``: greedy ``generate()`` with the KV cache.

Throughputs are medians over rounds with their minimum; a ratio is the median over rounds of the per-round ratio
(hf_vanilla against the Llama through the same backend is the target, >= 0.95).

``profile``: vLLM's torch profiler around the same requests for the Llama through both implementations (a worker
of its own), its op tables saved next to the results.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from hf_vanilla import VanillaConfig, VanillaForCausalLM, register
from hf_vanilla.convert import to_hf

from .bench import alternate, generation
from .vllm_check import (
    CheckResult,
    Shape,
    Worker,
    absolute_path,
    check_engine,
    check_json,
    check_servable,
    check_table,
    common_options,
    ensure_venv,
    load_transformers,
    log,
    make_prompts,
    parse_checked,
    reference_for,
    run_command,
    set_threads,
    write_json,
)

ENGINES = {  # row name -> (model, vLLM model_impl or None for transformers' generate())
    "vllm/vanilla (transformers backend)": ("vanilla", "transformers"),
    "vllm/llama (transformers backend)": ("llama", "transformers"),
    "vllm/llama (vllm's own)": ("llama", "vllm"),
    "transformers/vanilla generate()": ("vanilla", None),
    "transformers/llama generate()": ("llama", None),
}
#: Short names for --engines.
ENGINE_KEYS = dict(zip(("vllm-vanilla", "vllm-llama", "vllm-llama-own", "hf-vanilla", "hf-llama"), ENGINES, strict=True))
TARGET = ("vllm/vanilla (transformers backend)", "vllm/llama (transformers backend)", 0.95)
RATIOS = (  # (numerator, denominator): what each ratio tells
    TARGET[:2],
    ("vllm/llama (transformers backend)", "vllm/llama (vllm's own)"),
    ("vllm/vanilla (transformers backend)", "transformers/vanilla generate()"),
    ("vllm/llama (vllm's own)", "transformers/llama generate()"),
    ("transformers/vanilla generate()", "transformers/llama generate()"),
)


# ----------------------------------------------------------------------------------------------
# The same-shape pair, timed


def build_pair(shape: Shape, folder: Path, seed: int = 0) -> dict[str, Path]:
    """An hf_vanilla decoder in Llama's shape and its Llama (identical weights), saved with their code."""


    register()  # save_pretrained then copies the model files and writes auto_map
    torch.manual_seed(seed)
    config = VanillaConfig.from_preset(
        "llama", vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.ffn,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
        max_position_embeddings=shape.max_positions, initializer_range=shape.init_std,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, pad_token_id=0, bos_token_id=1,
        eos_token_id=2)
    vanilla = VanillaForCausalLM(config).eval()
    llama = to_hf(vanilla).eval()
    paths = {"vanilla": folder / "vanilla", "llama": folder / "llama"}
    vanilla.save_pretrained(paths["vanilla"])
    llama.save_pretrained(paths["llama"])
    return paths


@dataclass
class Throughput:
    engine: str
    batch: int
    median: float  # new tokens/s
    minimum: float
    maximum: float
    rounds: int


@dataclass
class Ratio:
    numerator: str
    denominator: str
    batch: int
    median: float  # median over rounds of the per-round ratio of new tokens/s
    minimum: float
    maximum: float


def throughputs(times: dict[str, list[float]], batch: int, new_tokens: int) -> list[Throughput]:
    rows = []
    for engine, seconds in times.items():
        rates = [batch * new_tokens / s for s in seconds]
        rows.append(Throughput(engine, batch, statistics.median(rates), min(rates), max(rates), len(rates)))
    return rows


def ratios(times: dict[str, list[float]], batch: int, pairs: Sequence[tuple[str, str]]) -> list[Ratio]:
    """Per-round ratios of throughput (= inverse ratios of seconds), summarised over the rounds."""
    rows = []
    for numerator, denominator in pairs:
        if numerator in times and denominator in times:
            per_round = [d / n for n, d in zip(times[numerator], times[denominator], strict=True)]
            rows.append(Ratio(numerator, denominator, batch, statistics.median(per_round), min(per_round),
                              max(per_round)))
    return rows


#: vLLM's worker process spins (sched_yield) for 1 s after each request before it sleeps: the next engine's turn
#: waits that out, untimed, so that no engine is timed beside another one's spinning.
SPIN_SECONDS = 1.5


def time_engines(runs: dict[str, Callable[[], object]], repeats: int) -> dict[str, list[float]]:
    return alternate(runs, repeats, warmup=1, pause=SPIN_SECONDS)


def run_bench(args: argparse.Namespace) -> int:


    shape = Shape()
    out = Path(args.out or tempfile.mkdtemp(prefix="vllm-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    set_threads(args.threads)
    paths = {name: Path(path) for name, path in args.models.items()} if args.models else \
        build_pair(shape, out / "models")
    for path in paths.values():
        check_servable(path)
    log(f"models: {', '.join(str(path) for path in paths.values())}; threads {args.threads}")
    python = ensure_venv(Path(args.venv), log)
    worker = Worker(python, args.threads, out / "worker.log")
    hf_models = {name: load_transformers(path) for name, path in paths.items()}
    report: dict[str, Any] = {"shape": asdict(shape), "threads": args.threads, "repeats": args.repeats,
                              "compiled": not args.eager,
                              "prompt_tokens": args.prompt_tokens, "new_tokens": args.bench_tokens,
                              "machine": machine(), "loads": {}, "checks": [], "throughputs": [], "ratios": []}
    engines = {ENGINE_KEYS[key]: ENGINES[ENGINE_KEYS[key]] for key in args.engines}
    try:
        for engine, (model, impl) in engines.items():
            if impl is None:
                continue
            loaded = worker.call("load", name=engine, folder=str(paths[model]), impl=impl,
                                 max_model_len=shape.max_positions, kv_cache_bytes=args.kv_cache_mib << 20,
                                 enforce_eager=args.eager)
            report["versions"] = {key: loaded[key] for key in ("vllm", "torch", "transformers")}
            report["loads"][engine] = loaded["seconds"]
            log(f"loaded {engine} in {loaded['seconds']:.0f} s")
        references = {model: reference_for(path, args.new_tokens) for model, path in paths.items()}
        results = [check_engine(worker, engine, paths[model], references[model], args.atol, log)
                   for engine, (model, impl) in engines.items() if impl is not None]
        report["checks"] = [check_json(result) for result in results]
        for batch in args.batches:
            prompts = make_prompts([args.prompt_tokens] * batch, shape.vocab, seed=2)
            ids = torch.tensor(prompts)
            inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
            runs: dict[str, Callable[[], object]] = {}
            for engine, (model, impl) in engines.items():
                if impl is None:
                    runs[engine] = generation(hf_models[model], inputs, args.bench_tokens)
                else:
                    runs[engine] = _vllm_run(worker, engine, prompts, args.bench_tokens)
            log(f"timing batch {batch}: {args.repeats} rounds of {len(runs)} engines")
            before = os.getloadavg()[0]
            times = time_engines(runs, args.repeats)
            report.setdefault("load_average", {})[str(batch)] = [before, os.getloadavg()[0]]  # 1-minute, before/after
            report["throughputs"] += [asdict(row) for row in throughputs(times, batch, args.bench_tokens)]
            report["ratios"] += [asdict(row) for row in ratios(times, batch, RATIOS)]
            report.setdefault("seconds", {})[str(batch)] = times
    finally:
        worker.close()
    write_json(out / "bench.json", report)
    table = bench_markdown(report, results)
    (out / "bench.md").write_text(table + "\n")
    print(table)
    return 0 if all(result.passed for result in results) else 1


def _vllm_run(worker: Worker, engine: str, prompts: list[list[int]], new_tokens: int) -> Callable[[], None]:
    def run() -> None:
        reply = worker.call("generate", name=engine, prompts=prompts, max_tokens=new_tokens, together=True)
        produced = sum(len(completion["tokens"]) for completion in reply["completions"])
        if produced != len(prompts) * new_tokens:
            raise RuntimeError(f"{engine} produced {produced} new tokens, asked for {len(prompts) * new_tokens}.")

    return run


# ----------------------------------------------------------------------------------------------
# profile: where the Transformers backend's time goes


def run_profile(args: argparse.Namespace) -> int:
    """Each implementation loaded once with vLLM's torch profiler; per batch size two warm-up requests, then one
    profiled request, whose op table (self CPU time, the worker process) is kept as ``<impl>-b<batch>.txt``."""
    shape = Shape()
    out = Path(args.out or tempfile.mkdtemp(prefix="vllm-profile-"))
    out.mkdir(parents=True, exist_ok=True)
    paths = {name: Path(path) for name, path in args.models.items()} if args.models else \
        build_pair(shape, out / "models")
    worker = Worker(ensure_venv(Path(args.venv), log), args.threads, out / "worker-profile.log")
    summary: dict[str, Any] = {}
    try:
        for engine in ("vllm/llama (transformers backend)", "vllm/llama (vllm's own)"):
            model, impl = ENGINES[engine]
            slug = impl + ("-eager" if args.eager else "")
            directory = out / "profile" / slug
            directory.mkdir(parents=True, exist_ok=True)
            worker.call("load", name=engine, folder=str(paths[model]), impl=impl, max_model_len=shape.max_positions,
                        kv_cache_bytes=args.kv_cache_mib << 20, profile_dir=str(directory), enforce_eager=args.eager)
            for batch in args.batches:
                prompts = make_prompts([args.prompt_tokens] * batch, shape.vocab, seed=2)
                warm = [worker.call("generate", name=engine, prompts=prompts, max_tokens=args.bench_tokens)["seconds"]
                        for _ in range(2)]
                reply = worker.call("generate", name=engine, prompts=prompts, max_tokens=args.bench_tokens,
                                    profile=True)
                tables = sorted(directory.glob("*profiler_out*.txt"))
                kept = [str(table.rename(out / "profile" / f"{slug}-b{batch}{'' if i == 0 else f'-{i}'}.txt"))
                        for i, table in enumerate(tables)]
                summary[f"{slug}-b{batch}"] = {"unprofiled_seconds": warm, "profiled_seconds": reply["seconds"],
                                               "tables": kept}
                log(f"profiled {engine} at batch {batch}: {reply['seconds']:.2f} s (unprofiled "
                    f"{min(warm):.2f} s); tables {kept}")
            worker.call("close", name=engine)
    finally:
        worker.close()
    write_json(out / "profile.json", summary)
    return 0


# ----------------------------------------------------------------------------------------------
# Output


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count()}


def throughput_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = ["| engine | batch | new tokens/s (median) | min | max | rounds |", "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['engine']} | {r['batch']} | {r['median']:,.1f} | {r['minimum']:,.1f} | {r['maximum']:,.1f} | "
              f"{r['rounds']} |" for r in rows]
    return "\n".join(lines)


def ratio_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = ["| ratio of new tokens/s | batch | median | min | max |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {r['numerator']} / {r['denominator']} | {r['batch']} | {r['median']:.3f} | {r['minimum']:.3f} | "
              f"{r['maximum']:.3f} |" for r in rows]
    return "\n".join(lines)


def bench_markdown(report: dict[str, Any], results: Sequence[CheckResult]) -> str:
    versions = report.get("versions", {})
    target = [r for r in report["ratios"] if (r["numerator"], r["denominator"]) == TARGET[:2]]
    verdict = ", ".join(f"batch {r['batch']}: {r['median']:.3f} ({'met' if r['median'] >= TARGET[2] else 'NOT met'})"
                        for r in target)
    return "\n\n".join([
        f"vLLM {versions.get('vllm', '?')}, torch {versions.get('torch', '?')}, transformers (vLLM side) "
        f"{versions.get('transformers', '?')}; vLLM {'compiled (its default)' if report.get('compiled', True) else 'eager (enforce_eager)'}; "
        f"{report['machine']['cpu']}, {report['threads']} threads; prompts of "
        f"{report['prompt_tokens']} tokens, {report['new_tokens']} new tokens each, {report['repeats']} rounds; "
        f"load average (1 min) before/after timing: {_loads(report)}.",
        check_table(results), throughput_table(report["throughputs"]), ratio_table(report["ratios"]),
        f"Target hf_vanilla / Llama through the same backend >= {TARGET[2]}: {verdict}.",
    ])


def _loads(report: dict[str, Any]) -> str:
    loads = report.get("load_average", {})
    return ", ".join(f"batch {batch} {a:.1f}/{b:.1f}" for batch, (a, b) in loads.items()) or "not recorded"


# ----------------------------------------------------------------------------------------------
# Command line


def _models(value: str) -> dict[str, str]:
    """``vanilla=DIR,llama=DIR``: saved models to use instead of building the pair."""
    pairs = {name: absolute_path(folder)
             for name, folder in (item.split("=", 1) for item in value.split(",") if "=" in item)}
    if set(pairs) != {"vanilla", "llama"}:
        raise argparse.ArgumentTypeError(f"--models wants vanilla=DIR,llama=DIR, got {value!r}.")
    return pairs


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    timing = argparse.ArgumentParser(add_help=False, parents=[common_options()])
    timing.add_argument("--batches", type=int, nargs="+", default=[1, 16], help="batch sizes (default 1 16)")
    timing.add_argument("--prompt-tokens", type=int, default=16, help="prompt length when timing (default 16)")
    timing.add_argument("--bench-tokens", type=int, default=64, help="new tokens per request when timing (default 64)")
    timing.add_argument("--models", type=_models, help="vanilla=DIR,llama=DIR: saved models instead of building them")

    bench = commands.add_parser("bench", parents=[timing], help="check and time hf_vanilla against Llama")
    bench.add_argument("--repeats", type=int, default=7, help="timed rounds per batch size (default 7)")
    bench.add_argument("--engines", nargs="+", choices=ENGINE_KEYS, default=list(ENGINE_KEYS),
                       help="which engines take turns (default: all)")
    bench.set_defaults(func=run_bench)

    profile = commands.add_parser("profile", parents=[timing],
                                  help="torch profiler tables: the Llama through both vLLM implementations")
    profile.set_defaults(func=run_profile)
    return parse_checked(parser, argv)


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
