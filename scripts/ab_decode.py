#!/usr/bin/env python
"""Cached generate() of this checkout against another commit's, in one process, alternating rounds.

The other commit is a checkout (e.g. `git worktree add /tmp/baseline 1dca436`) whose ``hf_vanilla``
package is imported under the name ``hf_vanilla_baseline``. Each generating pair of the benchmark is built
by both packages with the same weights, and the two take turns. Ratios are medians of per-round ratios against the
baseline (> 1: faster than the baseline).

    python scripts/ab_decode.py /tmp/baseline --pairs llama gpt2 --repeats 7
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import statistics
import sys
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from hf_vanilla.tools import bench


def import_baseline(checkout: Path):
    package = checkout / "hf_vanilla"
    spec = importlib.util.spec_from_file_location(
        "hf_vanilla_baseline", package / "__init__.py", submodule_search_locations=[str(package)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["hf_vanilla_baseline"] = module
    spec.loader.exec_module(module)
    return importlib.import_module("hf_vanilla_baseline.bench")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("baseline", type=Path, help="a checkout of the commit to compare with")
    parser.add_argument("--pairs", nargs="+", choices=bench.GENERATING, default=["llama", "gpt2"])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--tiny", action="store_true", help="tiny sizes: a smoke test")
    args = parser.parse_args(argv)

    transformers.logging.set_verbosity_error()
    if args.threads:
        torch.set_num_threads(args.threads)
    baseline_bench = import_baseline(args.baseline)
    sizes = bench.TINY if args.tiny else bench.FULL
    print("| row | baseline | ours | unit | ours / baseline |")
    print("|---|---:|---:|---|---:|")
    for name in args.pairs:
        pair = bench.build_pair(name, sizes)
        baseline = baseline_bench.build_pair(name, baseline_bench.FULL if not args.tiny else baseline_bench.TINY).ours
        baseline.load_state_dict(pair.ours.state_dict())
        models = {"baseline": baseline.eval(), "ours": pair.ours.eval()}
        for batch in (1, 8):
            inputs = bench.make_inputs(pair.kind, batch, sizes.prompt, sizes.vocab, labels=False)
            inputs.pop("decoder_input_ids", None)
            runs = {side: bench.generation(model, inputs, sizes.new_tokens) for side, model in models.items()}
            times = bench.alternate(runs, args.repeats)
            rate = {side: [batch * sizes.new_tokens / t for t in series] for side, series in times.items()}
            median = {side: statistics.median(series) for side, series in rate.items()}
            ratio = statistics.median(a / b for a, b in zip(rate["ours"], rate["baseline"], strict=True))
            print(f"| generate-b{batch}/{name} | {median['baseline']:.1f} | {median['ours']:.1f} | tokens/s | "
                  f"{ratio:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
