#!/usr/bin/env python
"""Where a benchmark pair's time goes: ours against the transformers reference, op by op, in one process.

For the training step and cached ``generate()`` at batch 1 and 8 (the bench's rows, its shapes and inputs), each
model's time per call is split into groups of aten ops by their self CPU time under ``torch.profiler``:

* ``matmul``: the products (``mm``, ``addmm``, ``bmm``, ...);
* ``attention``: SDPA's kernels, forward and backward;
* ``element-wise``: everything else that computes or copies (norms, RoPE, activations, residuals, the
  embedding, the loss, casts and copies);
* ``views``: ops that only make tensor metadata or allocate (view, transpose, slice, empty, ...);
* ``other``: the wall time of the profiled call minus all of the above: Python, the autograd engine's
  bookkeeping, ``generate()``'s own loop (and the profiler's own recording, about a microsecond per op).

Each model runs ``--profiled`` profiled calls, the two models taking turns, and every figure is the median
over those calls, so a call that the scheduler interrupted (a shared machine) does not set a figure. The
unprofiled wall times and the ratio column come from ``--repeats`` alternating rounds (bench.alternate), the
ratio being the median of per-round ratios as in the bench. ``--top`` lists the ops whose time differs most.

    python scripts/profile_pair.py --pair llama --threads 2 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import torch
import transformers
from torch.profiler import ProfilerActivity
from torch.profiler import profile as torch_profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from hf_vanilla.tools import bench

GROUPS = ("matmul", "attention", "element-wise", "views", "other")
MATMULS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addmv", "aten::mv", "aten::dot",
           "aten::matmul", "aten::linear"}
VIEWS = {"aten::view", "aten::reshape", "aten::_reshape_alias", "aten::_unsafe_view", "aten::transpose",
         "aten::t", "aten::permute", "aten::unsqueeze", "aten::squeeze", "aten::expand", "aten::slice",
         "aten::select", "aten::narrow", "aten::as_strided", "aten::alias", "aten::detach", "aten::detach_",
         "aten::split", "aten::chunk", "aten::unbind", "aten::empty", "aten::empty_strided", "aten::empty_like",
         "aten::lift_fresh", "aten::resolve_conj", "aten::resolve_neg", "aten::result_type", "aten::item",
         "aten::_local_scalar_dense", "aten::is_nonzero", "aten::numpy_T", "aten::expand_as", "aten::view_as"}


def group_of(name: str) -> str | None:
    """The group of one profiled event; None for events that are not ops (the autograd engine's, ours)."""
    if name in MATMULS:
        return "matmul"
    if "scaled_dot_product" in name or "flash_attention" in name or "efficient_attention" in name:
        return "attention"
    if name in VIEWS:
        return "views"
    if name.startswith(("aten::", "mkldnn::")):
        return "element-wise"
    return None


def profile(run: Callable[[], None]) -> tuple[list[tuple[str, float]], float]:
    """(name, self CPU microseconds) of every event of one call of ``run``, and the call's wall seconds."""
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        run()
        wall_s = time.perf_counter() - start
    return [(event.name, event.self_cpu_time_total) for event in prof.events()], wall_s


def split(events: list[tuple[str, float]], wall_s: float) -> dict[str, tuple[float, int]]:
    """group -> (milliseconds, op calls) of one profiled call; ``other`` is its wall time minus every op."""
    table: dict[str, list[float]] = {group: [0.0, 0] for group in GROUPS}
    for name, self_us in events:
        group = group_of(name)
        if group is not None:
            table[group][0] += self_us / 1e3
            table[group][1] += 1
    table["other"][0] = 1e3 * wall_s - sum(ms for ms, _ in table.values())
    return {group: (ms, int(count)) for group, (ms, count) in table.items()}


def per_op(events: list[tuple[str, float]]) -> dict[str, tuple[float, int]]:
    """op name -> (milliseconds, calls) of one profiled call."""
    table: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for name, self_us in events:
        if group_of(name) is not None:
            table[name][0] += self_us / 1e3
            table[name][1] += 1
    return {name: (ms, int(count)) for name, (ms, count) in table.items()}


def medians(tables: list[dict[str, tuple[float, int]]]) -> dict[str, tuple[float, float]]:
    """Per key, the median milliseconds and median count over the profiled calls (absent = 0)."""
    keys = set().union(*tables)
    return {key: (statistics.median(t.get(key, (0.0, 0))[0] for t in tables),
                  statistics.median(t.get(key, (0.0, 0))[1] for t in tables)) for key in keys}


def largest_gaps(ours: dict, reference: dict, top: int) -> list[tuple[str, tuple, tuple]]:
    """The ``top`` ops whose median time differs most between the two models, with both (ms, calls)."""
    zero = (0.0, 0)
    rows = [(name, ours.get(name, zero), reference.get(name, zero)) for name in set(ours) | set(reference)]
    return sorted(rows, key=lambda row: abs(row[1][0] - row[2][0]), reverse=True)[:top]


def workloads(pair: bench.Pair, sizes: bench.Sizes) -> dict[str, Callable]:
    train_inputs = bench.make_inputs(pair.kind, sizes.batch, sizes.seq, sizes.vocab, labels=True)
    prompts = {batch: bench.make_inputs(pair.kind, batch, sizes.prompt, sizes.vocab, labels=False) for batch in (1, 8)}
    for prompt in prompts.values():
        prompt.pop("decoder_input_ids", None)
    return {
        "train": lambda model: bench.train_step(model.train(), train_inputs),
        "generate-b1": lambda model: bench.generation(model.eval(), prompts[1], sizes.new_tokens),
        "generate-b8": lambda model: bench.generation(model.eval(), prompts[8], sizes.new_tokens),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair", choices=bench.GENERATING, default="llama")
    parser.add_argument("--measure", nargs="+", choices=["train", "generate-b1", "generate-b8"],
                        default=["train", "generate-b1"])
    parser.add_argument("--repeats", type=int, default=5, help="unprofiled alternating rounds")
    parser.add_argument("--profiled", type=int, default=5, help="profiled calls of each model")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--top", type=int, default=8, help="ops with the largest time difference to list")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes: a smoke test")
    args = parser.parse_args(argv)

    transformers.logging.set_verbosity_error()
    if args.threads:
        torch.set_num_threads(args.threads)
    sizes = bench.TINY if args.tiny else bench.FULL
    pair = bench.build_pair(args.pair, sizes)
    models = {"ours": pair.ours, "reference": pair.reference}
    print(f"pair={args.pair} threads={torch.get_num_threads()} load average={os.getloadavg()[0]:.1f}")
    for measure, make in workloads(pair, sizes).items():
        if measure not in args.measure:
            continue
        runs = {side: make(model) for side, model in models.items()}
        times = bench.alternate(runs, args.repeats)
        wall = {side: statistics.median(series) for side, series in times.items()}
        ratio = statistics.median(r / o for o, r in zip(times["ours"], times["reference"], strict=True))
        calls: dict[str, list] = {side: [] for side in models}
        for round_ in range(args.profiled):
            for side in list(models) if round_ % 2 == 0 else list(models)[::-1]:
                calls[side].append(profile(runs[side]))
        groups = {side: medians([split(*call) for call in calls[side]]) for side in models}
        ops = {side: medians([per_op(events) for events, _ in calls[side]]) for side in models}
        print(f"\n{measure}: wall ours {1e3 * wall['ours']:.1f} ms, reference {1e3 * wall['reference']:.1f} ms, "
              f"speed ratio reference/ours time {ratio:.3f} (median of {args.repeats} paired rounds); "
              f"profiled: medians of {args.profiled} calls each; load average {os.getloadavg()[0]:.1f}")
        print("| group | ours ms | reference ms | ours - reference ms | ours ops | reference ops |")
        print("|---|---:|---:|---:|---:|---:|")
        for group in GROUPS:
            (ours, ours_n), (reference, reference_n) = groups["ours"][group], groups["reference"][group]
            counts = "| |" if group == "other" else f"| {ours_n:.0f} | {reference_n:.0f} |"
            print(f"| {group} | {ours:.2f} | {reference:.2f} | {ours - reference:+.2f} {counts}")
        print(f"ops with the largest time difference (ms and calls per call), top {args.top}:")
        for name, (o_ms, o_n), (r_ms, r_n) in largest_gaps(ops["ours"], ops["reference"], args.top):
            print(f"  {name}: ours {o_ms:.2f} ms x{o_n:.0f}, reference {r_ms:.2f} ms x{r_n:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
