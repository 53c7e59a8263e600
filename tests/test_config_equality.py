"""A VanillaConfig compares, copies, serialises and gives its text config as transformers' own configs do.

Engines and tools handle configs through these generic operations: vLLM compares two configs (``==``) for any
model with an encoder, ``transformers serve`` does too, generate() and the caches read ``get_text_config``, and
``save_pretrained`` writes ``to_diff_dict``. Each check runs on GPT-2's, BERT's, BART's and Llama's configs as the
reference, and on a config built for every row of the table of variants in every family: the table's value (or its
example), not the default config.
"""

import copy
import json
from typing import Any

import pytest
from transformers import BartConfig, BertConfig, GPT2Config, LlamaConfig, PreTrainedConfig

from hf_vanilla import variants
from hf_vanilla.configuration_vanilla import field_default
from tests.factories import FAMILIES, tiny_config

#: Each row is shown on a base without RoPE (which has no rope_parameters) and on one with it.
BASE_SCHEMES = ("sinusoidal", "rope")


def row_fields(row: variants.Variant, family: str, scheme: str) -> dict[str, Any]:
    return {"architecture": family, "position_embedding_type": scheme, row.option: row.setting}


def other_setting(row: variants.Variant) -> Any:
    """A value of the row's option that is not the row's: another row's, or the field's default."""
    if row.value == variants.NON_DEFAULT:
        return field_default(row.option)
    return next(other.setting for other in variants.rows(row.option) if other.setting != row.setting)


def row_cases() -> list:
    """(row, fields) for every row in every family, on each base scheme; a row that sets the family or the scheme
    itself is shown once for each value of the other; a row whose option takes effect only under another value (RoPE
    scaling needs RoPE) is shown on the bases where it does."""
    cases: dict[str, tuple] = {}
    for row in variants.VARIANTS:
        for family in FAMILIES:
            for scheme in BASE_SCHEMES:
                fields = row_fields(row, family, scheme)
                if not variants.is_option_active(row.option, tiny_config(family, scheme)):
                    continue
                key = f"{row.option}={row.setting!r}-{fields['architecture']}-{fields['position_embedding_type']}"
                cases.setdefault(key, pytest.param(row, fields, id=key))
    return list(cases.values())


def check_config_protocol(config: PreTrainedConfig, other: PreTrainedConfig) -> None:
    """What a transformers config offers tools, checked against ``other``, a config of the same class that differs."""
    cls = type(config)
    assert config == config and config == copy.deepcopy(config) and copy.deepcopy(config) == config
    assert config != other and other != config and config != object()
    assert copy.deepcopy(config).to_dict() == config.to_dict()
    # to_dict adds transformers_version, so a config rebuilt from its dict is compared as a dict (as GPT-2's is)
    rebuilt = cls.from_dict(config.to_dict())
    assert rebuilt.to_dict() == config.to_dict() and rebuilt == cls.from_dict(rebuilt.to_dict())
    assert cls.from_dict(config.to_diff_dict()).to_dict() == config.to_dict()
    assert cls.from_dict(other.to_dict()) != rebuilt
    assert repr(config) == repr(copy.deepcopy(config)) and repr(config).startswith(cls.__name__)
    assert json.loads(repr(config)[len(cls.__name__):]) == json.loads(config.to_json_string())
    assert config.get_text_config() is config
    for side in ({"decoder": True}, {"encoder": True}):
        text_config = config.get_text_config(**side)
        assert text_config.vocab_size == config.vocab_size and text_config == copy.deepcopy(text_config)
        if not config.is_encoder_decoder:
            assert text_config is config


REFERENCES = [
    pytest.param(GPT2Config(), GPT2Config(n_embd=64), id="gpt2"),
    pytest.param(BertConfig(), BertConfig(hidden_act="relu"), id="bert"),
    pytest.param(BartConfig(), BartConfig(decoder_layers=2), id="bart"),
    pytest.param(LlamaConfig(), LlamaConfig(rope_parameters={"rope_type": "linear", "factor": 2.0}), id="llama"),
]


@pytest.mark.parametrize("config, other", REFERENCES)
def test_the_checks_hold_for_transformers_own_configs(config, other):
    check_config_protocol(config, other)


@pytest.mark.parametrize("row, fields", row_cases())
def test_a_config_built_for_each_row_compares_copies_and_serialises_as_transformers_configs_do(row, fields):
    config = tiny_config(**fields)
    assert getattr(config, row.option) == row.setting  # the row's own value, not the default config
    other = tiny_config(**{**fields, row.option: other_setting(row)})
    check_config_protocol(config, other)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("scheme", variants.values("position_embedding_type"))
def test_rope_parameters_exists_only_with_rope_and_equality_sees_a_change(family, scheme):
    """Without RoPE a config has no rope_parameters, as GPT-2's, BERT's and BART's lack it (transformers' tests and
    vLLM take ``hasattr(config, "rope_parameters")`` to mean RoPE), and still compares: transformers makes every
    config class a dataclass whose generated ``==`` reads every field, and raised AttributeError on the missing one
    (vLLM compares an encoder's config with its text config)."""
    config = tiny_config(family, scheme)
    assert hasattr(config, "rope_parameters") == (scheme == "rope") == ("rope_parameters" in config.to_dict())
    assert not any(hasattr(reference, "rope_parameters") for reference in (GPT2Config(), BertConfig(), BartConfig()))
    assert config == tiny_config(family, scheme) and not config != copy.deepcopy(config)
    assert not config != config.get_text_config()  # vLLM's test of a multimodal config
    assert config != tiny_config(family, scheme, num_hidden_layers=3)
    if scheme == "rope":
        assert config != tiny_config(family, scheme, rope_parameters={"rope_type": "default", "rope_theta": 500.0})
