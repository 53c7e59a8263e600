"""Translation: the paper's own task, an encoder-decoder trained on sentence pairs, scored with
sacrebleu's BLEU and chrF against a copy-the-source baseline."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import Evaluation, Task, TaskOptions, evaluate_splits, final_split, limit_samples, need_columns
from .markdown import plain

if TYPE_CHECKING:
    from datasets import Dataset, DatasetDict
    from transformers import PreTrainedTokenizerBase, Trainer


class Translation(Task):
    name = "translation"
    display_name = "translation"
    family = "encoder-decoder"
    auto_class = "AutoModelForSeq2SeqLM"
    model_class = "VanillaForSeq2SeqLM"
    pipeline_tag = "translation"
    defaults = dict(tokenizer="bpe", learning_rate=None, batch_size=32, recipe="paper", group_by_length=True)
    card_metrics = (("bleu", "bleu", "BLEU"), ("chrf", "chrf", "chrF"))
    seq2seq = True
    selection_metric = ("bleu", True)

    def default_corpus(self, opts: TaskOptions) -> tuple[DatasetDict, dict[str, Any]]:
        # the corpora need the [train] extra: loaded when a run fetches data, not when a task is named
        from ..corpora import BIBLE_TEST_BOOKS, BIBLE_VALIDATION_BOOKS, CORPORA, load_bible_pairs

        spec = CORPORA["bible-en-es"]
        return load_bible_pairs(), dict(
            source="hf_vanilla.corpora", name="bible-en-es", corpus=spec.description, license=spec.license,
            split_note=(f"whole books held out: validation = {', '.join(BIBLE_VALIDATION_BOOKS)}; "
                        f"test = {', '.join(BIBLE_TEST_BOOKS)}"))

    def text_columns(self, opts: TaskOptions) -> list[str]:
        return [opts.source_column, opts.target_column]

    def normalise(self, dsd: DatasetDict, opts: TaskOptions) -> DatasetDict:
        # datasets ([train] extra) takes seconds to load: only when a run prepares data (start-up time)
        from datasets import DatasetDict

        need_columns(dsd, [opts.source_column, opts.target_column])
        return DatasetDict({
            split: ds.select_columns([opts.source_column, opts.target_column])
            .rename_columns({opts.source_column: "source", opts.target_column: "target"})
            .filter(lambda s, t: bool(s and s.strip() and t and t.strip()), input_columns=["source", "target"])
            for split, ds in dsd.items()
        })

    def example_unit(self, opts: TaskOptions) -> str:
        return "sentence pairs"

    def build_tokenizer(self, train_split: Dataset, opts: TaskOptions) -> PreTrainedTokenizerBase:
        """One tokenizer over both languages (the paper's shared vocabulary), ``</s>`` after each sentence."""
        # the corpora need the [train] extra: loaded when a run fetches data, not when a task is named
        from ..corpora import iter_texts, train_tokenizer

        return train_tokenizer(iter_texts(train_split, ("source", "target")), kind=opts.tokenizer,  # type: ignore[arg-type]
                               vocab_size=opts.vocab_size, lowercase=opts.lowercase, add_eos=True,
                               model_max_length=self.max_positions(opts))

    def max_positions(self, opts: TaskOptions) -> int:
        return max(opts.max_source_length, opts.max_target_length)

    def tokenize(self, dsd: DatasetDict, tokenizer: PreTrainedTokenizerBase, opts: TaskOptions) -> DatasetDict:
        """Token pairs; the text columns stay (BLEU and the samples need them; the Trainer drops them)."""
        # datasets ([train] extra) takes seconds to load: only when a run prepares data (start-up time)
        from datasets import DatasetDict

        def encode(batch: dict[str, list]) -> dict[str, list]:
            enc = tokenizer(batch["source"], max_length=opts.max_source_length, truncation=True)
            enc["labels"] = tokenizer(text_target=batch["target"], max_length=opts.max_target_length,
                                      truncation=True)["input_ids"]
            return enc

        return limit_samples(DatasetDict({
            split: ds.map(encode, batched=True, remove_columns=[], desc=f"tokenising {split}")
            for split, ds in dsd.items()
        }), opts)

    def config_fields(self, tokenizer: PreTrainedTokenizerBase, raw: DatasetDict) -> dict[str, Any]:
        bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.cls_token_id
        return {"decoder_start_token_id": bos}

    def set_generation_defaults(self, model: Any, tokenizer: PreTrainedTokenizerBase, opts: TaskOptions) -> None:
        """Beam 4 and length penalty 0.6 as in the paper (GNMT's penalty; transformers' differs slightly).
        Only ``max_new_tokens`` bounds the length: setting ``max_length`` too warns on every generate."""
        gc = model.generation_config
        gc.pad_token_id, gc.eos_token_id, gc.bos_token_id = (tokenizer.pad_token_id, model.config.eos_token_id,
                                                             model.config.bos_token_id)
        gc.decoder_start_token_id = model.config.decoder_start_token_id
        gc.num_beams, gc.max_new_tokens = opts.num_beams, opts.max_target_length
        if opts.num_beams > 1:  # beam-only settings; transformers refuses to save them for greedy decoding
            gc.length_penalty, gc.early_stopping = 0.6, True

    def collator(self, tokenizer: PreTrainedTokenizerBase, model: Any, opts: TaskOptions) -> Any:
        # transformers' collators load torch: only when a run trains (start-up time)
        from transformers import DataCollatorForSeq2Seq

        return DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)

    def evaluate(self, trainer: Trainer, data: DatasetDict, tokenizer: PreTrainedTokenizerBase,
                 opts: TaskOptions) -> Evaluation:
        test_name = final_split(data)
        scores, translations = self.translate(trainer, data[test_name], tokenizer, test_name, opts)
        metrics = {"test_split": test_name, **scores, **evaluate_splits(trainer, data, ("validation",))}
        sources, refs = data[test_name]["source"], data[test_name]["target"]
        baseline = {"name": "copy the source sentence", **translation_scores(list(sources), list(refs), test_name)}
        return Evaluation(metrics, baseline, translations)

    def translate(self, trainer: Trainer, ds: Dataset, tokenizer: PreTrainedTokenizerBase, split: str,
                  opts: TaskOptions) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """BLEU and chrF (sacrebleu) of beam-search translations, and the translations themselves."""
        out = trainer.predict(ds, metric_key_prefix=split, num_beams=opts.num_beams,
                              max_new_tokens=opts.max_target_length)
        # Distributed prediction pads the last round with repeated examples and, with generation, the
        # gather does not always drop them; the order is preserved, so the first len(ds) rows are ours.
        hyps = decode_predictions(out.predictions[: len(ds)], tokenizer)
        refs = list(ds["target"])
        scores = {**translation_scores(hyps, refs, split, signatures=True), f"{split}_sentences": len(hyps),
                  f"{split}_loss": out.metrics.get(f"{split}_loss")}
        translations = [{"source": s, "reference": r, "translation": h}
                        for s, r, h in zip(ds["source"], refs, hyps, strict=True)]
        return scores, translations

    def metric_functions(self, tokenizer: PreTrainedTokenizerBase) -> tuple[Any, Any]:
        """BLEU and chrF of the greedy translations the periodic evaluations generate (the learning curves)."""

        def compute_metrics(prediction: Any) -> dict[str, float]:
            hyps = decode_predictions(prediction.predictions, tokenizer)
            refs = decode_predictions(prediction.label_ids, tokenizer)
            return translation_scores(hyps, refs, split=None)

        return None, compute_metrics

    def evaluation_arguments(self, opts: TaskOptions) -> dict[str, Any]:
        # Greedy, not the final beam search: a curve point costs a few seconds, not minutes.
        return {"predict_with_generate": True, "generation_num_beams": 1}

    def samples(self, model: Any, tokenizer: PreTrainedTokenizerBase, raw: DatasetDict, data: DatasetDict,
                evaluation: Evaluation, opts: TaskOptions) -> list[dict[str, Any]]:
        return evaluation.outputs[: opts.num_samples]

    def sample_markdown(self, sample: dict[str, Any]) -> str:
        return (f"- **source:** {plain(sample['source'])}\n  - **reference:** {plain(sample['reference'])}\n"
                f"  - **model:** {plain(sample['translation'])}")

    def card_procedure_rows(self, options: dict[str, Any]) -> list[tuple[str, str]]:
        return [("decoding", f"beam {options.get('num_beams')}, length penalty 0.6")]

    def card_result_notes(self, metrics: dict[str, Any]) -> list[str]:
        split = metrics.get("test_split", "test")
        notes = [f"{split.capitalize()}: beam search ({metrics.get(f'{split}_sentences')} sentences); validation: "
                 "greedy decoding, as in the learning curves. sacrebleu signatures: BLEU "
                 f"`{metrics.get(f'{split}_bleu_signature')}`, chrF `{metrics.get(f'{split}_chrf_signature')}`."]
        averaging = metrics.get("checkpoint_averaging")
        if averaging and "averaged" in averaging:
            verdict = "kept (it scored higher)" if averaging["kept"] else "not kept (the final weights scored higher)"
            notes.append(f"Checkpoint averaging of {', '.join(averaging['checkpoints'])}: {averaging['metric']} "
                         f"{averaging['averaged']:.2f} averaged vs {averaging['final']:.2f} final; {verdict}.")
        return notes

    def usage_lines(self) -> list[str]:
        return ['inputs = tokenizer("In the beginning was the Word.", return_tensors="pt")',
                "print(tokenizer.decode(model.generate(**inputs)[0], skip_special_tokens=True))"]


def decode_predictions(ids: Any, tokenizer: PreTrainedTokenizerBase) -> list[str]:
    """Token ids as the Trainer gathers them (-100 where it padded) -> stripped texts."""
    # numpy only where metrics are computed (start-up time: a task is named without it)
    import numpy as np

    ids = np.where(np.asarray(ids) == -100, tokenizer.pad_token_id, ids)
    return [text.strip() for text in tokenizer.batch_decode(ids, skip_special_tokens=True)]


def translation_scores(hyps: list[str], refs: list[str], split: str | None,
                       signatures: bool = False) -> dict[str, Any]:
    """sacrebleu's corpus BLEU and chrF as ``{split}_bleu`` / ``{split}_chrf`` (bare names for ``split=None``,
    which the Trainer prefixes itself), with sacrebleu's signatures when asked."""
    # sacrebleu ([train] extra) only where translations are scored (start-up time)
    import sacrebleu

    prefix = f"{split}_" if split else ""
    bleu, chrf = sacrebleu.BLEU(), sacrebleu.CHRF()
    scores: dict[str, Any] = {f"{prefix}bleu": bleu.corpus_score(hyps, [refs]).score,
                              f"{prefix}chrf": chrf.corpus_score(hyps, [refs]).score}
    if signatures:
        scores.update({f"{prefix}bleu_signature": str(bleu.get_signature()),
                       f"{prefix}chrf_signature": str(chrf.get_signature())})
    return scores
