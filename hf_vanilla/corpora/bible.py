"""Bible, English-Spanish: King James Version / Reina-Valera 1909 verse pairs, for translation.

Source: the Debian packages ``sword-text-kjv`` 14.3-1 and ``sword-text-sparv`` 2.60-1 (SWORD modules
``engKJV2006eb`` and ``spaRV1909eb`` in the zText format). Licence: both translations are public domain.
Both modules use the KJV versification, so verse *i* of one is verse *i* of the other: 31,084 non-empty
pairs (pairs where either side is empty are dropped).

Split: whole books are held out, so test sentences are not near-duplicates of training ones:
validation = Ruth, Jonah, Mark, Galatians, James; test = Esther, Ecclesiastes, Micah, John,
Philippians, 1 Peter (narrative, poetry, gospel and epistle in each).

The zText reader and OSIS stripping are hand-written (about 150 lines): pysword 0.2.8 (MIT, last
release 2022-05) reads zText, but its regex cleaner drops the canonical Psalm titles and mis-cuts
nested notes (a non-greedy ``<note.*?note>`` stops at the inner tag, leaving note text in the verse).
"""

from __future__ import annotations

import html
import re
import statistics
import struct
import tempfile
import zlib
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from datasets import DatasetDict, Features, Value, load_dataset

from .archives import unpack
from .fetch import CorpusSpec, PathLike, RawFile, datasets_cache, fetch_corpus, register
from .rows import check_holdout, write_jsonl

#: Books (OSIS ids) held out of training: narrative, poetry, gospel and epistle in each split.
BIBLE_VALIDATION_BOOKS: tuple[str, ...] = ("Ruth", "Jonah", "Mark", "Gal", "Jas")
BIBLE_TEST_BOOKS: tuple[str, ...] = ("Esth", "Eccl", "Mic", "John", "Phil", "1Pet")

# --------------------------------------------------------------------------------------------------
# The KJV versification, the SWORD zText reader, OSIS markup
# --------------------------------------------------------------------------------------------------

# fmt: off
# KJV versification (SWORD canon.h): OSIS id, name, verses per chapter.
_KJV_TABLE: tuple[tuple[str, str, str], ...] = (
    ("Gen", "Genesis",
        "31 25 24 26 32 22 24 22 29 32 32 20 18 24 21 16 27 33 38 18 34 24 20 67 "
        "34 35 46 22 35 43 55 32 20 31 29 43 36 30 23 23 57 38 34 34 28 34 31 22 "
        "33 26"),
    ("Exod", "Exodus",
        "22 25 22 31 23 30 25 32 35 29 10 51 22 31 27 36 16 27 25 26 36 31 33 18 "
        "40 37 21 43 46 38 18 35 23 35 35 38 29 31 43 38"),
    ("Lev", "Leviticus",
        "17 16 17 35 19 30 38 36 24 20 47 8 59 57 33 34 16 30 37 27 24 33 44 23 "
        "55 46 34"),
    ("Num", "Numbers",
        "54 34 51 49 31 27 89 26 23 36 35 16 33 45 41 50 13 32 22 29 35 41 30 25 "
        "18 65 23 31 40 16 54 42 56 29 34 13"),
    ("Deut", "Deuteronomy",
        "46 37 29 49 33 25 26 20 29 22 32 32 18 29 23 22 20 22 21 20 23 30 25 22 "
        "19 19 26 68 29 20 30 52 29 12"),
    ("Josh", "Joshua", "18 24 17 24 15 27 26 35 27 43 23 24 33 15 63 10 18 28 51 9 45 34 16 33"),
    ("Judg", "Judges", "36 23 31 24 31 40 25 35 57 18 40 15 25 20 20 31 13 31 30 48 25"),
    ("Ruth", "Ruth", "22 23 18 22"),
    ("1Sam", "I Samuel",
        "28 36 21 22 12 21 17 22 27 27 15 25 23 52 35 23 58 30 24 42 15 23 29 22 "
        "44 25 12 25 11 31 13"),
    ("2Sam", "II Samuel",
        "27 32 39 12 25 23 29 18 13 19 27 31 39 33 37 23 29 33 43 26 22 51 39 25"),
    ("1Kgs", "I Kings", "53 46 28 34 18 38 51 66 28 29 43 33 34 31 34 34 24 46 21 43 29 53"),
    ("2Kgs", "II Kings",
        "18 25 27 44 27 33 20 29 37 36 21 21 25 29 38 20 41 37 37 21 26 20 37 20 "
        "30"),
    ("1Chr", "I Chronicles",
        "54 55 24 43 26 81 40 40 44 14 47 40 14 17 29 43 27 17 19 8 30 19 32 31 "
        "31 32 34 21 30"),
    ("2Chr", "II Chronicles",
        "17 18 17 22 14 42 22 18 31 19 23 16 22 15 19 14 19 34 11 37 20 12 21 27 "
        "28 23 9 27 36 27 21 33 25 33 27 23"),
    ("Ezra", "Ezra", "11 70 13 24 17 22 28 36 15 44"),
    ("Neh", "Nehemiah", "11 20 32 23 19 19 73 18 38 39 36 47 31"),
    ("Esth", "Esther", "22 23 15 17 14 14 10 17 32 3"),
    ("Job", "Job",
        "22 13 26 21 27 30 21 22 35 22 20 25 28 22 35 22 16 21 29 29 34 30 17 25 "
        "6 14 23 28 25 31 40 22 33 37 16 33 24 41 30 24 34 17"),
    ("Ps", "Psalms",
        "6 12 8 8 12 10 17 9 20 18 7 8 6 7 5 11 15 50 14 9 13 31 6 10 22 12 14 9 "
        "11 12 24 11 22 22 28 12 40 22 13 17 13 11 5 26 17 11 9 14 20 23 19 9 6 7 "
        "23 13 11 11 17 12 8 12 11 10 13 20 7 35 36 5 24 20 28 23 10 12 20 72 13 "
        "19 16 8 18 12 13 17 7 18 52 17 16 15 5 23 11 13 12 9 9 5 8 28 22 35 45 "
        "48 43 13 31 7 10 10 9 8 18 19 2 29 176 7 8 9 4 8 5 6 5 6 8 8 3 18 3 3 21 "
        "26 9 8 24 13 10 7 12 15 21 10 20 14 9 6"),
    ("Prov", "Proverbs",
        "33 22 35 27 23 35 27 36 18 32 31 28 25 35 33 33 28 24 29 30 31 29 35 34 "
        "28 28 27 28 27 33 31"),
    ("Eccl", "Ecclesiastes", "18 26 22 16 20 12 29 17 18 20 10 14"),
    ("Song", "Song of Solomon", "17 17 11 16 16 13 13 14"),
    ("Isa", "Isaiah",
        "31 22 26 6 30 13 25 22 21 34 16 6 22 32 9 14 14 7 25 6 17 25 18 23 12 21 "
        "13 29 24 33 9 20 24 17 10 22 38 22 8 31 29 25 28 28 25 13 15 22 26 11 23 "
        "15 12 17 13 12 21 14 21 22 11 12 19 12 25 24"),
    ("Jer", "Jeremiah",
        "19 37 25 31 31 30 34 22 26 25 23 17 27 22 21 21 27 23 15 18 14 30 40 10 "
        "38 24 22 17 32 24 40 44 26 22 19 32 21 28 18 16 18 22 13 30 5 28 7 47 39 "
        "46 64 34"),
    ("Lam", "Lamentations", "22 22 66 22 22"),
    ("Ezek", "Ezekiel",
        "28 10 27 17 17 14 27 18 11 22 25 28 23 23 8 63 24 32 14 49 32 31 49 27 "
        "17 21 36 26 21 26 18 32 33 31 15 38 28 23 29 49 26 20 27 31 25 24 23 35"),
    ("Dan", "Daniel", "21 49 30 37 31 28 28 27 27 21 45 13"),
    ("Hos", "Hosea", "11 23 5 19 15 11 16 14 17 15 12 14 16 9"),
    ("Joel", "Joel", "20 32 21"),
    ("Amos", "Amos", "15 16 15 13 27 14 17 14 15"),
    ("Obad", "Obadiah", "21"),
    ("Jonah", "Jonah", "17 10 10 11"),
    ("Mic", "Micah", "16 13 12 13 15 16 20"),
    ("Nah", "Nahum", "15 13 19"),
    ("Hab", "Habakkuk", "17 20 19"),
    ("Zeph", "Zephaniah", "18 15 20"),
    ("Hag", "Haggai", "15 23"),
    ("Zech", "Zechariah", "21 13 10 14 11 15 14 23 17 12 17 14 9 21"),
    ("Mal", "Malachi", "14 17 18 6"),
    ("Matt", "Matthew",
        "25 23 17 25 48 34 29 34 38 42 30 50 58 36 39 28 27 35 30 34 46 46 39 51 "
        "46 75 66 20"),
    ("Mark", "Mark", "45 28 35 41 43 56 37 38 50 52 33 44 37 72 47 20"),
    ("Luke", "Luke",
        "80 52 38 44 39 49 50 56 62 42 54 59 35 35 32 31 37 43 48 47 38 71 56 53"),
    ("John", "John", "51 25 36 54 47 71 53 59 41 42 57 50 38 31 27 33 26 40 42 31 25"),
    ("Acts", "Acts",
        "26 47 26 37 42 15 60 40 43 48 30 25 52 28 41 40 34 28 41 38 40 30 35 27 "
        "27 32 44 31"),
    ("Rom", "Romans", "32 29 31 25 21 23 25 39 33 21 36 21 14 23 33 27"),
    ("1Cor", "I Corinthians", "31 16 23 21 13 20 40 13 27 33 34 31 13 40 58 24"),
    ("2Cor", "II Corinthians", "24 17 18 18 21 18 16 24 15 18 33 21 14"),
    ("Gal", "Galatians", "24 21 29 31 26 18"),
    ("Eph", "Ephesians", "23 22 21 32 33 24"),
    ("Phil", "Philippians", "30 30 21 23"),
    ("Col", "Colossians", "29 23 25 18"),
    ("1Thess", "I Thessalonians", "10 20 13 18 28"),
    ("2Thess", "II Thessalonians", "12 17 18"),
    ("1Tim", "I Timothy", "20 15 16 16 25 21"),
    ("2Tim", "II Timothy", "18 26 17 22"),
    ("Titus", "Titus", "16 15 15"),
    ("Phlm", "Philemon", "25"),
    ("Heb", "Hebrews", "14 18 19 16 14 20 28 13 28 39 40 29 25"),
    ("Jas", "James", "27 26 18 17 20"),
    ("1Pet", "I Peter", "25 25 22 19 14"),
    ("2Pet", "II Peter", "21 22 18"),
    ("1John", "I John", "10 29 24 21 21"),
    ("2John", "II John", "13"),
    ("3John", "III John", "14"),
    ("Jude", "Jude", "25"),
    ("Rev", "Revelation of John", "20 29 22 11 14 17 17 13 21 11 19 17 18 20 8 21 18 24 21 15 27 21"),
)
# fmt: on


@dataclass(frozen=True)
class Book:
    """One book of a versification: OSIS id, English name, testament, verses per chapter."""

    osis: str
    name: str
    testament: Literal["ot", "nt"]
    verses: tuple[int, ...]


def _make_versification(table: Sequence[tuple[str, str, str]], n_ot: int) -> tuple[Book, ...]:
    return tuple(
        Book(osis, name, "ot" if i < n_ot else "nt", tuple(int(v) for v in counts.split()))
        for i, (osis, name, counts) in enumerate(table)
    )


#: The KJV versification (66 books, 1,189 chapters, 31,102 verses) shared by both Bible modules.
KJV_VERSIFICATION: tuple[Book, ...] = _make_versification(_KJV_TABLE, n_ot=39)


def _index_size(books: Sequence[Book]) -> int:
    """Entries in a SWORD testament index for ``books``.

    The layout (checked against both real modules: every book- and chapter-heading slot holds that
    book's ``<div type="book">`` / that chapter's ``<chapter>`` start tag) is: entry 0 the module
    heading, entry 1 the testament heading, then per book one book-heading entry followed, per
    chapter, by one chapter-heading entry and the chapter's verses.
    """
    return 2 + sum(1 + len(b.verses) + sum(b.verses) for b in books)


def read_ztext(module_dir: PathLike, testament: Literal["ot", "nt"]) -> list[str]:
    """All index entries (raw OSIS markup, ``""`` for empty ones) of one testament of a zText module.

    ``<testament>.bzv`` holds 10 bytes per entry (``<IIH``: block number, offset in the decompressed
    block, size), ``.bzs`` 12 bytes per block (``<III``: offset in ``.bzz``, compressed size,
    uncompressed size) and ``.bzz`` the zlib-compressed blocks.
    """
    base = Path(module_dir)
    bzv = (base / f"{testament}.bzv").read_bytes()
    bzs = (base / f"{testament}.bzs").read_bytes()
    bzz = (base / f"{testament}.bzz").read_bytes()
    if len(bzv) % 10 or len(bzs) % 12:
        raise ValueError(f"{base}: truncated zText index ({len(bzv)} / {len(bzs)} bytes)")
    blocks: dict[int, bytes] = {}

    def block(n: int) -> bytes:
        if n not in blocks:
            if n >= len(bzs) // 12:
                raise ValueError(f"{base}/{testament}: verse points at missing block {n}")
            off, csize, usize = struct.unpack_from("<III", bzs, 12 * n)
            data = zlib.decompress(bzz[off : off + csize])
            if len(data) != usize:
                raise ValueError(f"{base}/{testament}: block {n} is {len(data)} bytes, index says {usize}")
            blocks[n] = data
        return blocks[n]

    entries: list[str] = []
    for bnum, off, size in struct.iter_unpack("<IIH", bzv):
        if size == 0:
            entries.append("")
            continue
        data = block(bnum)
        if off + size > len(data):
            raise ValueError(f"{base}/{testament}: entry {len(entries)} runs past the end of block {bnum}")
        entries.append(data[off : off + size].decode("utf-8", errors="replace"))
    return entries


_BOOK_DIV = re.compile(r'<div\b[^>]*\btype="book"[^>]*>')
_CHAPTER_START = re.compile(r'<chapter\b[^>]*\bsID="([^"]+)"')
_OSIS_ID = re.compile(r'\bosisID="([^"]+)"')


def iter_ztext_verses(
    module_dir: PathLike, versification: Sequence[Book] = KJV_VERSIFICATION
) -> Iterator[tuple[str, int, int, str]]:
    """Yield ``(book, chapter, verse, markup)`` for every verse slot of a zText module.

    Heading entries are skipped (see :func:`_index_size` for the layout); the module must use
    ``versification`` exactly (the index size is checked, as is any book or chapter start tag found
    in a heading slot, and no verse slot may start a chapter). Testaments whose files are absent are skipped.
    """
    for testament in ("ot", "nt"):
        books = [b for b in versification if b.testament == testament]
        if not books or not (Path(module_dir) / f"{testament}.bzv").exists():
            continue
        entries = read_ztext(module_dir, testament)  # type: ignore[arg-type]
        expected = _index_size(books)
        if len(entries) != expected:
            raise ValueError(
                f"{module_dir}/{testament}: {len(entries)} index entries, the versification needs "
                f"{expected}; the module does not use this versification"
            )
        i = 2
        for book in books:
            div = _BOOK_DIV.search(entries[i])
            found = _OSIS_ID.search(div.group(0)) if div else None
            if found and found.group(1) != book.osis:
                raise ValueError(
                    f"{module_dir}: book heading {i} is {found.group(1)!r}, expected {book.osis!r}"
                )
            i += 1
            for chapter, n_verses in enumerate(book.verses, start=1):
                start = _CHAPTER_START.search(entries[i])
                if start and start.group(1) != f"{book.osis}.{chapter}":
                    raise ValueError(
                        f"{module_dir}: chapter heading {i} is {start.group(1)!r}, "
                        f"expected {book.osis}.{chapter}"
                    )
                i += 1
                for verse in range(1, n_verses + 1):
                    start = _CHAPTER_START.search(entries[i])
                    if start:
                        raise ValueError(
                            f"{module_dir}: verse slot {i} ({book.osis} {chapter}:{verse}) holds the start "
                            f"of chapter {start.group(1)!r}; the module does not use this versification"
                        )
                    yield book.osis, chapter, verse, entries[i]
                    i += 1


_TAG = re.compile(r"""<(/?)([A-Za-z][\w:.-]*)((?:[^>"']|"[^"]*"|'[^']*')*?)(/?)>""")
_USFM_MARKER = re.compile(r"\\\+?[a-z]+[0-9]*\*?")


def strip_osis(markup: str, *, keep_canonical_titles: bool = True) -> str:
    """Plain text of an OSIS verse: tags removed, words kept, whitespace collapsed.

    The contents of ``<note>`` elements (footnotes, cross references) and of ``<title>`` elements
    (section headings) are dropped. Titles marked ``canonical="true"`` -- the Psalm superscriptions,
    which the Spanish module carries inline in verse 1 -- are kept unless
    ``keep_canonical_titles=False``. Entities are unescaped, stray USFM markers (``\\nd``) and
    pilcrows removed.
    """
    out: list[str] = []
    skipping: list[str] = []
    pos = 0
    for m in _TAG.finditer(markup):
        if not skipping:
            out.append(markup[pos : m.start()])
        pos = m.end()
        closing, name, attrs, self_closing = m.groups()
        if self_closing:
            out.append(" ")
            continue
        if closing:
            if skipping and skipping[-1] == name:
                skipping.pop()
            continue
        if skipping:
            if name in ("note", "title"):
                skipping.append(name)
            continue
        if name == "note" or (
            name == "title" and not (keep_canonical_titles and 'canonical="true"' in attrs)
        ):
            skipping.append(name)
    if not skipping:
        out.append(markup[pos:])
    text = html.unescape("".join(out))
    text = _USFM_MARKER.sub(" ", text).replace("\u00b6", " ")
    return " ".join(text.split())


def parse_bible_pairs(
    en_module: PathLike,
    es_module: PathLike,
    versification: Sequence[Book] = KJV_VERSIFICATION,
) -> list[dict[str, Any]]:
    """Pair verse *i* of two zText modules; rows ``{book, chapter, verse, en, es}``.

    Pairs where either side is empty after :func:`strip_osis` are dropped.
    """
    rows: list[dict[str, Any]] = []
    for (book, chapter, verse, en), (book2, chapter2, verse2, es) in zip(
        iter_ztext_verses(en_module, versification),
        iter_ztext_verses(es_module, versification),
        strict=True,
    ):
        assert (book, chapter, verse) == (book2, chapter2, verse2)
        en_text, es_text = strip_osis(en), strip_osis(es)
        if en_text and es_text:
            rows.append({"book": book, "chapter": chapter, "verse": verse, "en": en_text, "es": es_text})
    return rows


# --------------------------------------------------------------------------------------------------
# The corpus: two .deb files -> pairs.jsonl -> DatasetDict
# --------------------------------------------------------------------------------------------------

_SWORD_DIR = "usr/share/sword/modules/texts/ztext"
_KJV_MODULE = "engKJV2006eb"
_RV_MODULE = "spaRV1909eb"


def build(raws: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Unpack both packages, pair their verses into ``pairs.jsonl``; return the statistics."""
    with tempfile.TemporaryDirectory(prefix="hf_vanilla-debs-") as tmp:
        for deb in raws.values():
            unpack(deb, Path(tmp))
        modules = Path(tmp) / _SWORD_DIR
        rows = parse_bible_pairs(modules / _KJV_MODULE, modules / _RV_MODULE)
    if not rows:
        raise ValueError("the Bible modules produced no non-empty verse pairs")
    write_jsonl(out / "pairs.jsonl", rows)
    per_book = Counter(row["book"] for row in rows)
    return {
        "verse_pairs": len(rows),
        "dropped_pairs": sum(sum(b.verses) for b in KJV_VERSIFICATION) - len(rows),
        "pairs_per_book": {b.osis: per_book[b.osis] for b in KJV_VERSIFICATION},
        "mean_words_en": round(statistics.fmean(len(r["en"].split()) for r in rows), 2),
        "mean_words_es": round(statistics.fmean(len(r["es"].split()) for r in rows), 2),
        "chars_en": sum(len(r["en"]) for r in rows),
        "chars_es": sum(len(r["es"]) for r in rows),
    }


SPEC = register(
    CorpusSpec(
        name="bible-en-es",
        files=(
            RawFile(
                filename="sword-text-kjv_14.3-1_all.deb",
                sha256="9f463f28ce665f6f528fc723179722bced880a4c5485f7a41bf742838315de57",
                size=2800476,
                via="apt",
                requirement="sword-text-kjv=14.3-1",
            ),
            RawFile(
                filename="sword-text-sparv_2.60-1_all.deb",
                sha256="5c87f9b2bc97457e8a872f5bae7ea7ce59cb3de1dcee73e4d4740451863694cf",
                size=2722332,
                via="apt",
                requirement="sword-text-sparv=2.60-1",
            ),
        ),
        description="King James Version / Reina-Valera 1909 verse pairs (Debian SWORD modules).",
        license="Both translations public domain.",
        build=build,
    )
)


def load_bible_pairs(
    *,
    validation_books: Sequence[str] = BIBLE_VALIDATION_BOOKS,
    test_books: Sequence[str] = BIBLE_TEST_BOOKS,
    cache_dir: PathLike | None = None,
    source: PathLike | None = None,
) -> DatasetDict:
    """English-Spanish verse pairs (KJV / Reina-Valera 1909) with whole books held out.

    Columns ``en``, ``es``, ``book`` (OSIS id such as ``"Gen"``), ``chapter``, ``verse``. Default
    held-out books: validation = Ruth, Jonah, Mark, Galatians, James; test = Esther, Ecclesiastes,
    Micah, John, Philippians, 1 Peter. An empty ``test_books`` gives no test split.
    """
    folder = fetch_corpus("bible-en-es", cache_dir=cache_dir, source=source)
    check_holdout("book", (b.osis for b in KJV_VERSIFICATION), validation=validation_books, test=test_books)
    features = Features(
        {
            "en": Value("string"),
            "es": Value("string"),
            "book": Value("string"),
            "chapter": Value("int32"),
            "verse": Value("int32"),
        }
    )
    ds = load_dataset(
        "json",
        data_files=str(folder / "pairs.jsonl"),
        features=features,
        split="train",
        cache_dir=datasets_cache(cache_dir),
    )
    split_of = {b: "validation" for b in validation_books} | {b: "test" for b in test_books}
    indices: dict[str, list[int]] = {"train": [], "validation": [], "test": []}
    for i, book in enumerate(ds["book"]):
        indices[split_of.get(book, "train")].append(i)
    return DatasetDict(
        {split: ds.select(idx) for split, idx in indices.items() if split != "test" or test_books}
    )
