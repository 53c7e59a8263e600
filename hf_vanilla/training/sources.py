"""Where a run's text comes from: local files, a ``datasets`` name, or the task's default corpus."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datasets import DatasetDict

from ..corpora import load_local_files, load_named_dataset
from .preflight import all_files, check_data_files, parse_data_files

if TYPE_CHECKING:
    from ..tasks import Task
    from .options import TrainOptions


def load_raw(task: Task, opts: TrainOptions) -> tuple[DatasetDict, dict[str, Any]]:
    """The splits as read, before the task's column normalisation, and where they came from."""
    if opts.data_files:
        check_data_files(opts.data_files)
        files = parse_data_files(opts.data_files)
        sample_by = task.local_sample_by(opts)
        # Train-only files: the loader cuts validation itself (it knows to split a one-paragraph file by line).
        only_train = not isinstance(files, Mapping) or set(files) == {"train"}
        # Columns as the files name them: the task picks its own (--text-column, ...) when it normalises.
        dsd = load_local_files(files, text_column=None, string_columns=task.text_columns(opts), seed=opts.seed,
                               validation_fraction=opts.validation_fraction if only_train else 0.0,
                               sample_by=sample_by)  # type: ignore[arg-type]
        names = all_files(files)
        description = dict(source="local files", sample_by=sample_by, files=[str(Path(f).resolve()) for f in names],
                           name="local:" + ",".join(Path(f).name for f in names))
        if only_train:
            description["validation_note"] = f"{opts.validation_fraction:.0%} of train, seeded split"
        return dsd, description
    if opts.dataset:
        args = (opts.dataset_config,) if opts.dataset_config else ()
        return load_named_dataset(opts.dataset, *args), dict(source="datasets", name=opts.dataset,
                                                             config=opts.dataset_config)
    return task.default_corpus(opts)


def load_task_data(task: Task, opts: TrainOptions) -> tuple[DatasetDict, dict[str, Any]]:
    """The task's splits with its standard columns, and a description for run.json and the card.

    Without a validation split one is cut from train (``validation_fraction``); data with only train
    and test uses test for validation; without a test split the final evaluation uses validation.
    """
    dsd, description = load_raw(task, opts)
    dsd = DatasetDict(dict(dsd))
    if "train" not in dsd:
        raise ValueError(f"the data has no 'train' split (splits: {sorted(dsd)})")
    if "validation" not in dsd:
        if "test" in dsd and len(dsd) == 2:
            dsd["validation"] = dsd.pop("test")
        else:
            parts = dsd["train"].train_test_split(test_size=opts.validation_fraction, seed=opts.seed)
            dsd["train"], dsd["validation"] = parts["train"], parts["test"]
            description["validation_note"] = f"{opts.validation_fraction:.0%} of train, seeded split"
    dsd = task.normalise(dsd, opts)
    description["rows"] = {split: len(ds) for split, ds in dsd.items()}
    return dsd, description
