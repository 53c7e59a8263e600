#!/usr/bin/env python
"""Does ``save_pretrained``'s gap follow the model or the folder it was loaded from? The experiment behind the
save row of docs/performance.md ("The full ladder, measured here").

Builds the ladder's pair at one size (the twin's checkpoint, and ours converted from it with
``convert_checkpoint``), then two copies of ours' folder: a file copy of it (``copied``, ``shutil.copytree``) and
ours loaded and saved again with ``save_pretrained`` (``resaved``). Each round runs one fresh process per folder, in turn; a process loads
its folder in bfloat16 and times two ``save_pretrained`` calls into a temporary folder, with the user and system
CPU time and the minor page faults of each. Prints each folder's medians and their ratio to the twin's (twin /
folder: above 1.0 the folder saves faster). ``--reread`` (root on Linux) drops the page cache before each process
and reads every folder back, so that all their pages come from the same reads rather than from their writers.

    python scripts/save_gap.py --size 350m --rounds 6 --work /tmp/save_gap
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hf_vanilla.tools.ladder import SIZES, run_child

FOLDERS = ("twin", "ours", "copied", "resaved")


def time_saves(folder: Path, shard: str) -> dict[str, dict[str, float]]:
    """One process's two saves of the model in ``folder``: seconds, user and system CPU seconds, minor faults."""
    # torch and transformers in the child that saves: the parent only starts children and reads their numbers
    import torch
    import transformers

    if (folder / "configuration_vanilla.py").exists():
        import hf_vanilla  # noqa: F401  (registers the Vanilla* classes; the twin's process never imports it)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).eval()
    results = {}
    for save in ("first", "second"):
        with tempfile.TemporaryDirectory(dir=folder.parent) as out:
            before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            model.save_pretrained(out, max_shard_size=shard)
            seconds, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
        results[save] = {"seconds": seconds, "user": after.ru_utime - before.ru_utime,
                         "system": after.ru_stime - before.ru_stime, "minor_faults": after.ru_minflt - before.ru_minflt}
    return results


def build(size: str, work: Path) -> None:
    """The ladder's two checkpoints, then ours copied and ours saved again."""
    spec = SIZES[size]
    taken = [name for name in FOLDERS if (work / name).exists()]
    if taken:
        raise SystemExit(f"{work} already holds {', '.join(taken)}: pass an empty or new --work folder.")
    common = dict(threads=None, shard=spec.shard, scratch=str(work))
    run_child(dict(common, kind="make", model_class=spec.model_class, config_class=spec.config_class,
                   config=spec.config, out=str(work / "twin")))
    run_child(dict(common, kind="convert", dir=str(work / "twin"), out=str(work / "ours")))
    shutil.copytree(work / "ours", work / "copied")
    subprocess.run([sys.executable, "-c", "import sys, torch, transformers, hf_vanilla; transformers."
                    "AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.bfloat16).save_pretrained("
                    "sys.argv[2], max_shard_size=sys.argv[3])", str(work / "ours"), str(work / "resaved"), spec.shard],
                   check=True, capture_output=True)


def reread(folders: list[Path]) -> None:
    """Write back and drop the page cache, then read the folders' weights again: every page from a plain read."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError as error:
        raise SystemExit(f"--reread needs to write /proc/sys/vm/drop_caches (root, Linux): {error}") from error
    for path in sorted(p for folder in folders for p in folder.glob("*.safetensors")):
        with path.open("rb") as weights:
            while weights.read(1 << 24):
                pass


def summarise(runs: dict[str, list[dict]]) -> str:
    """Each folder's median seconds (first and second save) and its ratio to the twin's, one line each."""
    medians = {name: {save: statistics.median(r[save]["seconds"] for r in results) for save in ("first", "second")}
               for name, results in runs.items()}
    lines = []
    for name, median in medians.items():
        cells = [f"{save} {median[save]:.3f} s ({medians['twin'][save] / median[save]:.2f}x)" for save in median]
        user = statistics.median(r["first"]["user"] for r in runs[name])
        lines.append(f"{name:8s} " + ", ".join(cells) + f"; first save's user time {user:.3f} s")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="350m", choices=SIZES)
    parser.add_argument("--rounds", type=int, default=6, help="processes per folder (default 6)")
    parser.add_argument("--work", type=Path, default=None, help="where the four folders go (default: a temporary one)")
    parser.add_argument("--reread", action="store_true",
                        help="before each process, drop the page cache and read the folders back (root, Linux)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # one process's saves of this folder
    options = parser.parse_args()
    if options.child:
        print(json.dumps(time_saves(options.child, SIZES[options.size].shard)))
        return
    work = Path(options.work or tempfile.mkdtemp(prefix="save_gap_")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    build(options.size, work)
    runs: dict[str, list[dict]] = {name: [] for name in FOLDERS}
    for _ in range(options.rounds):
        for name in FOLDERS:
            if options.reread:
                reread([work / folder for folder in FOLDERS])
            done = subprocess.run([sys.executable, __file__, "--size", options.size, "--child", str(work / name)],
                                  capture_output=True, text=True, check=True)
            runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(summarise(runs))


if __name__ == "__main__":
    main()
