"""Stands in for transformers' tests/generation/test_utils.py, which the sdist does not ship.

test_modeling_common.py checks that a tester inherits GenerationTesterMixin exactly when one of its classes can
generate; test_vanilla_common.py's decoder and encoder-decoder testers do, as Llama's and BART's do. With this stand-in
they inherit no generate() test (tests/test_generation.py tests hf_vanilla's generate()); scripts/transformers_common.sh
puts the real file here when given a transformers source tree (HF_VANILLA_TRANSFORMERS_SRC).
"""


class GenerationTesterMixin:
    """transformers' generate() tests, absent from the sdist: no test runs from here."""
