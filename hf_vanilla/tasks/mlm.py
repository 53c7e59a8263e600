"""Masked language modelling: an encoder filling in masked tokens (BERT-style)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import Evaluation, TaskOptions, final_split
from .language_model import LanguageModelTask
from .markdown import code_span

if TYPE_CHECKING:
    from datasets import Dataset, DatasetDict
    from transformers import PreTrainedTokenizerBase


class MaskedLM(LanguageModelTask):
    name = "mlm"
    display_name = "masked language modelling"
    family = "encoder"
    auto_class = "AutoModelForMaskedLM"
    model_class = "VanillaForMaskedLM"
    pipeline_tag = "fill-mask"
    defaults = dict(tokenizer="wordpiece", learning_rate=5e-4, batch_size=32, recipe="default")
    card_metrics = (("perplexity", "perplexity", "Masked-token perplexity"),
                    ("accuracy", "accuracy", "Masked-token accuracy"))
    shift, join_with_eos, shakespeare_sample_by = False, False, "paragraph"

    def build_tokenizer(self, train_split: Dataset, opts: TaskOptions) -> PreTrainedTokenizerBase:
        """WordPiece with ``[CLS] ... [SEP]`` (or BPE with ``</s>`` after each text)."""
        # the corpora need the [train] extra: loaded when a run fetches data, not when a task is named
        from ..corpora import iter_texts, train_tokenizer

        return train_tokenizer(iter_texts(train_split, ("text",)), kind=opts.tokenizer,  # type: ignore[arg-type]
                               vocab_size=opts.vocab_size, lowercase=opts.lowercase, add_eos=opts.tokenizer == "bpe",
                               model_max_length=self.max_positions(opts))

    def tokenize(self, dsd: DatasetDict, tokenizer: PreTrainedTokenizerBase, opts: TaskOptions) -> DatasetDict:
        """Blocks, with the evaluation splits masked once (fixed, seeded masks, so every evaluation of a
        run, and of every run with that seed, scores the same positions)."""
        data = super().tokenize(dsd, tokenizer, opts)
        for split in ("validation", "test"):
            if split in data:
                data[split] = premask(data[split], tokenizer, opts.mlm_probability, opts.seed + 1)
        return data

    def collator(self, tokenizer: PreTrainedTokenizerBase, model: Any, opts: TaskOptions) -> Any:
        return MLMCollator(tokenizer, opts.mlm_probability)

    def unscored_tokens(self, tokenizer: PreTrainedTokenizerBase) -> list[int]:
        return list(tokenizer.all_special_ids)  # [CLS]/[SEP] are never masked

    def samples(self, model: Any, tokenizer: PreTrainedTokenizerBase, raw: DatasetDict, data: DatasetDict,
                evaluation: Evaluation, opts: TaskOptions) -> list[dict[str, Any]]:
        """The model's top 5 for the first masked positions of a few test blocks."""
        # torch only when a run draws samples (start-up time: naming a task loads no model)
        import torch

        split = data[final_split(data)]
        samples = []
        for row in split.select(range(min(opts.num_samples, len(split)))):
            logits = model(input_ids=torch.tensor([row["input_ids"]], device=model.device)).logits[0]
            labels = torch.tensor(row["labels"])
            positions = labels.ne(-100).nonzero().flatten()[:5].tolist()
            samples.append({
                "masked_text": tokenizer.decode(row["input_ids"], skip_special_tokens=False)[:400],
                "fills": [{"position": p, "answer": tokenizer.convert_ids_to_tokens(int(labels[p])),
                           "top5": tokenizer.convert_ids_to_tokens(logits[p].topk(5).indices.tolist())}
                          for p in positions],
            })
        return samples

    def sample_markdown(self, sample: dict[str, Any]) -> str:
        return "- " + "; ".join(f"{code_span(f['answer'])} -> {', '.join(code_span(t) for t in f['top5'])}"
                                for f in sample["fills"])

    def usage_lines(self) -> list[str]:
        return ["from transformers import pipeline",
                'fill = pipeline("fill-mask", model=model, tokenizer=tokenizer)',
                'print(fill(f"To be or not to be, that is the {tokenizer.mask_token}."))']


class MLMCollator:
    """Random masking for training batches; evaluation batches arrive pre-masked (:func:`premask`)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, mlm_probability: float, seed: int | None = None) -> None:
        # transformers' collators load torch: only when a run trains (start-up time)
        from transformers import DataCollatorForLanguageModeling, default_data_collator

        # seed=None: masking draws from torch's global RNG, which Trainer checkpoints restore, so a
        # resumed run masks exactly like an uninterrupted one.
        self.masker = DataCollatorForLanguageModeling(tokenizer, mlm_probability=mlm_probability, seed=seed)
        self.stack = default_data_collator

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        if "labels" in features[0]:
            return self.stack(features)
        return self.masker([{k: v for k, v in f.items() if k != "labels"} for f in features])


def premask(ds: Dataset, tokenizer: PreTrainedTokenizerBase, mlm_probability: float, seed: int) -> Dataset:
    """Mask an evaluation split once, reproducibly (``input_ids`` + ``labels`` columns)."""
    # transformers' collators load torch: only when a run trains (start-up time)
    from transformers import DataCollatorForLanguageModeling

    masker = DataCollatorForLanguageModeling(tokenizer, mlm_probability=mlm_probability, seed=seed,
                                             return_tensors="np")

    def mask(batch: dict[str, list]) -> dict[str, list]:
        out = masker([{"input_ids": ids} for ids in batch["input_ids"]])
        return {"input_ids": out["input_ids"].tolist(), "labels": out["labels"].tolist()}

    return ds.map(mask, batched=True, batch_size=256, desc="masking eval split")
