"""Shared pytest set-up: the local Hub server fixture, and no network for any test."""

import os

from tests.hub_fixtures import hub_server  # noqa: F401  (a fixture: the local Hub API server)

# Tests never reach the Hub: anything that tries fails at once instead of hanging.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
