"""Train a tokenizer for a new model on the training split, with ``tokenizers``' own trainers.

No pretrained tokenizer is fetched: :func:`train_tokenizer` runs ``tokenizers``' ``BpeTrainer`` (byte-level
BPE, GPT-2 style) or ``WordPieceTrainer`` (BERT style) over an iterator of strings and wraps the result
as a ``PreTrainedTokenizerFast`` with its special tokens, which ``save_pretrained`` writes and
``AutoTokenizer.from_pretrained`` reloads. docs/training.md shows the whole recipe.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Literal

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

#: Special tokens of the BPE tokenizer, ids 0-4.
BPE_SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<s>", "</s>", "<unk>", "<mask>")
#: Special tokens of the WordPiece tokenizer, ids 0-4.
WORDPIECE_SPECIAL_TOKENS: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def iter_texts(dataset: Any, columns: Sequence[str] = ("text",), batch_size: int = 1000) -> Iterator[str]:
    """Stream the strings of ``columns`` of a ``datasets.Dataset`` (e.g. ``("en", "es")`` to train one
    shared translation tokenizer), batch by batch."""
    for start in range(0, len(dataset), batch_size):
        batch = dataset[start : start + batch_size]
        for column in columns:
            yield from batch[column]


def train_tokenizer(
    texts: Iterable[str],
    kind: Literal["bpe", "wordpiece"] = "bpe",
    vocab_size: int = 8000,
    *,
    min_frequency: int = 2,
    lowercase: bool = False,
    add_bos: bool = False,
    add_eos: bool = True,
    model_max_length: int = 512,
    padding_side: Literal["left", "right"] = "right",
) -> PreTrainedTokenizerFast:
    """Train a tokenizer with ``tokenizers`` and wrap it as a ``PreTrainedTokenizerFast``.

    ``kind="bpe"``: byte-level BPE (no unknown characters; ``decode`` reproduces the text exactly) for
    causal LM and translation. Special tokens, ids 0-4: ``<pad> <s> </s> <unk> <mask>``. Encoding
    appends ``</s>`` (``add_eos``) and can prepend ``<s>`` (``add_bos``). For translation train one
    tokenizer on both languages (shared vocabulary), e.g.
    ``train_tokenizer(iter_texts(ds["train"], ("en", "es")))``.

    ``kind="wordpiece"``: BERT-style WordPiece for encoder tasks (``lowercase`` optional), special
    tokens, ids 0-4: ``[PAD] [UNK] [CLS] [SEP] [MASK]``, and the post-processor
    ``[CLS] A [SEP]`` / ``[CLS] A [SEP] B [SEP]`` with token type ids 0 / 1. Like the BPE tokenizer it
    returns only ``input_ids`` and ``attention_mask`` by default (the original transformer has no
    segment embeddings); pass ``return_token_type_ids=True`` when calling it to get the type ids.

    ``padding_side="left"`` for a decoder's tokenizer (batched ``generate()`` continues each row at its
    end); given to the constructor, it is saved with the tokenizer (set afterwards, it would not be).
    """
    wrapper_kwargs = {"model_max_length": model_max_length, "padding_side": padding_side}
    if kind == "bpe":
        return _train_bpe(texts, vocab_size, min_frequency, lowercase, add_bos, add_eos, wrapper_kwargs)
    if kind == "wordpiece":
        return _train_wordpiece(texts, vocab_size, min_frequency, lowercase, wrapper_kwargs)
    raise ValueError(f"kind must be 'bpe' or 'wordpiece', got {kind!r}")


def _train_bpe(
    texts: Iterable[str],
    vocab_size: int,
    min_frequency: int,
    lowercase: bool,
    add_bos: bool,
    add_eos: bool,
    wrapper_kwargs: dict[str, Any],
) -> PreTrainedTokenizerFast:
    specials = list(BPE_SPECIAL_TOKENS)
    if vocab_size < 256 + len(specials):
        raise ValueError(f"byte-level BPE needs vocab_size >= {256 + len(specials)}, got {vocab_size}")
    tok = Tokenizer(models.BPE())
    if lowercase:
        tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    bos, eos = ["<s>"] if add_bos else [], ["</s>"] if add_eos else []
    if bos or eos:
        tok.post_processor = processors.TemplateProcessing(
            single=[*bos, "$A", *eos],
            pair=[*bos, "$A", *eos, "$B", *eos],
            special_tokens=[(t, tok.token_to_id(t)) for t in (*bos, *eos)],
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
        **wrapper_kwargs,
        clean_up_tokenization_spaces=False,
    )


def _train_wordpiece(
    texts: Iterable[str], vocab_size: int, min_frequency: int, lowercase: bool, wrapper_kwargs: dict[str, Any]
) -> PreTrainedTokenizerFast:
    specials = list(WORDPIECE_SPECIAL_TOKENS)
    if vocab_size <= len(specials):
        raise ValueError(f"vocab_size must exceed {len(specials)}, got {vocab_size}")
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=None if lowercase else False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=specials,
        continuing_subword_prefix="##",
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        **wrapper_kwargs,
        clean_up_tokenization_spaces=True,
    )
