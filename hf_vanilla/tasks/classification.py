"""Text classification: an encoder with a pooled classification head, against a majority-class baseline."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from .base import Evaluation, Task, TaskOptions, evaluate_splits, final_split, limit_samples, need_columns
from .markdown import plain
from .metrics import classification_metrics, macro_f1

if TYPE_CHECKING:
    from datasets import Dataset, DatasetDict
    from transformers import PreTrainedTokenizerBase, Trainer


class Classification(Task):
    name = "classification"
    display_name = "text classification"
    family = "encoder"
    auto_class = "AutoModelForSequenceClassification"
    model_class = "VanillaForSequenceClassification"
    pipeline_tag = "text-classification"
    defaults = dict(tokenizer="wordpiece", learning_rate=3e-4, batch_size=16, recipe="default")
    card_metrics = (("accuracy", "accuracy", "Accuracy"), ("macro_f1", "f1", "Macro-F1"))

    def default_corpus(self, opts: TaskOptions) -> tuple[DatasetDict, dict[str, Any]]:
        # the corpora need the [train] extra: loaded when a run fetches data, not when a task is named
        from ..corpora import CORPORA, load_bbc_news

        spec = CORPORA["bbc-news"]
        return load_bbc_news(seed=opts.seed), dict(
            source="hf_vanilla.corpora", name="bbc-news", corpus=spec.description, license=spec.license,
            split_note="stratified by class, 10% validation and 10% test, by a seeded hash of each article id")

    def normalise(self, dsd: DatasetDict, opts: TaskOptions) -> DatasetDict:
        """``text`` + a ``ClassLabel`` ``label`` whose classes are the training split's."""
        # datasets ([train] extra) takes seconds to load: only when a run prepares data (start-up time)
        from datasets import ClassLabel, DatasetDict

        need_columns(dsd, [opts.text_column, opts.label_column])
        train_feature = dsd["train"].features[opts.label_column]
        if isinstance(train_feature, ClassLabel):
            names = list(train_feature.names)
        else:  # strings or ints: the classes are the sorted set of training labels
            names = sorted({str(v) for v in dsd["train"][opts.label_column]})
        index = {name: i for i, name in enumerate(names)}
        out = {}
        for split, ds in dsd.items():
            feature = ds.features[opts.label_column]
            if isinstance(feature, ClassLabel):
                ds = ds.map(lambda v, _f=feature: {"label_id": index[_f.int2str(v)]}, input_columns=opts.label_column)
            else:
                unknown = sorted({str(v) for v in ds[opts.label_column]} - set(names))
                if unknown:
                    raise ValueError(f"split {split!r} has labels not seen in train: {unknown[:10]}")
                ds = ds.map(lambda v: {"label_id": index[str(v)]}, input_columns=opts.label_column)
            ds = ds.select_columns([opts.text_column, "label_id"]).rename_columns(
                {opts.text_column: "text", "label_id": "label"})
            out[split] = ds.cast_column("label", ClassLabel(names=names))
        return DatasetDict(out)

    def example_unit(self, opts: TaskOptions) -> str:
        return "articles"

    def build_tokenizer(self, train_split: Dataset, opts: TaskOptions) -> PreTrainedTokenizerBase:
        # the corpora need the [train] extra: loaded when a run fetches data, not when a task is named
        from ..corpora import iter_texts, train_tokenizer

        return train_tokenizer(iter_texts(train_split, ("text",)), kind=opts.tokenizer,  # type: ignore[arg-type]
                               vocab_size=opts.vocab_size, lowercase=opts.lowercase, add_eos=opts.tokenizer == "bpe",
                               model_max_length=self.max_positions(opts))

    def max_positions(self, opts: TaskOptions) -> int:
        return opts.max_length

    def tokenize(self, dsd: DatasetDict, tokenizer: PreTrainedTokenizerBase, opts: TaskOptions) -> DatasetDict:
        # datasets ([train] extra) takes seconds to load: only when a run prepares data (start-up time)
        from datasets import DatasetDict

        def encode(batch: dict[str, list]) -> dict[str, list]:
            return tokenizer(batch["text"], max_length=opts.max_length, truncation=True)

        return limit_samples(DatasetDict({
            split: ds.map(encode, batched=True, remove_columns=["text"], desc=f"tokenising {split}")
            for split, ds in dsd.items()
        }), opts)

    def config_fields(self, tokenizer: PreTrainedTokenizerBase, raw: DatasetDict) -> dict[str, Any]:
        names = raw["train"].features["label"].names
        fields: dict[str, Any] = dict(num_labels=len(names), id2label=dict(enumerate(names)),
                                      label2id={n: i for i, n in enumerate(names)})
        if tokenizer.cls_token_id is None:
            fields["classifier_pooling"] = "mean"  # no [CLS] token to pool (a BPE tokenizer)
        return fields

    def collator(self, tokenizer: PreTrainedTokenizerBase, model: Any, opts: TaskOptions) -> Any:
        # transformers' collators load torch: only when a run trains (start-up time)
        from transformers import DataCollatorWithPadding

        return DataCollatorWithPadding(tokenizer)

    def metric_functions(self, tokenizer: PreTrainedTokenizerBase) -> tuple[Any, Any]:
        def predicted_class(logits, labels):
            return (logits[0] if isinstance(logits, tuple) else logits).argmax(-1)

        return predicted_class, classification_metrics

    def evaluate(self, trainer: Trainer, data: DatasetDict, tokenizer: PreTrainedTokenizerBase,
                 opts: TaskOptions) -> Evaluation:
        test_name = final_split(data)
        metrics = {"test_split": test_name, **evaluate_splits(trainer, data, ("validation", test_name))}
        majority = Counter(data["train"]["label"]).most_common(1)[0][0]
        gold = data[test_name]["label"]
        baseline = {"name": f"majority class ({trainer.model.config.id2label[majority]})",
                    f"{test_name}_accuracy": sum(g == majority for g in gold) / max(1, len(gold)),
                    f"{test_name}_macro_f1": macro_f1(gold, [majority] * len(gold))}
        return Evaluation(metrics, baseline)

    def samples(self, model: Any, tokenizer: PreTrainedTokenizerBase, raw: DatasetDict, data: DatasetDict,
                evaluation: Evaluation, opts: TaskOptions) -> list[dict[str, Any]]:
        # torch only when a run draws samples (start-up time: naming a task loads no model)
        import torch

        split = final_split(data)
        rows = data[split].select(range(min(opts.num_samples, len(data[split]))))
        names = model.config.id2label
        samples = []
        for row, text in zip(rows, raw[split]["text"][: len(rows)], strict=True):
            probs = model(input_ids=torch.tensor([row["input_ids"]], device=model.device)).logits[0].softmax(-1)
            samples.append({"text": text[:200], "label": names[row["label"]],
                            "predicted": names[int(probs.argmax())], "confidence": float(probs.max())})
        return samples

    def sample_markdown(self, sample: dict[str, Any]) -> str:
        return (f"- {plain(repr(sample['text'][:120]))}... gold **{plain(sample['label'])}**, predicted "
                f"**{plain(sample['predicted'])}** ({sample['confidence']:.2f})")

    def usage_lines(self) -> list[str]:
        return ['logits = model(**tokenizer("Shares rose after the results.", return_tensors="pt")).logits',
                "print(model.config.id2label[int(logits.argmax())])"]
