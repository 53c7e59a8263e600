"""hf_vanilla.corpora.bible: the zText reader, the KJV layout, OSIS stripping, verse pairs, the book split."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hf_vanilla import corpora
from hf_vanilla.corpora import (
    KJV_VERSIFICATION,
    Book,
    archives,
    bible,
    rows,
)
from tests.corpus_fixtures import EN, ES, TOY, write_module, write_ztext

pytestmark = pytest.mark.usefixtures("corpus_cache")


# --------------------------------------------------------------------------------------------------
# zText reader, layout and OSIS stripping
# --------------------------------------------------------------------------------------------------


def test_read_ztext_returns_every_entry_across_blocks(tmp_path: Path) -> None:
    entries = ["", "head", "α β", "", "x" * 300, "last"]
    write_ztext(tmp_path / "m", "ot", entries, per_block=4)
    assert (tmp_path / "m" / "ot.bzv").stat().st_size == 10 * len(entries)
    assert (tmp_path / "m" / "ot.bzs").stat().st_size == 12 * 2
    assert corpora.read_ztext(tmp_path / "m", "ot") == entries


def test_read_ztext_rejects_truncated_index(tmp_path: Path) -> None:
    write_ztext(tmp_path / "m", "nt", ["", "a"])
    with open(tmp_path / "m" / "nt.bzv", "ab") as fh:
        fh.write(b"\0\0\0")
    with pytest.raises(ValueError, match="truncated zText index"):
        corpora.read_ztext(tmp_path / "m", "nt")


def test_iter_ztext_verses_skips_heading_entries(tmp_path: Path) -> None:
    mod = write_module(tmp_path / "m", TOY, EN)
    refs = [(b, c, v) for b, c, v, _ in corpora.iter_ztext_verses(mod, TOY)]
    assert refs == [
        ("Gen", 1, 1), ("Gen", 1, 2), ("Gen", 2, 1), ("Exod", 1, 1), ("Exod", 1, 2),
        ("Matt", 1, 1), ("Matt", 2, 1), ("Matt", 2, 2),
    ]  # fmt: skip
    markup = {(b, c, v): m for b, c, v, m in corpora.iter_ztext_verses(mod, TOY)}
    assert markup == EN


def test_iter_ztext_verses_checks_versification(tmp_path: Path) -> None:
    mod = write_module(tmp_path / "m", TOY, EN)
    longer = (Book("Gen", "Genesis", "ot", (3, 1)), *TOY[1:])
    with pytest.raises(ValueError, match="12 index entries, the versification needs 13"):
        list(corpora.iter_ztext_verses(mod, longer))
    renamed = (Book("Lev", "Leviticus", "ot", (2, 1)), *TOY[1:])
    with pytest.raises(ValueError, match="book heading 2 is 'Gen', expected 'Lev'"):
        list(corpora.iter_ztext_verses(mod, renamed))
    swapped = (Book("Gen", "Genesis", "ot", (1, 2)), *TOY[1:])
    with pytest.raises(ValueError, match=r"verse slot 6 \(Gen 2:1\) holds the start of chapter 'Gen.2'"):
        list(corpora.iter_ztext_verses(mod, swapped))


def test_kjv_versification_matches_the_real_index_sizes() -> None:
    # The real modules' ot.bzv / nt.bzv are 241150 / 82460 bytes: 24115 / 8246 entries.
    ot = [b for b in KJV_VERSIFICATION if b.testament == "ot"]
    nt = [b for b in KJV_VERSIFICATION if b.testament == "nt"]
    assert (len(ot), len(nt)) == (39, 27)
    assert sum(len(b.verses) for b in KJV_VERSIFICATION) == 1189
    assert (sum(map(sum, (b.verses for b in ot))), sum(map(sum, (b.verses for b in nt)))) == (23145, 7957)
    assert bible._index_size(ot) == 24115
    assert bible._index_size(nt) == 8246
    assert [b.osis for b in KJV_VERSIFICATION[:2] + KJV_VERSIFICATION[-2:]] == ["Gen", "Exod", "Jude", "Rev"]
    assert KJV_VERSIFICATION[18].verses[118] == 176  # Psalm 119


def test_full_kjv_layout_places_first_and_last_verses(tmp_path: Path) -> None:
    verses = {
        ("Gen", 1, 1): "In the beginning.",
        ("Ps", 119, 176): "I have gone astray.",
        ("Mal", 4, 6): "Lest I come.",
        ("Matt", 1, 1): "The book.",
        ("Rev", 22, 21): "The grace.",
    }
    mod = write_module(tmp_path / "kjv", KJV_VERSIFICATION, verses)
    assert (mod / "ot.bzv").stat().st_size == 241150
    assert (mod / "nt.bzv").stat().st_size == 82460
    found = {(b, c, v): m for b, c, v, m in corpora.iter_ztext_verses(mod) if m}
    assert found == verses


@pytest.mark.parametrize(
    ("markup", "expected"),
    [
        ('In the <w lemma="strong:H7225">beginning</w> God.', "In the beginning God."),
        (
            'earth<note placement="foot"><reference>1.2 </reference>void: <seg>or</seg></note> was',
            "earth was",
        ),
        ("<title>Heading</title>Thus the heavens", "Thus the heavens"),
        (
            '<title canonical="true" type="psalm">A Psalm of David.</title> LORD, how',
            "A Psalm of David. LORD, how",
        ),
        ("¶ the \\nd <w>LORD</w></divineName> &amp; &lt;Israel&gt; &#233;", "the LORD & <Israel> é"),
        ("a<lb/>b<l level=\"1\" eID='x > y'/>c", "a b c"),
        ("<note>outer <note>inner</note> still note</note>kept", "kept"),
        ("kept<note>never closed", "kept"),
        ("stray</q> close", "stray close"),
        ('<chapter n="1" osisID="Gen.1" sID="Gen.1"/> ', ""),
    ],
)
def test_strip_osis(markup: str, expected: str) -> None:
    assert corpora.strip_osis(markup) == expected


def test_strip_osis_can_drop_canonical_titles() -> None:
    markup = '<title canonical="true" type="psalm">A Psalm.</title> LORD, how'
    assert corpora.strip_osis(markup, keep_canonical_titles=False) == "LORD, how"


def test_parse_bible_pairs_pairs_by_index_and_drops_empty_sides(tmp_path: Path) -> None:
    en = write_module(tmp_path / "en", TOY, EN)
    es = write_module(tmp_path / "es", TOY, ES)
    rows = corpora.parse_bible_pairs(en, es, TOY)
    assert [(r["book"], r["chapter"], r["verse"]) for r in rows] == [
        ("Gen", 1, 1), ("Gen", 1, 2), ("Gen", 2, 1), ("Exod", 1, 1), ("Matt", 1, 1), ("Matt", 2, 1),
    ]  # fmt: skip
    # Exod 1:2 is only a note in English and Matt 2:2 is missing in Spanish: both pairs dropped.
    assert rows[0] == {
        "book": "Gen", "chapter": 1, "verse": 1,
        "en": "In the beginning God created the heaven.", "es": "EN el principio crió Dios los cielos.",
    }  # fmt: skip
    assert rows[1]["en"] == "And the earth was void."
    assert rows[3]["en"] == "Now these are the names & the LORD."
    assert rows[5]["en"] == "A Psalm. Now when Jesus was born in Bethlehem."



@pytest.mark.parametrize("use_dpkg", [True, False])
def test_load_bible_pairs_from_debs(bible_src: Path, monkeypatch: pytest.MonkeyPatch, use_dpkg: bool) -> None:
    if use_dpkg and shutil.which("dpkg-deb") is None:
        pytest.skip("dpkg-deb not installed")
    if not use_dpkg:  # the pure-Python .deb reader
        real_which = shutil.which
        monkeypatch.setattr(
            archives.shutil, "which", lambda name: None if name == "dpkg-deb" else real_which(name)
        )
    info = corpora.corpus_info("bible-en-es", source=bible_src)
    assert (info["verse_pairs"], info["dropped_pairs"]) == (6, 31102 - 6)
    assert {b: n for b, n in info["pairs_per_book"].items() if n} == {"Gen": 3, "Exod": 1, "Matt": 2}
    assert len(info["pairs_per_book"]) == 66
    dsd = corpora.load_bible_pairs(validation_books=["Exod"], test_books=["Matt"])
    assert dsd["train"].column_names == ["en", "es", "book", "chapter", "verse"]
    assert dsd["train"]["book"] == ["Gen"] * 3
    assert dsd["validation"][0] == {
        "en": "Now these are the names & the LORD.", "es": "Estos son los nombres.", "book": "Exod",
        "chapter": 1, "verse": 1,
    }  # fmt: skip
    assert dsd["test"]["es"] == ["LIBRO de la generación.", "Y como fué nacido Jesús en Bethlehem."]
    no_test = corpora.load_bible_pairs(validation_books=["Matt"], test_books=[])
    assert {k: len(v) for k, v in no_test.items()} == {"train": 4, "validation": 2}
    with pytest.raises(ValueError, match="unknown book 'Genesis'"):
        corpora.load_bible_pairs(validation_books=["Genesis"], test_books=[])


def test_default_bible_holdouts_are_real_books() -> None:
    osis = [b.osis for b in KJV_VERSIFICATION]
    rows.check_holdout("book", osis, validation=corpora.BIBLE_VALIDATION_BOOKS, test=corpora.BIBLE_TEST_BOOKS)
    verses = {b.osis: sum(b.verses) for b in KJV_VERSIFICATION}
    assert sum(verses[b] for b in corpora.BIBLE_VALIDATION_BOOKS) == 1068
    assert sum(verses[b] for b in corpora.BIBLE_TEST_BOOKS) == 1582
