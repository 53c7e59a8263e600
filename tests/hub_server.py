"""A local Hub for the end-to-end test: the real huggingface_hub client (and transformers on top of it) against
127.0.0.1, speaking only what our round trip uses.

A push (``create_repo``, ``repo_info``, ``list_repo_files``, ``create_commit``) and a load (``from_pretrained``:
repo info and ``/resolve/`` downloads). Every file is uploaded inline in the commit (``uploadMode: regular``), so
there is no LFS; a commit is all-or-nothing and moves its branch only if ``parentCommit`` is still the head.
Clients reach it through ``HF_ENDPOINT`` set before they import huggingface_hub (a subprocess), so nothing
of the client is patched. Anything else the client asks is answered 404 and recorded in ``unknown``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

TOKEN = "hf_local_write_token"
USER = "tester"


@dataclass
class Repo:
    private: bool
    branches: dict[str, str] = field(default_factory=dict)  # branch -> commit id
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # commit id -> files at that commit
    titles: dict[str, str] = field(default_factory=dict)

    def commit(self, branch: str, files: dict[str, bytes], title: str) -> str:
        parent = self.branches.get(branch, "")
        listing = json.dumps({p: hashlib.sha256(c).hexdigest() for p, c in sorted(files.items())})
        oid = hashlib.sha1(f"{parent}\n{title}\n{listing}".encode()).hexdigest()
        self.commits[oid], self.titles[oid], self.branches[branch] = files, title, oid
        return oid

    def resolve(self, revision: str) -> str | None:
        revision = unquote(revision)
        if revision in self.branches:
            return self.branches[revision]
        return revision if revision in self.commits else None


class HubError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None, commit: str | None = None,
                 url: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.commit, self.url = status, code, commit, url


class LocalHub:
    """The server and its repos; ``files_at`` and ``heads`` inspect them from the test."""

    def __init__(self, port: int = 0) -> None:
        self.repos: dict[str, Repo] = {}
        self.lock = threading.Lock()
        self.unknown: list[str] = []  # requests no handler took: what the client asked that this Hub lacks
        self.server = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> LocalHub:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def files_at(self, repo_id: str, revision: str = "main") -> dict[str, bytes]:
        repo = self.repos[repo_id]
        return dict(repo.commits[repo.resolve(revision)])

    def heads(self, repo_id: str) -> dict[str, str]:
        return dict(self.repos[repo_id].branches)

    # -- the API ------------------------------------------------------------------------------------------------

    def create_repo(self, payload: dict[str, Any]) -> dict[str, Any]:
        repo_id = f"{payload.get('organization') or USER}/{payload['name']}"
        with self.lock:
            if repo_id in self.repos:
                # the client reads the repo's url from the 409 when called with exist_ok=True
                raise HubError(409, "You already created this model repo", url=f"{self.url}/{repo_id}")
            repo = self.repos[repo_id] = Repo(private=payload.get("visibility") == "private")
            repo.commit("main", {".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"},
                         "initial commit")
        return {"url": f"{self.url}/{repo_id}", "name": repo_id}

    def repo(self, repo_id: str) -> Repo:
        if repo_id not in self.repos:
            raise HubError(404, "Repository not found", code="RepoNotFound")
        return self.repos[repo_id]

    def at(self, repo_id: str, revision: str) -> str:
        oid = self.repo(repo_id).resolve(revision)
        if oid is None:
            raise HubError(404, f"Invalid rev id: {unquote(revision)}", code="RevisionNotFound")
        return oid

    def info(self, repo_id: str, revision: str) -> dict[str, Any]:
        oid = self.at(repo_id, revision)
        files = self.repos[repo_id].commits[oid]
        return {"id": repo_id, "sha": oid, "private": self.repos[repo_id].private,
                "siblings": [{"rfilename": path} for path in sorted(files)]}

    def tree(self, repo_id: str, revision: str) -> list[dict[str, Any]]:
        files = self.repos[repo_id].commits[self.at(repo_id, revision)]
        return [{"type": "file", "path": p, "size": len(c), "oid": _git_oid(c)} for p, c in sorted(files.items())]

    def preupload(self, repo_id: str, revision: str, payload: dict[str, Any]) -> dict[str, Any]:
        files = self.repos[repo_id].commits[self.at(repo_id, revision)]
        answers = []
        for item in payload["files"]:
            answer = {"path": item["path"], "uploadMode": "regular", "shouldIgnore": False}
            if item["path"] in files:  # lets the client skip unchanged files, as on the Hub
                answer["oid"] = _git_oid(files[item["path"]])
            answers.append(answer)
        return {"files": answers}

    def commit(self, repo_id: str, branch: str, body: bytes) -> dict[str, Any]:
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        header = lines[0]["value"]
        with self.lock:
            repo, branch = self.repo(repo_id), unquote(branch)
            head = repo.branches.get(branch)
            if head is None:
                raise HubError(404, f"Invalid rev id: {branch}", code="RevisionNotFound")
            if header.get("parentCommit") not in (None, head):
                raise HubError(412, "A commit has happened since. Please refresh and try again.")
            files = dict(repo.commits[head])
            for line in lines[1:]:
                key, value = line["key"], line["value"]
                if key == "file":
                    files[value["path"]] = base64.b64decode(value["content"])
                elif key == "deletedFile" and value["path"] in files:
                    del files[value["path"]]
                else:
                    raise HubError(400, f"unsupported or invalid commit operation {line}")
            oid = repo.commit(branch, files, header["summary"])
        return {"commitOid": oid, "commitUrl": f"{self.url}/{repo_id}/commit/{oid}", "success": True}

    def create_branch(self, repo_id: str, branch: str) -> dict[str, Any]:
        with self.lock:
            repo = self.repo(repo_id)
            if unquote(branch) in repo.branches:
                raise HubError(409, "Reference already exists")
            repo.branches[unquote(branch)] = repo.branches["main"]
        return {}


def _git_oid(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def _handler(hub: LocalHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet, like a test should be
            pass

        def do_GET(self) -> None:  # noqa: N802 - stdlib naming
            self.route("GET")

        def do_HEAD(self) -> None:  # noqa: N802
            self.route("HEAD")

        def do_POST(self) -> None:  # noqa: N802
            self.route("POST")

        def route(self, method: str) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            parts = urlsplit(self.path).path.strip("/").split("/")
            try:
                if self.headers.get("Authorization") not in (None, f"Bearer {TOKEN}"):
                    raise HubError(401, "Invalid credentials in Authorization header")
                self.dispatch(method, parts, body)
            except HubError as error:
                headers = {"X-Error-Message": str(error)}
                if error.code:
                    headers["X-Error-Code"] = error.code
                if error.commit:
                    headers["X-Repo-Commit"] = error.commit
                payload = {"error": str(error), **({"url": error.url} if error.url else {})}
                self.send(error.status, json.dumps(payload).encode(), headers, head=method == "HEAD")

        def dispatch(self, method: str, parts: list[str], body: bytes) -> None:
            if parts[:1] == ["api"]:
                rest = parts[1:]
                if rest == ["validate-yaml"] and method == "POST":  # create_commit checks README.md's metadata
                    return self.json({"errors": [], "warnings": []})
                if rest == ["agent-harnesses"] and method == "GET":  # the client detects the agent it runs under
                    return self.json({"standardEnvVars": [], "harnesses": {}})
                if rest == ["whoami-v2"] and method == "GET":  # the push asks whose the token is first
                    return self.json({"type": "user", "name": USER, "auth": {"accessToken": {"role": "write"}}})
                if rest == ["repos", "create"] and method == "POST":
                    return self.json(hub.create_repo(json.loads(body)))
                if rest[:1] == ["models"] and len(rest) >= 3:
                    return self.repo_api(method, f"{rest[1]}/{rest[2]}", rest[3:], body)
            elif len(parts) >= 5 and parts[2] == "resolve" and method in ("GET", "HEAD"):
                return self.download(f"{parts[0]}/{parts[1]}", parts[3], unquote("/".join(parts[4:])), method)
            hub.unknown.append(f"{method} {self.path}")
            raise HubError(404, "Sorry, we can't find the page you are looking for.")

        def repo_api(self, method: str, repo_id: str, rest: list[str], body: bytes) -> None:
            action, revision = (rest[0], "/".join(rest[1:])) if rest else ("", "main")
            if method == "GET" and action in ("", "revision"):
                return self.json(hub.info(repo_id, revision))
            if method == "GET" and action == "tree":
                return self.json(hub.tree(repo_id, rest[1]))
            if method == "POST" and action == "preupload":
                return self.json(hub.preupload(repo_id, revision, json.loads(body)))
            if method == "POST" and action == "commit":
                return self.json(hub.commit(repo_id, revision, body))
            if method == "POST" and action == "branch":
                return self.json(hub.create_branch(repo_id, revision))
            hub.unknown.append(f"{method} {self.path}")
            raise HubError(404, "Sorry, we can't find the page you are looking for.")

        def download(self, repo_id: str, revision: str, path: str, method: str) -> None:
            oid = hub.at(repo_id, revision)
            files = hub.repos[repo_id].commits[oid]
            if path not in files:
                raise HubError(404, "Entry not found", code="EntryNotFound", commit=oid)
            headers = {"X-Repo-Commit": oid, "ETag": f'"{_git_oid(files[path])}"'}
            self.send(200, files[path], headers, content_type="application/octet-stream", head=method == "HEAD")

        def json(self, payload: Any) -> None:
            self.send(200, json.dumps(payload).encode(), {})

        def send(self, status: int, body: bytes, headers: dict[str, str], content_type: str = "application/json",
                 *, head: bool = False) -> None:
            self.send_response(status)
            for key, value in {**headers, "Content-Type": content_type, "Content-Length": str(len(body))}.items():
                self.send_header(key, value)
            self.end_headers()
            if not head:
                self.wfile.write(body)

    return Handler


if __name__ == "__main__":  # python -m tests.hub_server [--port N]: a Hub to rehearse a push against
    import argparse
    import time

    parser = argparse.ArgumentParser(description="a local Hub on 127.0.0.1 for rehearsing a push")
    parser.add_argument("--port", type=int, default=0)
    with LocalHub(parser.parse_args().port) as hub:
        print(f"HF_ENDPOINT={hub.url} HF_HUB_DISABLE_XET=1 HF_TOKEN={TOKEN}", flush=True)
        while True:
            time.sleep(3600)
