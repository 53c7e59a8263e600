"""Checkpoint averaging, the paper's cheap win (its base models average the last 5 checkpoints), kept only
when it measurably helps: the averaged weights must score better on the validation split than the final
ones, or the final weights stay. Both scores go into metrics.json, so the choice can be checked.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file

from .trainer import recorded_checkpoints

if TYPE_CHECKING:
    from datasets import Dataset
    from transformers import Trainer

logger = logging.getLogger(__name__)


def newest_checkpoints(run_dir: Path, count: int) -> list[Path]:
    """The ``count`` newest ``checkpoint-N`` folders the run's record lists, oldest first."""
    return recorded_checkpoints(run_dir)[-count:]


def averaged_weights(checkpoints: list[Path]) -> dict[str, torch.Tensor]:
    """The element-wise mean of the checkpoints' floating-point weights (other tensors: the newest's)."""
    total: dict[str, torch.Tensor] = {}
    for checkpoint in checkpoints:
        for path in sorted(checkpoint.glob("model*.safetensors")):
            for name, tensor in load_file(str(path)).items():
                if not tensor.is_floating_point():
                    total[name] = tensor
                elif name in total:
                    total[name] += tensor.double()
                else:
                    total[name] = tensor.double()
    return {name: (t / len(checkpoints)).to(torch.float32) if t.dtype == torch.float64 else t
            for name, t in total.items()}


def average_if_better(trainer: Trainer, run_dir: Path, count: int, validation: Dataset, metric: str,
                      higher_is_better: bool) -> dict[str, Any]:
    """Put the mean of the run's ``count`` newest checkpoints into ``trainer.model`` if it scores better on
    ``validation`` (``eval_<metric>``) than the final weights; otherwise leave the final weights. Returns what
    was compared and chosen."""
    checkpoints = newest_checkpoints(run_dir, count)
    if len(checkpoints) < 2:
        return {"kept": False, "reason": f"only {len(checkpoints)} checkpoint(s) to average"}
    model = trainer.accelerator.unwrap_model(trainer.model)
    final = {name: t.detach().clone() for name, t in model.state_dict().items()}

    def score() -> float:
        return float(trainer.evaluate(validation, metric_key_prefix="averaging")[f"averaging_{metric}"])

    final_score = score()
    averaged = averaged_weights(checkpoints)
    with torch.no_grad():
        model.load_state_dict({**final, **{k: v.to(final[k].dtype) for k, v in averaged.items() if k in final}})
    model.tie_weights()
    averaged_score = score()
    better = averaged_score > final_score if higher_is_better else averaged_score < final_score
    if not better:
        model.load_state_dict(final)
    logger.info("checkpoint averaging of %s: validation %s %.4g (averaged) vs %.4g (final): %s",
                [c.name for c in checkpoints], metric, averaged_score, final_score,
                "keeping the average" if better else "keeping the final weights")
    return {"checkpoints": [c.name for c in checkpoints], "metric": f"validation_{metric}",
            "final": final_score, "averaged": averaged_score, "kept": better}
