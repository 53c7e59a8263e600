"""Stands in for transformers' tests/generation/test_utils.py, which the sdist does not ship.

test_modeling_common.py checks that a tester inherits GenerationTesterMixin exactly when one of its classes can
generate; test_vanilla_common.py's decoder and encoder-decoder testers do, as Llama's and BART's do. This stand-in is
used only with HF_VANILLA_GENERATION_TESTS=none: then they inherit no generate() test. Otherwise
scripts/transformers_common.sh puts the real file here (HF_VANILLA_GENERATION_TESTS, or a transformers source tree
given as HF_VANILLA_TRANSFORMERS_SRC), and refuses to start without one (docs/testing.md says how to fetch it).
"""


class GenerationTesterMixin:
    """transformers' generate() tests, absent from the sdist: no test runs from here."""
