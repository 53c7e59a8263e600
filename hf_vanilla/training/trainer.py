"""The Trainer with atomic, self-contained checkpoints, and finding the checkpoint to resume from."""

from __future__ import annotations

import copy
import functools
import logging
import os
import shutil
from pathlib import Path

from ..checkpoint import (
    clear_disk_errors,
    ensure_code_files,
    fsync_path,
    fsync_tree,
    make_shareable,
    remove_stale_staging,
)
from ..output_folder import OutputFolder

logger = logging.getLogger(__name__)


@functools.cache
def trainer_classes() -> tuple[type, type]:
    """``(VanillaTrainer, VanillaSeq2SeqTrainer)``: built on first use, so importing this module stays light."""
    from torch.utils.data import SequentialSampler
    from transformers import Seq2SeqTrainer, Trainer
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, has_length, rotate_checkpoints

    class AtomicCheckpointMixin:
        """Trainer checkpoints that appear all at once, always carry the model code, and say "No space left
        on device" when the disk fills.

        transformers writes ``checkpoint-N`` file by file in place, so a run killed while saving leaves a
        folder that resuming picks (it is the newest) but cannot load. Here every process writes into
        ``.staging-checkpoint-N/checkpoint-N`` (a name the Trainer's checkpoint search ignores); the main
        process adds the code files, flushes and publishes the folder with one ``os.replace``.
        """

        def _save_checkpoint(self, model, trial):  # type: ignore[override]
            run_dir = Path(self._get_output_dir(trial=trial))
            name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            staging_root, final = run_dir / f".staging-{name}", run_dir / name
            if self.args.should_save:
                shutil.rmtree(staging_root, ignore_errors=True)
                staging_root.mkdir(parents=True)
            self.accelerator.wait_for_everyone()
            real_output_dir = self.args.output_dir
            self.args.output_dir = str(staging_root)  # super() writes to <output_dir>/checkpoint-N
            try:
                with clear_disk_errors(final):
                    super()._save_checkpoint(model, trial)
            except BaseException:
                shutil.rmtree(staging_root, ignore_errors=True)
                raise
            finally:
                self.args.output_dir = real_output_dir
            self.accelerator.wait_for_everyone()  # every rank's files (RNG states, shards) are written
            if self.args.should_save:
                self._publish(staging_root / name, final)
                shutil.rmtree(staging_root, ignore_errors=True)
                rotate_checkpoints(output_dir=str(run_dir), save_total_limit=self.args.save_total_limit,
                                   best_model_checkpoint=self.state.best_model_checkpoint)
            self.accelerator.wait_for_everyone()

        def _get_eval_sampler(self, eval_dataset):
            # transformers 5.24 also groups *evaluation* batches by length when training does, so predict()
            # returns rows permuted against the dataset (translations scored against other sentences' references).
            if self.args.train_sampling_strategy != "group_by_length" or not has_length(eval_dataset):
                return super()._get_eval_sampler(eval_dataset)
            return SequentialSampler(eval_dataset) if self.args.world_size <= 1 else None

        @staticmethod
        def _publish(staged: Path, final: Path) -> None:
            ensure_code_files(staged)
            make_shareable(staged)
            fsync_tree(staged)
            OutputFolder(final.parent, "run").add([final.name])  # recorded first: a kill never leaves it unrecorded
            if final.exists():  # same step saved before (a resumed run re-saving): replace it
                shutil.rmtree(final)
            os.replace(staged, final)
            fsync_path(final.parent)

    class VanillaTrainer(AtomicCheckpointMixin, Trainer):
        """``Trainer`` with atomic, self-contained checkpoints."""

    class VanillaSeq2SeqTrainer(AtomicCheckpointMixin, Seq2SeqTrainer):
        """``Seq2SeqTrainer`` with atomic, self-contained checkpoints, whose generating evaluations leave the
        model's generation settings as they were."""

        def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None, **gen_kwargs):
            # generate() called from here fills the model's generation_config with every default (max_length=20
            # beside our max_new_tokens: a warning on each generate() of every later checkpoint): restore it.
            settings = copy.deepcopy(self.model.generation_config)
            try:
                return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys, **gen_kwargs)
            finally:
                self.model.generation_config = settings

    return VanillaTrainer, VanillaSeq2SeqTrainer


def checkpoint_problem(checkpoint: Path) -> str | None:
    """Why ``checkpoint`` cannot be resumed from (naming the file), or None if it reads back."""
    import json

    from safetensors.torch import load_file

    state = checkpoint / "trainer_state.json"
    try:
        json.loads(state.read_text(encoding="utf-8"))["global_step"]
    except (OSError, ValueError, KeyError) as error:
        return f"{state} is unreadable ({type(error).__name__}: {error})"
    tokenizer = checkpoint / "tokenizer.json"  # resuming reads the run's tokenizer from its checkpoint
    try:
        json.loads(tokenizer.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return f"{tokenizer} is unreadable ({type(error).__name__}: {error})"
    weights = sorted(checkpoint.glob("model*.safetensors"))
    if not weights:
        return f"{checkpoint} holds no model*.safetensors"
    for path in weights:
        try:
            load_file(str(path))
        except Exception as error:  # safetensors raises its own SafetensorError for a damaged header or body
            return f"{path} is unreadable ({type(error).__name__}: {error})"
    for path in training_state_files(checkpoint):
        problem = torch_archive_problem(path)
        if problem:
            return f"{path} is unreadable ({problem})"
    return None


def training_state_files(checkpoint: Path) -> list[Path]:
    """The optimizer, scheduler and RNG states the Trainer restores on resume (each process has its RNG file)."""
    return sorted(path for name in ("optimizer.pt", "scheduler.pt", "rng_state*.pth") for path in checkpoint.glob(name))


def torch_archive_problem(path: Path) -> str | None:
    """Why a ``torch.save`` file is damaged, or None: its zip archive must open and every member match its CRC
    (a truncated or overwritten file fails here, before the Trainer's ``torch.load`` throws a traceback). Nothing
    is unpickled."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (OSError, zipfile.BadZipFile, EOFError, ValueError) as error:
        return f"{type(error).__name__}: {error}"
    return f"its member {bad} fails its checksum" if bad else None


def checkpoint_step(checkpoint: Path) -> int:
    import json

    return int(json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))["global_step"])


def find_resume_checkpoint(run_dir: Path, resume: str, clean: bool = True) -> Path | None:
    """The checkpoint to resume from: ``resume`` itself, or (``"latest"``) the newest one that reads back.

    A damaged newest checkpoint is named in a warning and skipped for the previous good one. ``clean``
    removes the staging folders of saves that were killed (the main process does).
    """
    if resume != "latest":
        checkpoint = Path(resume)
        if not checkpoint.is_dir():
            raise FileNotFoundError(f"checkpoint {checkpoint} does not exist")
        problem = checkpoint_problem(checkpoint)
        if problem:
            raise ValueError(f"cannot resume from {checkpoint}: {problem}")
        return checkpoint
    if clean:
        remove_stale_staging(run_dir, "checkpoint")
    candidates = sorted((p for p in run_dir.glob("checkpoint-*") if p.is_dir() and p.name.split("-")[-1].isdigit()),
                        key=lambda p: int(p.name.split("-")[-1]), reverse=True)
    for checkpoint in candidates:
        problem = checkpoint_problem(checkpoint)
        if problem is None:
            return checkpoint
        logger.warning("resume: skipping %s: %s", checkpoint.name, problem)
    if not candidates:
        logger.warning("resume: no checkpoint in %s, starting from scratch", run_dir)
    else:
        logger.warning("resume: no readable checkpoint in %s, starting from scratch", run_dir)
    return None


def load_finished_checkpoint(trainer, checkpoint: Path) -> None:
    """Give ``trainer`` the weights and state of a checkpoint that already reached the last step, without
    training: resuming a finished run (or one killed during its final save) must not train further."""
    from safetensors.torch import load_file
    from transformers import TrainerState

    model = trainer.model
    state_dict = {}
    for path in sorted(checkpoint.glob("model*.safetensors")):
        state_dict.update(load_file(str(path)))
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    tied = set(getattr(model, "_tied_weights_keys", None) or {})
    if unexpected or set(missing) - tied:
        raise ValueError(f"{checkpoint} does not fit this model: missing {sorted(set(missing) - tied)}, "
                         f"unexpected {sorted(unexpected)}")
    model.tie_weights()
    trainer.state = TrainerState.load_from_json(str(checkpoint / "trainer_state.json"))
