"""hf_vanilla.corpora.tokenizers: BPE and WordPiece trained with tokenizers' trainers, saved and reloaded."""

from __future__ import annotations

from pathlib import Path

import datasets
import pytest
from transformers import AutoTokenizer

from hf_vanilla import corpora

pytestmark = pytest.mark.usefixtures("corpus_cache")


# --------------------------------------------------------------------------------------------------
# Tokenizers
# --------------------------------------------------------------------------------------------------

CORPUS_EN = ["In the beginning God created the heaven and the earth.", "And the earth was without form."]
CORPUS_ES = ["En el principio crió Dios los cielos y la tierra.", "Y la tierra estaba desordenada y vacía."]


def test_bpe_tokenizer_round_trip(tmp_path: Path) -> None:
    tok = corpora.train_tokenizer((CORPUS_EN + CORPUS_ES) * 5, "bpe", vocab_size=320, min_frequency=1)
    assert [tok.convert_tokens_to_ids(t) for t in ("<pad>", "<s>", "</s>", "<unk>", "<mask>")] == [0, 1, 2, 3, 4]
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.mask_token_id) == (0, 1, 2, 4)
    assert len(tok) == 320
    samples = [*CORPUS_EN, *CORPUS_ES, "  doble  espacio\ty tab\nnueva línea ", "unseen: 東京 🙂 ñandú"]
    for text in samples:
        ids = tok(text)["input_ids"]
        assert ids[-1] == 2 and 2 not in ids[:-1]
        assert tok.decode(ids, skip_special_tokens=True) == text
    tok.save_pretrained(tmp_path / "tok")
    loaded = AutoTokenizer.from_pretrained(tmp_path / "tok")
    assert loaded.all_special_tokens == tok.all_special_tokens
    assert (loaded.pad_token, loaded.eos_token, loaded.mask_token, loaded.unk_token) == ("<pad>", "</s>", "<mask>", "<unk>")
    for text in samples:
        assert loaded(text)["input_ids"] == tok(text)["input_ids"]
        assert loaded.decode(loaded(text)["input_ids"], skip_special_tokens=True) == text
    batch = loaded(["a", "longer text here"], padding=True)
    assert batch["input_ids"][0][-1] == 0 and batch["attention_mask"][0][-1] == 0
    assert len(batch["input_ids"][0]) == len(batch["input_ids"][1])


def test_bpe_tokenizer_bos_and_no_eos() -> None:
    tok = corpora.train_tokenizer(CORPUS_EN * 3, vocab_size=270, min_frequency=1, add_bos=True, add_eos=False)
    ids = tok("earth")["input_ids"]
    assert ids[0] == 1 and 2 not in ids
    assert tok("a", "b")["input_ids"] == [1, tok.convert_tokens_to_ids("a"), tok.convert_tokens_to_ids("b")]


def test_wordpiece_tokenizer_round_trip(tmp_path: Path) -> None:
    tok = corpora.train_tokenizer(CORPUS_EN * 5, "wordpiece", vocab_size=200, min_frequency=1, lowercase=True)
    assert [tok.convert_tokens_to_ids(t) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")] == [0, 1, 2, 3, 4]
    assert list(tok("The earth", "was created")) == ["input_ids", "attention_mask"]
    enc = tok("The earth", "was created", return_token_type_ids=True)
    assert enc["input_ids"][0] == 2 and enc["input_ids"][-1] == 3
    assert tok.convert_ids_to_tokens(enc["input_ids"]) == ["[CLS]", "the", "earth", "[SEP]", "was", "created", "[SEP]"]
    assert enc["token_type_ids"] == [0, 0, 0, 0, 1, 1, 1]
    assert (
        tok.decode(tok("And the Earth created.")["input_ids"], skip_special_tokens=True)
        == "and the earth created."
    )
    assert tok("☃")["input_ids"] == [2, 1, 3]
    tok.save_pretrained(tmp_path / "wp")
    loaded = AutoTokenizer.from_pretrained(tmp_path / "wp")
    assert (loaded.cls_token, loaded.sep_token, loaded.pad_token_id, loaded.mask_token_id) == ("[CLS]", "[SEP]", 0, 4)
    again = loaded("The earth", "was created", return_token_type_ids=True)
    assert (again["input_ids"], again["token_type_ids"]) == (enc["input_ids"], enc["token_type_ids"])


@pytest.mark.parametrize("kind", ["bpe", "wordpiece"])
def test_padding_side_survives_save_and_reload(tmp_path: Path, kind: str) -> None:
    """A decoder's tokenizer pads on the left for batched generate(); set as an attribute it was lost on save."""
    tok = corpora.train_tokenizer(CORPUS_EN * 3, kind, vocab_size=270, min_frequency=1, padding_side="left")
    tok.save_pretrained(tmp_path / "tok")
    loaded = AutoTokenizer.from_pretrained(tmp_path / "tok")
    assert (tok.padding_side, loaded.padding_side) == ("left", "left")
    batch = loaded(["earth", "the earth was"], padding=True)
    assert batch["attention_mask"][0][0] == 0 and batch["attention_mask"][0][-1] == 1
    default = corpora.train_tokenizer(CORPUS_EN * 3, kind, vocab_size=270, min_frequency=1)
    default.save_pretrained(tmp_path / "default")
    assert AutoTokenizer.from_pretrained(tmp_path / "default").padding_side == "right"


def test_train_tokenizer_validates_arguments() -> None:
    with pytest.raises(ValueError, match="kind must be 'bpe' or 'wordpiece'"):
        corpora.train_tokenizer(["a"], "unigram")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs vocab_size >= 261"):
        corpora.train_tokenizer(["a"], "bpe", vocab_size=100)


def test_iter_texts_streams_columns_for_a_shared_vocabulary() -> None:
    ds = datasets.Dataset.from_dict({"en": ["a", "b", "c"], "es": ["x", "y", "z"], "book": ["G"] * 3})
    assert list(corpora.iter_texts(ds, ("en", "es"), batch_size=2)) == ["a", "b", "x", "y", "c", "z"]
