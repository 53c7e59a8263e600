"""`hf-vanilla bench --size 124m|350m|1b`: hf_vanilla against its twin at the sizes people train and serve.

The twin is transformers' own model at the same shape: GPT-2 small (124M), a Llama of 350M, TinyLlama's 1.1B
(hidden 2048, 22 layers, 32 heads, 4 key/value heads, intermediate 5632, vocabulary 32000). Its checkpoint is built
on the meta device, filled by its own initialisation and saved in bfloat16 shards; ours is that checkpoint
converted with ``convert_checkpoint``. The measurements then run in fresh processes
(:mod:`hf_vanilla.tools.ladder_child`, run by path so the twin's never import hf_vanilla), in the order twin,
ours, twin again: the second twin is the A/A control, how far noise alone moves a ratio on this machine, and a
load that changes while ours runs moves it too. A
process costs its imports (seconds quiet, tens of seconds under load), so each side has one process for all the
bfloat16 steps and one for the two training steps: ten processes a rung, seven at 1b, which does not train
(:func:`_processes`).

Rows (ratio = twin / ours: above 1.0 ours is faster or smaller): ``model code import`` (hf_vanilla against the
twin's modeling module), ``meta`` (building the model on the meta device, the process's first build; then
``meta-again``, the least CPU time of seven more builds), ``load`` (``from_pretrained`` of the
sharded bfloat16 folder, the process's first: time and peak resident memory), ``load-remote`` (ours through
``trust_remote_code`` without the package imported: the import of the folder's code against the twin's modeling
module, then the load against the twin's load), ``save`` (``save_pretrained``), ``forward-bf16`` (one forward of
128 tokens), ``train`` and ``train-checkpointing`` (one float32 AdamW step, s/step and peak memory; 124m and 350m),
``generate-b1``/``generate-b8`` (greedy new tokens/s, the tokens of both models asserted identical; 1b), and
``convert-to-vanilla``/``convert-to-native`` (time, and peak memory against the checkpoint's size: the goal is one
shard plus 20%).

Sizes whose estimated peak does not fit in the memory available now are refused before anything is allocated;
``--estimate`` prints the plan with each process's estimated seconds from this machine's rates now.
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

from hf_vanilla.files.atomic import atomic_write_json

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
    prompt: int = 16  # generate's prompt
    new_tokens: int = 8
    twin_conv1d: bool = False  # GPT-2's Conv1D: [in, out] weights, which bfloat16 multiplies slowly on some CPUs

    @property
    def generate_batches(self) -> tuple[int, ...]:
        return (1, 8) if self.generate else ()


LLAMA_1B = dict(vocab_size=32000, hidden_size=2048, num_hidden_layers=22, num_attention_heads=32,
                num_key_value_heads=4, intermediate_size=5632, max_position_embeddings=2048, tie_word_embeddings=False)
SIZES: dict[str, Size] = {
    "tiny": Size("LlamaForCausalLM", "LlamaConfig", dict(vocab_size=256, hidden_size=64, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, intermediate_size=128, max_position_embeddings=64),
                 parameters=100_000, shard="40KB", train=True, generate=True, length=16, new_tokens=4),
    "124m": Size("GPT2LMHeadModel", "GPT2Config", dict(vocab_size=50257, n_embd=768, n_layer=12, n_head=12,
                 n_positions=1024), parameters=124_439_808, shard="100MB", train=True, generate=False,
                 twin_conv1d=True),
    "350m": Size("LlamaForCausalLM", "LlamaConfig", dict(vocab_size=32000, hidden_size=1024, num_hidden_layers=24,
                 num_attention_heads=16, num_key_value_heads=16, intermediate_size=2816, max_position_embeddings=2048,
                 tie_word_embeddings=False), parameters=374_000_000, shard="250MB", train=True, generate=False),
    # bfloat16 products run at a few GFLOP/s on a CPU without bfloat16 instructions: at 1.1B a forward of 32
    # tokens, and prompts of 4, keep the rung within minutes
    "1b": Size("LlamaForCausalLM", "LlamaConfig", LLAMA_1B, parameters=1_100_048_384, shard="1GB", train=False,
               generate=True, length=32, prompt=4),
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
        import ladder_child  # by its folder, as the child process runs it (it imports no hf_vanilla)
    finally:
        sys.path.remove(str(CHILD.parent))
    return ladder_child.main(spec)


def _mib(value: float) -> float:
    return round(value, 1)


def _processes(name: str) -> list[tuple[str, str]]:
    """The rung's processes in the order they run, (kind, side): the plan both the ladder and its estimate follow.
    Each measurement of ours runs between the twin's and the twin's again (the A/A control), so that a load that
    changes while ours runs moves the A/A spread as well, rather than ours' figure alone."""
    size = SIZES[name]
    plan = [("make", "twin"), ("convert", "to-vanilla"), ("convert", "to-native")]
    plan += [("serve", side) for side in TRIO] + [("remote", "ours")]
    if size.train:
        plan += [("train", side) for side in TRIO]
    return plan


TRIO = ("twin", "ours", "twin")  # the order of a row's three runs


def estimate_seconds(name: str, rates: dict[str, float]) -> list[tuple[str, float]]:
    """Each process's seconds on a machine with ``rates`` (:func:`calibrate`): its imports, plus its products at
    the measured float32/bfloat16 rates, plus its bytes written at the measured speed. A plan, not a promise: the
    rates are a 1024x4096 product's, and a model's layers run a little slower than that."""
    size = SIZES[name]
    params, length, new = size.parameters, size.length, size.new_tokens
    checkpoint = 2 * params  # bfloat16
    start = rates["import_s"] + 1.0  # + transformers' first from_pretrained (it compiles its key-renaming rules)
    write = checkpoint / rates["write_bytes_per_s"]

    def serve(side: str) -> float:
        bf16 = rates["bf16_flops_conv1d" if size.twin_conv1d and side == "twin" else "bf16_flops"]
        seconds = 2 * write + 2 * params * (length + 8) / bf16  # save, load; the forward and its warm-up
        for batch in size.generate_batches:  # warm-up (4 tokens, 2 new), prompt, new tokens one at a time
            per_token = 2 * params * batch / min(batch * rates["bf16_flops_b1"], bf16)
            seconds += (new + 2) * per_token + 2 * params * batch * (size.prompt + 4) / bf16
        return seconds

    def steps(kind: str, side: str) -> float:
        return {
            "make": lambda: params / rates["fill_per_s"] + write,
            "convert": lambda: 2 * write,
            "serve": lambda: serve(side),
            "remote": lambda: rates["import_s"] + write,
            # the checkpointed step runs the forward twice: 8 flops a parameter and token, the plain step 6;
            # AdamW's three steps make about four passes over the parameters each (at most a random fill's speed)
            "train": lambda: 2 * write + 14 * params * length / rates["fp32_flops"]
            + 3 * 4 * params / rates["fill_per_s"],
        }[kind]()

    return [(f"{kind} {side}", start + steps(kind, side)) for kind, side in _processes(name)]


COMPUTED = ("import_s", "fp32_flops", "bf16_flops", "bf16_flops_b1", "bf16_flops_conv1d", "fill_per_s")


def quiet(rates: dict[str, float]) -> dict[str, float]:
    """The same machine with its CPUs all ours: what the processor does goes 1 / cpu_share faster, writing not."""
    share = rates.get("cpu_share", 1.0)
    return {key: (value * share if key == "import_s" else value / share) if key in COMPUTED else value
            for key, value in rates.items()}


def calibrate(run: Runner | None = None, scratch: str | None = None) -> dict[str, float]:
    """The rates of this machine now, measured by one fresh process (its imports are the first rate)."""
    return (run or run_child)(dict(kind="calibrate", scratch=scratch))


def format_plan(names: Sequence[str], rates: dict[str, float]) -> str:
    lines = [f"Rates now: imports {rates['import_s']:.1f} s a process, float32 {rates['fp32_flops'] / 1e9:.1f} "
             f"GFLOP/s, bfloat16 {rates['bf16_flops'] / 1e9:.1f} GFLOP/s ({rates['bf16_flops_b1'] / 1e9:.2f} at one "
             f"row, {rates['bf16_flops_conv1d'] / 1e9:.2f} in Conv1D's layout), writing "
             f"{rates['write_bytes_per_s'] / 1e6:.0f} MB/s; load average {os.getloadavg()[0]:.1f} "
             f"on {os.cpu_count()} CPUs"]
    share = rates.get("cpu_share", 1.0)
    lines.append(f"This process got {share:.0%} of its threads' CPUs; 'quiet' assumes all of them.")
    totals = [0.0, 0.0]
    for name in names:
        now, alone = estimate_seconds(name, rates), estimate_seconds(name, quiet(rates))
        rung = [sum(seconds for _, seconds in steps) for steps in (now, alone)]
        totals = [total + seconds for total, seconds in zip(totals, rung, strict=True)]
        lines.append(f"--size {name}: {len(now)} processes, about {rung[0] / 60:.1f} min now, {rung[1] / 60:.1f} "
                     f"quiet; peak memory about {estimate_peak_bytes(SIZES[name]) / GIB:.1f} GiB "
                     f"({available_bytes() / GIB:.1f} GiB available)")
        lines += [f"    {step:<22} {seconds:6.0f} s now {quietly:6.0f} s quiet"
                  for (step, seconds), (_, quietly) in zip(now, alone, strict=True)]
    lines.append(f"all: about {totals[0] / 60:.1f} min now, {totals[1] / 60:.1f} min quiet")
    return "\n".join(lines)


#: The rows ``--rows build-load`` measures: what building and loading cost, without the rest of the rung.
BUILD_LOAD_ROWS = ("model code import time", "meta build time", "meta rebuild CPU time", "load bf16 time",
                   "load bf16 peak RSS")


def ladder(name: str, work: Path, run: Runner = run_child, log: Callable[[str], None] = print,
           threads: int | None = None, build_load_only: bool = False) -> list[Row]:
    """Every row of one rung, measured in ``work`` (which receives the two checkpoints); with ``build_load_only``
    only :data:`BUILD_LOAD_ROWS` (the serving processes stop after the load, nothing converts back or trains)."""
    size = SIZES[name]
    refuse_if_too_large(name, size)
    twin_dir, ours_dir, back_dir = work / "twin", work / "ours", work / "back"
    common = dict(threads=threads, shard=size.shard, scratch=str(work))
    started = time.perf_counter()
    spent: list[tuple[str, float]] = []

    def timed(label: str, spec: dict[str, Any]) -> dict[str, Any]:
        begun = time.perf_counter()
        result = run(spec)
        spent.append((label, time.perf_counter() - begun))
        return result

    log(f"[{name}] building the twin on the meta device, filling it, saving bfloat16 shards of {size.shard}")
    timed("make twin", dict(common, kind="make", model_class=size.model_class, config_class=size.config_class,
                            config=size.config, out=str(twin_dir)))
    checkpoint = sum(p.stat().st_size for p in twin_dir.glob("*.safetensors"))
    largest = max(p.stat().st_size for p in twin_dir.glob("*.safetensors"))
    rows: list[Row] = []

    ways = "to hf_vanilla" if build_load_only else "both ways"
    log(f"[{name}] convert_checkpoint {ways} ({checkpoint / GIB:.2f} GiB, largest shard {largest / GIB:.2f} GiB)")
    there = timed("convert to-vanilla", dict(common, kind="convert", dir=str(twin_dir), out=str(ours_dir)))["convert"]
    if build_load_only:
        return _build_load_rows(name, work, timed, log, common, size)
    back = timed("convert to-native", dict(common, kind="convert", dir=str(ours_dir), out=str(back_dir)))["convert"]
    shutil.rmtree(back_dir)
    goal = largest + 0.2 * checkpoint
    for direction, result in (("to-vanilla", there), ("to-native", back)):
        rows.append(Row(f"convert-{direction} peak / checkpoint", "x", result["peak_mib"] * 2**20 / checkpoint,
                        goal / checkpoint, goal / checkpoint,
                        note=f"{result['seconds']:.1f} s; goal: one shard + 20% = {goal / checkpoint:.2f}x"))

    def trio(kind: str, **extra: Any) -> tuple[dict, dict, dict]:
        """(ours, twin, control), run in :data:`TRIO`'s order."""
        log(f"[{name}] {kind}: twin, ours, twin again")
        folders = {"ours": ours_dir, "twin": twin_dir}
        twin, ours, control = (timed(f"{kind} {side}", dict(common, kind=kind, side=side, dir=str(folders[side]), **extra))
                               for side in TRIO)
        return ours, twin, control

    def add(label: str, results: Sequence[dict], step: str, memory: bool = True) -> None:
        ours, twin, control = (result[step] for result in results)
        rows.append(Row(f"{label} time", "s", ours["seconds"], twin["seconds"], control["seconds"]))
        if memory:
            rows.append(Row(f"{label} peak RSS", "MiB", _mib(ours["peak_mib"]), _mib(twin["peak_mib"]),
                            _mib(control["peak_mib"])))

    served = trio("serve", length=size.length, generate_batches=list(size.generate_batches), prompt=size.prompt,
                  new_tokens=size.new_tokens)
    add("model code import", served, "import", memory=False)
    add("meta build", served, "meta", memory=False)
    rows.append(meta_rebuild_row(served))
    add("load bf16", served, "load")
    log(f"[{name}] load through trust_remote_code, the package not imported")
    remote = timed("remote ours", dict(common, kind="remote", side="ours", dir=str(ours_dir)))
    twin_import, twin_load = (tuple(result[step] for result in served[1:]) for step in ("import", "load"))
    rows.append(Row("load-remote code import time", "s", remote["import"]["seconds"], *(r["seconds"] for r in twin_import)))
    rows.append(Row("load-remote time", "s", remote["load"]["seconds"], *(r["seconds"] for r in twin_load)))
    rows.append(Row("load-remote peak RSS", "MiB", _mib(remote["load"]["peak_mib"]), *(_mib(r["peak_mib"]) for r in twin_load)))
    add("save_pretrained", served, "save")
    rows.append(Row("forward bf16", "tokens/s", *(size.length / r["forward"]["seconds"] for r in served),
                    higher_is_better=True))
    if size.train:
        trained = trio("train", length=size.length)
        add("train step fp32 AdamW", trained, "train")
        add("train step fp32 AdamW + checkpointing", trained, "train-checkpointing")
    for batch in size.generate_batches:
        results = [r[f"generate-b{batch}"] for r in served]
        tokens = [r["tokens"] for r in results]
        assert tokens[0] == tokens[1] == tokens[2], f"greedy tokens differ at batch {batch}: {tokens}"
        rows.append(Row(f"generate b{batch} bf16 (tokens identical)", "tokens/s",
                        *(batch * size.new_tokens / r["seconds"] for r in results), higher_is_better=True))
    log(f"[{name}] done in {time.perf_counter() - started:.0f} s: "
        + ", ".join(f"{label} {seconds:.0f} s" for label, seconds in spent))
    return rows


def _build_load_rows(name: str, work: Path, timed: Callable[[str, dict], dict], log: Callable[[str], None],
                     common: dict[str, Any], size: Size) -> list[Row]:
    """The serving trio (twin, ours, twin again) stopped after the load: code import, meta build, load."""
    log(f"[{name}] code import, meta build and load: twin, ours, twin again")
    folders = {"ours": work / "ours", "twin": work / "twin"}
    served = [timed(f"serve {side}", dict(common, kind="serve", side=side, dir=str(folders[side]), stop_after="load",
                                          length=size.length))
              for side in TRIO]
    twin, ours, control = served
    rows = [Row(f"{label} time", "s", *(result[step]["seconds"] for result in (ours, twin, control)))
            for label, step in (("model code import", "import"), ("meta build", "meta"), ("load bf16", "load"))]
    rows.insert(2, meta_rebuild_row((ours, twin, control)))
    rows.append(Row("load bf16 peak RSS", "MiB", *(_mib(result["load"]["peak_mib"]) for result in (ours, twin, control))))
    return rows


def meta_rebuild_row(served: Sequence[dict]) -> Row:
    """The meta build repeated in each serving process, its least CPU time: what building costs once the first
    build's one-time work is done, steadier on a loaded machine than the first build's wall time."""
    return Row("meta rebuild CPU time", "s", *(result["meta-again"]["seconds"] for result in served))


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
    estimate: bool = False  # print the plan and its estimated minutes from this machine's rates, build nothing
    rows: str = "all"  # or "build-load": only BUILD_LOAD_ROWS


def run_ladder(options: Options, log: Callable[[str], None] = print) -> dict[str, list[Row]]:
    if options.work:  # the user names a folder to put checkpoints in, as --output-dir elsewhere: made if missing
        Path(options.work).mkdir(parents=True, exist_ok=True)
    if options.estimate:
        log(format_plan(options.sizes, calibrate(scratch=options.work)))
    for name in options.sizes:  # every size is checked before the first is built
        refuse_if_too_large(name, SIZES[name])
    if options.estimate:
        return {}
    results = {}
    for name in options.sizes:
        with tempfile.TemporaryDirectory(dir=options.work, prefix=f"ladder-{name}-") as work:
            results[name] = ladder(name, Path(work), log=log, threads=options.threads,
                                   build_load_only=options.rows == "build-load")
        log(format_table(name, results[name]))
        if options.json:  # after every rung, so a later rung's failure keeps the rows measured before it
            atomic_write_json(options.json, {done: [dict(vars(row), ratio=row.ratio, spread=row.spread) for row in rows]
                                             for done, rows in results.items()})
    return results


__all__ = ["BUILD_LOAD_ROWS", "SIZES", "Options", "Row", "Size", "calibrate", "quiet", "estimate_peak_bytes", "estimate_seconds", "format_plan",
           "format_table", "ladder", "run_child", "run_in_process", "run_ladder"]
