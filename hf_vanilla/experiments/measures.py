"""What one finished training run measured, read from the run folder the ordinary train run wrote: held-out loss,
training speed, the loss curve, the parameter count; and on request its loss at 1x-4x the training length.

Length extrapolation (the ALiBi paper's non-overlapping evaluation): the held-out token stream is cut into
non-overlapping windows of n*L tokens for each factor n, and only tokens whose offset in the stream is not a
multiple of L are scored, so every length scores exactly the same tokens and only the context they see changes. A
window the model cannot read is not scored (None), for the reason :func:`reach` gives: learned positions past the
training length (their rows there were never trained, so a score would measure the initialisation, not
extrapolation), any scheme past its position table.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import register
from ..tasks import get_task
from ..training.options import make_options
from ..variants import scheme_row

if TYPE_CHECKING:  # imported where used: `hf-vanilla compare --help` reads OPTIONAL without loading torch
    import torch

#: The inference lengths of the extrapolation measure, as multiples of the training length.
LENGTH_FACTORS = (1, 2, 3, 4)

#: Held-out tokens scored at most per length (the test split of a large corpus need not be read whole).
MAX_SCORED_TOKENS = 32768

#: The measures a run can be asked for beyond its held-out loss, and what each adds to its outcome.
OPTIONAL = {"extrapolation": "held-out loss at 1x-4x the training length",
            "speed": "training tokens per second and seconds per optimizer step"}


def outcome(result: Any) -> dict[str, Any]:
    """The numbers a comparison reads from a finished :class:`hf_vanilla.training.run.RunResult`."""
    metrics, split = result.metrics, result.metrics.get("test_split") or "validation"
    loss = metrics.get(f"{split}_loss", metrics.get("validation_loss"))
    return dict(status="completed", held_out_split=split, loss=loss,
                perplexity=math.exp(loss) if loss is not None else None,
                validation_loss=metrics.get("validation_loss"), steps=result.global_step,
                curve=training_curve(result.log_history), evaluations=evaluation_curve(result.log_history),
                parameters=parameter_count(Path(result.run_dir)))


def training_curve(log_history: list[dict[str, Any]]) -> list[tuple[int, float]]:
    return [(entry["step"], entry["loss"]) for entry in log_history if "loss" in entry and "step" in entry]


def evaluation_curve(log_history: list[dict[str, Any]]) -> list[tuple[int, float]]:
    return [(entry["step"], entry["eval_loss"]) for entry in log_history if "eval_loss" in entry and "step" in entry]


def parameter_count(run_dir: Path) -> int:
    """The parameters stored in the run's final weights (a tied matrix once), read from the safetensors headers."""
    # the measures run in the worker: compare imports this module for its names before anything loads torch
    from safetensors import safe_open

    from ..checkpoint import weight_files

    total = 0
    for name in weight_files(run_dir):
        if name.endswith(".json"):  # a sharded model's index: its shards follow
            continue
        with safe_open(str(run_dir / name), framework="pt") as weights:
            total += sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys())  # noqa: SIM118
    return total


def speed(result: Any, run_dir: Path) -> dict[str, Any]:
    """Training throughput as the run timed it (metrics.json's timing)."""
    # the measures run in the worker: compare imports this module for its names before anything loads torch
    from ..training.outputs import read_outputs

    timing = (read_outputs(run_dir) or {}).get("timing") or {}
    return dict(tokens_per_s=timing.get("tokens_per_s"), seconds_per_step=timing.get("time_per_step_s_median"))


def held_out_stream(task_name: str, tokenizer: Any, options: dict[str, Any], span: int) -> torch.Tensor:
    """The held-out split (test, else validation) as one token stream, as training joins it, cut to a whole number of
    ``span``-token windows and to at most about :data:`MAX_SCORED_TOKENS` tokens."""
    # the measures run in the worker: compare imports this module for its names before anything loads torch
    import torch
    from datasets import DatasetDict

    from ..training.sources import load_task_data

    task = get_task(task_name)
    opts = make_options(dict(options, block_size=span, max_test_samples=None, max_eval_samples=None)).resolved(task)
    raw, _ = load_task_data(task, opts)
    split = "test" if "test" in raw else "validation"
    blocks = task.tokenize(DatasetDict({split: raw[split]}), tokenizer, opts)[split]["input_ids"]
    blocks = blocks[: max(1, MAX_SCORED_TOKENS // span)]
    return torch.tensor([token for block in blocks for token in block], dtype=torch.long)


def loss_at(model: Any, stream: torch.Tensor, window: int, train_length: int, batch_tokens: int = 8192) -> float:
    """Mean loss over ``stream`` cut into non-overlapping ``window``-token windows, scoring only tokens whose offset
    is not a multiple of ``train_length`` (the same tokens at every window that is a multiple of it)."""
    # the measures run in the worker: compare imports this module for its names before anything loads torch
    import torch

    with torch.no_grad():
        return _mean_scored_loss(model, stream, window, train_length, batch_tokens)


def _mean_scored_loss(model: Any, stream: torch.Tensor, window: int, train_length: int, batch_tokens: int) -> float:
    # the measures run in the worker: compare imports this module for its names before anything loads torch
    import torch

    device = next(model.parameters()).device  # the model's (the scaling sweep scores on its GPU too)
    batch = max(1, batch_tokens // window)
    windows = stream[: stream.numel() // window * window].view(-1, window)
    offsets = torch.arange(windows.numel()).view(-1, window)[:, 1:]  # targets: every token but each window's first
    scored = (offsets % train_length != 0).to(device)
    total, count = 0.0, 0
    for i in range(0, len(windows), batch):
        ids = windows[i : i + batch].to(device)
        logits = model(input_ids=ids).logits[:, :-1].float()
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
        keep = scored[i : i + batch]
        total += nll[keep].double().sum().item()
        count += int(keep.sum())
    return total / count


def perplexity_at(model: Any, stream: torch.Tensor, window: int, train_length: int, batch_tokens: int = 8192) -> float:
    """:func:`loss_at` as a perplexity."""
    return math.exp(loss_at(model, stream, window, train_length, batch_tokens))


def reach(config: Any, training_length: int) -> tuple[int, str]:
    """The longest window the extrapolation measure scores a model of ``config`` at, and why no longer. A scheme
    whose row adds one trained vector per absolute position (learned) reaches only the rows training reached."""
    scheme = scheme_row(config)
    if scheme.adds_to_embeddings and scheme.parameters:
        return training_length, (f"{config.position_embedding_type} positions cannot extrapolate: the rows of its "
                                 f"table past the training length ({training_length} tokens) were never trained")
    table = config.max_position_embeddings
    return table, f"beyond the model's position table ({table} positions)"


def extrapolation(task_name: str, run_dir: Path, options: dict[str, Any],
                  factors: tuple[int, ...] = LENGTH_FACTORS) -> dict[str, Any]:
    """Held-out loss of the run's final model at each factor of its training length (None beyond its :func:`reach`,
    and why), all lengths scoring the same tokens."""
    # the measures run in the worker: compare imports this module for its names before anything loads torch
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    register()  # the Auto classes load the run's model (a worker process has not registered them yet)
    if task_name != "clm":
        raise ValueError(f"the extrapolation measure scores a causal language model (--task clm), not {task_name}")
    length = options["block_size"]
    model = AutoModelForCausalLM.from_pretrained(run_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(run_dir)
    longest = length * math.lcm(*factors)  # every window length divides the stream
    stream = held_out_stream(task_name, tokenizer, options, longest)
    reachable, why = reach(model.config, length)
    losses = {str(n): loss_at(model, stream, n * length, length) if n * length <= reachable else None
              for n in factors}
    scored = int((torch.arange(stream.numel()) % length != 0).sum())
    return dict(training_length=length, factors=list(factors), losses=losses, scored_tokens=scored,
                not_scored=why if None in losses.values() else None)


def collect(task_name: str, run_dir: Path, options: dict[str, Any], result: Any, wanted: tuple[str, ...]) -> dict:
    """:func:`outcome` plus each measure of ``wanted`` (names of :data:`OPTIONAL`)."""
    found = outcome(result)
    if "speed" in wanted:
        found["speed"] = speed(result, run_dir)
    if "extrapolation" in wanted:
        found["extrapolation"] = extrapolation(task_name, run_dir, options)
    return found
