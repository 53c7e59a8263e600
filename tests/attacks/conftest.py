"""The attack suite: tests that treat hf_vanilla as an attacker or an unlucky user would -- fuzzed configs and
options, faults mid-write, hostile files, links out of the user's folder, servers that never answer.

A new attack joins by adding a test in a file here (one file per surface: ``test_<surface>.py``); every test
collected under this folder carries the ``attack`` marker, so ``pytest tests/attacks`` or ``pytest -m attack``
runs the suite alone, and the default run includes it.
"""

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/attacks/" in item.nodeid:
            item.add_marker(pytest.mark.attack)
