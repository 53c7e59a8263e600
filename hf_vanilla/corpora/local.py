"""Your own text in place of a corpus: local ``.txt`` / ``.json`` / ``.jsonl`` / ``.csv`` / ``.tsv``
files, or a ``datasets`` name for users with network access. Licence and split are the user's: splits
come from the files (``{split: files}``) or a seeded fraction of ``train`` is cut off for validation."""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from datasets import Dataset, DatasetDict, load_dataset

from .fetch import CORPORA, CorpusUnavailableError, PathLike
from .rows import drop_blank, strip_paragraph_edges

logger = logging.getLogger(__name__)

SampleBy = Literal["line", "paragraph", "document"]

_BUILDER_BY_SUFFIX = {
    ".txt": "text",
    ".text": "text",
    ".json": "json",
    ".jsonl": "json",
    ".csv": "csv",
    ".tsv": "csv",
}


def load_local_files(
    paths: PathLike | Sequence[PathLike] | Mapping[str, PathLike | Sequence[PathLike]],
    *,
    text_column: str | None = "text",
    string_columns: Sequence[str] = (),
    validation_fraction: float = 0.0,
    seed: int = 0,
    sample_by: SampleBy = "line",
    cache_dir: PathLike | None = None,
    **load_kwargs: Any,
) -> DatasetDict:
    """Load your own ``.txt`` / ``.json`` / ``.jsonl`` / ``.csv`` / ``.tsv`` files in place of a corpus.

    Args:
        paths: one file, a list of files (all in ``train``), or ``{split: file(s)}``. All files must
            share one format.
        text_column: the column holding the text; renamed to ``text`` so the result is a drop-in for
            the default corpus (``.txt`` files already give ``text``). ``None`` keeps all columns as
            they are (e.g. ``en`` / ``es`` pairs in JSONL).
        string_columns: more columns that must hold text (e.g. ``en`` and ``es``); a number or a list
            there is refused, naming the file and line, as is a file that is empty, blank, binary, not
            UTF-8 (or ``encoding``) or malformed JSON.
        validation_fraction: if > 0 and no ``validation`` split was given, that fraction of
            ``train`` is split off (``Dataset.train_test_split`` with ``seed``). Text cut by
            paragraph that gives a single row (one file without blank lines) is cut by line instead,
            so one plain text file is enough; anything else too small to split raises a
            ``ValueError`` saying what to pass.
        sample_by: for ``.txt`` files, passed to the ``text`` builder; blank rows are dropped.
        cache_dir: ``datasets`` cache folder (default: ``datasets``' own).
        load_kwargs: passed to ``datasets.load_dataset`` (e.g. ``encoding``, ``features``).
    """
    files = _files_by_split(paths)
    builder = _builder_for(files)
    texts = [*([text_column] if text_column is not None else []), *string_columns]
    for name in [f for fs in files.values() for f in fs]:
        check_data_file(name, builder, texts, load_kwargs.get("encoding", "utf-8"))
    dsd = _load(builder, files, sample_by, cache_dir, load_kwargs)
    _check_rows(dsd, files, texts)
    if text_column is not None:
        dsd = _rename_text_column(dsd, text_column)
    if validation_fraction <= 0 or "validation" in dsd:
        return dsd
    if builder == "text" and sample_by == "paragraph" and len(dsd["train"]) < 2:
        logger.warning(
            "%s holds a single paragraph; cutting it by line so a validation split can be taken.",
            ", ".join(files["train"]),
        )
        return load_local_files(
            paths, text_column=text_column, string_columns=string_columns, validation_fraction=validation_fraction, seed=seed,
            sample_by="line", cache_dir=cache_dir, **load_kwargs,
        )  # fmt: skip
    return _cut_validation(dsd, validation_fraction, seed, files["train"], sample_by if builder == "text" else None)


def _files_by_split(
    paths: PathLike | Sequence[PathLike] | Mapping[str, PathLike | Sequence[PathLike]],
) -> dict[str, list[str]]:
    """``{split: [file, ...]}`` from any accepted form of ``paths``; every file must exist."""
    if isinstance(paths, Mapping):
        files = {
            split: [str(p)] if isinstance(p, (str, os.PathLike)) else [str(x) for x in p]
            for split, p in paths.items()
        }
    elif isinstance(paths, (str, os.PathLike)):
        files = {"train": [str(paths)]}
    else:
        files = {"train": [str(p) for p in paths]}
    all_files = [f for fs in files.values() for f in fs]
    if not all_files:
        raise ValueError("no files given")
    for f in all_files:
        if not Path(f).is_file():
            raise FileNotFoundError(f)
    return files


def _builder_for(files: Mapping[str, list[str]]) -> str:
    """The ``datasets`` packaged builder (``text``, ``json``, ``csv``) all ``files`` share."""
    all_files = [f for fs in files.values() for f in fs]
    builders = {_BUILDER_BY_SUFFIX.get(Path(f).suffix.lower()) for f in all_files}
    if None in builders or len(builders) != 1:
        raise ValueError(f"files must all be one of {sorted(_BUILDER_BY_SUFFIX)}, got {all_files}")
    return builders.pop()  # type: ignore[return-value]


def _load(
    builder: str,
    files: Mapping[str, list[str]],
    sample_by: SampleBy,
    cache_dir: PathLike | None,
    load_kwargs: Mapping[str, Any],
) -> DatasetDict:
    kwargs = dict(load_kwargs)
    if builder == "text":
        kwargs.setdefault("sample_by", sample_by)
    if builder == "csv" and all(f.lower().endswith(".tsv") for fs in files.values() for f in fs):
        kwargs.setdefault("sep", "\t")
    dsd = load_dataset(builder, data_files=dict(files), cache_dir=None if cache_dir is None else str(cache_dir),
                       **kwargs)  # fmt: skip
    if builder == "text" and kwargs["sample_by"] == "paragraph":
        dsd = DatasetDict({k: strip_paragraph_edges(v) for k, v in dsd.items()})
    if builder == "text":
        dsd = DatasetDict({k: drop_blank(v) for k, v in dsd.items()})
    return dsd


# --------------------------------------------------------------------------------------------------
# A file datasets would fail on with a traceback (or read wrongly) is refused first, naming the line and the fix


def check_data_file(path: str, builder: str, string_columns: Sequence[str] = (), encoding: str = "utf-8") -> None:
    """Refuse ``path`` if it is empty, binary, not ``encoding`` text, blank, malformed JSON, a CSV without rows,
    or holds a non-string in one of ``string_columns`` (JSON): the error names the file, the line and the fix."""
    if os.path.getsize(path) == 0:
        raise ValueError(f"{path} is empty: put text in it, or leave it out of the data files")
    with open(path, "rb") as fh:
        if b"\0" in fh.read(1 << 16):
            raise ValueError(f"{path} looks binary (it holds NUL bytes), not a {builder} file of text; if it is "
                             "UTF-16 text, re-save it as UTF-8")
    lines = ((number, line) for number, line in _decoded_lines(path, encoding) if line.strip())
    if builder == "json":
        _check_json(path, lines, string_columns, encoding)
        return
    first, second = next(lines, None), next(lines, None)
    if first is None:
        raise ValueError(f"{path} holds only blank lines: put text in it, or leave it out of the data files")
    if builder == "csv" and second is None:
        raise ValueError(f"{path} has a header line but no rows: add rows below the header {first[1].strip()!r}")
    for _ in lines:  # the rest must decode too
        pass


def _decoded_lines(path: str, encoding: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line; a line that does not decode is named with its byte and the fix."""
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, 1):
            try:
                yield number, raw.decode(encoding)
            except UnicodeDecodeError as error:
                byte = raw[error.start : error.start + 1]
                raise ValueError(
                    f"{path} line {number} is not {encoding} text (byte {byte!r} at column {error.start + 1}); "
                    f"if it is Latin-1 or Windows-1252 text, re-save it as UTF-8 (e.g. iconv -f cp1252 -t utf-8 "
                    f"{path} > utf8-{Path(path).name}), or load it with encoding='cp1252'") from None


def _check_json(path: str, lines: Iterator[tuple[int, str]], string_columns: Sequence[str], encoding: str) -> None:
    """JSON lines (one object per line) or, for a ``.json`` file, one document holding a list of objects."""
    seen = 0
    for number, line in lines:
        record = _json_or_error(line)
        if seen == 0 and path.lower().endswith(".json") and not isinstance(record, dict):
            _check_json_document(path, string_columns, encoding)  # a .json file may be one document
            return
        if isinstance(record, json.JSONDecodeError):
            raise ValueError(f"{path} line {number} is not valid JSON ({record.msg}, column {record.colno}): a "
                             '.jsonl file holds one JSON object per line, e.g. {"text": "..."}')
        _check_record(path, f"line {number}", record, string_columns)
        seen += 1
    if seen == 0:
        raise ValueError(f"{path} holds only blank lines: put text in it, or leave it out of the data files")


def _json_or_error(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        return error


def _check_json_document(path: str, string_columns: Sequence[str], encoding: str) -> None:
    try:
        document = json.loads(Path(path).read_text(encoding=encoding))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON ({error.msg}, line {error.lineno}, column {error.colno}); give "
                         'a list of objects, or one JSON object per line, e.g. {"text": "..."}') from None
    for i, record in enumerate(document if isinstance(document, list) else [], 1):
        _check_record(path, f"item {i}", record, string_columns)


def _check_record(path: str, where: str, record: Any, string_columns: Sequence[str]) -> None:
    if not isinstance(record, dict):
        raise ValueError(f'{path} {where} holds a JSON {type(record).__name__}, not an object like {{"text": "..."}}')
    for column in string_columns:
        value = record.get(column)
        if value is not None and not isinstance(value, str):
            raise ValueError(f"{path} {where}: {column!r} is {value!r} ({type(value).__name__}), not text; quote "
                             f'it ("{column}": "...") or name another column')


def _check_rows(dsd: DatasetDict, files: Mapping[str, list[str]], string_columns: Sequence[str]) -> None:
    """What only the loaded table shows: a split left without rows, a text column read as numbers (CSV)."""
    for split, ds in dsd.items():
        where = f"split {split!r} ({', '.join(files[split])})"
        if len(ds) == 0:
            raise ValueError(f"{where} holds no text rows: put text in the file(s)")
        for column in string_columns:
            feature = ds.features.get(column)
            if feature is None or getattr(feature, "dtype", None) in ("string", "large_string"):
                continue
            found = next(((i, v) for i, v in enumerate(ds[column]) if v is not None and not isinstance(v, str)), None)
            if found is None:
                continue
            row, value = found
            raise ValueError(f"{where}: column {column!r} was read as {type(value).__name__} (row {row + 1} is "
                             f"{value!r}), not text; name the column that holds the text (--text-column)")


def _rename_text_column(dsd: DatasetDict, text_column: str) -> DatasetDict:
    for split, ds in dsd.items():
        if text_column not in ds.column_names:
            raise ValueError(f"split {split!r} has no column {text_column!r}; columns: {ds.column_names}")
        if text_column != "text":
            if "text" in ds.column_names:
                raise ValueError(f"cannot rename {text_column!r} to 'text': split {split!r} has both")
            dsd[split] = ds.rename_column(text_column, "text")
    return dsd


def _cut_validation(
    dsd: DatasetDict, fraction: float, seed: int, train_files: Sequence[str], sample_by: SampleBy | None
) -> DatasetDict:
    """Split ``fraction`` of ``train`` off as ``validation``, or say what to pass when it is too small."""
    try:
        parts = dsd["train"].train_test_split(test_size=fraction, seed=seed, shuffle=True)
    except ValueError as exc:
        rows = f"{len(dsd['train'])} row(s)" + (f" by {sample_by}" if sample_by else "")
        smaller = " or sample_by='line' (--sample-by line)" if sample_by in ("paragraph", "document") else ""
        raise ValueError(
            f"cannot cut a {fraction:g} validation split from {', '.join(train_files)}: it gives {rows}. "
            f"Pass a validation file ({{'validation': PATH}}; --data-files validation=PATH){smaller}, "
            f"more text, or another validation fraction."
        ) from exc
    return DatasetDict({**dsd, "train": parts["train"], "validation": parts["test"]})


def load_named_dataset(name: str, *args: Any, **kwargs: Any) -> DatasetDict:
    """``datasets.load_dataset(name, ...)`` for users with network access, always as a DatasetDict.

    A single split (``split="train[:10%]"``) is wrapped as ``{"train": ds}``. Network failures raise
    :class:`CorpusUnavailableError` pointing at :func:`load_local_files` and the bundled corpora.
    """
    try:
        result = load_dataset(name, *args, **kwargs)
    except ConnectionError as exc:
        raise CorpusUnavailableError(
            f"could not load dataset {name!r} ({exc}); without network use load_local_files(...) "
            f"or the registry-fetched corpora ({', '.join(sorted(CORPORA))})"
        ) from exc
    if isinstance(result, Dataset):
        split = str(kwargs.get("split") or (args[3] if len(args) > 3 else "train"))
        return DatasetDict({re.split(r"[\[+]", split, maxsplit=1)[0] or "train": result})
    return result
