"""Pytest fixture `hub_server`: a local Hub (tests/hub_server.py) wired into huggingface_hub and transformers.

Register it from ``tests/conftest.py`` with::

    pytest_plugins = ["tests.hub_fixtures"]

The fixture is function-scoped: each test gets a fresh, empty Hub on free ports of 127.0.0.1 and its own
``HF_HOME`` (cache, token path, xet cache, assets), so tests never share repos or cached files.

huggingface_hub reads most settings once, at import time (``huggingface_hub/constants.py``), so setting the
environment variables is not enough once it has been imported: the fixture also patches the already-computed
module attributes the client reads at call time (checked against huggingface_hub 2.4):

* ``constants.ENDPOINT`` and ``constants.HUGGINGFACE_CO_URL_TEMPLATE`` (hf_hub_url, HfApi(), lfs, commit API);
* ``constants.HF_URL_HOSTS`` and ``utils._http._HUB_ORIGINS`` (hosts considered to be the Hub);
* the module-level ``huggingface_hub.hf_api.api`` instance, whose ``endpoint`` was fixed when it was built
  (``huggingface_hub.upload_file`` & co. are its bound methods);
* ``transformers.utils.hub._hf_api``, transformers' shared HfApi, reset so it is rebuilt with the new endpoint;
* ``constants.HF_HUB_OFFLINE`` / ``HF_HUB_DISABLE_XET`` (xet off: the server speaks the LFS protocol only);
* every cache and token path (``HF_HOME``, ``HF_HUB_CACHE``, ``HF_TOKEN_PATH``, ...).

The pooled HTTP connections of the shared client are closed at teardown (``close_session``) so that no
keep-alive connection to a stopped server is reused by the next test.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

try:
    from tests.hub_server import HubServer
except ModuleNotFoundError:  # tests/ is not a package: pytest put tests/ itself on sys.path
    from hub_server import HubServer  # type: ignore[no-redef]


@dataclass(frozen=True)
class HubFixture:
    """What the `hub_server` fixture yields."""

    url: str  # HF_ENDPOINT
    token: str  # valid write token of `user` (also exported as HF_TOKEN)
    bad_token: str  # a token the server rejects with 401
    read_token: str  # valid read-only token of `user`
    other_token: str  # valid write token of another user (no rights on `user`'s repos)
    user: str  # namespace of `token`
    hf_home: Path
    cache_dir: Path  # HF_HUB_CACHE
    server: HubServer  # server-side inspection: heads, stored files, request log, fault injection

    def repo_id(self, name: str) -> str:
        return f"{self.user}/{name}"


def _patch_hub_client(monkeypatch: pytest.MonkeyPatch, server: HubServer, hf_home: Path) -> None:
    cache = hf_home / "hub"
    env = {
        "HF_ENDPOINT": server.url,
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_OFFLINE": "0",
        "TRANSFORMERS_OFFLINE": "0",
        "HF_TOKEN": server.token,
        "HF_HOME": str(hf_home),
        "HF_HUB_CACHE": str(cache),
        "HF_ASSETS_CACHE": str(hf_home / "assets"),
        "HF_XET_CACHE": str(hf_home / "xet"),
        "HF_TOKEN_PATH": str(hf_home / "token"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_UPDATE_CHECK": "1",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    # Other credentials sources the client would prefer or fall back to.
    for key in ("HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE", "HF_OIDC_ID_TOKEN", "HUGGINGFACE_CO_STAGING"):
        monkeypatch.delenv(key, raising=False)

    from huggingface_hub import constants, hf_api
    from huggingface_hub.utils import _http

    monkeypatch.setattr(constants, "ENDPOINT", server.url)
    monkeypatch.setattr(
        constants, "HUGGINGFACE_CO_URL_TEMPLATE", server.url + "/{repo_id}/resolve/{revision}/{filename}"
    )
    host = urlsplit(server.url).hostname or "127.0.0.1"
    monkeypatch.setattr(constants, "HF_URL_HOSTS", frozenset(constants.HF_URL_HOSTS | {host}))
    # Only the Hub origin is trusted with the token; the storage origin must stay a foreign (CDN-like) origin.
    monkeypatch.setattr(
        _http, "_HUB_ORIGINS", frozenset(_http._HUB_ORIGINS | {_http._url_origin(server.url)})
    )
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_UPDATE_CHECK", True)
    paths = {
        "HF_HOME": hf_home,
        "HF_HUB_CACHE": cache,
        "HUGGINGFACE_HUB_CACHE": cache,
        "HF_ASSETS_CACHE": hf_home / "assets",
        "HUGGINGFACE_ASSETS_CACHE": hf_home / "assets",
        "HF_XET_CACHE": hf_home / "xet",
        "HF_TOKEN_PATH": hf_home / "token",
        "HF_STORED_TOKENS_PATH": hf_home / "stored_tokens",
        "CHECK_FOR_UPDATE_DONE_PATH": hf_home / ".check_for_update_done",
        "CHECK_FOR_SKILL_UPDATE_DONE_PATH": hf_home / ".check_for_skill_update_done",
        "AGENT_HARNESSES_PATH": hf_home / ".agent_harnesses.json",
    }
    for name, value in paths.items():
        if hasattr(constants, name):
            monkeypatch.setattr(constants, name, str(value))
    # `huggingface_hub.upload_file`, `create_repo`, ... are bound methods of this instance.
    monkeypatch.setattr(hf_api.api, "endpoint", server.url)
    # transformers keeps one shared HfApi built on first use: drop it so it is rebuilt with our endpoint.
    transformers_hub = sys.modules.get("transformers.utils.hub")
    if transformers_hub is not None and hasattr(transformers_hub, "_hf_api"):
        monkeypatch.setattr(transformers_hub, "_hf_api", None)


@pytest.fixture
def hub_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubFixture]:
    """A fresh local Hub for one test, with huggingface_hub/transformers pointed at it (see module docstring)."""
    from huggingface_hub.utils import close_session

    server = HubServer(tmp_path / "hub-storage").start()
    hf_home = tmp_path / "hf-home"
    hf_home.mkdir()
    close_session()  # no pooled connection from a previous test may be reused
    try:
        _patch_hub_client(monkeypatch, server, hf_home)
        yield HubFixture(
            url=server.url,
            token=server.token,
            bad_token=server.bad_token,
            read_token=server.read_token,
            other_token=server.other_token,
            user=server.user,
            hf_home=hf_home,
            cache_dir=hf_home / "hub",
            server=server,
        )
    finally:
        close_session()
        server.stop()
        # If transformers was first imported during the test, its shared HfApi was built with this server's
        # endpoint and monkeypatch has nothing to restore: drop it so it is rebuilt from the real settings.
        transformers_hub = sys.modules.get("transformers.utils.hub")
        if transformers_hub is not None and hasattr(transformers_hub, "_hf_api"):
            transformers_hub._hf_api = None
    # A 500 from the server is a bug in the server, never an expected outcome: fail the test loudly.
    assert not server.errors, "hub server raised:\n" + "\n".join(server.errors)
    assert not server.pending_upload_files(), "partial uploads left on disk"


__all__ = ["HubFixture", "hub_server"]
