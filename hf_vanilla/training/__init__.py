"""Train hf_vanilla models on real text: causal LM, masked LM, translation and classification.

:func:`train` (and ``hf-vanilla train``) builds everything a run needs from a task name and options,
hands the loop to transformers' ``Trainer`` / ``Seq2SeqTrainer`` (so ``accelerate launch`` gives DDP /
FSDP / DeepSpeed with no code change) and leaves a self-contained run directory::

    run_dir/
      model.safetensors config.json generation_config.json  the model (+ its code, via auto_map)
      tokenizer.json tokenizer_config.json ...               trained on the training split only
      run.json        task, options, data, environment, status (running/completed/interrupted/diverged)
      metrics.json    final metrics, baseline, timing, sample outputs
      trainer_state.json                                     the Trainer's log history
      curves.png      training / validation loss curves
      README.md       model card (hf_vanilla.card.build_model_card)
      checkpoint-N/   atomic Trainer checkpoints (resume with resume=True / --resume)

The package, in reading order: :mod:`.options` (what a run can be told), :mod:`.tasks` (one module per
task: data, tokenizer, preprocessing, collator, metrics, baseline, samples, card text),
:mod:`.sources` (where the text comes from), :mod:`.rundir` (the run directory: checks, lock,
replacement), :mod:`.trainer` and :mod:`.callbacks` (atomic checkpoints, NaN guard, time limit,
Ctrl-C), :mod:`.run` (the run, top to bottom), :mod:`.outputs` (records, curves, card), :mod:`.cli`.

Guarantees the tests check: the loss is normalised by ``num_items_in_batch`` (gradient accumulation
and DDP match one big batch); the same seed gives bitwise-identical losses on CPU; a run killed after a
checkpoint and resumed logs the same losses as an uninterrupted one; a non-finite loss stops the run
before it can overwrite the last good checkpoint; nothing is lost on a mistyped option, a second
writer, Ctrl-C, a full disk or a damaged checkpoint.
"""

from .options import SIZE_PRESETS, TrainOptions
from .run import RunResult, TrainingDivergedError, TrainingInterruptedError, train
from .rundir import RunDirectoryBusyError
from .tasks import TASKS, Task, get_task

__all__ = [
    "SIZE_PRESETS",
    "TASKS",
    "RunDirectoryBusyError",
    "RunResult",
    "Task",
    "TrainOptions",
    "TrainingDivergedError",
    "TrainingInterruptedError",
    "get_task",
    "train",
]
