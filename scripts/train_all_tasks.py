#!/usr/bin/env python
"""Train every task at a small size on its real corpus, a few minutes each on a 2-core CPU.

    python scripts/train_all_tasks.py                         # mlm, classification
    python scripts/train_all_tasks.py --tasks clm mlm --time-limit-minutes 5 --output-dir runs/all-tasks

The real-data check the unit tests cannot be (they must run offline in seconds). Each run is a normal
``hf_vanilla.training.train`` run directory (model, tokenizer, metrics.json, curves.png, README.md); the
script prints one line of headline metrics per task and writes ``summary.json`` next to the runs.
The causal LM and translation have their own, longer recipes: ``scripts/main_job.py`` (15 minutes) and
``scripts/train_translation.py`` (an hour: translation learns nothing useful in five CPU minutes).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from hf_vanilla.training import train

# Small models that learn something in minutes on a CPU; every option is a TrainOptions field. Pre-norm
# blocks: with the paper's post-norm, these short runs sit on the unigram plateau for most of their budget
# (see docs/training.md); everything else is the paper's block.
PRE = {"norm_position": "pre"}
SETTINGS: dict[str, dict[str, Any]] = {
    "clm": dict(preset="small", config=PRE, vocab_size=4096, block_size=128, batch_size=16, learning_rate=1e-3,
                dropout=0.0, max_steps=300, max_eval_samples=64),
    "mlm": dict(preset="small", config=dict(PRE, hidden_size=128, intermediate_size=512), vocab_size=4096,
                lowercase=True, block_size=128, batch_size=16, learning_rate=1e-3, dropout=0.0, max_steps=400,
                eval_steps=100, max_eval_samples=128, max_test_samples=256),
    "classification": dict(preset="small", config={"hidden_size": 128, "intermediate_size": 512,
                                                   "num_hidden_layers": 2}, vocab_size=8000, lowercase=True,
                           max_length=256, batch_size=16, learning_rate=1e-3, dropout=0.1, num_train_epochs=3),
}

HEADLINE = {
    "clm": ("test_perplexity", "test_perplexity"),
    "mlm": ("test_accuracy", "test_perplexity"),
    "classification": ("test_accuracy", "test_macro_f1"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["mlm", "classification"],
                        choices=sorted(SETTINGS))
    parser.add_argument("--output-dir", default="runs/all-tasks")
    parser.add_argument("--time-limit-minutes", "--time-limit", dest="time_limit", type=float, default=5.0,
                        metavar="MINUTES", help="minutes of training per task at most")
    args = parser.parse_args(argv)

    root = Path(args.output_dir)
    summary: dict[str, Any] = {}
    for task in args.tasks:
        t0 = time.perf_counter()
        result = train(task, root / task, overwrite=True, time_limit_minutes=args.time_limit, **SETTINGS[task])
        timing = json.loads((result.run_dir / "metrics.json").read_text())["timing"]
        summary[task] = {
            "metrics": {k: v for k, v in result.metrics.items() if isinstance(v, (int, float))},
            "baseline": result.baseline,
            "steps": result.global_step,
            "time_per_step_s": result.time_per_step_s,
            "wall_time_s": round(time.perf_counter() - t0, 1),
            "stopped_by_time_limit_at": timing["stopped_by_time_limit_at"],
            "samples": result.samples[:2],
        }
        a, b = HEADLINE[task]
        print(f"[{task}] {a}={result.metrics.get(a):.4g} {b}={result.metrics.get(b):.4g} "
              f"baseline={ {k: round(v, 4) for k, v in result.baseline.items() if isinstance(v, float)} } "
              f"steps={result.global_step} time/step={result.time_per_step_s:.2f}s "
              f"wall={summary[task]['wall_time_s']}s", flush=True)
    root.mkdir(parents=True, exist_ok=True)
    (root / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    print(json.dumps({t: s["metrics"] for t, s in summary.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
