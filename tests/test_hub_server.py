"""The local Hub server (tests/hub_server.py) driven by the real, unmodified huggingface_hub client.

Everything runs on 127.0.0.1; the `hub_server` fixture gives each test a fresh Hub and cache. Expected ids are
computed here independently of the server (git blob/tree sha1, LFS pointer) so the tests check the protocol,
not the server against itself.
"""

from __future__ import annotations

import hashlib
import json
import random
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from huggingface_hub import (
    CommitOperationAdd,
    CommitOperationDelete,
    HfApi,
    get_hf_file_metadata,
    hf_hub_download,
    hf_hub_url,
    snapshot_download,
)
from huggingface_hub.errors import (
    BadRequestError,
    HfHubHTTPError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import RepoFile, RepoFolder
from huggingface_hub.lfs import UploadInfo, post_lfs_batch_info
from huggingface_hub.utils import get_session, hf_raise_for_status

try:
    from tests.hub_fixtures import HubFixture, hub_server  # noqa: F401 - the fixture is used by name
except ModuleNotFoundError:  # tests/ is not a package: pytest put tests/ itself on sys.path
    from hub_fixtures import HubFixture, hub_server  # type: ignore[no-redef]  # noqa: F401


def git_blob_sha1(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def git_tree_sha1(files: dict[str, bytes]) -> str:
    """Tree id of a flat directory of regular files, as `git write-tree` computes it."""
    body = b"".join(
        b"100644 " + name.encode() + b"\0" + bytes.fromhex(git_blob_sha1(content))
        for name, content in sorted(files.items())
    )
    return hashlib.sha1(b"tree %d\0" % len(body) + body).hexdigest()


def lfs_pointer(content: bytes) -> bytes:
    oid = hashlib.sha256(content).hexdigest()
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {len(content)}\n".encode()


def raw_commit(hub: HubFixture, repo_id: str, lines: list[dict]) -> None:
    """POST an ndjson commit payload directly, as a client that skipped the LFS upload would."""
    response = get_session().post(
        f"{hub.url}/api/models/{repo_id}/commit/main",
        headers={"authorization": f"Bearer {hub.token}", "Content-Type": "application/x-ndjson"},
        content=b"".join(json.dumps(line).encode() + b"\n" for line in lines),
    )
    hf_raise_for_status(response, endpoint_name="commit")


def wait_for(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "server did not reach the expected state in time"
        time.sleep(0.01)


def test_known_git_ids() -> None:
    # Anchors the helpers above on git itself: `printf 'hello world\n' | git hash-object --stdin`.
    assert git_blob_sha1(b"hello world\n") == "3b18e512dba79e4c8300dd08aeb37f8e728b8dad"
    assert git_tree_sha1({}) == "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # git's empty tree


def test_whoami_create_repo_and_private_visibility(hub_server: HubFixture) -> None:
    api = HfApi()
    me = api.whoami()
    assert (me["name"], me["auth"]["accessToken"]["role"]) == ("hub-tester", "write")

    url = api.create_repo("alpha")
    assert (url, url.repo_id, url.repo_type) == (
        f"{hub_server.url}/hub-tester/alpha",
        "hub-tester/alpha",
        "model",
    )
    # Like the Hub, a new repo starts with an initial commit holding `.gitattributes`.
    assert api.list_repo_files("hub-tester/alpha") == [".gitattributes"]
    assert [c.title for c in api.list_repo_commits("hub-tester/alpha")] == ["initial commit"]
    with pytest.raises(HfHubHTTPError) as conflict:
        api.create_repo("alpha")
    assert conflict.value.response.status_code == 409
    assert api.create_repo("alpha", exist_ok=True).repo_id == "hub-tester/alpha"
    assert api.create_repo("hub-org/shared").repo_id == "hub-org/shared"
    with pytest.raises(HfHubHTTPError) as forbidden:
        HfApi(token=hub_server.other_token).create_repo("hub-tester/not-yours")
    assert forbidden.value.response.status_code == 403

    api.create_repo("secret", private=True)
    api.upload_file(path_or_fileobj=b"top secret\n", path_in_repo="s.txt", repo_id="hub-tester/secret")
    assert api.model_info("hub-tester/secret").private is True
    assert HfApi(token=False).model_info("hub-tester/alpha").private is False
    # A private repo is indistinguishable from a missing one for outsiders: 401 anonymous, 404 authenticated.
    with pytest.raises(RepositoryNotFoundError) as anonymous:
        HfApi(token=False).model_info("hub-tester/secret")
    assert anonymous.value.response.status_code == 401
    with pytest.raises(RepositoryNotFoundError) as outsider:
        HfApi(token=hub_server.other_token).model_info("hub-tester/secret")
    assert outsider.value.response.status_code == 404
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("hub-tester/secret", "s.txt", token=False)
    assert Path(hf_hub_download("hub-tester/secret", "s.txt")).read_bytes() == b"top secret\n"


def test_wrong_token_gets_401_and_read_token_cannot_write(hub_server: HubFixture) -> None:
    api = HfApi()
    repo_id = api.create_repo("public").repo_id
    bad = HfApi(token=hub_server.bad_token)

    with pytest.raises(HfHubHTTPError) as whoami:
        bad.whoami()
    assert whoami.value.response.status_code == 401
    assert str(whoami.value).startswith("Invalid user token.")
    # A bad token is refused even on a public repo, and is not reported as a missing repo.
    with pytest.raises(HfHubHTTPError) as info:
        bad.model_info(repo_id)
    assert type(info.value) is HfHubHTTPError
    assert info.value.response.status_code == 401
    assert info.value.server_message == "Invalid credentials in Authorization header"
    with pytest.raises(HfHubHTTPError) as download:
        hf_hub_download(repo_id, ".gitattributes", token=hub_server.bad_token)
    assert type(download.value) is HfHubHTTPError and download.value.response.status_code == 401
    with pytest.raises(HfHubHTTPError) as upload:
        bad.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id=repo_id)
    assert upload.value.response.status_code == 401

    reader = HfApi(token=hub_server.read_token)
    assert reader.list_repo_files(repo_id) == [".gitattributes"]
    with pytest.raises(HfHubHTTPError) as read_only:
        reader.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id=repo_id)
    assert read_only.value.response.status_code == 403
    assert api.list_repo_files(repo_id) == [".gitattributes"]
    assert hub_server.server.commit_count(repo_id) == 1


def test_upload_file_regular_and_lfs_then_download(hub_server: HubFixture) -> None:
    api = HfApi()
    repo_id = api.create_repo("files").repo_id
    text = b"hello world\n"
    weights = bytes(range(256)) * 64  # NUL bytes: binary, so LFS whatever its name
    first = api.upload_file(path_or_fileobj=text, path_in_repo="docs/hello.txt", repo_id=repo_id)
    second = api.upload_file(path_or_fileobj=weights, path_in_repo="weights.bin", repo_id=repo_id)
    assert second.oid == hub_server.server.head(repo_id) != first.oid
    assert second.commit_url == f"{hub_server.url}/{repo_id}/commit/{second.oid}"

    info = api.model_info(repo_id, files_metadata=True)
    assert info.sha == second.oid
    siblings = {s.rfilename: s for s in info.siblings or []}
    assert sorted(siblings) == [".gitattributes", "docs/hello.txt", "weights.bin"]
    hello, blob = siblings["docs/hello.txt"], siblings["weights.bin"]
    assert (hello.blob_id, hello.size, hello.lfs) == ("3b18e512dba79e4c8300dd08aeb37f8e728b8dad", 12, None)
    assert blob.size == len(weights) == 16384
    assert blob.blob_id == git_blob_sha1(lfs_pointer(weights))  # git stores the pointer, not the content
    assert blob.lfs is not None
    assert (blob.lfs.sha256, blob.lfs.size) == (hashlib.sha256(weights).hexdigest(), len(weights))
    assert blob.lfs.pointer_size == len(lfs_pointer(weights))

    # Regular file: served by the Hub itself; ETag is the git blob id.
    meta = get_hf_file_metadata(hf_hub_url(repo_id, "docs/hello.txt"))
    assert (meta.commit_hash, meta.etag, meta.size) == (second.oid, git_blob_sha1(text), 12)
    assert meta.location == hf_hub_url(repo_id, "docs/hello.txt")
    # LFS file: 302 to the storage origin, metadata in X-Linked-Etag / X-Linked-Size.
    meta = get_hf_file_metadata(hf_hub_url(repo_id, "weights.bin", revision=second.oid))
    assert (meta.commit_hash, meta.etag, meta.size) == (
        second.oid,
        hashlib.sha256(weights).hexdigest(),
        16384,
    )
    assert meta.location.startswith(f"{hub_server.server.storage_url}/lfs/model/{repo_id}/")

    path = Path(hf_hub_download(repo_id, "weights.bin"))
    assert path.read_bytes() == weights
    assert (
        path == hub_server.cache_dir / "models--hub-tester--files" / "snapshots" / second.oid / "weights.bin"
    )
    assert Path(hf_hub_download(repo_id, "docs/hello.txt", revision=first.oid)).read_bytes() == text

    # Resumable downloads rely on Range requests.
    partial = get_session().get(hf_hub_url(repo_id, "docs/hello.txt"), headers={"Range": "bytes=6-10"})
    assert (partial.status_code, partial.content) == (206, b"world")
    assert partial.headers["Content-Range"] == "bytes 6-10/12"

    # The storage origin only ever saw presigned URLs: the token never left the Hub origin.
    storage = [r for r in hub_server.server.requests if r.origin == "storage"]
    assert [(r.method, r.status, r.authorized) for r in storage] == [("PUT", 200, False), ("GET", 200, False)]


def test_upload_folder_decides_regular_or_lfs_like_the_hub(hub_server: HubFixture, tmp_path: Path) -> None:
    api = HfApi()
    repo_id = api.create_repo("folder").repo_id
    api.upload_file(path_or_fileobj=b"*.log\n", path_in_repo=".gitignore", repo_id=repo_id)
    folder = tmp_path / "upload"
    contents = {
        "notes.txt": b"plain text\n",
        "model.safetensors": b"text, but the extension is LFS-tracked by .gitattributes\n",
        "blob.dat": b"\x00\x01\x02 binary",
        "big.txt": b"a" * (10 * 1024 * 1024),  # 10 MiB: too large for a regular git blob
        "sub/readme.md": b"# nested\n",
        "debug.log": b"ignored by .gitignore\n",
    }
    for name, content in contents.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(content)
    api.upload_folder(folder_path=folder, repo_id=repo_id)

    tree = {entry.path: entry for entry in api.list_repo_tree(repo_id, recursive=True)}
    assert sorted(tree) == [
        ".gitattributes",
        ".gitignore",
        "big.txt",
        "blob.dat",
        "model.safetensors",
        "notes.txt",
        "sub",
        "sub/readme.md",
    ]
    assert isinstance(tree["sub"], RepoFolder)
    modes = {p: ("lfs" if e.lfs else "regular") for p, e in tree.items() if isinstance(e, RepoFile)}
    assert modes == {
        ".gitattributes": "regular",
        ".gitignore": "regular",
        "big.txt": "lfs",
        "blob.dat": "lfs",
        "model.safetensors": "lfs",
        "notes.txt": "regular",
        "sub/readme.md": "regular",
    }
    snapshot = Path(snapshot_download(repo_id))
    for name, content in contents.items():
        if name != "debug.log":
            assert (snapshot / name).read_bytes() == content
    assert not (snapshot / "debug.log").exists()


def test_branches_tags_and_revisions(hub_server: HubFixture) -> None:
    api = HfApi()
    repo_id = api.create_repo("revs").repo_id
    v1 = api.upload_file(path_or_fileobj=b"version 1\n", path_in_repo="version.txt", repo_id=repo_id).oid
    api.create_tag(repo_id, tag="v1.0")
    api.create_branch(repo_id, branch="dev")
    v2 = api.upload_file(
        path_or_fileobj=b"version 2\n", path_in_repo="version.txt", repo_id=repo_id, revision="dev"
    )
    dev = api.upload_file(
        path_or_fileobj=b"dev only\n", path_in_repo="dev.txt", repo_id=repo_id, revision="dev"
    )

    refs = api.list_repo_refs(repo_id)
    assert [(b.name, b.ref, b.target_commit) for b in refs.branches] == [
        ("dev", "refs/heads/dev", dev.oid),
        ("main", "refs/heads/main", v1),
    ]
    assert [(t.name, t.ref, t.target_commit) for t in refs.tags] == [("v1.0", "refs/tags/v1.0", v1)]
    assert refs.converts == []
    for revision, expected in [
        ("main", b"version 1\n"),
        ("v1.0", b"version 1\n"),
        (v1, b"version 1\n"),
        ("dev", b"version 2\n"),
        (v2.oid, b"version 2\n"),
    ]:
        assert Path(hf_hub_download(repo_id, "version.txt", revision=revision)).read_bytes() == expected
    assert api.list_repo_files(repo_id, revision="dev") == [".gitattributes", "dev.txt", "version.txt"]
    assert api.list_repo_files(repo_id, revision="v1.0") == [".gitattributes", "version.txt"]
    assert api.model_info(repo_id, revision="dev").sha == dev.oid
    assert [c.commit_id for c in api.list_repo_commits(repo_id, revision="dev")][:3] == [dev.oid, v2.oid, v1]

    with pytest.raises(HfHubHTTPError) as exists:
        api.create_branch(repo_id, branch="dev")
    assert exists.value.response.status_code == 409
    api.create_branch(repo_id, branch="dev", exist_ok=True)
    with pytest.raises(HfHubHTTPError) as tag_exists:
        api.create_tag(repo_id, tag="v1.0")
    assert tag_exists.value.response.status_code == 409
    with pytest.raises(RevisionNotFoundError):
        api.create_branch(repo_id, branch="from-nowhere", revision="no-such-rev")
    with pytest.raises(HfHubHTTPError) as default_branch:
        api.delete_branch(repo_id, branch="main")
    assert default_branch.value.response.status_code == 403

    api.delete_branch(repo_id, branch="dev")
    api.delete_tag(repo_id, tag="v1.0")
    refs = api.list_repo_refs(repo_id)
    assert ([b.name for b in refs.branches], refs.tags) == (["main"], [])
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(repo_id, "dev.txt", revision="dev")  # even though the file is in the local cache
    with pytest.raises(RevisionNotFoundError):
        api.delete_branch(repo_id, branch="dev")


def test_missing_repo_file_and_revision(hub_server: HubFixture) -> None:
    api = HfApi()
    repo_id = api.create_repo("present").repo_id
    head = api.upload_file(path_or_fileobj=b"{}", path_in_repo="config.json", repo_id=repo_id).oid

    with pytest.raises(RepositoryNotFoundError) as missing_repo:
        api.model_info("hub-tester/absent")
    assert missing_repo.value.response.status_code == 404
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("hub-tester/absent", "config.json")
    with pytest.raises(RepositoryNotFoundError):
        api.list_repo_files("hub-tester/absent")

    with pytest.raises(RemoteEntryNotFoundError):
        hf_hub_download(repo_id, "missing.json")
    # The 404 carried X-Repo-Commit, so the client cached the file's absence at that commit.
    assert (
        hub_server.cache_dir / "models--hub-tester--present" / ".no_exist" / head / "missing.json"
    ).is_file()
    with pytest.raises(RemoteEntryNotFoundError):
        list(api.list_repo_tree(repo_id, path_in_repo="no/such/dir"))

    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(repo_id, "config.json", revision="no-such-branch")
    with pytest.raises(RevisionNotFoundError):
        api.model_info(repo_id, revision="no-such-branch")
    with pytest.raises(RevisionNotFoundError):
        api.list_repo_files(repo_id, revision="0" * 40)
    with pytest.raises(RevisionNotFoundError):
        snapshot_download(repo_id, revision="no-such-branch")

    assert (api.repo_exists(repo_id), api.repo_exists("hub-tester/absent")) == (True, False)
    assert (api.file_exists(repo_id, "config.json"), api.file_exists(repo_id, "missing.json")) == (
        True,
        False,
    )
    assert (api.revision_exists(repo_id, "main"), api.revision_exists(repo_id, "nope")) == (True, False)


def test_snapshot_download_at_branch_tag_and_sha(hub_server: HubFixture, tmp_path: Path) -> None:
    api = HfApi()
    repo_id = api.create_repo("snap").repo_id
    old = api.upload_file(path_or_fileobj=b"\x00old weights", path_in_repo="w.bin", repo_id=repo_id).oid
    api.create_tag(repo_id, tag="old")
    api.upload_file(path_or_fileobj=b"\x00new weights", path_in_repo="w.bin", repo_id=repo_id)
    api.upload_file(path_or_fileobj=b"added later\n", path_in_repo="extra/notes.txt", repo_id=repo_id)

    for revision in ("main", "old", old):
        folder = Path(snapshot_download(repo_id, revision=revision))
        files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
        expected = hub_server.server.files_at(repo_id, revision)
        assert files == sorted(expected)
        assert {name: (folder / name).read_bytes() for name in files} == expected
    assert hub_server.server.files_at(repo_id, "old")["w.bin"] == b"\x00old weights"
    local = Path(snapshot_download(repo_id, local_dir=tmp_path / "local", allow_patterns=["*.bin"]))
    assert sorted(p.name for p in local.iterdir() if p.is_file()) == ["w.bin"]
    assert (local / "w.bin").read_bytes() == b"\x00new weights"


def test_tree_pagination_paths_info_and_deletions(hub_server: HubFixture, tmp_path: Path) -> None:
    hub_server.server.tree_page_size = 2  # force the client to follow `Link: rel="next"` pages
    hub_server.server.commits_page_size = 2
    api = HfApi()
    repo_id = api.create_repo("tree").repo_id
    folder = tmp_path / "t"
    contents = {"a/1.txt": b"one\n", "a/2.txt": b"two\n", "b/3.txt": b"three\n", "top.txt": b"top\n"}
    for name, content in contents.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(content)
    api.upload_folder(folder_path=folder, repo_id=repo_id, commit_message="add tree")

    entries = list(api.list_repo_tree(repo_id, recursive=True))
    assert [(type(e).__name__, e.path) for e in entries] == [
        ("RepoFile", ".gitattributes"),
        ("RepoFolder", "a"),
        ("RepoFile", "a/1.txt"),
        ("RepoFile", "a/2.txt"),
        ("RepoFolder", "b"),
        ("RepoFile", "b/3.txt"),
        ("RepoFile", "top.txt"),
    ]
    assert sum("/tree/main" in r.path for r in hub_server.server.requests) == 4  # 7 entries, 2 per page
    assert [e.path for e in api.list_repo_tree(repo_id)] == [".gitattributes", "a", "b", "top.txt"]
    assert [e.path for e in api.list_repo_tree(repo_id, path_in_repo="a")] == ["a/1.txt", "a/2.txt"]

    infos = api.get_paths_info(repo_id, ["top.txt", "a", "missing.txt"], expand=True)
    assert [(type(i).__name__, i.path) for i in infos] == [("RepoFile", "top.txt"), ("RepoFolder", "a")]
    top, a = infos
    assert isinstance(top, RepoFile) and isinstance(a, RepoFolder)
    assert (top.blob_id, top.size) == (git_blob_sha1(b"top\n"), 4)
    assert a.tree_id == git_tree_sha1({"1.txt": b"one\n", "2.txt": b"two\n"})  # a real git tree id
    assert top.last_commit is not None and top.last_commit.title == "add tree"

    api.delete_file("top.txt", repo_id)
    api.delete_folder("a", repo_id)
    assert api.list_repo_files(repo_id) == [".gitattributes", "b/3.txt"]
    with pytest.raises(RemoteEntryNotFoundError):
        api.delete_file("top.txt", repo_id)
    titles = [c.title for c in api.list_repo_commits(repo_id)]  # 4 commits over 2 pages
    assert titles == [
        "Delete folder a with huggingface_hub",
        "Delete top.txt with huggingface_hub",
        "add tree",
        "initial commit",
    ]


def test_parent_commit_guards_against_concurrent_updates(hub_server: HubFixture) -> None:
    api = HfApi()
    repo_id = api.create_repo("parent").repo_id
    first = api.upload_file(path_or_fileobj=b"1", path_in_repo="n.txt", repo_id=repo_id).oid
    second = api.upload_file(path_or_fileobj=b"2", path_in_repo="n.txt", repo_id=repo_id).oid
    with pytest.raises(HfHubHTTPError) as stale:
        api.create_commit(
            repo_id,
            operations=[CommitOperationAdd("n.txt", b"3")],
            commit_message="based on a stale head",
            parent_commit=first,
        )
    assert stale.value.response.status_code == 412
    assert hub_server.server.head(repo_id) == second
    ok = api.create_commit(
        repo_id,
        operations=[CommitOperationAdd("n.txt", b"3")],
        commit_message="up to date",
        parent_commit=second[:7],
    )
    assert hub_server.server.head(repo_id) == ok.oid
    assert hub_server.server.files_at(repo_id)["n.txt"] == b"3"


def test_failing_commit_changes_nothing(hub_server: HubFixture) -> None:
    api = HfApi()
    repo_id = api.create_repo("atomic").repo_id
    api.upload_file(path_or_fileobj=b"keep\n", path_in_repo="keep.txt", repo_id=repo_id)
    head = hub_server.server.head(repo_id)
    before = hub_server.server.files_at(repo_id)
    commits = hub_server.server.commit_count(repo_id)
    lfs_content = b"\x00" + b"w" * 4096

    # Additions, an LFS upload and a valid deletion, but one deletion of a file that does not exist.
    with pytest.raises(RemoteEntryNotFoundError) as missing:
        api.create_commit(
            repo_id,
            operations=[
                CommitOperationAdd("new.txt", b"new\n"),
                CommitOperationAdd("w.safetensors", lfs_content),
                CommitOperationDelete("keep.txt"),
                CommitOperationDelete("not-there.txt"),
            ],
            commit_message="should not land",
        )
    assert "A file with this name doesn't exist" in str(missing.value)
    assert hub_server.server.head(repo_id) == head
    assert hub_server.server.files_at(repo_id) == before
    assert hub_server.server.commit_count(repo_id) == commits
    assert api.list_repo_files(repo_id) == [".gitattributes", "keep.txt"]
    # The LFS object was uploaded before the commit was attempted (as on the Hub), but nothing refers to it.
    assert hub_server.server.has_lfs_object(repo_id, hashlib.sha256(lfs_content).hexdigest())


def test_commit_referencing_an_lfs_object_never_uploaded_is_rejected_whole(hub_server: HubFixture) -> None:
    api = HfApi()
    repo_id = api.create_repo("no-upload").repo_id
    api.upload_file(path_or_fileobj=b"old\n", path_in_repo="old.txt", repo_id=repo_id)
    head = hub_server.server.head(repo_id)
    before = hub_server.server.files_at(repo_id)
    never_uploaded = hashlib.sha256(b"never uploaded").hexdigest()

    with pytest.raises(BadRequestError) as rejected:
        raw_commit(
            hub_server,
            repo_id,
            [
                {
                    "key": "header",
                    "value": {"summary": "skip the upload", "description": "", "parentCommit": head},
                },
                {"key": "file", "value": {"path": "new.txt", "content": "bmV3Cg==", "encoding": "base64"}},
                {"key": "deletedFile", "value": {"path": "old.txt"}},
                {
                    "key": "lfsFile",
                    "value": {"path": "w.bin", "algo": "sha256", "oid": never_uploaded, "size": 14},
                },
            ],
        )
    assert rejected.value.response.status_code == 400
    assert "LFS pointer pointed to a file that does not exist" in (rejected.value.server_message or "")
    assert hub_server.server.head(repo_id) == head
    assert hub_server.server.files_at(repo_id) == before
    assert api.list_repo_files(repo_id) == [".gitattributes", "old.txt"]


def test_lfs_upload_cut_off_midway_is_discarded_then_retried(hub_server: HubFixture) -> None:
    api = HfApi()
    repo_id = api.create_repo("cutoff").repo_id
    data = random.Random(0).randbytes(256 * 1024)
    hub_server.server.cut_off_next_lfs_uploads(1)  # the storage origin hangs up halfway through the next PUT

    commit = api.upload_file(path_or_fileobj=data, path_in_repo="weights.safetensors", repo_id=repo_id)

    puts = [r.status for r in hub_server.server.requests if r.origin == "storage" and r.method == "PUT"]
    assert puts == ["aborted", 200]  # the half body was dropped; the client's retry stored the whole object
    assert hub_server.server.head(repo_id) == commit.oid
    assert Path(hf_hub_download(repo_id, "weights.safetensors")).read_bytes() == data


def test_lfs_upload_that_never_completes_leaves_nothing_behind(hub_server: HubFixture) -> None:
    api = HfApi()
    repo_id = api.create_repo("interrupted").repo_id
    api.upload_file(path_or_fileobj=b"keep\n", path_in_repo="keep.txt", repo_id=repo_id)
    head = hub_server.server.head(repo_id)
    data = b"\x00" + random.Random(1).randbytes(64 * 1024)
    oid = hashlib.sha256(data).hexdigest()
    auth = {"authorization": f"Bearer {hub_server.token}"}

    actions, errors, transfer = post_lfs_batch_info(
        upload_infos=[UploadInfo.from_bytes(data)], token=hub_server.token, repo_type="model", repo_id=repo_id
    )
    assert (errors, transfer, [a["oid"] for a in actions]) == ([], "basic", [oid])
    upload_href = actions[0]["actions"]["upload"]["href"]
    verify_href = actions[0]["actions"]["verify"]["href"]
    assert upload_href.startswith(f"{hub_server.server.storage_url}/lfs/model/{repo_id}/{oid}?")
    assert verify_href == f"{hub_server.url}/{repo_id}.git/info/lfs/objects/verify"

    # A presigned URL is the only credential of the storage origin, and it checks what it receives.
    tampered = get_session().put(upload_href.replace("signature=", "signature=0"), content=data)
    assert tampered.status_code == 403
    corrupted = get_session().put(upload_href, content=data[:-1] + b"!")
    assert corrupted.status_code == 400

    # The client sends half of the body and the connection dies.
    url = urlsplit(upload_href)
    request_head = (
        f"PUT {url.path}?{url.query} HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Length: {len(data)}\r\n\r\n"
    )
    with socket.create_connection((url.hostname, url.port)) as sock:
        sock.sendall(request_head.encode() + data[: len(data) // 2])
    wait_for(lambda: any(r.origin == "storage" and r.status == "aborted" for r in hub_server.server.requests))
    assert not hub_server.server.has_lfs_object(repo_id, oid)
    assert hub_server.server.pending_upload_files() == []

    verify = get_session().post(verify_href, json={"oid": oid, "size": len(data)}, headers=auth)
    assert verify.status_code == 404
    with pytest.raises(BadRequestError):
        raw_commit(
            hub_server,
            repo_id,
            [
                {"key": "header", "value": {"summary": "use the half-uploaded object"}},
                {
                    "key": "lfsFile",
                    "value": {"path": "w.bin", "algo": "sha256", "oid": oid, "size": len(data)},
                },
            ],
        )
    assert hub_server.server.head(repo_id) == head
    assert api.list_repo_files(repo_id) == [".gitattributes", "keep.txt"]

    # The batch API still asks for the object, and the client's normal upload then goes through.
    actions, _, _ = post_lfs_batch_info(
        upload_infos=[UploadInfo.from_bytes(data)], token=hub_server.token, repo_type="model", repo_id=repo_id
    )
    assert "upload" in actions[0]["actions"]
    api.upload_file(path_or_fileobj=data, path_in_repo="w.bin", repo_id=repo_id)
    assert hub_server.server.files_at(repo_id)["w.bin"] == data


def test_create_pr_commits_to_a_pull_request_ref(hub_server: HubFixture) -> None:
    api = HfApi()
    repo_id = api.create_repo("prs").repo_id
    base = hub_server.server.head(repo_id)
    pr = api.upload_file(
        path_or_fileobj=b"proposal\n", path_in_repo="proposal.txt", repo_id=repo_id, create_pr=True
    )
    assert (pr.pr_revision, pr.pr_num, pr.pr_url) == (
        "refs/pr/1",
        1,
        f"{hub_server.url}/{repo_id}/discussions/1",
    )
    assert hub_server.server.head(repo_id) == base  # main untouched
    assert Path(hf_hub_download(repo_id, "proposal.txt", revision="refs/pr/1")).read_bytes() == b"proposal\n"
    more = api.upload_file(
        path_or_fileobj=b"more\n", path_in_repo="more.txt", repo_id=repo_id, revision="refs/pr/1"
    )
    refs = api.list_repo_refs(repo_id, include_pull_requests=True)
    assert [(p.name, p.ref, p.target_commit) for p in refs.pull_requests or []] == [
        ("1", "refs/pr/1", more.oid)
    ]
    assert api.list_repo_files(repo_id, revision="refs/pr/1") == [
        ".gitattributes",
        "more.txt",
        "proposal.txt",
    ]
    assert api.list_repo_files(repo_id) == [".gitattributes"]


def test_dataset_repo_roundtrip_and_delete(hub_server: HubFixture) -> None:
    api = HfApi()
    url = api.create_repo("corpus", repo_type="dataset")
    assert (url, url.repo_type) == (f"{hub_server.url}/datasets/hub-tester/corpus", "dataset")
    repo_id = url.repo_id
    parquet = b"PAR1\x00\x00PAR1"
    api.upload_file(
        path_or_fileobj=b"a,b\n1,2\n", path_in_repo="train.csv", repo_id=repo_id, repo_type="dataset"
    )
    last = api.upload_file(
        path_or_fileobj=parquet, path_in_repo="data/x.parquet", repo_id=repo_id, repo_type="dataset"
    )
    assert last.commit_url == f"{hub_server.url}/datasets/{repo_id}/commit/{last.oid}"
    info = api.dataset_info(repo_id, files_metadata=True)
    assert info.sha == last.oid
    assert [(s.rfilename, s.lfs is not None) for s in info.siblings or []] == [
        (".gitattributes", False),
        ("data/x.parquet", True),
        ("train.csv", False),
    ]
    assert Path(hf_hub_download(repo_id, "data/x.parquet", repo_type="dataset")).read_bytes() == parquet
    # Same name, other repo type: a different repo.
    with pytest.raises(RepositoryNotFoundError):
        api.model_info(repo_id)

    api.delete_repo(repo_id, repo_type="dataset")
    assert api.repo_exists(repo_id, repo_type="dataset") is False
    with pytest.raises(RepositoryNotFoundError):
        api.delete_repo(repo_id, repo_type="dataset")
    api.delete_repo(repo_id, repo_type="dataset", missing_ok=True)


def test_transformers_push_to_hub_and_from_pretrained_at_revisions(hub_server: HubFixture) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=64,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
    )
    torch.manual_seed(0)
    first = transformers.BertModel(config)
    torch.manual_seed(1)
    second = transformers.BertModel(config)
    repo_id = hub_server.repo_id("tiny-bert")

    c1 = first.push_to_hub(repo_id, commit_message="first weights")
    HfApi().create_tag(repo_id, tag="v1")
    c2 = second.push_to_hub(repo_id, revision="v2", commit_message="second weights")  # creates branch v2
    assert HfApi().list_repo_files(repo_id) == [
        ".gitattributes",
        "README.md",
        "config.json",
        "model.safetensors",
    ]
    weights = {e.path: e for e in HfApi().list_repo_tree(repo_id, revision="v2")}["model.safetensors"]
    assert isinstance(weights, RepoFile) and weights.lfs is not None

    def same_weights(a, b) -> bool:
        sa, sb = a.state_dict(), b.state_dict()
        return list(sa) == list(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)

    assert not same_weights(first, second)
    for revision, expected in [
        ("main", first),
        ("v1", first),
        (c1.oid, first),
        ("v2", second),
        (c2.oid, second),
    ]:
        loaded = transformers.BertModel.from_pretrained(repo_id, revision=revision)
        assert same_weights(loaded, expected), revision
    loaded_config = transformers.BertConfig.from_pretrained(repo_id, revision="v2")
    assert (loaded_config.hidden_size, loaded_config.vocab_size, loaded_config.num_hidden_layers) == (
        16,
        64,
        1,
    )
