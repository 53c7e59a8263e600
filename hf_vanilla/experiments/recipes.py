"""The documented experiments as ``hf-vanilla compare`` commands (``--study NAME``; docs/compare.md quotes each
one's full command and result). A study is only flags: the command line after it may change any of them.

``positions``      the quick example: sinusoidal vs RoPE vs ALiBi at a tiny size, 3 seeds, minutes on two cores.
``extrapolation``  every positional scheme of the table trained at L = 64 and scored at 1x-4x L on held-out text.
``warmup``         pre- vs post-norm blocks with and without a linear warm-up, at two peak learning rates.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..variants import values


@dataclass(frozen=True)
class Study:
    summary: str
    argv: tuple[str, ...]


#: A model small enough for a CPU: 2 layers of width 64 (the "tiny" size preset), 64-token blocks.
_TINY = ("--preset", "tiny", "--block-size", "64", "--batch-size", "16", "--vocab-size", "2048", "--dropout", "0",
         "--max-eval-samples", "64", "--max-test-samples", "256")

STUDIES: dict[str, Study] = {
    "positions": Study(
        "sinusoidal vs RoPE vs ALiBi, tiny decoder, 150 steps, 3 seeds, held-out loss and 1x-4x extrapolation",
        ("--vary", "position_embedding_type=sinusoidal,rope,alibi", *_TINY, "--max-steps", "150", "--seeds", "3",
         "--learning-rate", "3e-3", "--measure", "extrapolation")),
    "extrapolation": Study(
        "every positional scheme of the table, width 128, 3 layers, 300 steps, 3 seeds, loss at 1x-4x the "
        "training length",
        ("--vary", "position_embedding_type=" + ",".join(map(str, values("position_embedding_type"))),
         "--preset", "tiny", "--config", "hidden_size=128", "--config", "intermediate_size=512",
         "--config", "num_hidden_layers=3", "--block-size", "64", "--batch-size", "16", "--vocab-size", "2048",
         "--dropout", "0", "--max-steps", "300", "--learning-rate", "1e-3", "--seeds", "3",
         "--max-eval-samples", "64", "--max-test-samples", "256", "--measure", "extrapolation")),
    "warmup": Study(
        "pre- vs post-norm, warm-up of 20% of the steps vs none, peak learning rates 1e-3 and 3e-3, 6 layers, "
        "a constant schedule after the warm-up, 3 seeds",
        ("--vary", "norm_position=pre,post", "--vary", "warmup_steps=24,0", "--vary", "learning_rate=1e-3,3e-3",
         "--preset", "tiny", "--config", "hidden_size=128", "--config", "intermediate_size=512",
         "--config", "num_hidden_layers=6", "--block-size", "64", "--batch-size", "8", "--vocab-size", "2048",
         "--dropout", "0", "--max-steps", "120", "--lr-scheduler", "constant_with_warmup", "--seeds", "3",
         "--max-eval-samples", "64", "--max-test-samples", "256")),
}
