"""Bad configuration is refused when the config is built, naming the field and what is allowed."""

import json

import pytest
import torch
from huggingface_hub.errors import StrictDataclassClassValidationError
from transformers import AutoModelForCausalLM

import hf_vanilla as hv
from hf_vanilla.modeling_vanilla import VanillaDecoder, VanillaEncoder
from hf_vanilla.presets import PRESETS
from tests.factories import HEAD_FOR_FAMILY, tiny_config


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(architecture="decoder-only"), r"architecture='decoder-only'.*'encoder', 'decoder', 'encoder-decoder'"),
        (dict(position_embedding_type="xpos"), r"position_embedding_type='xpos'.*'sinusoidal'.*'rope'.*'alibi'"),
        (dict(norm_position="sandwich"), r"norm_position='sandwich'.*'pre', 'post'"),
        (dict(norm_type="scalenorm"), r"norm_type='scalenorm'.*'layernorm', 'rmsnorm'"),
        (dict(hidden_act="swishy"), r"hidden_act='swishy'.*relu"),
        (dict(hidden_size=30, num_attention_heads=4, head_dim=None), r"hidden_size=30 is not divisible by num_attention_heads=4"),
        (dict(num_attention_heads=4, num_key_value_heads=3), r"num_attention_heads=4 is not divisible by num_key_value_heads=3"),
        (dict(hidden_dropout=1.5), r"hidden_dropout=1.5 is out of range: it must be in \[0, 1\)"),
        (dict(initializer_factor=0.0), r"initializer_factor=0.0 is out of range: it must be in \(0, 1000\] \(1.0 is T5's initialisation\) or None"),
        (dict(num_hidden_layers=0), r"num_hidden_layers=0 is out of range: it must be a positive integer"),
        (dict(classifier_pooling="max"), r"classifier_pooling='max'.*'first', 'last', 'mean'"),
        (dict(position_embedding_type="rope", hidden_size=36, num_attention_heads=4, head_dim=9), r"head_dim=9 must be even"),
        (dict(norm_eps=float("nan")), r"norm_eps=nan is out of range: it must be a finite number > 0"),
        (dict(attention_scale=float("inf")), r"attention_scale=inf is out of range: it must be a finite number > 0"),
        (dict(lm_head_scale=0.0), r"lm_head_scale=0.0 is out of range: it must be a finite number > 0"),
        (dict(initializer_factor=1e30), r"initializer_factor=1e\+30 is out of range: it must be in \(0, 1000\]"),
        (dict(initializer_range=-0.02), r"initializer_range=-0.02 is out of range: it must be a number in \[0, 1000\]"),
        *[(dict(position_embedding_type="rope", rope_parameters=rope), message) for rope, message in [
            ({"rope_type": "default", "rope_theta": 0.0}, r"rope_theta must be a number > 0"),
            ({"rope_type": "default", "rope_theta": -5.0}, r"rope_theta must be a number > 0"),
            ({"rope_type": "default", "rope_theta": float("nan")}, r"rope_theta must be a finite number"),
            ({"rope_type": "default", "rope_theta": "10000"}, r"rope_theta must be a finite number"),
            ({"rope_type": "linear", "rope_theta": 1e4, "factor": 0.0}, r"factor must be >= 1"),
            ({"rope_type": "bogus", "rope_theta": 1e4}, r"rope_type 'bogus' is unknown; choose one of 'default', 'linear'"),
            ({"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}, r"partial_rotary_factor is not supported"),
            ({"rope_type": "default", "rope_theta": 1e4, "extra": {"nested": 1}}, r"extra must be a finite number"),
        ]],
        (dict(position_embedding_type="relative", relative_attention_num_buckets=8, relative_attention_max_distance=4),
         r"num_buckets=8 with relative_attention_max_distance=4 leaves 4 exact bucket\(s\) in a causal stack"),
    ],
)
def test_invalid_config_is_refused_at_build_time(overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny_config("decoder", **overrides)


@pytest.mark.parametrize("family, buckets, distance", [("encoder", 2, 128), ("encoder", 16, 4), ("encoder-decoder", 8, 4)])
def test_relative_buckets_that_divide_by_zero_or_index_out_of_range_are_refused(family, buckets, distance):
    with pytest.raises(ValueError, match=r"exact bucket\(s\) in a (bidirectional|causal) stack: it needs at least 1"):
        tiny_config(family, "relative", relative_attention_num_buckets=buckets, relative_attention_max_distance=distance)


@pytest.mark.parametrize("family", ["encoder", "decoder", "encoder-decoder"])
def test_smallest_accepted_relative_buckets_give_finite_outputs(family):
    """The boundary the check draws: one exact bucket and max_distance just above it compute finite values."""
    buckets, distance = {"encoder": (4, 2), "decoder": (2, 2), "encoder-decoder": (4, 3)}[family]
    model = HEAD_FOR_FAMILY[family](tiny_config(family, "relative", relative_attention_num_buckets=buckets,
                                                relative_attention_max_distance=distance)).eval()
    ids = torch.arange(3, 40)[None]
    inputs = dict(input_ids=ids, decoder_input_ids=ids) if family == "encoder-decoder" else dict(input_ids=ids)
    assert torch.isfinite(model(**inputs).logits).all()


def test_t5_presets_scale_the_head_by_the_overridden_width():
    assert hv.VanillaConfig.from_preset("tiny-t5").lm_head_scale == 32**-0.5
    assert hv.VanillaConfig.from_preset("tiny-t5", hidden_size=64).lm_head_scale == 64**-0.5
    assert hv.VanillaConfig.from_preset("t5-base").lm_head_scale == 768**-0.5
    assert hv.VanillaConfig.from_preset("tiny-t5", hidden_size=64, lm_head_scale=1.0).lm_head_scale == 1.0


def test_head_that_does_not_fit_family_is_refused_in_config_and_model():
    with pytest.raises(ValueError, match=r"VanillaForCausalLM does not fit architecture='encoder'.*'decoder'"):
        tiny_config("encoder", architectures=["VanillaForCausalLM"])
    with pytest.raises(ValueError, match=r"VanillaForSeq2SeqLM does not fit architecture='decoder'.*'encoder-decoder'"):
        hv.VanillaForSeq2SeqLM(tiny_config("decoder"))
    with pytest.raises(ValueError, match=r"VanillaForMaskedLM does not fit architecture='encoder-decoder'"):
        hv.VanillaForMaskedLM(tiny_config("encoder-decoder"))


@pytest.mark.parametrize("scheme", ["alibi", "relative"])
def test_flash_attention_is_refused_for_bias_schemes(scheme):
    with pytest.raises(ValueError, match=rf"flash_attention_2.*{scheme}.*no additive attention bias"):
        tiny_config("decoder", scheme, attn_implementation="flash_attention_2")
    model = hv.VanillaForCausalLM(tiny_config("decoder", scheme))
    with pytest.raises(ValueError, match="no additive attention bias"):
        model.set_attn_implementation("flash_attention_2")
    with pytest.raises(ValueError, match="no additive attention bias"):
        AutoModelForCausalLM.from_config(tiny_config("decoder", scheme), attn_implementation="flash_attention_3")


@pytest.mark.parametrize("scheme", ["alibi", "relative"])
def test_flash_attention_is_refused_when_loading(scheme, tmp_path):
    """The scheme, not a missing flash-attn install, is named as the obstacle."""
    hv.VanillaForCausalLM(tiny_config("decoder", scheme)).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=rf"flash_attention_2.*{scheme}.*no additive attention bias"):
        AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="flash_attention_2")


def test_family_flags_are_derived_from_architecture():
    enc, dec, encdec = (tiny_config(f) for f in ("encoder", "decoder", "encoder-decoder"))
    assert (enc.is_encoder_decoder, enc.is_decoder, enc.add_cross_attention) == (False, False, False)
    assert (dec.is_encoder_decoder, dec.is_decoder, dec.add_cross_attention) == (False, True, False)
    assert (encdec.is_encoder_decoder, encdec.is_decoder, encdec.add_cross_attention) == (True, False, True)
    assert encdec.decoder_start_token_id == encdec.bos_token_id
    # Passing inconsistent flags cannot override the family.
    assert tiny_config("decoder", is_encoder_decoder=True).is_encoder_decoder is False


def test_defaults_are_the_papers_base_model():
    config = hv.VanillaConfig()
    assert (config.architecture, config.hidden_size, config.intermediate_size) == ("encoder-decoder", 512, 2048)
    assert (config.num_hidden_layers, config.num_decoder_layers, config.num_attention_heads) == (6, 6, 8)
    assert (config.hidden_act, config.norm_position, config.position_embedding_type) == ("relu", "post", "sinusoidal")
    assert config.scale_embedding and config.tie_word_embeddings and config.hidden_dropout == 0.1
    assert config.head_dim == 64 and config.final_norm is False


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_build_and_round_trip(name, tmp_path):
    config = hv.VanillaConfig.from_preset(name)
    config.save_pretrained(tmp_path)
    reloaded = hv.VanillaConfig.from_pretrained(tmp_path)
    assert reloaded.to_dict() == config.to_dict()


@pytest.mark.parametrize("name", ["t5-base", "tiny-t5"])
def test_t5_presets_are_t5_v1_0_as_published(name):
    # t5-base ties its output projection to the embedding and rescales the last hidden states by d_model**-0.5;
    # a tied head without the rescaling is neither v1.0 nor v1.1 and starts training ~4x above the uniform loss.
    config = hv.VanillaConfig.from_preset(name)
    assert config.tie_word_embeddings and not config.gated_ffn and config.hidden_act == "relu"
    assert config.lm_head_scale == pytest.approx(config.hidden_size**-0.5)


def test_tiny_presets_build_working_models():
    for name in ("tiny-transformer", "tiny-bert", "tiny-gpt2", "tiny-llama", "tiny-t5"):
        config = hv.VanillaConfig.from_preset(name)
        head = {"encoder": hv.VanillaForMaskedLM, "decoder": hv.VanillaForCausalLM,
                "encoder-decoder": hv.VanillaForSeq2SeqLM}[config.architecture]
        ids = torch.randint(3, config.vocab_size, (1, 5))
        inputs = dict(input_ids=ids, labels=ids)
        assert torch.isfinite(head(config)(**inputs).loss)


def test_preset_overrides_and_unknown_preset():
    assert hv.VanillaConfig.from_preset("gpt2", num_hidden_layers=3).num_hidden_layers == 3
    with pytest.raises(ValueError, match="Unknown preset 'gpt-5'.*available: bart-base"):
        hv.VanillaConfig.from_preset("gpt-5")


def test_explicit_head_dim_need_not_divide_hidden_size():
    config = tiny_config("decoder", "rope", hidden_size=48, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    model = hv.VanillaForCausalLM(config)
    assert model.model.layers[0].self_attn.q_proj.out_features == 64
    ids = torch.tensor([[3, 4, 5]])
    assert model(input_ids=ids).logits.shape == (1, 3, config.vocab_size)


@pytest.mark.parametrize("family", ["encoder", "decoder", "encoder-decoder"])
def test_saved_config_with_extra_attributes_reloads(family, tmp_path, caplog):
    """Tools and users add attributes to a config and save it (PreTrainedConfig keeps them); it must reload."""
    from transformers import AutoConfig, AutoModel

    notes = f"notes_{family.replace('-', '_')}"  # a key per family: the log names a given set of keys once
    model = HEAD_FOR_FAMILY[family](tiny_config(family))
    model.config.layer_norm_eps = 1e-3
    setattr(model.config, notes, {"task": family, "epochs": 3})
    model.save_pretrained(tmp_path)
    with caplog.at_level("WARNING"):
        config = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(config, hv.VanillaConfig)
    assert config.layer_norm_eps == 1e-3 and getattr(config, notes) == {"task": family, "epochs": 3}
    assert f"['layer_norm_eps', '{notes}']" in caplog.text and "does not use them" in caplog.text
    reloaded = type(model).from_pretrained(tmp_path)
    assert getattr(reloaded.config, notes)["task"] == family
    backbone = AutoModel.from_pretrained(tmp_path)
    assert isinstance(backbone, hv.VanillaModel) and backbone.config.layer_norm_eps == 1e-3
    reloaded.save_pretrained(tmp_path / "again")  # and they survive the next save
    assert getattr(hv.VanillaConfig.from_pretrained(tmp_path / "again"), notes)["epochs"] == 3


def test_keys_transformers_writes_are_accepted_silently(tmp_path, caplog):
    model = hv.VanillaForCausalLM(tiny_config("decoder", "rope")).to(torch.bfloat16)
    model.save_pretrained(tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert {"transformers_version", "architectures", "auto_map", "dtype", "model_type"} <= written.keys()
    with caplog.at_level("INFO"):
        config = hv.VanillaConfig.from_pretrained(tmp_path)
    assert "does not use" not in caplog.text
    assert config.architectures == ["VanillaForCausalLM"] and config.dtype == torch.bfloat16
    assert config.rope_parameters == {"rope_theta": 10000.0, "rope_type": "default"}


def test_rope_settings_are_absent_without_rope_and_older_saves_still_load(tmp_path):
    config = tiny_config("decoder", "sinusoidal")
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert "rope_parameters" not in saved
    # checkpoints saved before carry None, or the defaults PreTrainedConfig fills in; they had no effect and load
    for older in (None, {"rope_theta": 10000.0, "rope_type": "default"}):
        (tmp_path / "config.json").write_text(json.dumps({**saved, "rope_parameters": older}))
        assert not hasattr(hv.VanillaConfig.from_pretrained(tmp_path), "rope_parameters")
    saved["rope_parameters"] = {"rope_theta": 500000.0, "rope_type": "default"}
    (tmp_path / "config.json").write_text(json.dumps(saved))
    with pytest.raises(ValueError, match=r"config.json: VanillaConfig.rope_parameters=.* has no effect unless "):
        hv.VanillaConfig.from_pretrained(tmp_path)


def test_rope_chosen_after_construction_without_settings_is_refused_in_words():
    config = tiny_config("decoder", "sinusoidal")
    config.position_embedding_type = "rope"
    with pytest.raises(ValueError, match=r"rope_parameters=None: position_embedding_type='rope' needs a dict"):
        hv.VanillaForCausalLM(config)


@pytest.mark.parametrize("family", ["encoder", "decoder", "encoder-decoder"])
@pytest.mark.parametrize("scheme", ["sinusoidal", "learned", "alibi", "relative", "none"])
def test_rope_settings_assigned_after_construction_are_refused_where_they_would_be_ignored(family, scheme, tmp_path):
    """Tools (transformers' RoPE tests among them) assign ``config.rope_parameters`` after building a config, then
    build a model: without RoPE the model would ignore the setting, so building it (or saving the config) refuses."""
    config = tiny_config(family, scheme)
    config.rope_parameters = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    message = r"VanillaConfig.rope_parameters=.*'linear'.* has no effect unless position_embedding_type='rope'"
    with pytest.raises(ValueError, match=message):
        HEAD_FOR_FAMILY[family](config)
    with pytest.raises(ValueError, match=message):
        hv.VanillaModel(config)
    with pytest.raises(ValueError, match=message):  # a stack built alone, as an engine builds get_decoder()'s class
        (VanillaEncoder if family == "encoder" else VanillaDecoder)(config)
    with pytest.raises((ValueError, StrictDataclassClassValidationError), match=message):  # strict's save-time check
        config.save_pretrained(tmp_path)
    del config.rope_parameters  # taking it back leaves a config that builds
    HEAD_FOR_FAMILY[family](config)


def test_rope_settings_assigned_after_construction_apply_with_rope():
    config = tiny_config("decoder", "rope")
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    torch.manual_seed(0)
    plain = hv.VanillaForCausalLM(config).eval()
    config.rope_parameters = {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0}
    torch.manual_seed(0)
    scaled = hv.VanillaForCausalLM(config).eval()
    assert not torch.allclose(plain(ids).logits, scaled(ids).logits)  # the scaling took effect


@pytest.mark.parametrize("decoder_layers", [2, 3])
def test_rope_settings_written_through_the_decoder_text_config_reach_the_encoder_decoder(decoder_layers):
    """transformers' tests and tools write settings into ``get_text_config(decoder=True)``; transformers gives a flat
    encoder-decoder config a copy there, so the RoPE scaling never reached the model. With a deeper decoder the
    view counts the decoder's layers (KV caches are sized by it) and still writes to the config."""
    config = tiny_config("encoder-decoder", "rope", num_decoder_layers=decoder_layers)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    torch.manual_seed(0)
    plain = hv.VanillaForSeq2SeqLM(config).eval()(input_ids=ids, decoder_input_ids=ids).logits
    text_config = config.get_text_config(decoder=True)
    assert text_config.num_hidden_layers == decoder_layers and config.num_hidden_layers == 2
    text_config.rope_parameters = {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0}
    assert config.rope_parameters["rope_type"] == "linear"
    torch.manual_seed(0)
    scaled = hv.VanillaForSeq2SeqLM(config).eval()(input_ids=ids, decoder_input_ids=ids).logits
    assert not torch.allclose(plain, scaled)  # the scaling took effect


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("hidden_size", "32", r"hidden_size='32' has the wrong type: hidden_size takes int"),
        ("num_hidden_layers", 2.7, r"num_hidden_layers=2.7 has the wrong type"),
        ("tie_word_embeddings", "false", r"tie_word_embeddings='false' has the wrong type: .* takes bool"),
        ("pad_token_id", 97, r"pad_token_id=97 is outside the vocabulary \[0, 97\)"),
        ("eos_token_id", [2, 500], r"eos_token_id=\[2, 500\] is outside the vocabulary"),
    ],
)
def test_json_values_of_the_wrong_type_or_range_are_refused_naming_the_field(field, value, message, tmp_path):
    tiny_config("decoder").save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**saved, field: value}))
    with pytest.raises(ValueError, match=message):
        hv.VanillaConfig.from_pretrained(tmp_path)


def test_numbers_json_writes_as_integers_are_accepted_where_llama_accepts_them(tmp_path):
    """JSON has one number type: `"attention_dropout": 0` is as valid in a config.json as 0.0 (LlamaConfig takes it)."""
    from transformers import LlamaConfig

    LlamaConfig(attention_dropout=0)  # the reference: an int where a float is expected, for a dropout
    tiny_config("decoder").save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    zeros = dict.fromkeys(("hidden_dropout", "attention_dropout", "activation_dropout", "classifier_dropout"), 0)
    (tmp_path / "config.json").write_text(json.dumps({**saved, **zeros}))
    config = hv.VanillaConfig.from_pretrained(tmp_path)
    assert [getattr(config, name) for name in zeros] == [0, 0, 0, 0]
