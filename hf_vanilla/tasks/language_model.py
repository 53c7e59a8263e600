"""What the causal and the masked language model share: Shakespeare, fixed-length token blocks,
exact token-weighted perplexity and the unigram baseline."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import Evaluation, Task, TaskOptions, evaluate_splits, final_split, limit_samples, need_columns
from .metrics import lm_metrics, token_stats, unigram_counts, unigram_perplexity

if TYPE_CHECKING:
    from datasets import DatasetDict
    from transformers import PreTrainedTokenizerBase, Trainer


class LanguageModelTask(Task):
    shift: bool  # the causal LM predicts the next token; the masked LM the token in place
    join_with_eos: bool  # documents joined by </s> (clm); [CLS]/[SEP] are already there (mlm)
    shakespeare_sample_by: str  # rows of Shakespeare: whole works (clm), speeches/stanzas (mlm)

    def default_corpus(self, opts: TaskOptions) -> tuple[DatasetDict, dict[str, Any]]:
        # the corpora need the [train] extra: loaded when a run fetches data, not when a task is named
        from ..corpora import CORPORA, SHAKESPEARE_TEST_WORKS, SHAKESPEARE_VALIDATION_WORKS, load_shakespeare

        sample_by = opts.sample_by or self.shakespeare_sample_by
        spec = CORPORA["shakespeare"]
        return load_shakespeare(sample_by=sample_by), dict(  # type: ignore[arg-type]
            source="hf_vanilla.corpora", name="shakespeare", corpus=spec.description, license=spec.license,
            sample_by=sample_by,
            split_note=(f"whole works held out: validation = {', '.join(SHAKESPEARE_VALIDATION_WORKS)}; "
                        f"test = {', '.join(SHAKESPEARE_TEST_WORKS)}"))

    def normalise(self, dsd: DatasetDict, opts: TaskOptions) -> DatasetDict:
        # datasets ([train] extra) takes seconds to load: only when a run prepares data (start-up time)
        from datasets import DatasetDict

        need_columns(dsd, [opts.text_column])
        out = {}
        for split, ds in dsd.items():
            if opts.text_column != "text":
                ds = ds.rename_column(opts.text_column, "text")
            out[split] = ds.select_columns(["text"]).filter(lambda t: bool(t and t.strip()), input_columns="text")
        return DatasetDict(out)

    def example_unit(self, opts: TaskOptions) -> str:
        return f"blocks of {opts.block_size} tokens"

    def tokens_per_example(self, opts: TaskOptions) -> int | None:
        return opts.block_size

    def max_positions(self, opts: TaskOptions) -> int:
        return opts.block_size

    def tokenize(self, dsd: DatasetDict, tokenizer: PreTrainedTokenizerBase, opts: TaskOptions) -> DatasetDict:
        """Concatenate each batch of texts and cut fixed blocks: no padding, every position a real token."""
        # datasets ([train] extra) takes seconds to load: only when a run prepares data (start-up time)
        from datasets import DatasetDict

        block, eos = opts.block_size, tokenizer.eos_token_id if self.join_with_eos else None

        def group(batch: dict[str, list]) -> dict[str, list]:
            ids: list[int] = []
            for text in batch["text"]:
                ids.extend(tokenizer(text, verbose=False)["input_ids"])
                if eos is not None:
                    ids.append(eos)
            n = (len(ids) // block) * block or len(ids)  # a tiny split keeps one short block
            blocks = [ids[i : i + block] for i in range(0, n, block)]
            return self.block_columns(blocks)

        # Batches of 1000 rows: each batch's remainder (< one block) is dropped, which is <0.1% of tokens.
        return limit_samples(DatasetDict({
            split: ds.map(group, batched=True, batch_size=1000, remove_columns=ds.column_names,
                          desc=f"tokenising {split}")
            for split, ds in dsd.items()
        }), opts)

    def block_columns(self, blocks: list[list[int]]) -> dict[str, list]:
        return {"input_ids": blocks, "attention_mask": [[1] * len(b) for b in blocks]}

    def metric_functions(self, tokenizer: PreTrainedTokenizerBase) -> tuple[Any, Any]:
        shift = self.shift
        return (lambda logits, labels: token_stats(logits, labels, shift=shift)), lm_metrics

    def evaluate(self, trainer: Trainer, data: DatasetDict, tokenizer: PreTrainedTokenizerBase,
                 opts: TaskOptions) -> Evaluation:
        test_name = final_split(data)
        splits = ("validation", test_name)
        metrics = {"test_split": test_name, **evaluate_splits(trainer, data, splits)}
        return Evaluation(metrics, self.unigram_baseline(data, tokenizer, splits))

    def unigram_baseline(self, data: DatasetDict, tokenizer: PreTrainedTokenizerBase, splits) -> dict[str, Any]:
        """An add-one unigram trained on the training split, scored on the tokens the model predicts."""
        counts = unigram_counts(data["train"], len(tokenizer))
        for special in self.unscored_tokens(tokenizer):
            counts[special] = 0
        baseline: dict[str, Any] = {
            "name": "unigram, add-one smoothing, same tokenization, trained on the training split"}
        top = max(range(len(counts)), key=counts.__getitem__)  # the unigram's only guess
        for split in dict.fromkeys(splits):
            labels = data[split]["labels"]
            baseline[f"{split}_perplexity"] = unigram_perplexity(counts, labels, shift=self.shift)
            targets = [t for row in labels for t in (row[1:] if self.shift else row) if t != -100]
            baseline[f"{split}_accuracy"] = sum(t == top for t in targets) / max(1, len(targets))
        return baseline

    def unscored_tokens(self, tokenizer: PreTrainedTokenizerBase) -> list[int]:
        """Tokens the model is never asked to predict (the unigram spends no mass on them)."""
        return []
