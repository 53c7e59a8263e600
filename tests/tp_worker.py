"""One rank of tests/test_tensor_parallel.py, started by ``torchrun --nproc-per-node 2``.

Loads each saved case with ``tp_plan="auto"`` through the files that travel with the checkpoint
(``trust_remote_code=True``), runs its forward (and greedy generation where the head generates), runs the
tensor-parallelism example of docs/deploying.md, and saves what it saw to ``OUT/rank{R}.pt`` for the test to
compare with one process. Only torch and transformers are imported: a rank costs what a user's script costs.
"""

import contextlib
import io
import json
import os
import sys
from pathlib import Path

import torch
import transformers
from transformers.distributed import DistributedConfig


def local_shapes(model: torch.nn.Module) -> dict[str, list[int]]:
    """Each parameter's shape on this rank (a DTensor's local shard), to tell what the plan really split."""
    return {
        name: list((param.to_local() if hasattr(param, "to_local") else param).shape)
        for name, param in model.named_parameters()
    }


def run_case(folder: Path, spec: dict) -> dict:
    auto_class = getattr(transformers, spec["auto_class"])
    model = auto_class.from_pretrained(folder, trust_remote_code=True, distributed_config=DistributedConfig(tp_plan="auto"))
    inputs = {name: torch.tensor(value) for name, value in spec["inputs"].items()}
    with torch.no_grad():
        output = model(**inputs)
    seen = {"logits": output.logits, "tp_size": model.tp_size, "shapes": local_shapes(model)}
    if spec["generate"]:
        prompt = {name: inputs[name] for name in ("input_ids", "attention_mask")}
        seen["tokens"] = model.generate(**prompt, max_new_tokens=spec["new_tokens"], do_sample=False)
    return seen


def run_documented_example(folder: Path, source: str) -> str:
    """The example as a user runs it: in the folder that holds ``runs/main-shakespeare``, its printed text captured."""
    printed = io.StringIO()
    with contextlib.chdir(folder), contextlib.redirect_stdout(printed):
        exec(compile(source, "docs/deploying.md (tensor parallelism)", "exec"), {"__name__": "__main__"})
    return printed.getvalue()


def main(work: Path) -> None:
    torch.set_num_threads(1)
    plan = json.loads((work / "cases.json").read_text())
    results = {name: run_case(work / name, spec) for name, spec in plan["cases"].items()}
    results["documented example"] = run_documented_example(work / "docs", plan["documented_example"])
    torch.save(results, work / f"rank{os.environ['RANK']}.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
