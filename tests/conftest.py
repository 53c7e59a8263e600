"""Shared pytest set-up: one torch thread, the corpus fixtures, hypothesis profiles, and no network for any test."""

import os

# One intra-op thread for this process and the commands the tests start (an explicit OMP_NUM_THREADS wins): the
# tests' models are tiny, so a second thread adds no speed, only a pool that spins between operations, which
# measured 2-3x the CPU time of a training run on a loaded 2-core machine (docs/performance.md, "The test suite's
# time").
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402  (after OMP_NUM_THREADS, which torch reads when imported)
from hypothesis import HealthCheck, settings  # noqa: E402

from tests.corpus_fixtures import bbc_src, bible_src, corpus_cache, shakespeare_src  # noqa: E402, F401  (fixtures)
from tests.hub_fixtures import trained_run  # noqa: E402, F401  (fixture)

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

# Tests never reach the Hub: anything that tries fails at once instead of hanging.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Every property test: 150 examples in the default run, HYPOTHESIS_PROFILE=long for the documented long run
# (3000). No deadline: the first examples pay for kernel set-up, and CI machines are shared.
settings.register_profile("ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
