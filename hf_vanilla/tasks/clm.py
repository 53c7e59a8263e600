"""Causal language modelling: a decoder predicting the next token (GPT-style)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import Evaluation, TaskOptions, final_split
from .language_model import LanguageModelTask
from .markdown import code_block, code_span

if TYPE_CHECKING:
    from datasets import Dataset, DatasetDict
    from transformers import PreTrainedTokenizerBase

#: Prompts for samples of a model trained on the default Shakespeare corpus (Macbeth is a held-out
#: test work, so its names test generalisation, not recall).
SHAKESPEARE_PROMPTS = ("MACBETH.\n", "LADY MACBETH.\nCome, ", "To be, or not to be, ")


class CausalLM(LanguageModelTask):
    name = "clm"
    display_name = "causal language modelling"
    family = "decoder"
    auto_class = "AutoModelForCausalLM"
    model_class = "VanillaForCausalLM"
    pipeline_tag = "text-generation"
    defaults = dict(tokenizer="bpe", learning_rate=1e-3, batch_size=32, recipe="default")
    # The paper's post-norm decoder sat on the unigram plateau for most of a few-hundred-step run (docs/training.md).
    model_defaults = dict(norm_position="pre")
    card_metrics = (("perplexity", "perplexity", "Perplexity"), ("accuracy", "accuracy", "Next-token accuracy"))
    shift, join_with_eos, shakespeare_sample_by = True, True, "document"

    def build_tokenizer(self, train_split: Dataset, opts: TaskOptions) -> PreTrainedTokenizerBase:
        """Byte-level BPE without automatic special tokens (documents are joined with ``</s>`` when
        tokenising, and prompts must not end in ``</s>``); left padding for batched generation,
        passed to the constructor so that it is saved with the tokenizer."""
        # the corpora need the [train] extra: loaded when a run fetches data, not when a task is named
        from ..corpora import iter_texts, train_tokenizer

        return train_tokenizer(iter_texts(train_split, ("text",)), kind=opts.tokenizer,  # type: ignore[arg-type]
                               vocab_size=opts.vocab_size, lowercase=opts.lowercase, add_eos=False,
                               model_max_length=self.max_positions(opts), padding_side="left")

    def block_columns(self, blocks: list[list[int]]) -> dict[str, list]:
        return {**super().block_columns(blocks), "labels": [list(b) for b in blocks]}

    def set_generation_defaults(self, model: Any, tokenizer: PreTrainedTokenizerBase, opts: TaskOptions) -> None:
        gc = model.generation_config
        gc.pad_token_id, gc.eos_token_id, gc.bos_token_id = (tokenizer.pad_token_id, model.config.eos_token_id,
                                                             model.config.bos_token_id)
        gc.do_sample, gc.top_k, gc.temperature, gc.max_new_tokens = True, 50, 0.8, opts.max_new_tokens

    def collator(self, tokenizer: PreTrainedTokenizerBase, model: Any, opts: TaskOptions) -> Any:
        # transformers' collators load torch: only when a run trains (start-up time)
        from transformers import default_data_collator

        return default_data_collator

    def prompts(self, raw: DatasetDict, opts: TaskOptions) -> list[str]:
        """The user's prompts; else Shakespeare's for the default corpus; else the test texts' openings."""
        if opts.prompts:
            return list(opts.prompts)
        if not (opts.data_files or opts.dataset):
            return list(SHAKESPEARE_PROMPTS)[: opts.num_samples]
        return [" ".join(t.split()[:6]) for t in raw[final_split(raw)]["text"][: opts.num_samples]]

    def samples(self, model: Any, tokenizer: PreTrainedTokenizerBase, raw: DatasetDict, data: DatasetDict,
                evaluation: Evaluation, opts: TaskOptions) -> list[dict[str, Any]]:
        """A sampled and a greedy continuation per prompt; prompt i samples with seed ``seed + i``, so the
        samples differ because the prompts do, not because of one shared random stream."""
        # torch only when a run draws samples (start-up time: naming a task loads no model)
        import torch

        samples = []
        for i, prompt in enumerate(self.prompts(raw, opts)):
            enc = tokenizer(prompt, return_tensors="pt").to(model.device)
            torch.manual_seed(opts.seed + i)
            sampled = model.generate(**enc, max_new_tokens=opts.max_new_tokens, do_sample=True, top_k=50,
                                     temperature=0.8, pad_token_id=tokenizer.pad_token_id)
            greedy = model.generate(**enc, max_new_tokens=opts.max_new_tokens, do_sample=False,
                                    pad_token_id=tokenizer.pad_token_id)
            cut = enc["input_ids"].shape[1]
            samples.append({"prompt": prompt, "seed": opts.seed + i,
                            "sampled": tokenizer.decode(sampled[0, cut:], skip_special_tokens=True),
                            "greedy": tokenizer.decode(greedy[0, cut:], skip_special_tokens=True)})
        return samples

    def sample_markdown(self, sample: dict[str, Any]) -> str:
        seed = f", seed {sample['seed']}" if "seed" in sample else ""
        return (f"Prompt {code_span(repr(sample['prompt']))}, sampled (top-k 50, temperature 0.8{seed}):\n\n"
                + code_block(sample["prompt"] + sample["sampled"], "text"))

    def usage_lines(self) -> list[str]:
        return ['inputs = tokenizer("MACBETH.\\n", return_tensors="pt")',
                "print(tokenizer.decode(model.generate(**inputs, max_new_tokens=60)[0]))"]
