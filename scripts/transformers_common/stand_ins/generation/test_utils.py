"""Stands in for transformers' tests/generation/test_utils.py, which the sdist does not ship.

test_modeling_common.py imports GenerationTesterMixin only to check that a tester inheriting it lists generative
classes; test_vanilla_common.py inherits no generation tests and says so (``all_generative_model_classes = ()``).
"""


class GenerationTesterMixin:
    """transformers' generate() tests, absent from the sdist: no test runs from here."""
