"""Shared pytest set-up: the corpus fixtures, hypothesis profiles, and no network for any test."""

import os

from hypothesis import HealthCheck, settings

from tests.corpus_fixtures import bbc_src, bible_src, corpus_cache, shakespeare_src  # noqa: F401  (fixtures)
from tests.hub_fixtures import trained_run  # noqa: F401  (fixture)

# Tests never reach the Hub: anything that tries fails at once instead of hanging.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Every property test: 150 examples in the default run, HYPOTHESIS_PROFILE=long for the documented long run
# (3000). No deadline: the first examples pay for kernel set-up, and CI machines are shared.
settings.register_profile("ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
