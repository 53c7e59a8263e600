"""The :class:`Task` interface: everything that differs between training tasks, in one object.

A run asks its task for the data, tokenizer, preprocessing, collator, metrics, baseline, samples,
model class and card text; the run itself never branches on the task name. Methods take what they
need as arguments and return results, so a task object holds constants only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

if TYPE_CHECKING:
    from datasets import Dataset, DatasetDict
    from transformers import PreTrainedTokenizerBase, Trainer

#: How text files are cut into rows, and the tokenizers a task trains (the choices of ``--sample-by``, ``--tokenizer``).
SampleBy = Literal["line", "paragraph", "document"]
TokenizerKind = Literal["bpe", "wordpiece"]


class TaskOptions(Protocol):
    """What a task reads of a run's options: the training layer's ``TrainOptions`` has each of them, with this type
    (tests/test_layers.py holds the two equal), resolved before a task sees them (its defaults filled in). Declared
    here, where the tasks are, so that tasks need nothing of the training layer above them."""

    # the data
    dataset: str | None
    data_files: list[str]
    text_column: str
    label_column: str
    source_column: str
    target_column: str
    sample_by: SampleBy | None
    max_train_samples: int | None
    max_eval_samples: int | None
    max_test_samples: int | None
    # the tokenizer and sequence lengths
    tokenizer: TokenizerKind | None
    vocab_size: int
    lowercase: bool
    block_size: int
    max_source_length: int
    max_target_length: int
    max_length: int
    mlm_probability: float
    seed: int
    # generation and samples
    num_beams: int
    max_new_tokens: int
    num_samples: int
    prompts: list[str]


@dataclass
class Evaluation:
    """The final evaluation of a run: metrics, the baseline's scores and any per-example outputs."""

    metrics: dict[str, Any]
    baseline: dict[str, Any]
    outputs: list[dict[str, Any]] = field(default_factory=list)


class Task:
    """One training task. Subclasses set the class constants and override what differs."""

    name: ClassVar[str]
    display_name: ClassVar[str]  # "causal language modelling"
    family: ClassVar[str]  # VanillaConfig.architecture
    auto_class: ClassVar[str]  # the transformers Auto class that loads the model
    model_class: ClassVar[str]  # the hf_vanilla.modeling_vanilla head
    pipeline_tag: ClassVar[str]
    #: Values for options left at ``None`` (tokenizer, learning rate, batch size, recipe).
    defaults: ClassVar[dict[str, Any]]
    #: VanillaConfig fields of the task's fresh model from a size preset (tiny/small/base), under ``--config``:
    #: what trains well at small budgets, where the paper's choice does not (named in ``--config``'s help).
    model_defaults: ClassVar[dict[str, Any]] = {}
    #: (metric key suffix, model-index metric type, display name) reported in the card.
    card_metrics: ClassVar[tuple[tuple[str, str, str], ...]]
    seq2seq: ClassVar[bool] = False  # trained with Seq2SeqTrainer / Seq2SeqTrainingArguments
    #: The validation metric (``eval_<name>``) that picks between checkpoints, and whether higher is better.
    selection_metric: ClassVar[tuple[str, bool]] = ("loss", False)

    # -- data
    def default_corpus(self, opts: TaskOptions) -> tuple[DatasetDict, dict[str, Any]]:
        """The raw splits of the task's default corpus and a description for run.json and the card."""
        raise NotImplementedError

    def local_sample_by(self, opts: TaskOptions) -> str:
        """How local text files are cut into rows (paragraphs, so validation can be cut from one file)."""
        return opts.sample_by or "paragraph"

    def text_columns(self, opts: TaskOptions) -> list[str]:
        """The columns that hold the task's texts (local files must have strings there)."""
        return [opts.text_column]

    def normalise(self, dsd: DatasetDict, opts: TaskOptions) -> DatasetDict:
        """The task's standard columns (``text``; ``text`` + ``label``; ``source`` + ``target``)."""
        raise NotImplementedError

    def example_unit(self, opts: TaskOptions) -> str:
        raise NotImplementedError

    def tokens_per_example(self, opts: TaskOptions) -> int | None:
        """Tokens in every training example, when that is fixed (for the tokens/s figure)."""
        return None

    # -- tokenizer and preprocessing
    def build_tokenizer(self, train_split: Dataset, opts: TaskOptions) -> PreTrainedTokenizerBase:
        """Train the tokenizer on the training split only (no held-out text leaks into it)."""
        raise NotImplementedError

    def max_positions(self, opts: TaskOptions) -> int:
        raise NotImplementedError

    def tokenize(self, dsd: DatasetDict, tokenizer: PreTrainedTokenizerBase, opts: TaskOptions) -> DatasetDict:
        raise NotImplementedError

    # -- model
    def config_fields(self, tokenizer: PreTrainedTokenizerBase, raw: DatasetDict) -> dict[str, Any]:
        """VanillaConfig fields this task needs beyond size and vocabulary (labels, pooling, ...)."""
        return {}

    def set_generation_defaults(self, model: Any, tokenizer: PreTrainedTokenizerBase, opts: TaskOptions) -> None:
        """Generation settings saved with the model (what pipelines and the Hub widget use)."""

    # -- training
    def collator(self, tokenizer: PreTrainedTokenizerBase, model: Any, opts: TaskOptions) -> Any:
        raise NotImplementedError

    def metric_functions(self, tokenizer: PreTrainedTokenizerBase) -> tuple[Any, Any]:
        """``(preprocess_logits_for_metrics, compute_metrics)`` for the Trainer's evaluations."""
        return None, None

    def evaluation_arguments(self, opts: TaskOptions) -> dict[str, Any]:
        """Extra ``Seq2SeqTrainingArguments`` of the periodic evaluations (generation settings)."""
        return {}

    def evaluate(self, trainer: Trainer, data: DatasetDict, tokenizer: PreTrainedTokenizerBase,
                 opts: TaskOptions) -> Evaluation:
        """Final metrics on validation and test, and the baseline scored on the same data."""
        raise NotImplementedError

    def samples(self, model: Any, tokenizer: PreTrainedTokenizerBase, raw: DatasetDict, data: DatasetDict,
                evaluation: Evaluation, opts: TaskOptions) -> list[dict[str, Any]]:
        """A few outputs to look at (generations, fill-ins, translations, predicted labels)."""
        return []

    # -- model card
    def sample_markdown(self, sample: dict[str, Any]) -> str:
        raise NotImplementedError

    def card_procedure_rows(self, options: dict[str, Any]) -> list[tuple[str, str]]:
        """Task-specific rows of the card's training-procedure table."""
        return []

    def card_result_notes(self, metrics: dict[str, Any]) -> list[str]:
        """Paragraphs under the card's results table (how the figures were obtained)."""
        return []

    def usage_lines(self) -> list[str]:
        """Lines of the card's loading snippet after ``model`` and ``tokenizer`` are loaded."""
        raise NotImplementedError


def final_split(splits: Sequence[str]) -> str:
    """The final-evaluation split: ``test`` when there is one, else ``validation``."""
    return "test" if "test" in splits else "validation"


def need_columns(dsd: DatasetDict, columns: Sequence[str]) -> None:
    """Every split has ``columns``, or a clear error naming the flags that choose them."""
    for split, ds in dsd.items():
        missing = [c for c in columns if c not in ds.column_names]
        if missing:
            raise ValueError(f"split {split!r} lacks column(s) {missing}; it has {ds.column_names}. Name the right "
                             "ones with --text-column / --label-column / --source-column / --target-column.")


def limit_samples(data: DatasetDict, opts: TaskOptions) -> DatasetDict:
    """Apply ``--max-train-samples`` / ``--max-eval-samples`` / ``--max-test-samples``."""
    limits = {"train": opts.max_train_samples, "validation": opts.max_eval_samples, "test": opts.max_test_samples}
    for split, limit in limits.items():
        if limit is not None and split in data and len(data[split]) > limit:
            data[split] = data[split].select(range(limit))
    return data


def evaluate_splits(trainer: Trainer, data: DatasetDict, splits: Sequence[str]) -> dict[str, Any]:
    """``trainer.evaluate`` on each split, keeping quality metrics (not speed or progress)."""
    metrics: dict[str, Any] = {}
    for split in dict.fromkeys(splits):
        out = trainer.evaluate(data[split], metric_key_prefix=split)
        metrics.update({k: v for k, v in out.items()
                        if not k.endswith(("_runtime", "_per_second", "_model_preparation_time", "epoch"))})
    return metrics
