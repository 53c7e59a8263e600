"""`hf-vanilla bench --size 124m|350m|1b`: hf_vanilla against its twin at the sizes people train and serve.

The twin is transformers' own model at the same shape: GPT-2 small (124M), a Llama of 350M, TinyLlama's 1.1B
(hidden 2048, 22 layers, 32 heads, 4 key/value heads, intermediate 5632, vocabulary 32000). Its checkpoint is built
on the meta device, filled by its own initialisation and saved in bfloat16 shards; ours is that checkpoint
converted with ``convert_checkpoint``. Every measurement then runs in a fresh process
(:mod:`hf_vanilla.tools.ladder_child`, run by path so the twin's never import hf_vanilla), in the order ours,
twin, twin again: the second twin is the A/A control, how far noise alone moves a ratio on this machine.

Rows (ratio = twin / ours: above 1.0 ours is faster or smaller): ``meta`` (building the model on the meta
device), ``load`` (``from_pretrained`` of the sharded bfloat16 folder: time and peak resident memory),
``load-remote`` (ours through ``trust_remote_code`` without the package imported, against the twin's load),
``save`` (``save_pretrained``), ``forward-bf16`` (one forward of 128 tokens), ``train`` and ``train-checkpointing``
(one float32 AdamW step, s/step and peak memory; 124m and 350m), ``generate-b1``/``generate-b8`` (greedy new
tokens/s, the tokens of both models asserted identical; 1b), and ``convert-to-vanilla``/``convert-to-native``
(time, and peak memory against the checkpoint's size: the goal is one shard plus 20%).

Sizes whose estimated peak does not fit in the memory available now are refused before anything is allocated.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHILD = Path(__file__).with_name("ladder_child.py")
GIB = 1024**3


@dataclass(frozen=True)
class Size:
    """One rung: the twin's class and config, its shard size and which measurements it gets."""

    model_class: str
    config_class: str
    config: dict[str, Any]
    parameters: int  # for the memory estimate, before anything is built
    shard: str
    train: bool
    generate: bool
    length: int = 128  # tokens of a forward or a training step
    new_tokens: int = 8


LLAMA_1B = dict(vocab_size=32000, hidden_size=2048, num_hidden_layers=22, num_attention_heads=32,
                num_key_value_heads=4, intermediate_size=5632, max_position_embeddings=2048, tie_word_embeddings=False)
SIZES: dict[str, Size] = {
    "tiny": Size("LlamaForCausalLM", "LlamaConfig", dict(vocab_size=256, hidden_size=64, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, intermediate_size=128, max_position_embeddings=64),
                 parameters=100_000, shard="40KB", train=True, generate=True, length=16, new_tokens=4),
    "124m": Size("GPT2LMHeadModel", "GPT2Config", dict(vocab_size=50257, n_embd=768, n_layer=12, n_head=12,
                 n_positions=1024), parameters=124_439_808, shard="100MB", train=True, generate=False),
    "350m": Size("LlamaForCausalLM", "LlamaConfig", dict(vocab_size=32000, hidden_size=1024, num_hidden_layers=24,
                 num_attention_heads=16, num_key_value_heads=16, intermediate_size=2816, max_position_embeddings=2048,
                 tie_word_embeddings=False), parameters=374_000_000, shard="250MB", train=True, generate=False),
    "1b": Size("LlamaForCausalLM", "LlamaConfig", LLAMA_1B, parameters=1_100_048_384, shard="1GB", train=False,
               generate=True),
}


def estimate_peak_bytes(size: Size) -> int:
    """The largest step's resident memory: a float32 AdamW step (weights, gradients, two moments: 16 bytes a
    parameter, plus a quarter for activations) where the rung trains, else two bfloat16 copies (save, convert)."""
    return int(size.parameters * (16 * 1.25 if size.train else 2 * 2))


def available_bytes() -> int:
    """MemAvailable from /proc/meminfo (the memory a process can take without swapping others out)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def refuse_if_too_large(name: str, size: Size) -> None:
    need, have = estimate_peak_bytes(size), available_bytes()
    if need > have:
        raise MemoryError(f"--size {name} needs about {need / GIB:.1f} GiB at its peak (estimated before building "
                          f"anything) and {have / GIB:.1f} GiB is available now: free memory or pick a smaller size.")


@dataclass
class Row:
    name: str
    unit: str
    ours: float
    twin: float
    control: float  # the twin's second run
    higher_is_better: bool = False
    note: str = ""

    @property
    def ratio(self) -> float:
        better, worse = (self.ours, self.twin) if self.higher_is_better else (self.twin, self.ours)
        return better / worse if worse else math.nan  # nothing measured (a tiny model's memory)

    @property
    def spread(self) -> float:
        """|A/A - 1|: the same model's two runs disagree this much on this machine now."""
        return abs(self.control / self.twin - 1) if self.twin else 0.0


Runner = Callable[[dict[str, Any]], dict[str, Any]]


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    """One measurement in a fresh process (its peak memory is its own), offline."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    done = subprocess.run([sys.executable, str(CHILD), json.dumps(spec)], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"the {spec['kind']} measurement ({spec.get('side', '')}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_in_process(spec: dict[str, Any]) -> dict[str, Any]:
    """The same measurement in this process: structure only (the tests), its memory figures mean nothing."""
    sys.path.insert(0, str(CHILD.parent))
    try:
        import ladder_child
    finally:
        sys.path.remove(str(CHILD.parent))
    return ladder_child.main(spec)


def _mib(value: float) -> float:
    return round(value, 1)


def ladder(name: str, work: Path, run: Runner = run_child, log: Callable[[str], None] = print,
           threads: int | None = None) -> list[Row]:
    """Every row of one rung, measured in ``work`` (which receives the two checkpoints)."""
    size = SIZES[name]
    refuse_if_too_large(name, size)
    twin_dir, ours_dir, back_dir = work / "twin", work / "ours", work / "back"
    common = dict(threads=threads, shard=size.shard, scratch=str(work))
    started = time.perf_counter()
    log(f"[{name}] building the twin on the meta device, filling it, saving bfloat16 shards of {size.shard}")
    run(dict(common, kind="make", model_class=size.model_class, config_class=size.config_class,
             config=size.config, out=str(twin_dir)))
    checkpoint = sum(p.stat().st_size for p in twin_dir.glob("*.safetensors"))
    largest = max(p.stat().st_size for p in twin_dir.glob("*.safetensors"))
    rows: list[Row] = []

    log(f"[{name}] convert_checkpoint both ways ({checkpoint / GIB:.2f} GiB, largest shard {largest / GIB:.2f} GiB)")
    there = run(dict(common, kind="convert", dir=str(twin_dir), out=str(ours_dir)))
    back = run(dict(common, kind="convert", dir=str(ours_dir), out=str(back_dir)))
    shutil.rmtree(back_dir)
    goal = largest + 0.2 * checkpoint
    for direction, result in (("to-vanilla", there), ("to-native", back)):
        rows.append(Row(f"convert-{direction} peak / checkpoint", "x", result["peak_mib"] * 2**20 / checkpoint,
                        goal / checkpoint, goal / checkpoint,
                        note=f"{result['seconds']:.1f} s; goal: one shard + 20% = {goal / checkpoint:.2f}x"))

    def trio(kind: str, **extra: Any) -> tuple[dict, dict, dict]:
        log(f"[{name}] {kind} {extra or ''}".rstrip())
        ours = run(dict(common, kind=kind, side="ours", dir=str(ours_dir), **extra))
        twin = run(dict(common, kind=kind, side="twin", dir=str(twin_dir), **extra))
        control = run(dict(common, kind=kind, side="twin", dir=str(twin_dir), **extra))
        return ours, twin, control

    def add(label: str, results: tuple[dict, dict, dict], memory: bool = True) -> None:
        ours, twin, control = results
        rows.append(Row(f"{label} time", "s", ours["seconds"], twin["seconds"], control["seconds"]))
        if memory:
            rows.append(Row(f"{label} peak RSS", "MiB", _mib(ours["peak_mib"]), _mib(twin["peak_mib"]),
                            _mib(control["peak_mib"])))

    add("meta build", trio("meta"), memory=False)
    add("load bf16", trio("load"))
    remote = run(dict(common, kind="load-remote", side="ours", dir=str(ours_dir)))
    load = [row for row in rows if row.name.startswith("load bf16")]
    rows.append(Row("load-remote time", "s", remote["seconds"], load[0].twin, load[0].control))
    rows.append(Row("load-remote peak RSS", "MiB", _mib(remote["peak_mib"]), load[1].twin, load[1].control))
    add("save_pretrained", trio("save"))
    forward = trio("forward", batch=1, length=size.length)
    rows.append(Row("forward bf16", "tokens/s", *(size.length / r["seconds"] for r in forward), higher_is_better=True))
    if size.train:
        for checkpointing in (False, True):
            label = "train step fp32 AdamW" + (" + checkpointing" if checkpointing else "")
            add(label, trio("train", batch=1, length=size.length, checkpointing=checkpointing))
    if size.generate:
        for batch in (1, 8):
            results = trio("generate", batch=batch, length=16, new_tokens=size.new_tokens)
            tokens = [r["tokens"] for r in results]
            assert tokens[0] == tokens[1] == tokens[2], f"greedy tokens differ at batch {batch}: {tokens}"
            rows.append(Row(f"generate b{batch} bf16 (tokens identical)", "tokens/s",
                            *(batch * size.new_tokens / r["seconds"] for r in results), higher_is_better=True))
    log(f"[{name}] done in {time.perf_counter() - started:.0f} s")
    return rows


def format_table(name: str, rows: Sequence[Row]) -> str:
    lines = [f"| {name} | ours | twin | unit | ratio (twin/ours; >1 ours better) | A/A spread | note |",
             "|---|---:|---:|---|---:|---:|---|"]
    for row in rows:
        lines.append(f"| {row.name} | {row.ours:.3g} | {row.twin:.3g} | {row.unit} | {row.ratio:.2f}x | "
                     f"±{row.spread:.0%} | {row.note} |")
    return "\n".join(lines)


@dataclass
class Options:
    sizes: list[str] = field(default_factory=lambda: ["124m"])
    work: str | None = None
    json: str | None = None
    threads: int | None = None


def run_ladder(options: Options, log: Callable[[str], None] = print) -> dict[str, list[Row]]:
    for name in options.sizes:  # every size is checked before the first is built
        refuse_if_too_large(name, SIZES[name])
    results = {}
    for name in options.sizes:
        with tempfile.TemporaryDirectory(dir=options.work, prefix=f"ladder-{name}-") as work:
            results[name] = ladder(name, Path(work), log=log, threads=options.threads)
        log(format_table(name, results[name]))
    if options.json:
        payload = {name: [dict(vars(row), ratio=row.ratio, spread=row.spread) for row in rows]
                   for name, rows in results.items()}
        Path(options.json).write_text(json.dumps(payload, indent=2) + "\n")
    return results


__all__ = ["SIZES", "Options", "Row", "Size", "estimate_peak_bytes", "format_table", "ladder", "run_child",
           "run_in_process", "run_ladder"]
