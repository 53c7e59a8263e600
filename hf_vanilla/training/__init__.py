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
      README.md       model card (hf_vanilla.publishing.card.build_model_card)
      checkpoint-N/   atomic Trainer checkpoints (resume with resume=True / --resume)
      .hf_vanilla.json  the names of the files above: hf_vanilla replaces only these (--overwrite), and
                      other files in the folder stay (hf_vanilla.files.output_folder)

The package, in reading order: :mod:`.options` (what a run can be told), :mod:`.tasks` (one module per
task: data, tokenizer, preprocessing, collator, metrics, baseline, samples, card text),
:mod:`.sources` (where the text comes from), :mod:`.rundir` (run.json, the run's record), :mod:`.preflight`
(what is refused before anything loads), :mod:`.layout` (the run folder's files, declared for the docs),
:mod:`.trainer` and :mod:`.callbacks` (atomic checkpoints, NaN guard, time limit, Ctrl-C), :mod:`.run`
(the run, top to bottom), :mod:`.outputs` (records, curves, card), :mod:`.cli`; the run folder's files,
lock and replacement: :mod:`hf_vanilla.files.output_folder`.

Guarantees the tests check: the loss is normalised by ``num_items_in_batch`` (gradient accumulation
and DDP match one big batch); the same seed gives bitwise-identical losses on CPU; a run killed after a
checkpoint and resumed logs the same losses as an uninterrupted one; a non-finite loss stops the run
before it can overwrite the last good checkpoint; nothing is lost on a mistyped option, a second
writer, Ctrl-C, a full disk or a damaged checkpoint.
"""


import importlib

from ..extras import require_extra

require_extra("train", __name__)

#: Public name -> the submodule that defines it; loaded on first use, so that ``hf-vanilla train --help``
#: (which reads only :mod:`.options` and :mod:`.cli`) imports no torch.
_PUBLIC = {
    "SIZE_PRESETS": ".options", "TrainOptions": ".options",
    "RunResult": ".run", "TrainingDivergedError": ".run", "TrainingInterruptedError": ".run", "train": ".run",
    "RunDirectoryBusyError": ".rundir",
    "TASKS": "..tasks", "Task": "..tasks", "get_task": "..tasks",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name], __name__), name)
    globals()[name] = value
    return value
