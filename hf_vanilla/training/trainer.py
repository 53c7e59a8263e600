"""The Trainer with atomic, self-contained checkpoints, and finding the checkpoint to resume from."""

from __future__ import annotations

import copy
import functools
import json
import logging
import re
import shutil
import zipfile
from pathlib import Path

from safetensors.torch import load_file
from torch.utils.data import SequentialSampler
from transformers import Seq2SeqTrainer, Trainer, TrainerState
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, has_length

from ..checkpoint import ensure_code_files
from ..files.atomic import clear_disk_errors, fsync_tree, make_shareable
from ..files.output_folder import ChangedFileError, OutputFolder, own_files

logger = logging.getLogger(__name__)


@functools.cache
def trainer_classes() -> tuple[type, type]:
    """``(VanillaTrainer, VanillaSeq2SeqTrainer)``: built on first use, so importing this module stays light."""
    class AtomicCheckpointMixin:
        """Trainer checkpoints that appear all at once, always carry the model code, are the run's own by its
        record, and say "No space left on device" when the disk fills.

        transformers writes ``checkpoint-N`` file by file in place, so a run killed while saving leaves a
        folder that resuming picks (it is the newest) but cannot load. Here every process writes into a work
        folder of the run (``.hf_vanilla-fresh-checkpoint-N/checkpoint-N``); the main process adds the code
        files, flushes, records the name and publishes the folder with one ``os.replace``. Rotation
        (``save_total_limit``) deletes only checkpoints the run's record lists, never a folder of the user's
        that merely looks like one (``checkpoint-3-best``, ``checkpoint-1.bak``).
        """

        def _save_checkpoint(self, model, trial):  # type: ignore[override]
            folder = self._run_folder(trial)
            name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            work = folder.fresh(name, create=self.args.should_save)
            self.accelerator.wait_for_everyone()
            real_output_dir = self.args.output_dir
            self.args.output_dir = str(work)  # super() writes to <output_dir>/checkpoint-N (and rotates there)
            try:
                with clear_disk_errors(folder.path / name):
                    super()._save_checkpoint(model, trial)
            except BaseException:
                shutil.rmtree(work, ignore_errors=True)
                raise
            finally:
                self.args.output_dir = real_output_dir
            self.accelerator.wait_for_everyone()  # every rank's files (RNG states, shards) are written
            if self.args.should_save:
                publish_checkpoint(folder, work / name)
                shutil.rmtree(work, ignore_errors=True)
                rotate_recorded(folder, self.args.save_total_limit, self.state.best_model_checkpoint)
            self.accelerator.wait_for_everyone()

        def _run_folder(self, trial) -> OutputFolder:
            """The run's own folder object when the run gave one (its first checkpoint commits the run's write, and
            the run must know it), else one for the output folder."""
            given = getattr(self, "output_folder", None)
            path = Path(self._get_output_dir(trial=trial))
            return given if given is not None and given.path == path else OutputFolder(path, "run")

        def _issue_warnings_after_load(self, load_result):
            # A tied head's weight is its embedding's, saved once: its "missing" key on resume is expected, not news.
            super()._issue_warnings_after_load(without_tied_keys(self.model, load_result))

        def _get_eval_sampler(self, eval_dataset):
            # transformers 5.24 also groups *evaluation* batches by length when training does, so predict()
            # returns rows permuted against the dataset (translations scored against other sentences' references).
            if self.args.train_sampling_strategy != "group_by_length" or not has_length(eval_dataset):
                return super()._get_eval_sampler(eval_dataset)
            return SequentialSampler(eval_dataset) if self.args.world_size <= 1 else None

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


def publish_checkpoint(folder: OutputFolder, staged: Path) -> None:
    """Move a checkpoint saved into a work folder into the run, whole: code files added, flushed, its name
    recorded first (a kill never leaves it unrecorded), then one ``os.replace``, which also commits a new run
    (from its first checkpoint on, the run stays and an old run it replaces goes: ``OutputFolder.place``)."""
    ensure_code_files(staged)
    make_shareable(staged)
    fsync_tree(staged)
    folder.place(staged, staged.name, commits=True)


def rotate_recorded(folder: OutputFolder, limit: int | None, best: str | None) -> None:
    """transformers' rotation (``save_total_limit``: keep the newest and the best), over the run's recorded
    checkpoints only."""
    if limit is None or limit <= 0:
        return
    checkpoints = recorded_checkpoints(folder.path)
    protected = {checkpoints[-1].name} | ({Path(best).name} if best else set())
    surplus = len(checkpoints) - max(limit, len(protected))
    for checkpoint in [c for c in checkpoints if c.name not in protected][:max(surplus, 0)]:
        logger.info("deleting %s (save_total_limit=%d)", checkpoint, limit)
        try:
            folder.remove(checkpoint.name)
        except ChangedFileError as error:  # changed since it was saved (edited, damaged): kept, training goes on
            logger.warning("save_total_limit: keeping %s: %s", checkpoint.name, error)


def checkpoint_problem(checkpoint: Path) -> str | None:
    """Why ``checkpoint`` cannot be resumed from (naming the file), or None if it reads back."""

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
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (OSError, zipfile.BadZipFile, EOFError, ValueError) as error:
        return f"{type(error).__name__}: {error}"
    return f"its member {bad} fails its checksum" if bad else None


def checkpoint_step(checkpoint: Path) -> int:
    return int(json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))["global_step"])


def recorded_checkpoints(run_dir: Path) -> list[Path]:
    """The run's ``checkpoint-N`` folders, oldest first: those its record lists (a folder of the user's named
    like one, ``checkpoint-3-best`` or even ``checkpoint-4``, is not the run's)."""
    name = re.compile(rf"{PREFIX_CHECKPOINT_DIR}-(\d+)", re.ASCII)  # checkpoint-٣ is a name of the user's
    found = [path for path in own_files(run_dir) if path.is_dir() and name.fullmatch(path.name)]
    return sorted(found, key=lambda path: int(name.fullmatch(path.name).group(1)))


def without_tied_keys(model, load_result):
    """``load_result`` (torch's missing and unexpected keys) less the missing keys of weights tied to one that loaded
    (transformers' ``all_tied_weights_keys``, target -> source): every other missing key is still reported."""
    tied = getattr(model, "all_tied_weights_keys", None) or {}
    missing = set(load_result.missing_keys)
    kept = [key for key in load_result.missing_keys if not (key in tied and tied[key] not in missing)]
    return load_result._replace(missing_keys=kept)


def find_resume_checkpoint(run_dir: Path, resume: str) -> Path | None:
    """The checkpoint to resume from: ``resume`` itself, or (``"latest"``) the newest recorded one that reads
    back. A damaged newest checkpoint is named in a warning and skipped for the previous good one."""
    if resume != "latest":
        checkpoint = Path(resume)
        if not checkpoint.is_dir():
            raise FileNotFoundError(f"checkpoint {checkpoint} does not exist")
        problem = checkpoint_problem(checkpoint)
        if problem:
            raise ValueError(f"cannot resume from {checkpoint}: {problem}")
        return checkpoint
    candidates = recorded_checkpoints(run_dir)[::-1]
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
