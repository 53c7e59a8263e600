"""A small Hugging Face Hub API server, for tests that must never touch the network.

The unmodified ``huggingface_hub`` client (and ``transformers`` on top of it) talks to this server over HTTP on
127.0.0.1 when ``HF_ENDPOINT`` points at it and ``HF_HUB_DISABLE_XET=1``. The endpoints, headers and JSON shapes
are the ones the installed client speaks (``hf_api.py``, ``_commit_api.py``, ``lfs.py``, ``file_download.py``,
``utils/_http.py`` of huggingface_hub 2.x); this module is a server, not a mock of the client.

Design, mirroring the real Hub:

* Two origins. The *Hub* origin serves the JSON API, git-LFS batch API and ``/resolve/`` downloads. A second
  *storage* origin (another port, so another origin for the client) plays the role of S3/CDN: LFS uploads are
  ``PUT`` to presigned (HMAC-signed) URLs there and LFS downloads are ``302`` redirects to it. Because it is a
  different origin, the client neither follows the ``HEAD`` redirect nor forwards the ``Authorization`` header to
  it, exactly as with the real CDN; the signature in the URL is the only credential it accepts.
* Git-like storage under a temp directory: every commit is an immutable snapshot ``path -> (sha256, size, lfs)``
  with a parent; branches, tags and PR refs (``refs/heads/*``, ``refs/tags/*``, ``refs/pr/*``) point to commits.
  Commit, tree and blob ids are real git object ids (sha1 of the git object encoding), so ``blob_id``/``ETag``
  values match what ``git hash-object`` would give. Regular contents live in a content-addressed store; LFS
  objects are stored per repo by their sha256 oid, and only a complete upload whose bytes hash to the oid is ever
  stored.
* Commits are all-or-nothing: the whole ndjson payload is validated against a working copy (missing LFS object,
  unknown file to delete, ``parentCommit`` mismatch, ...) before the new commit is created and the ref moved
  under the store lock; any failure leaves the repo exactly at its previous commit.
* Auth: a fixed set of tokens. An unknown token gets ``401 Invalid credentials in Authorization header`` on every
  API call; private repos answer ``RepoNotFound`` (401 anonymous / 404 authenticated) to anyone outside their
  namespace, like the Hub does to avoid leaking their existence.

Run standalone with ``python -m tests.hub_server --port 8080``.
"""

from __future__ import annotations

import argparse
import base64
import fnmatch
import hashlib
import hmac
import json
import mimetypes
import os
import re
import secrets
import shutil
import socket
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

__all__ = [
    "BAD_TOKEN",
    "OTHER_TOKEN",
    "READ_TOKEN",
    "WRITE_TOKEN",
    "Commit",
    "FileEntry",
    "HubServer",
    "HubUser",
    "RequestRecord",
    "git_blob_oid",
    "lfs_pointer",
]

# The Hub stores files above 10 MiB with LFS and refuses them as regular git blobs.
LFS_SIZE_THRESHOLD = 10 * 1024 * 1024
# The client sends the first 512 bytes of each file to /preupload; binary detection only looks there.
SAMPLE_SIZE = 512
# Cap for request bodies read in memory on the Hub origin (commit payloads carry regular files in base64).
MAX_API_BODY = 64 * 1024 * 1024
# Presigned storage URLs are valid for one hour, like the Hub's S3 URLs.
SIGNED_URL_TTL = 3600
DEFAULT_BRANCH = "main"

WRITE_TOKEN = "hf_HubTestWriteToken00000000000000000"
READ_TOKEN = "hf_HubTestReadToken000000000000000000"
OTHER_TOKEN = "hf_HubTestOtherUserToken0000000000000"
BAD_TOKEN = "hf_HubTestInvalidToken000000000000000"

# The `.gitattributes` the Hub writes in the initial commit of every new repo: these patterns are LFS-tracked.
DEFAULT_GITATTRIBUTES = "".join(
    f"{pattern} filter=lfs diff=lfs merge=lfs -text\n"
    for pattern in (
        "*.7z", "*.arrow", "*.bin", "*.bz2", "*.ckpt", "*.ftz", "*.gz", "*.h5", "*.joblib", "*.lfs.*",
        "*.mlmodel", "*.model", "*.msgpack", "*.npy", "*.npz", "*.onnx", "*.ot", "*.parquet", "*.pb",
        "*.pickle", "*.pkl", "*.pt", "*.pth", "*.rar", "*.safetensors", "saved_model/**/*", "*.tar.*",
        "*.tar", "*.tflite", "*.tgz", "*.wasm", "*.xz", "*.zip", "*.zst", "*tfevents*",
    )
)  # fmt: skip

_REPO_TYPES_PLURAL = {"models": "model", "datasets": "dataset", "spaces": "space"}
_URL_PREFIXES = {"model": "", "dataset": "datasets/", "space": "spaces/"}
_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_-])?$")
_OID_RE = re.compile(r"^[0-9a-f]{64}$")
_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
_SHORT_COMMIT_RE = re.compile(r"^[0-9a-f]{5,40}$")
_REF_NAME_RE = re.compile(r"^[A-Za-z0-9._-]+(?:/[A-Za-z0-9._-]+)*$")


# --------------------------------------------------------------------------------------------------------------
# Git object model
# --------------------------------------------------------------------------------------------------------------


def git_blob_oid(content: bytes) -> str:
    """Git blob id of `content` (what the Hub reports as `oid`/`blobId` and as the ETag of regular files)."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def lfs_pointer(oid: str, size: int) -> bytes:
    """The git-lfs pointer file committed in git in place of an LFS file."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n".encode()


@dataclass(frozen=True)
class FileEntry:
    """One file of a commit snapshot."""

    sha256: str  # content hash: key of the regular blob store, or the LFS oid
    size: int  # size of the real content (not of the LFS pointer)
    lfs: bool
    git_oid: str  # git blob id: of the content for regular files, of the pointer for LFS files

    @property
    def pointer_size(self) -> int:
        return len(lfs_pointer(self.sha256, self.size))


@dataclass(frozen=True)
class Commit:
    """An immutable commit: a full snapshot of the repo's files plus its parent."""

    oid: str
    parent: str | None
    files: Mapping[str, FileEntry]
    dir_oids: Mapping[str, str]  # "" is the root tree
    title: str
    message: str
    author: str
    date: str  # ISO 8601, as the Hub formats it

    def to_json(self) -> dict[str, Any]:
        return {
            "oid": self.oid,
            "parent": self.parent,
            "title": self.title,
            "message": self.message,
            "author": self.author,
            "date": self.date,
            "files": {
                path: {"sha256": e.sha256, "size": e.size, "lfs": e.lfs, "gitOid": e.git_oid}
                for path, e in sorted(self.files.items())
            },
        }


def _tree_oids(files: Mapping[str, FileEntry]) -> dict[str, str]:
    """Git tree ids of every directory of a snapshot, computed bottom-up like `git write-tree`."""
    dirs = {""}
    for path in files:
        parts = path.split("/")
        for i in range(1, len(parts)):
            dirs.add("/".join(parts[:i]))
    children: dict[str, list[tuple[str, bool, str]]] = {d: [] for d in dirs}
    for path in files:
        parent, _, name = path.rpartition("/")
        children[parent].append((name, False, path))
    for d in dirs:
        if d:
            parent, _, name = d.rpartition("/")
            children[parent].append((name, True, d))
    oids: dict[str, str] = {}
    for d in sorted(dirs, key=lambda p: p.count("/") + (1 if p else 0), reverse=True):
        body = b""
        # git sorts tree entries by name, directories compared as if suffixed with "/"
        for name, is_dir, full in sorted(children[d], key=lambda t: t[0] + ("/" if t[1] else "")):
            mode = b"40000" if is_dir else b"100644"
            oid = oids[full] if is_dir else files[full].git_oid
            body += mode + b" " + name.encode() + b"\0" + bytes.fromhex(oid)
        oids[d] = hashlib.sha1(b"tree %d\0" % len(body) + body).hexdigest()
    return oids


def _now_iso(ts: float) -> str:
    return (
        datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.")
        + f"{int(ts * 1000) % 1000:03d}Z"
    )


def _make_commit(
    parent: Commit | None, files: dict[str, FileEntry], title: str, description: str, author: str
) -> Commit:
    ts = time.time()
    dir_oids = _tree_oids(files)
    message = title if not description else f"{title}\n\n{description}"
    ident = f"{author} <{author}@users.noreply.huggingface.co> {int(ts)} +0000"
    body = f"tree {dir_oids['']}\n"
    if parent is not None:
        body += f"parent {parent.oid}\n"
    body += f"author {ident}\ncommitter {ident}\n\n{message}\n"
    raw = body.encode()
    oid = hashlib.sha1(b"commit %d\0" % len(raw) + raw).hexdigest()
    return Commit(
        oid=oid,
        parent=parent.oid if parent else None,
        files=dict(files),
        dir_oids=dir_oids,
        title=title,
        message=description,
        author=author,
        date=_now_iso(ts),
    )


# --------------------------------------------------------------------------------------------------------------
# Users, repos, store
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HubUser:
    """The identity behind an access token."""

    name: str
    role: str = "write"  # "read" or "write", as in the Hub's access token roles
    orgs: tuple[str, ...] = ()
    fullname: str = ""

    def can_read_namespace(self, namespace: str) -> bool:
        return namespace == self.name or namespace in self.orgs

    def can_write_namespace(self, namespace: str) -> bool:
        return self.role == "write" and self.can_read_namespace(namespace)


def default_tokens() -> dict[str, HubUser]:
    """Fixed token set: a write and a read token of `hub-tester` (member of `hub-org`), and another user."""
    tester = HubUser(name="hub-tester", role="write", orgs=("hub-org",), fullname="Hub Tester")
    return {
        WRITE_TOKEN: tester,
        READ_TOKEN: HubUser(name="hub-tester", role="read", orgs=("hub-org",), fullname="Hub Tester"),
        OTHER_TOKEN: HubUser(name="other-user", role="write", fullname="Other User"),
    }


class HubError(Exception):
    """An HTTP error answered the way the Hub does: JSON `{"error": ...}` plus `X-Error-Code`/`X-Error-Message`."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = dict(headers or {})
        self.body = dict(body or {})  # extra JSON fields next to "error"


class _ClientGone(Exception):
    """The client went away (or was cut off) before sending its whole request body."""


@dataclass
class _Repo:
    repo_type: str
    repo_id: str
    private: bool
    created_at: str
    path: Path
    gated: bool | str = False
    refs: dict[str, str] = field(default_factory=dict)
    commits: dict[str, Commit] = field(default_factory=dict)
    next_pr: int = 1

    @property
    def namespace(self) -> str:
        return self.repo_id.split("/")[0]

    @property
    def lfs_dir(self) -> Path:
        return self.path / "lfs"

    def lfs_object(self, oid: str) -> Path:
        return self.lfs_dir / oid[:2] / oid

    def resolve(self, revision: str) -> Commit | None:
        """Revision -> commit: full ref name, branch, tag, then full commit sha."""
        for ref in (revision, f"refs/heads/{revision}", f"refs/tags/{revision}"):
            if ref.startswith("refs/") and ref in self.refs:
                return self.commits[self.refs[ref]]
        if _COMMIT_RE.fullmatch(revision):
            return self.commits.get(revision)
        return None


class _Store:
    """All repos under one root directory. Metadata is kept in memory (source of truth) and written through to
    disk as JSON (commits are written once, refs rewritten atomically), so the layout can be inspected."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.lock = threading.RLock()
        self.repos: dict[tuple[str, str], _Repo] = {}
        (root / "objects").mkdir(parents=True, exist_ok=True)
        (root / "tmp").mkdir(parents=True, exist_ok=True)
        (root / "repos").mkdir(parents=True, exist_ok=True)

    @property
    def tmp_dir(self) -> Path:
        return self.root / "tmp"

    # -- blobs --------------------------------------------------------------------------------------------------

    def blob_path(self, sha256: str) -> Path:
        return self.root / "objects" / sha256[:2] / sha256

    def put_blob(self, content: bytes) -> str:
        sha = hashlib.sha256(content).hexdigest()
        dest = self.blob_path(sha)
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.tmp_dir / f"{uuid.uuid4().hex}.blob"
            tmp.write_bytes(content)
            os.replace(tmp, dest)  # atomic: readers see the whole blob or nothing
        return sha

    def content_path(self, repo: _Repo, entry: FileEntry) -> Path:
        return repo.lfs_object(entry.sha256) if entry.lfs else self.blob_path(entry.sha256)

    # -- repos --------------------------------------------------------------------------------------------------

    def get(self, repo_type: str, repo_id: str) -> _Repo | None:
        with self.lock:
            return self.repos.get((repo_type, repo_id))

    def create_repo(self, repo_type: str, repo_id: str, private: bool, author: str) -> _Repo:
        with self.lock:
            path = self.root / "repos" / repo_type / repo_id
            repo = _Repo(
                repo_type=repo_type,
                repo_id=repo_id,
                private=private,
                created_at=_now_iso(time.time()),
                path=path,
            )
            path.mkdir(parents=True, exist_ok=True)
            content = DEFAULT_GITATTRIBUTES.encode()
            entry = FileEntry(self.put_blob(content), len(content), False, git_blob_oid(content))
            initial = _make_commit(None, {".gitattributes": entry}, "initial commit", "", author)
            self._save_commit(repo, initial)
            repo.refs[f"refs/heads/{DEFAULT_BRANCH}"] = initial.oid
            self.repos[(repo_type, repo_id)] = repo
            self.save_meta(repo)
            return repo

    def delete_repo(self, repo: _Repo) -> None:
        with self.lock:
            self.repos.pop((repo.repo_type, repo.repo_id), None)
            shutil.rmtree(repo.path, ignore_errors=True)

    def _save_commit(self, repo: _Repo, commit: Commit) -> None:
        repo.commits[commit.oid] = commit
        path = repo.path / "commits" / f"{commit.oid}.json"
        if not path.exists():
            _write_json_atomic(path, commit.to_json(), self.tmp_dir)

    def save_meta(self, repo: _Repo) -> None:
        meta = {
            "type": repo.repo_type,
            "id": repo.repo_id,
            "private": repo.private,
            "gated": repo.gated,
            "createdAt": repo.created_at,
            "refs": dict(sorted(repo.refs.items())),
        }
        _write_json_atomic(repo.path / "repo.json", meta, self.tmp_dir)

    def add_commit(self, repo: _Repo, ref: str, commit: Commit, expected_head: str | None) -> None:
        """Store `commit` and move `ref` to it, unless `ref` moved since `expected_head` was read."""
        with self.lock:
            if repo.refs.get(ref) != expected_head:
                raise HubError(412, "A commit has happened since. Please refresh and try again.")
            self._save_commit(repo, commit)
            repo.refs[ref] = commit.oid
            self.save_meta(repo)


def _write_json_atomic(path: Path, obj: Any, tmp_dir: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_dir / f"{uuid.uuid4().hex}.json"
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


# --------------------------------------------------------------------------------------------------------------
# Upload-mode helpers (what /preupload decides)
# --------------------------------------------------------------------------------------------------------------


def _lfs_patterns(gitattributes: str) -> list[str]:
    patterns = []
    for line in gitattributes.splitlines():
        parts = line.split()
        if len(parts) >= 2 and not parts[0].startswith("#") and "filter=lfs" in parts[1:]:
            patterns.append(parts[0])
    return patterns


def _gitattributes_match(pattern: str, path: str) -> bool:
    # gitattributes semantics, simplified: a pattern without "/" matches the basename at any depth,
    # a pattern with "/" matches the path relative to the repo root.
    if "/" not in pattern:
        return fnmatch.fnmatchcase(path.rsplit("/", 1)[-1], pattern)
    pattern = pattern.lstrip("/")
    return fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(path, pattern.replace("**/", ""))


def _gitignore_match(gitignore: str, path: str) -> bool:
    """Whether `path` is ignored by `gitignore` (simplified gitignore semantics: last matching line wins)."""
    ignored = False
    for raw in gitignore.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line[1:] if negate else line
        dir_only = pattern.endswith("/")
        pattern = pattern.rstrip("/")
        if "/" in pattern:  # anchored at the repo root
            pattern = pattern.lstrip("/")
            match = fnmatch.fnmatchcase(path, pattern) or path.startswith(pattern + "/")
        else:  # matches any path component (only directories for "dir/")
            parts = path.split("/")
            match = any(fnmatch.fnmatchcase(part, pattern) for part in (parts[:-1] if dir_only else parts))
        if match:
            ignored = not negate
    return ignored


def _is_binary(sample: bytes) -> bool:
    # Same heuristic as git: a NUL byte in the first bytes means binary.
    return b"\0" in sample[:SAMPLE_SIZE]


def _upload_mode(path: str, size: int, sample: bytes, lfs_patterns: list[str]) -> str:
    if size >= LFS_SIZE_THRESHOLD or _is_binary(sample):
        return "lfs"
    if any(_gitattributes_match(p, path) for p in lfs_patterns):
        return "lfs"
    return "regular"


def _check_path(path: Any) -> str:
    if not isinstance(path, str) or not path or path.startswith("/") or path.endswith("/"):
        raise HubError(400, f"Invalid path: {path!r}")
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts) or parts[0] == ".git":
        raise HubError(400, f"Invalid path: {path!r}")
    return path


# --------------------------------------------------------------------------------------------------------------
# HTTP layer
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestRecord:
    """One request as the server saw it (for tests asserting on the protocol)."""

    origin: str  # "hub" or "storage"
    method: str
    path: str
    status: int | str  # HTTP status sent, or "aborted" when the client went away mid-request
    authorized: bool  # whether an Authorization header was sent


class _Origin(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, host: str, port: int, hub: HubServer, kind: str) -> None:
        self.hub = hub
        self.kind = kind
        super().__init__((host, port), _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like the real Hub; every response carries Content-Length
    timeout = 60  # so that idle keep-alive threads eventually end
    # Headers and body go out in separate writes: without TCP_NODELAY, Nagle + the client's delayed ACK stall
    # every small keep-alive response by ~40 ms.
    disable_nagle_algorithm = True
    server: _Origin

    # -- plumbing -----------------------------------------------------------------------------------------------

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # keep test output clean; requests are recorded in `HubServer.requests` instead

    def send_response(self, code: int, message: str | None = None) -> None:
        # Record before any byte of the response leaves: once the client has its answer, tests may read the log.
        self._record(code)
        super().send_response(code, message)

    def _record(self, status: int | str) -> None:
        if not self._recorded:
            self._recorded = True
            self.hub.requests.append(
                RequestRecord(
                    origin=self.server.kind,
                    method=self.command,
                    path=self.path,
                    status=status,
                    authorized=self.headers.get("Authorization") is not None,
                )
            )

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._handle("GET")

    def do_HEAD(self) -> None:  # noqa: N802
        self._handle("HEAD")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._handle("PUT")

    def do_DELETE(self) -> None:  # noqa: N802
        self._handle("DELETE")

    @property
    def hub(self) -> HubServer:
        return self.server.hub

    def _handle(self, method: str) -> None:
        self._recorded = False
        split = urlsplit(self.path)
        self._query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        self._query_all = parse_qs(split.query, keep_blank_values=True)
        self._parts = [p for p in split.path.split("/") if p != ""]
        try:
            if self.server.kind == "storage":
                self._route_storage(method)
            else:
                body = self._read_body(MAX_API_BODY)
                self._route_hub(method, body)
        except (_ClientGone, BrokenPipeError, ConnectionResetError):
            self._record("aborted")  # no-op if a response had already started
            self.close_connection = True
        except HubError as err:
            self._send_error(err)
        except Exception:  # a bug in the server: answer 500 and make the fixture fail the test
            self.hub.errors.append(f"{method} {self.path}\n{traceback.format_exc()}")
            self._send_error(HubError(500, "Internal server error"))

    def _body_chunks(self) -> Iterator[bytes]:
        """Yield the request body, raising `_ClientGone` if the stream ends before its announced end."""
        try:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                while True:
                    line = self.rfile.readline(65537)
                    if not line:
                        raise _ClientGone()
                    size = int(line.split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                            pass  # trailers
                        return
                    remaining = size
                    while remaining:
                        data = self.rfile.read(min(remaining, 1 << 20))
                        if not data:
                            raise _ClientGone()
                        remaining -= len(data)
                        yield data
                    self.rfile.readline()
            else:
                remaining = int(self.headers.get("Content-Length") or 0)
                while remaining > 0:
                    data = self.rfile.read(min(remaining, 1 << 20))
                    if not data:
                        raise _ClientGone()
                    remaining -= len(data)
                    yield data
        except (OSError, ValueError) as err:
            raise _ClientGone() from err

    def _read_body(self, limit: int) -> bytes:
        chunks, total = [], 0
        for chunk in self._body_chunks():
            total += len(chunk)
            if total > limit:
                self.close_connection = True
                raise HubError(413, "Request body too large")
            chunks.append(chunk)
        return b"".join(chunks)

    def _send(
        self,
        status: int,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
        content_type: str = "application/json; charset=utf-8",
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        trace = self.headers.get("X-Amzn-Trace-Id")
        if trace:
            self.send_header("X-Request-Id", trace)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _send_json(self, obj: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> None:
        self._send(status, json.dumps(obj).encode(), headers)

    def _send_error(self, err: HubError) -> None:
        headers = dict(err.headers)
        if err.code:
            headers["X-Error-Code"] = err.code
        # header values must be single-line latin-1
        headers["X-Error-Message"] = (
            err.message.replace("\n", " ").encode("latin-1", "replace").decode("latin-1")
        )
        try:
            self._send_json({"error": err.message, **err.body}, status=err.status, headers=headers)
        except OSError:
            self.close_connection = True

    def _send_file(self, path: Path, headers: dict[str, str], content_type: str) -> None:
        """Serve a file, honouring a single `Range: bytes=a-b` (used by the client to resume downloads)."""
        size = path.stat().st_size
        start, end, status = 0, size - 1, 200
        range_header = self.headers.get("Range")
        if range_header:
            m = re.fullmatch(r"\s*bytes=(\d*)-(\d*)\s*", range_header)
            if m is None or (not m.group(1) and not m.group(2)):
                raise HubError(416, "Invalid range", headers={"Content-Range": f"bytes */{size}"})
            if m.group(1):
                start = int(m.group(1))
                end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
            else:
                start = max(size - int(m.group(2)), 0)
            if start >= size or start > end:
                raise HubError(416, "Range not satisfiable", headers={"Content-Range": f"bytes */{size}"})
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        length = max(end - start + 1, 0)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command == "HEAD":
            return
        with open(path, "rb") as f:
            f.seek(start)
            remaining = length
            while remaining:
                data = f.read(min(remaining, 1 << 20))
                if not data:
                    break
                self.wfile.write(data)
                remaining -= len(data)

    # -- auth -----------------------------------------------------------------------------------------------------

    def _user(self) -> HubUser | None:
        header = self.headers.get("Authorization")
        if header is None:
            return None
        scheme, _, token = header.partition(" ")
        user = self.hub.tokens.get(token.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            # Exact message the client special-cases (not turned into RepositoryNotFoundError).
            raise HubError(401, "Invalid credentials in Authorization header")
        return user

    def _readable_repo(self, repo_type: str, repo_id: str, user: HubUser | None) -> _Repo:
        repo = self.hub.store.get(repo_type, repo_id)
        if repo is None or (repo.private and (user is None or not user.can_read_namespace(repo.namespace))):
            # The Hub answers the same for missing and private repos, 401 if anonymous and 404 otherwise.
            raise HubError(401 if user is None else 404, "Repository not found", code="RepoNotFound")
        return repo

    def _writable_repo(self, repo_type: str, repo_id: str, user: HubUser | None) -> _Repo:
        repo = self._readable_repo(repo_type, repo_id, user)
        if user is None:
            raise HubError(401, "You must be authenticated to write to a repository")
        if not user.can_write_namespace(repo.namespace):
            raise HubError(403, f"You don't have the rights to write to {repo_type}s/{repo_id}")
        return repo

    def _commit_at(self, repo: _Repo, revision: str) -> Commit:
        with self.hub.store.lock:
            commit = repo.resolve(revision)
        if commit is None:
            raise HubError(404, f"Invalid rev id: {revision}", code="RevisionNotFound")
        return commit

    # -- routing --------------------------------------------------------------------------------------------------

    def _route_hub(self, method: str, body: bytes) -> None:
        parts = self._parts
        user = self._user()
        if parts[:1] == ["api"]:
            rest = parts[1:]
            if rest == ["whoami-v2"] and method == "GET":
                return self._whoami(user)
            if rest == ["agent-harnesses"] and method == "GET":
                return self._send_json({"standardEnvVars": [], "harnesses": {}})
            if rest == ["validate-yaml"] and method == "POST":
                return self._send_json({"errors": [], "warnings": []})
            if rest == ["repos", "create"] and method == "POST":
                return self._create_repo(user, _json(body))
            if rest == ["repos", "delete"] and method == "DELETE":
                return self._delete_repo(user, _json(body))
            if len(rest) >= 3 and rest[0] in _REPO_TYPES_PLURAL:
                repo_type = _REPO_TYPES_PLURAL[rest[0]]
                repo_id = f"{unquote(rest[1])}/{unquote(rest[2])}"
                return self._route_repo_api(method, user, repo_type, repo_id, rest[3:], body)
            raise HubError(404, "Sorry, we can't find the page you are looking for.")

        repo_type = "model"
        if parts[:1] and parts[0] in ("datasets", "spaces"):
            repo_type = _REPO_TYPES_PLURAL[parts[0]]
            parts = parts[1:]
        if len(parts) >= 5 and parts[1].endswith(".git") and parts[2:5] == ["info", "lfs", "objects"]:
            repo_id = f"{unquote(parts[0])}/{unquote(parts[1])[: -len('.git')]}"
            if parts[5:] == ["batch"] and method == "POST":
                return self._lfs_batch(user, repo_type, repo_id, _json(body))
            if parts[5:] == ["verify"] and method == "POST":
                return self._lfs_verify(user, repo_type, repo_id, _json(body))
        if len(parts) >= 5 and parts[2] == "resolve" and method in ("GET", "HEAD"):
            repo_id = f"{unquote(parts[0])}/{unquote(parts[1])}"
            return self._resolve(user, repo_type, repo_id, unquote(parts[3]), unquote("/".join(parts[4:])))
        if len(parts) >= 3 and parts[1] == "resolve":
            # legacy single-segment repo id ("gpt2"): this Hub only hosts namespaced repos
            raise HubError(401 if user is None else 404, "Repository not found", code="RepoNotFound")
        raise HubError(404, "Sorry, we can't find the page you are looking for.")

    def _route_repo_api(
        self, method: str, user: HubUser | None, repo_type: str, repo_id: str, rest: list[str], body: bytes
    ) -> None:
        head = rest[0] if rest else ""
        if not rest and method == "GET":
            return self._repo_info(user, repo_type, repo_id, DEFAULT_BRANCH)
        if head == "revision" and len(rest) >= 2 and method == "GET":
            return self._repo_info(user, repo_type, repo_id, unquote("/".join(rest[1:])))
        if head == "tree" and len(rest) >= 2 and method == "GET":
            # revision is quoted with safe="" by the client, the path with safe="" too ("a%2Fb")
            return self._tree(user, repo_type, repo_id, unquote(rest[1]), unquote("/".join(rest[2:])))
        if head == "paths-info" and len(rest) >= 2 and method == "POST":
            return self._paths_info(user, repo_type, repo_id, unquote("/".join(rest[1:])), body)
        if rest == ["refs"] and method == "GET":
            return self._refs(user, repo_type, repo_id)
        if head == "commits" and len(rest) >= 2 and method == "GET":
            return self._commits(user, repo_type, repo_id, unquote("/".join(rest[1:])))
        if head == "preupload" and len(rest) >= 2 and method == "POST":
            return self._preupload(user, repo_type, repo_id, unquote("/".join(rest[1:])), _json(body))
        if head == "commit" and len(rest) >= 2 and method == "POST":
            return self._commit(user, repo_type, repo_id, unquote("/".join(rest[1:])), body)
        if head == "branch" and len(rest) >= 2 and method in ("POST", "DELETE"):
            branch = unquote("/".join(rest[1:]))
            if method == "POST":
                return self._create_branch(user, repo_type, repo_id, branch, _json(body) if body else {})
            return self._delete_ref(user, repo_type, repo_id, f"refs/heads/{branch}")
        if head == "tag" and len(rest) >= 2 and method in ("POST", "DELETE"):
            name = unquote("/".join(rest[1:]))
            if method == "POST":
                return self._create_tag(user, repo_type, repo_id, name, _json(body))
            return self._delete_ref(user, repo_type, repo_id, f"refs/tags/{name}")
        if rest == ["settings"] and method == "PUT":
            return self._settings(user, repo_type, repo_id, _json(body))
        if rest == ["auth-check"] and method == "GET":
            self._readable_repo(repo_type, repo_id, user)
            return self._send_json({})
        # unknown sub-route: the repo's existence decides between RepoNotFound and a plain 404
        self._readable_repo(repo_type, repo_id, user)
        raise HubError(404, "Sorry, we can't find the page you are looking for.")

    # -- account --------------------------------------------------------------------------------------------------

    def _whoami(self, user: HubUser | None) -> None:
        if user is None:
            raise HubError(401, "Invalid username or password.")
        self._send_json(
            {
                "type": "user",
                "id": hashlib.sha1(user.name.encode()).hexdigest()[:24],
                "name": user.name,
                "fullname": user.fullname or user.name,
                "email": f"{user.name}@example.com",
                "emailVerified": True,
                "isPro": False,
                "canPay": False,
                "periodEnd": None,
                "avatarUrl": "",
                "orgs": [
                    {"type": "org", "name": org, "fullname": org, "roleInOrg": "write"} for org in user.orgs
                ],
                "auth": {
                    "type": "access_token",
                    "accessToken": {"displayName": "hub-server-test", "role": user.role, "createdAt": _EPOCH},
                },
            }
        )

    # -- repos ----------------------------------------------------------------------------------------------------

    def _repo_url(self, repo: _Repo) -> str:
        return f"{self.hub.url}/{_URL_PREFIXES[repo.repo_type]}{repo.repo_id}"

    def _create_repo(self, user: HubUser | None, payload: dict[str, Any]) -> None:
        if user is None:
            raise HubError(401, "You must be authenticated to create a repository")
        repo_type = payload.get("type") or "model"
        if repo_type not in _URL_PREFIXES:
            raise HubError(400, f"Invalid repo type: {repo_type}")
        name = payload.get("name")
        namespace = payload.get("organization") or user.name
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or "--" in name or ".." in name:
            raise HubError(400, f"Invalid repo name: {name!r}")
        if not user.can_write_namespace(namespace):
            raise HubError(
                403, f'You don\'t have the rights to create a {repo_type} under the namespace "{namespace}"'
            )
        if repo_type == "space" and payload.get("sdk") is None:
            raise HubError(400, "Missing sdk for space")
        visibility = payload.get("visibility")
        private = bool(payload.get("private")) if visibility is None else visibility != "public"
        repo_id = f"{namespace}/{name}"
        store = self.hub.store
        with store.lock:
            existing = store.get(repo_type, repo_id)
            if existing is not None:
                # The client reads "url" from this 409 when called with exist_ok=True.
                raise HubError(
                    409, f"You already created this {repo_type} repo", body={"url": self._repo_url(existing)}
                )
            repo = store.create_repo(repo_type, repo_id, private, user.name)
        self._send_json({"url": self._repo_url(repo), "name": repo_id, "id": uuid.uuid4().hex[:24]})

    def _delete_repo(self, user: HubUser | None, payload: dict[str, Any]) -> None:
        repo_type = payload.get("type") or "model"
        namespace = payload.get("organization") or (user.name if user else "")
        repo = self._writable_repo(repo_type, f"{namespace}/{payload.get('name')}", user)
        self.hub.store.delete_repo(repo)
        self._send(200, b"OK", content_type="text/plain; charset=utf-8")

    def _settings(self, user: HubUser | None, repo_type: str, repo_id: str, payload: dict[str, Any]) -> None:
        repo = self._writable_repo(repo_type, repo_id, user)
        with self.hub.store.lock:
            if "private" in payload:
                repo.private = bool(payload["private"])
            if payload.get("visibility") is not None:
                repo.private = payload["visibility"] != "public"
            if "gated" in payload:
                if payload["gated"] not in ("auto", "manual", False):
                    raise HubError(400, f"Invalid gated value: {payload['gated']!r}")
                repo.gated = payload["gated"]
            self.hub.store.save_meta(repo)
        self._send_json({"private": repo.private, "gated": repo.gated})

    def _repo_info(self, user: HubUser | None, repo_type: str, repo_id: str, revision: str) -> None:
        repo = self._readable_repo(repo_type, repo_id, user)
        commit = self._commit_at(repo, revision)
        blobs = _truthy(self._query.get("blobs"))
        siblings = []
        for path, entry in sorted(commit.files.items()):
            sibling: dict[str, Any] = {"rfilename": path}
            if blobs:
                sibling["blobId"] = entry.git_oid
                sibling["size"] = entry.size
                if entry.lfs:
                    sibling["lfs"] = {
                        "sha256": entry.sha256,
                        "size": entry.size,
                        "pointerSize": entry.pointer_size,
                    }
            siblings.append(sibling)
        info: dict[str, Any] = {
            "_id": hashlib.sha1(f"{repo_type}/{repo_id}".encode()).hexdigest()[:24],
            "id": repo_id,
            "author": repo.namespace,
            "sha": commit.oid,
            "lastModified": commit.date,
            "createdAt": repo.created_at,
            "private": repo.private,
            "gated": repo.gated,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "siblings": siblings,
            "usedStorage": sum(e.size for e in commit.files.values()),
        }
        if repo_type == "model":
            info["spaces"] = []
        expand = self._query_all.get("expand") or self._query_all.get("expand[]")
        if expand:
            info = {k: v for k, v in info.items() if k in ("_id", "id") or k in expand}
        self._send_json(info)

    # -- tree / paths-info / refs / commits -----------------------------------------------------------------------

    def _last_commit(self, repo: _Repo, commit: Commit, path: str, is_dir: bool) -> dict[str, str]:
        """Most recent commit (first-parent history) that changed `path`."""

        def state(c: Commit | None) -> Any:
            if c is None:
                return None
            return c.dir_oids.get(path) if is_dir else c.files.get(path)

        current: Commit | None = commit
        while current is not None:
            parent = repo.commits[current.parent] if current.parent else None
            if state(current) != state(parent):
                break
            current = parent
        found = current or commit
        return {"id": found.oid, "title": found.title, "date": found.date}

    def _entry_json(self, repo: _Repo, commit: Commit, path: str, expand: bool) -> dict[str, Any]:
        if path in commit.files:
            e = commit.files[path]
            out: dict[str, Any] = {"type": "file", "oid": e.git_oid, "size": e.size, "path": path}
            if e.lfs:
                out["lfs"] = {"oid": e.sha256, "size": e.size, "pointerSize": e.pointer_size}
            if expand:
                out["lastCommit"] = self._last_commit(repo, commit, path, is_dir=False)
                # No scanner runs here: report it honestly rather than claiming "safe".
                out["securityFileStatus"] = {"status": "unscanned", "avScan": None, "pickleImportScan": None}
            return out
        out = {"type": "directory", "oid": commit.dir_oids[path], "size": 0, "path": path}
        if expand:
            out["lastCommit"] = self._last_commit(repo, commit, path, is_dir=True)
        return out

    def _tree(self, user: HubUser | None, repo_type: str, repo_id: str, revision: str, path: str) -> None:
        repo = self._readable_repo(repo_type, repo_id, user)
        commit = self._commit_at(repo, revision)
        path = path.strip("/")
        if path and path not in commit.dir_oids:
            raise HubError(
                404,
                f"Entry not found: {path} is not a directory on {revision}",
                code="EntryNotFound",
                headers={"X-Repo-Commit": commit.oid},
            )
        recursive = _truthy(self._query.get("recursive"))
        expand = _truthy(self._query.get("expand"))
        prefix = f"{path}/" if path else ""
        paths = [p for p in (*commit.files, *commit.dir_oids) if p and p.startswith(prefix)]
        if not recursive:
            paths = [p for p in paths if "/" not in p[len(prefix) :]]
        paths.sort()
        # Cursor pagination with a `Link: <...>; rel="next"` header, like the Hub (1000 per page, 50 if expanded).
        page_size = self.hub.tree_page_size_expanded if expand else self.hub.tree_page_size
        start = int(self._query.get("cursor") or 0)
        page = paths[start : start + page_size]
        headers = {}
        if start + page_size < len(paths):
            query = urlencode({"recursive": recursive, "expand": expand, "cursor": start + page_size})
            headers["Link"] = f'<{self.hub.url}{urlsplit(self.path).path}?{query}>; rel="next"'
        self._send_json([self._entry_json(repo, commit, p, expand) for p in page], headers=headers)

    def _paths_info(
        self, user: HubUser | None, repo_type: str, repo_id: str, revision: str, body: bytes
    ) -> None:
        repo = self._readable_repo(repo_type, repo_id, user)
        commit = self._commit_at(repo, revision)
        content_type = self.headers.get("Content-Type", "")
        if "json" in content_type:
            form = _json(body)
            paths, expand = form.get("paths") or [], bool(form.get("expand"))
        else:  # the client posts `data=`: application/x-www-form-urlencoded, paths repeated
            form = parse_qs(body.decode(), keep_blank_values=True)
            paths, expand = form.get("paths", []), _truthy((form.get("expand") or ["false"])[-1])
        out = []
        for p in paths:
            p = p.strip("/")
            if p in commit.files or (p and p in commit.dir_oids):
                out.append(self._entry_json(repo, commit, p, expand))
        self._send_json(out)

    def _refs(self, user: HubUser | None, repo_type: str, repo_id: str) -> None:
        repo = self._readable_repo(repo_type, repo_id, user)
        with self.hub.store.lock:
            refs = sorted(repo.refs.items())

        def group(prefix: str) -> list[dict[str, str]]:
            return [
                {"name": ref[len(prefix) :], "ref": ref, "targetCommit": oid}
                for ref, oid in refs
                if ref.startswith(prefix)
            ]

        data: dict[str, Any] = {
            "branches": group("refs/heads/"),
            "converts": group("refs/convert/"),
            "tags": group("refs/tags/"),
        }
        if _truthy(self._query.get("include_prs")):
            data["pullRequests"] = group("refs/pr/")
        self._send_json(data)

    def _commits(self, user: HubUser | None, repo_type: str, repo_id: str, revision: str) -> None:
        repo = self._readable_repo(repo_type, repo_id, user)
        commit: Commit | None = self._commit_at(repo, revision)
        history = []
        while commit is not None:
            item: dict[str, Any] = {
                "id": commit.oid,
                "title": commit.title,
                "message": commit.message,
                "date": commit.date,
                "authors": [{"user": commit.author, "avatar": ""}],
            }
            if "formatted" in (self._query_all.get("expand[]") or []):
                item["formatted"] = {"title": commit.title, "message": commit.message}
            history.append(item)
            commit = repo.commits[commit.parent] if commit.parent else None
        page_num = int(self._query.get("p") or 0)
        page_size = self.hub.commits_page_size
        headers = {}
        if (page_num + 1) * page_size < len(history):
            query = {k: v for k, v in self._query.items() if k != "p"} | {"p": page_num + 1}
            headers["Link"] = f'<{self.hub.url}{urlsplit(self.path).path}?{urlencode(query)}>; rel="next"'
        self._send_json(history[page_num * page_size : (page_num + 1) * page_size], headers=headers)

    # -- branches and tags ----------------------------------------------------------------------------------------

    def _check_new_ref_name(self, repo: _Repo, name: str) -> None:
        if (
            not _REF_NAME_RE.fullmatch(name)
            or name.startswith("refs/")
            or ".." in name
            or name.endswith(".lock")
            or _COMMIT_RE.fullmatch(name)
        ):
            raise HubError(400, f"Invalid reference name: {name!r}")
        # Branch and tag names share one namespace here so that a revision string is never ambiguous.
        if f"refs/heads/{name}" in repo.refs or f"refs/tags/{name}" in repo.refs:
            raise HubError(409, f"Reference already exists: {name}")

    def _create_branch(
        self, user: HubUser | None, repo_type: str, repo_id: str, branch: str, payload: dict[str, Any]
    ) -> None:
        repo = self._writable_repo(repo_type, repo_id, user)
        starting_point = payload.get("startingPoint") or DEFAULT_BRANCH
        with self.hub.store.lock:
            self._check_new_ref_name(repo, branch)
            commit = self._commit_at(repo, starting_point)
            repo.refs[f"refs/heads/{branch}"] = commit.oid
            self.hub.store.save_meta(repo)
        self._send_json({})

    def _create_tag(
        self, user: HubUser | None, repo_type: str, repo_id: str, revision: str, payload: dict[str, Any]
    ) -> None:
        repo = self._writable_repo(repo_type, repo_id, user)
        tag = payload.get("tag")
        if not isinstance(tag, str):
            raise HubError(400, "Missing tag name")
        with self.hub.store.lock:
            commit = self._commit_at(repo, revision)
            self._check_new_ref_name(repo, tag)
            repo.refs[f"refs/tags/{tag}"] = commit.oid
            self.hub.store.save_meta(repo)
        self._send_json({})

    def _delete_ref(self, user: HubUser | None, repo_type: str, repo_id: str, ref: str) -> None:
        repo = self._writable_repo(repo_type, repo_id, user)
        with self.hub.store.lock:
            if ref == f"refs/heads/{DEFAULT_BRANCH}":
                raise HubError(403, "Cannot delete the default branch")
            if ref not in repo.refs:
                raise HubError(404, f"Invalid rev id: {ref.split('/', 2)[-1]}", code="RevisionNotFound")
            del repo.refs[ref]
            self.hub.store.save_meta(repo)
        self._send_json({})

    # -- uploads --------------------------------------------------------------------------------------------------

    def _preupload(
        self, user: HubUser | None, repo_type: str, repo_id: str, revision: str, payload: dict[str, Any]
    ) -> None:
        repo = self._writable_repo(repo_type, repo_id, user)
        create_pr = _truthy(self._query.get("create_pr"))
        commit = self._commit_at(repo, revision)
        if not create_pr and not self._branch_ref(repo, revision):
            raise HubError(400, f"Cannot commit to {revision!r}: not a branch")

        def text_at(path: str) -> str | None:
            entry = commit.files.get(path)
            if entry is None or entry.lfs:
                return None
            return self.hub.store.blob_path(entry.sha256).read_text(errors="replace")

        lfs_patterns = _lfs_patterns(text_at(".gitattributes") or "")
        gitignore = payload.get("gitIgnore")
        if gitignore is None:
            gitignore = text_at(".gitignore") or ""
        files = payload.get("files")
        if not isinstance(files, list):
            raise HubError(400, "Invalid preupload payload: missing files")
        out = []
        for item in files:
            path = _check_path(item.get("path") if isinstance(item, dict) else None)
            size = item.get("size")
            if not isinstance(size, int) or size < 0:
                raise HubError(400, f"Invalid size for {path}")
            try:
                sample = base64.b64decode(item.get("sample") or "", validate=True)
            except ValueError as err:
                raise HubError(400, f"Invalid sample for {path}") from err
            result: dict[str, Any] = {
                "path": path,
                "uploadMode": _upload_mode(path, size, sample, lfs_patterns),
                "shouldIgnore": _gitignore_match(gitignore, path),
            }
            existing = commit.files.get(path)
            if existing is not None:
                # What the client compares with its local oid to skip unchanged files:
                # sha256 for LFS files, git blob sha1 for regular ones.
                result["oid"] = existing.sha256 if existing.lfs else existing.git_oid
            out.append(result)
        self._send_json({"files": out, "commitOid": commit.oid})

    def _signed_url(self, op: str, repo: _Repo, oid: str, size: int, filename: str = "") -> str:
        expires = int(time.time()) + SIGNED_URL_TTL
        params = {"size": str(size), "expires": str(expires)}
        if filename:
            params["filename"] = filename
        params["signature"] = self.hub.sign(op, repo.repo_type, repo.repo_id, oid, size, expires, filename)
        return f"{self.hub.storage_url}/lfs/{repo.repo_type}/{repo.repo_id}/{oid}?{urlencode(params)}"

    def _lfs_batch(self, user: HubUser | None, repo_type: str, repo_id: str, payload: dict[str, Any]) -> None:
        operation = payload.get("operation")
        if operation == "upload":
            repo = self._writable_repo(repo_type, repo_id, user)
        elif operation == "download":
            repo = self._readable_repo(repo_type, repo_id, user)
        else:
            raise HubError(422, f"Invalid operation: {operation!r}")
        transfers = payload.get("transfers") or ["basic"]
        if "basic" not in transfers:
            raise HubError(422, "Only the basic transfer adapter is supported")
        if payload.get("hash_algo", "sha256") != "sha256":
            raise HubError(422, "Only sha256 is supported")
        objects = []
        for obj in payload.get("objects") or []:
            oid, size = obj.get("oid"), obj.get("size")
            if (
                not isinstance(oid, str)
                or not _OID_RE.fullmatch(oid)
                or not isinstance(size, int)
                or size < 0
            ):
                objects.append(
                    {
                        "oid": oid if isinstance(oid, str) else "",
                        "size": size if isinstance(size, int) else 0,
                        "error": {"code": 422, "message": "Invalid oid or size"},
                    }
                )
                continue
            path = repo.lfs_object(oid)
            stored_size = path.stat().st_size if path.exists() else None
            if stored_size is not None and stored_size != size:
                objects.append({"oid": oid, "size": size, "error": {"code": 422, "message": "Size mismatch"}})
            elif operation == "upload" and stored_size is not None:
                objects.append({"oid": oid, "size": size})  # no actions: already uploaded
            elif operation == "upload":
                verify_url = f"{self.hub.url}/{_URL_PREFIXES[repo_type]}{repo_id}.git/info/lfs/objects/verify"
                objects.append(
                    {
                        "oid": oid,
                        "size": size,
                        "authenticated": True,
                        "actions": {
                            "upload": {
                                "href": self._signed_url("upload", repo, oid, size),
                                "expires_in": SIGNED_URL_TTL,
                            },
                            "verify": {"href": verify_url},
                        },
                    }
                )
            elif stored_size is None:
                objects.append(
                    {"oid": oid, "size": size, "error": {"code": 404, "message": "Object does not exist"}}
                )
            else:
                href = self._signed_url("download", repo, oid, size)
                objects.append({"oid": oid, "size": size, "actions": {"download": {"href": href}}})
        body = json.dumps({"transfer": "basic", "objects": objects, "hash_algo": "sha256"}).encode()
        self._send(200, body, content_type="application/vnd.git-lfs+json")

    def _lfs_verify(
        self, user: HubUser | None, repo_type: str, repo_id: str, payload: dict[str, Any]
    ) -> None:
        repo = self._writable_repo(repo_type, repo_id, user)
        oid, size = payload.get("oid"), payload.get("size")
        if not isinstance(oid, str) or not _OID_RE.fullmatch(oid):
            raise HubError(422, "Invalid oid")
        path = repo.lfs_object(oid)
        if not path.exists():
            raise HubError(404, f"Object {oid} not found")
        if path.stat().st_size != size:
            raise HubError(422, f"Object {oid} has size {path.stat().st_size}, not {size}")
        self._send_json({"success": True})

    # -- commit ---------------------------------------------------------------------------------------------------

    @staticmethod
    def _branch_ref(repo: _Repo, revision: str) -> str | None:
        """The ref a commit to `revision` moves: a branch, or an existing PR ref."""
        if revision.startswith("refs/pr/") and revision in repo.refs:
            return revision
        branch = revision[len("refs/heads/") :] if revision.startswith("refs/heads/") else revision
        ref = f"refs/heads/{branch}"
        return ref if ref in repo.refs else None

    def _commit(self, user: HubUser | None, repo_type: str, repo_id: str, revision: str, body: bytes) -> None:
        repo = self._writable_repo(repo_type, repo_id, user)
        assert user is not None
        store = self.hub.store
        create_pr = _truthy(self._query.get("create_pr"))

        # 1. Parse the whole ndjson payload before touching anything.
        lines = []
        for n, raw in enumerate(body.splitlines()):
            if raw.strip():
                try:
                    lines.append(json.loads(raw))
                except ValueError as err:
                    raise HubError(400, f"Invalid JSON on line {n + 1} of the commit payload") from err
        if not lines or not isinstance(lines[0], dict) or lines[0].get("key") != "header":
            raise HubError(400, "The first line of the commit payload must be the header")
        header = lines[0].get("value") or {}
        title = header.get("summary")
        if not isinstance(title, str) or not title.strip():
            raise HubError(400, "Commit summary must not be empty")
        description = header.get("description") or ""
        parent_commit = header.get("parentCommit")

        # 2. Resolve the ref to move and its current head.
        with store.lock:
            if create_pr:
                base_ref = self._branch_ref(repo, revision)
                if base_ref is None:
                    raise HubError(404, f"Invalid rev id: {revision}", code="RevisionNotFound")
                base_oid = repo.refs[base_ref]
                if parent_commit is not None:
                    base_oid = self._match_parent(repo, parent_commit).oid
                target_ref, expected_head = None, None  # the PR ref is allocated when committing
            else:
                target_ref = self._branch_ref(repo, revision)
                if target_ref is None:
                    if repo.resolve(revision) is None:
                        raise HubError(404, f"Invalid rev id: {revision}", code="RevisionNotFound")
                    raise HubError(400, f"Cannot commit to {revision!r}: not a branch")
                base_oid = expected_head = repo.refs[target_ref]
                if parent_commit is not None and not (
                    isinstance(parent_commit, str)
                    and _SHORT_COMMIT_RE.fullmatch(parent_commit)
                    and base_oid.startswith(parent_commit)
                ):
                    raise HubError(412, "A commit has happened since. Please refresh and try again.")
            base = repo.commits[base_oid]

        # 3. Apply every operation to a working copy; any invalid one rejects the whole commit.
        files = dict(base.files)
        new_blobs: dict[str, bytes] = {}
        for item in lines[1:]:
            key = item.get("key") if isinstance(item, dict) else None
            value = item.get("value") if isinstance(item, dict) else None
            if not isinstance(value, dict):
                raise HubError(400, "Invalid commit operation")
            if key == "file":
                path = _check_path(value.get("path"))
                if value.get("encoding") != "base64":
                    raise HubError(400, f"Unsupported encoding for {path}: {value.get('encoding')!r}")
                try:
                    content = base64.b64decode(value.get("content") or "", validate=True)
                except ValueError as err:
                    raise HubError(400, f"Invalid base64 content for {path}") from err
                # The same rules /preupload announced: large or binary files must go through LFS.
                if len(content) >= LFS_SIZE_THRESHOLD:
                    raise HubError(
                        400, f"Your push was rejected because {path} is larger than 10 MiB. Please use LFS."
                    )
                if _is_binary(content):
                    raise HubError(
                        400, f"Your push was rejected because {path} is a binary file. Please use LFS."
                    )
                sha = hashlib.sha256(content).hexdigest()
                new_blobs[sha] = content
                files[path] = FileEntry(sha, len(content), False, git_blob_oid(content))
            elif key == "lfsFile":
                path = _check_path(value.get("path"))
                oid = value.get("oid")
                if (
                    value.get("algo", "sha256") != "sha256"
                    or not isinstance(oid, str)
                    or not _OID_RE.fullmatch(oid)
                ):
                    raise HubError(400, f"Invalid LFS oid for {path}")
                obj = repo.lfs_object(oid)
                if not obj.exists():
                    raise HubError(
                        400,
                        "Your push was rejected because an LFS pointer pointed to a file that does not exist. "
                        f"Missing LFS object {oid} for {path}.",
                    )
                size = obj.stat().st_size
                if value.get("size") is not None and value.get("size") != size:
                    raise HubError(400, f"LFS object {oid} has size {size}, not {value.get('size')} ({path})")
                files[path] = FileEntry(oid, size, True, git_blob_oid(lfs_pointer(oid, size)))
            elif key == "deletedFile":
                path = _check_path(value.get("path"))
                if path not in files:
                    raise HubError(
                        404,
                        f"A file with this name doesn't exist: {path}",
                        code="EntryNotFound",
                        headers={"X-Repo-Commit": base.oid},
                    )
                del files[path]
            elif key == "deletedFolder":
                folder = _check_path(str(value.get("path") or "").rstrip("/"))
                doomed = [p for p in files if p.startswith(folder + "/")]
                if not doomed:
                    raise HubError(
                        404,
                        f"A folder with this name doesn't exist: {folder}",
                        code="EntryNotFound",
                        headers={"X-Repo-Commit": base.oid},
                    )
                for p in doomed:
                    del files[p]
            else:
                raise HubError(400, f"Unknown commit operation: {key!r}")
        # A path cannot be both a file and a folder.
        for path in files:
            parts = path.split("/")
            for i in range(1, len(parts)):
                if "/".join(parts[:i]) in files:
                    raise HubError(400, f"Conflict: {'/'.join(parts[:i])} is a file and a folder")

        # 4. Store contents, then create the commit and move the ref atomically.
        for content in new_blobs.values():
            store.put_blob(content)
        commit = _make_commit(base, files, title.strip(), description, user.name)
        pr_url = None
        with store.lock:
            if create_pr:
                pr_num = repo.next_pr
                repo.next_pr += 1
                target_ref = f"refs/pr/{pr_num}"
                pr_url = f"{self._repo_url(repo)}/discussions/{pr_num}"
            assert target_ref is not None
            store.add_commit(repo, target_ref, commit, expected_head)
        self._send_json(
            {
                "success": True,
                "commitOid": commit.oid,
                "commitUrl": f"{self._repo_url(repo)}/commit/{commit.oid}",
                "hookOutput": "",
                "pullRequestUrl": pr_url,
            }
        )

    @staticmethod
    def _match_parent(repo: _Repo, parent_commit: Any) -> Commit:
        if isinstance(parent_commit, str) and _SHORT_COMMIT_RE.fullmatch(parent_commit):
            matches = [c for oid, c in repo.commits.items() if oid.startswith(parent_commit)]
            if len(matches) == 1:
                return matches[0]
        raise HubError(404, f"Invalid rev id: {parent_commit}", code="RevisionNotFound")

    # -- downloads ------------------------------------------------------------------------------------------------

    def _resolve(self, user: HubUser | None, repo_type: str, repo_id: str, revision: str, path: str) -> None:
        repo = self._readable_repo(repo_type, repo_id, user)
        commit = self._commit_at(repo, revision)
        entry = commit.files.get(path)
        if entry is None:
            # X-Repo-Commit lets the client cache the non-existence of the file for this commit (.no_exist).
            raise HubError(
                404, "Entry not found", code="EntryNotFound", headers={"X-Repo-Commit": commit.oid}
            )
        filename = path.rsplit("/", 1)[-1]
        headers = {"X-Repo-Commit": commit.oid, "ETag": f'"{entry.git_oid}"'}
        if entry.lfs:
            # Like the Hub: redirect to a presigned URL on the storage origin, with the LFS metadata here.
            location = self._signed_url("download", repo, entry.sha256, entry.size, filename)
            headers |= {
                "Location": location,
                "X-Linked-Etag": f'"{entry.sha256}"',
                "X-Linked-Size": str(entry.size),
            }
            self._send(
                302, f"Found. Redirecting to {location}".encode(), headers, "text/plain; charset=utf-8"
            )
            return
        headers["Content-Disposition"] = _content_disposition(filename)
        content_type = mimetypes.guess_type(filename)[0] or "text/plain; charset=utf-8"
        self._send_file(self.hub.store.blob_path(entry.sha256), headers, content_type)

    # -- storage origin -------------------------------------------------------------------------------------------

    def _route_storage(self, method: str) -> None:
        parts = self._parts
        if len(parts) != 5 or parts[0] != "lfs" or parts[1] not in _URL_PREFIXES:
            self.close_connection = True
            raise HubError(404, "NoSuchKey")
        repo_type, repo_id, oid = parts[1], f"{unquote(parts[2])}/{unquote(parts[3])}", parts[4]
        q = self._query
        try:
            size, expires = int(q.get("size", "")), int(q.get("expires", ""))
        except ValueError:
            size, expires = -1, 0
        filename = q.get("filename", "")
        op = "upload" if method == "PUT" else "download" if method in ("GET", "HEAD") else ""
        expected = self.hub.sign(op, repo_type, repo_id, oid, size, expires, filename) if op else ""
        if not op or not hmac.compare_digest(expected, q.get("signature", "")) or expires < time.time():
            # Do not read a possibly huge body we refuse anyway.
            self.close_connection = True
            raise HubError(403, "SignatureDoesNotMatch: invalid or expired presigned URL")
        repo = self.hub.store.get(repo_type, repo_id)
        if repo is None:
            self.close_connection = True
            raise HubError(404, "NoSuchBucket")
        dest = repo.lfs_object(oid)
        if op == "download":
            if not dest.exists():
                raise HubError(404, "NoSuchKey")
            headers = {"ETag": f'"{oid}"'}
            if filename:
                headers["Content-Disposition"] = _content_disposition(filename)
            self._send_file(dest, headers, "application/octet-stream")
            return
        self._store_upload(repo, oid, size, dest)

    def _store_upload(self, repo: _Repo, oid: str, size: int, dest: Path) -> None:
        """Stream a PUT body to a temp file; only a complete body whose sha256 is `oid` is moved into place."""
        tmp = self.hub.store.tmp_dir / f"{uuid.uuid4().hex}.part"
        digest, received = hashlib.sha256(), 0
        cut_off = self.hub._take_cutoff()
        try:
            with open(tmp, "wb") as f:
                for chunk in self._body_chunks():
                    if cut_off and received + len(chunk) >= size // 2:
                        # Simulated network failure: keep half of the body, then drop the connection.
                        chunk = chunk[: max(size // 2 - received, 0)]
                        f.write(chunk)
                        raise _ClientGone()
                    received += len(chunk)
                    if received > size:
                        self.close_connection = True
                        raise HubError(400, "Body larger than the size signed in the URL")
                    digest.update(chunk)
                    f.write(chunk)
            if received != size or digest.hexdigest() != oid:
                raise HubError(400, f"BadDigest: received {received} bytes hashing to {digest.hexdigest()}")
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, dest)
        except _ClientGone:
            if cut_off:
                self._record("aborted")  # before the client can notice the drop
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            raise
        finally:
            tmp.unlink(missing_ok=True)
        self._send(200, b"", {"ETag": f'"{oid}"'}, "text/plain")


def _json(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body or b"{}")
    except ValueError as err:
        raise HubError(400, "Invalid JSON body") from err
    if not isinstance(data, dict):
        raise HubError(400, "JSON body must be an object")
    return data


def _truthy(value: str | None) -> bool:
    return value is not None and value.lower() in ("1", "true", "yes", "on")


def _content_disposition(filename: str) -> str:
    ascii_name = filename.encode("ascii", "replace").decode().replace('"', "")
    return f"inline; filename*=UTF-8''{quote(filename)}; filename=\"{ascii_name}\";"


_EPOCH = "2024-01-01T00:00:00.000Z"


# --------------------------------------------------------------------------------------------------------------
# Public entry point
# --------------------------------------------------------------------------------------------------------------


class HubServer:
    """A Hub API server on 127.0.0.1 (plus its storage origin), each served by a background thread.

    Usage::

        with HubServer() as hub:
            os.environ["HF_ENDPOINT"] = hub.url   # plus the constants patching done in tests/hub_fixtures.py
            ...

    Attributes for tests: `url`, `storage_url`, `token` (write), `read_token`, `other_token`, `bad_token`,
    `user`, `requests` (every request seen), `errors` (tracebacks of server bugs; should stay empty).
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        storage_port: int = 0,
        tokens: Mapping[str, HubUser] | None = None,
    ) -> None:
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="hub-server-")) if root is None else Path(root)
        self.store = _Store(self.root)
        self.tokens: dict[str, HubUser] = dict(tokens) if tokens is not None else default_tokens()
        self.token = WRITE_TOKEN
        self.read_token = READ_TOKEN
        self.other_token = OTHER_TOKEN
        self.bad_token = BAD_TOKEN
        self.requests: list[RequestRecord] = []
        self.errors: list[str] = []
        self.tree_page_size = 1000
        self.tree_page_size_expanded = 50
        self.commits_page_size = 50
        self._secret = secrets.token_bytes(32)
        self._cutoffs = 0
        self._cutoff_lock = threading.Lock()
        self._host, self._port, self._storage_port = host, port, storage_port
        self._origins: list[_Origin] = []
        self._threads: list[threading.Thread] = []

    @property
    def user(self) -> str:
        return self.tokens[self.token].name if self.token in self.tokens else ""

    @property
    def url(self) -> str:
        """The Hub endpoint (what `HF_ENDPOINT` must be)."""
        host, port = self._origins[0].server_address[:2]
        return f"http://{host}:{port}"

    @property
    def storage_url(self) -> str:
        """The storage ("CDN") origin that presigned LFS URLs point to."""
        host, port = self._origins[1].server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> HubServer:
        for kind, port in (("hub", self._port), ("storage", self._storage_port)):
            origin = _Origin(self._host, port, self, kind)
            # A short poll interval keeps `stop()` (which waits for the serve loop to notice) fast.
            thread = threading.Thread(
                target=origin.serve_forever,
                kwargs={"poll_interval": 0.02},
                name=f"hub-server-{kind}",
                daemon=True,
            )
            thread.start()
            self._origins.append(origin)
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        for origin in self._origins:
            origin.shutdown()
            origin.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._origins.clear()
        self._threads.clear()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def sign(
        self, op: str, repo_type: str, repo_id: str, oid: str, size: int, expires: int, filename: str
    ) -> str:
        msg = f"{op}\n{repo_type}\n{repo_id}\n{oid}\n{size}\n{expires}\n{filename}".encode()
        return hmac.new(self._secret, msg, hashlib.sha256).hexdigest()

    # -- fault injection and server-side inspection (bypass HTTP; for assertions) ---------------------------------

    def cut_off_next_lfs_uploads(self, count: int = 1) -> None:
        """Make the next `count` LFS uploads to the storage origin drop the connection halfway through the body."""
        with self._cutoff_lock:
            self._cutoffs = count

    def _take_cutoff(self) -> bool:
        with self._cutoff_lock:
            if self._cutoffs > 0:
                self._cutoffs -= 1
                return True
            return False

    def head(self, repo_id: str, branch: str = DEFAULT_BRANCH, repo_type: str = "model") -> str | None:
        """Commit oid a branch points to, or None."""
        repo = self.store.get(repo_type, repo_id)
        with self.store.lock:
            return None if repo is None else repo.refs.get(f"refs/heads/{branch}")

    def files_at(
        self, repo_id: str, revision: str = DEFAULT_BRANCH, repo_type: str = "model"
    ) -> dict[str, bytes]:
        """Full content of every file at `revision`, read from the store."""
        repo = self.store.get(repo_type, repo_id)
        if repo is None:
            raise KeyError(repo_id)
        with self.store.lock:
            commit = repo.resolve(revision)
        if commit is None:
            raise KeyError(revision)
        return {p: self.store.content_path(repo, e).read_bytes() for p, e in sorted(commit.files.items())}

    def commit_count(self, repo_id: str, repo_type: str = "model") -> int:
        repo = self.store.get(repo_type, repo_id)
        with self.store.lock:
            return 0 if repo is None else len(repo.commits)

    def has_lfs_object(self, repo_id: str, oid: str, repo_type: str = "model") -> bool:
        repo = self.store.get(repo_type, repo_id)
        return repo is not None and repo.lfs_object(oid).exists()

    def pending_upload_files(self) -> list[Path]:
        """Partial uploads still on disk (must always be empty once a request has finished)."""
        return sorted(self.store.tmp_dir.iterdir())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run the test Hub server in the foreground.")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--storage-port", type=int, default=0)
    parser.add_argument("--root", default=None, help="storage directory (default: a fresh temp dir)")
    args = parser.parse_args(argv)
    hub = HubServer(args.root, port=args.port, storage_port=args.storage_port).start()
    print(f"HF_ENDPOINT={hub.url} HF_HUB_DISABLE_XET=1 HF_TOKEN={hub.token}  (storage: {hub.storage_url})")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        hub.stop()


if __name__ == "__main__":
    main()
