"""Small helpers the corpus modules share: decoding raw text, writing JSONL, checking held-out names,
tidying the rows of text files."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from datasets import Dataset


def decode_text(data: bytes) -> str:
    """UTF-8, else Windows-1252 (as in some BBC articles), else Latin-1 (which always decodes)."""
    for encoding in ("utf-8", "cp1252"):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    return data.decode("latin-1")


def write_jsonl(path: Path, rows: Iterable[Mapping[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def check_holdout(kind: str, known: Iterable[str], **splits: Sequence[str]) -> None:
    """Every held-out name is ``known`` and in one split only; the error names the culprit."""
    known_set = set(known)
    seen: dict[str, str] = {}
    for split, items in splits.items():
        for item in items:
            if item not in known_set:
                raise ValueError(f"unknown {kind} {item!r} in {split}; known: {sorted(known_set)}")
            if item in seen:
                raise ValueError(f"{kind} {item!r} is in both {seen[item]} and {split}")
            seen[item] = split


def drop_blank(ds: Dataset, column: str = "text") -> Dataset:
    return ds.filter(lambda text: bool(text and text.strip()), input_columns=column)


def strip_paragraph_edges(ds: Dataset, column: str = "text") -> Dataset:
    """``sample_by="paragraph"`` leaves a ``"\\n"`` at a paragraph's edge (a run of 3+ newlines, or the
    file's last newline); remove it."""
    return ds.map(lambda text: {column: text.strip("\n")}, input_columns=column)
