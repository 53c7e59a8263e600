"""The door of ``python scripts/experiments.py scaling``: claim the output folder, then call the sweep
(hf_vanilla/experiments/scaling.py says what it trains; hf_vanilla/experiments/scaling_fits.py how it fits).

    python scripts/experiments.py scaling [--out docs/figures] [--runs runs/scaling] [--workers 2] [--tiny]
                                          [--device cpu|cuda] [--dtype float32|bfloat16] [--plan cpu|gpu]
                                          [--estimate] [--no-train]
                                          [--reanalyse RECORD [--add-runs FILE ...] [--rerun --runs FOLDER]]

The committed record (docs/figures/scaling.json) is the seeded sweep re-analysed with the runs issue 53 added
(the learning rates bracketed at the fitted budgets, the IsoFLOP runs at the rates chosen there):
``--reanalyse docs/figures/scaling.json --add-runs runs/scaling/*/result.json`` rebuilds it from a runs folder
holding them; ``--rerun`` first trains there, resumably, the IsoFLOP runs the record names as not yet rerun at
their width's chosen rate (``rates_not_rerun``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from experiments import claimed_outputs, provenance

from hf_vanilla.experiments.scaling import (  # noqa: F401  (the names scripts/experiments.py calls)
    CPU,
    GPU,
    PLANS,
    SweepPlan,
    check_device,
    choose_plan,
    estimate,
    family,
    home_budgets,
    measure_sweep,
    reanalysed,
    scaling_table,
    step_seconds,
    train_reruns,
    write_outputs,
)


def sweep(out: Path, runs: Path, plan: SweepPlan, data_files: tuple[str, ...] = (), workers: int = 1,
          device: str = "cpu", dtype: str = "float32", train: bool = True) -> dict[str, Any]:
    """The whole experiment into ``out/scaling.{png,md,json}``, the folder claimed before anything trains."""
    check_device(device, dtype)
    with claimed_outputs(out, "scaling") as outputs:
        record = measure_sweep(runs, plan, data_files, workers, device, dtype, train, provenance())
        write_outputs(record, *outputs)
    print(scaling_table(record))
    print(f"scaling: {record['wall_time_s']} s; written to {out}/scaling.{{png,md,json}}")
    return record


def reanalyse(out: Path, record_path: Path, added: tuple[Path, ...] = (), rerun_in: Path | None = None,
              workers: int = 1) -> dict[str, Any]:
    """Refit a written record (and added result files) with this analysis into ``out/scaling.{png,md,json}``;
    with ``rerun_in``, first train there the runs the record names as not rerun, and add them."""
    record = json.loads(record_path.read_text(encoding="utf-8"))
    runs = [json.loads(path.read_text(encoding="utf-8")) for path in added]
    if rerun_in is not None:
        named = {r["name"] for r in runs}
        runs += [r for r in train_reruns(record, rerun_in, workers) if r["name"] not in named]
    record = reanalysed(record, runs, provenance())
    with claimed_outputs(out, "scaling") as outputs:
        write_outputs(record, *outputs)
    print(scaling_table(record))
    return record

