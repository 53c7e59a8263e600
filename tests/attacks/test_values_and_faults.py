"""Every valid configuration works; every invalid one is refused; broken files and inputs fail clearly."""

import json
import os
import re
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file

import hf_vanilla as hv
from hf_vanilla import variants
from hf_vanilla.checkpoint import load_complete
from hf_vanilla.convert import convert_checkpoint
from hf_vanilla.files.atomic import save_pretrained_atomic
from hf_vanilla.rules import activation_condition, field_is_active
from tests.factories import (
    BACKENDS,
    FAMILIES,
    HEAD_FOR_FAMILY,
    SCHEMES,
    model_inputs,
    padded_batch,
    settings,
    tiny_model,
)


@st.composite
def valid_configs(draw):
    heads = draw(st.sampled_from([1, 2, 4]))
    kv_heads = draw(st.sampled_from([h for h in (1, 2, 4) if heads % h == 0]))
    head_dim = draw(st.sampled_from([4, 8]))
    fields = dict(
        architecture=draw(st.sampled_from(FAMILIES)),
        position_embedding_type=draw(st.sampled_from(SCHEMES)),
        norm_position=draw(st.sampled_from(settings("norm_position"))),
        norm_type=draw(st.sampled_from(settings("norm_type"))),
        hidden_act=draw(st.sampled_from(settings("hidden_act"))),  # every row of the table, not a hand list
        gated_ffn=draw(st.booleans()),
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        hidden_size=heads * head_dim,
        intermediate_size=draw(st.sampled_from([8, 16, 24])),
        num_hidden_layers=draw(st.integers(1, 2)),
        num_decoder_layers=draw(st.integers(1, 2)),
        vocab_size=draw(st.integers(8, 40)),
        max_position_embeddings=32,
        attention_bias=draw(st.booleans()),
        mlp_bias=draw(st.booleans()),
        scale_embedding=draw(st.booleans()),
        embedding_norm=draw(st.booleans()),
        tie_word_embeddings=draw(st.booleans()),
        sinusoidal_layout=draw(st.sampled_from(["interleaved", "concatenated"])),
        hidden_dropout=0.0,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    # An option the drawn scheme, norm or family would ignore is not valid: leave it at its default.
    drawn = SimpleNamespace(**fields)
    return {name: value for name, value in fields.items()
            if field_is_active(name, drawn)}


@given(fields=valid_configs(), length=st.integers(2, 6), batch=st.integers(1, 3), data=st.data())
def test_every_valid_configuration_works(fields, length, batch, data, tmp_path_factory):
    torch.manual_seed(0)
    config = hv.VanillaConfig(**fields)
    model = HEAD_FOR_FAMILY[config.architecture](config).eval()
    ids = torch.tensor(data.draw(st.lists(st.lists(st.integers(3, config.vocab_size - 1), min_size=length,
                                                   max_size=length), min_size=batch, max_size=batch)))
    inputs = dict(input_ids=ids)
    if config.architecture == "encoder-decoder":
        inputs["decoder_input_ids"] = ids
    out = model(**inputs, labels=ids)
    out.loss.backward()
    assert torch.isfinite(out.loss) and torch.isfinite(out.logits).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    directory = tmp_path_factory.mktemp("roundtrip")
    model.save_pretrained(directory)
    reloaded = type(model).from_pretrained(directory).eval()
    saved, loaded = model.state_dict(), reloaded.state_dict()
    assert saved.keys() == loaded.keys() and all(torch.equal(saved[k], loaded[k]) for k in saved)
    with torch.no_grad():  # same weights; memory alignment may still pick another SIMD path (last-ulp noise)
        torch.testing.assert_close(reloaded(**inputs).logits, model(**inputs).logits, rtol=1e-6, atol=1e-6)
    if config.architecture != "encoder":
        settings_ = dict(input_ids=ids, max_new_tokens=3, do_sample=False, eos_token_id=None)
        torch.testing.assert_close(model.generate(**settings_, use_cache=True),
                                   model.generate(**settings_, use_cache=False), rtol=0, atol=0)


INVALID = st.sampled_from([
    ("architecture", "decoder-only"), ("position_embedding_type", "xpos"), ("norm_position", "middle"),
    ("norm_type", "batchnorm"), ("hidden_act", "nope"), ("num_key_value_heads", 3), ("hidden_size", 0),
    ("attention_dropout", -0.1), ("intermediate_size", 0), ("sinusoidal_layout", "spiral"),
    # wrong JSON types and ids outside the vocabulary
    ("hidden_size", "16"), ("num_hidden_layers", 1.5), ("num_hidden_layers", True), ("tie_word_embeddings", "false"),
    ("norm_eps", "1e-5"), ("hidden_dropout", True), ("pad_token_id", 40), ("eos_token_id", [2, -1]),
    ("bos_token_id", "1"), ("rope_parameters", "default"),
    # the right type, but NaN, an infinity or a range that gives NaN or a late crash
    ("norm_eps", float("nan")), ("norm_eps", float("inf")), ("attention_scale", float("nan")),
    ("attention_scale", float("inf")), ("lm_head_scale", float("nan")), ("lm_head_scale", 0.0),
    ("initializer_factor", 1e30), ("initializer_range", float("nan")), ("initializer_range", -0.1),
])


@given(fields=valid_configs(), bad=INVALID)
def test_every_invalid_configuration_is_refused_naming_the_field(fields, bad):
    field, value = bad
    fields = dict(fields, **{field: value})
    with pytest.raises(ValueError, match=field):
        hv.VanillaConfig(**fields)


@given(fields=valid_configs(), option=st.sampled_from(sorted(variants.fields_with_conditions())))
def test_an_option_the_config_would_ignore_is_refused(fields, option):
    condition, active = activation_condition(option)
    config = hv.VanillaConfig(**fields)
    assume(not active(config))
    setting = {"position_offset": 2, "sinusoidal_layout": "concatenated", "relative_attention_num_buckets": 8,
               "relative_attention_max_distance": 64, "rope_parameters": {"rope_type": "default", "rope_theta": 500.0},
               "norm_bias": False, "num_decoder_layers": config.num_hidden_layers + 1}[option]
    with pytest.raises(ValueError, match=rf"VanillaConfig.{option}=.* has no effect unless {re.escape(condition)}"):
        hv.VanillaConfig(**dict(fields, **{option: setting}))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_fully_padded_rows_stay_finite(family, backend, dtype):
    model = tiny_model(family, "alibi", attn_implementation=backend).to(dtype)
    ids, mask = padded_batch(batch=2, length=5)
    mask[1] = 0  # a row with nothing to attend to
    inputs = model_inputs(family, ids, mask)
    if family == "encoder-decoder":
        inputs["decoder_attention_mask"] = mask[:, :5].clone()
    with torch.no_grad():
        logits = model(**inputs).logits
    assert torch.isfinite(logits).all()


# transformers passes safetensors' message on without the file name ("incomplete metadata, file not fully
# covered"), for built-ins too; the package's tools load through checkpoint.load_complete, which names it.


def test_truncated_safetensors_names_the_file(tmp_path):
    tiny_model("decoder").save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-200])
    with pytest.raises(OSError, match=r"Cannot read the weights in .*model.safetensors: .*truncated or corrupted"):
        load_complete(hv.VanillaForCausalLM, tmp_path)
    with pytest.raises(OSError, match=r"Cannot read the weights in .*model.safetensors"):
        convert_checkpoint(tmp_path, tmp_path / "out")


def test_corrupted_safetensors_header_names_the_file(tmp_path):
    tiny_model("decoder").save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[8:20] = b"not a header"
    weights.write_bytes(bytes(data))
    with pytest.raises(OSError, match=r"Cannot read the weights in .*model.safetensors"):
        load_complete(hv.VanillaForCausalLM, tmp_path)


def test_the_packages_loader_refuses_missing_weights_naming_them(tmp_path):
    """transformers initialises missing weights at random (with a warning); convert must not pass them on."""
    tiny_model("decoder", "learned").save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    del weights["model.layers.1.mlp.up_proj.weight"]
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"lacks weights .*\['model.layers.1.mlp.up_proj.weight'\]"):
        load_complete(hv.VanillaForCausalLM, tmp_path)
    with pytest.raises(ValueError, match=r"model.layers.1.mlp.up_proj.weight"):
        convert_checkpoint(tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_config_with_unknown_or_missing_keys(tmp_path):
    tiny_model("decoder", "learned").save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps({**config, "num_hidden_layers": "2"}))
    with pytest.raises(ValueError, match=r"config.json: VanillaConfig.num_hidden_layers='2' has the wrong type"):
        hv.VanillaForCausalLM.from_pretrained(tmp_path)
    del config["hidden_size"]  # falls back to the default 512: the stored weights no longer fit
    path.write_text(json.dumps(config))
    with pytest.raises(Exception, match=r"size mismatch|mismatch"):
        hv.VanillaForCausalLM.from_pretrained(tmp_path)


def test_checkpoint_of_another_architecture_is_refused(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50)).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"config.json: This config describes a 'gpt2' model.*hf-vanilla convert"):
        hv.VanillaForCausalLM.from_pretrained(tmp_path)


def test_save_killed_midway_leaves_previous_checkpoint_intact(tmp_path):
    """The package's atomic save (checkpoint.save_pretrained_atomic); model.save_pretrained is transformers' own."""
    model = tiny_model("decoder", "rope")
    model.save_pretrained(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "tokenizer.json").write_text("{}")  # a neighbour the save must keep
    ids, mask = padded_batch(left=True)
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).logits
    script = textwrap.dedent(f"""
        import os, torch, transformers.modeling_utils as mu
        from tests.factories import tiny_model
        def dies_midway(tensors, filename, metadata=None):
            with open(filename, "wb") as handle:
                handle.write(b"partial")
            os._exit(137)  # as abrupt as SIGKILL: no cleanup, no exception handlers
        mu.safe_save_file = dies_midway
        from hf_vanilla.files.atomic import save_pretrained_atomic
        save_pretrained_atomic(tiny_model("decoder", "rope", seed=99), {str(tmp_path / "ckpt")!r})
    """)
    result = subprocess.run([sys.executable, "-c", script], cwd=os.getcwd(), capture_output=True, text=True)
    assert result.returncode == 137, result.stderr[-2000:]
    reloaded = hv.VanillaForCausalLM.from_pretrained(tmp_path / "ckpt").eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids, attention_mask=mask).logits, expected, rtol=0, atol=0)
    assert (tmp_path / "ckpt" / "tokenizer.json").read_text() == "{}"


def test_save_failing_on_full_disk_reports_and_keeps_previous(tmp_path, monkeypatch):
    import transformers.modeling_utils as mu

    tiny_model("decoder").save_pretrained(tmp_path / "ckpt")
    before = {p.name: p.read_bytes() for p in (tmp_path / "ckpt").iterdir()}

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(mu, "safe_save_file", disk_full)
    with pytest.raises(OSError, match="No space left on device"):
        save_pretrained_atomic(tiny_model("decoder", seed=5), tmp_path / "ckpt")
    assert {p.name: p.read_bytes() for p in (tmp_path / "ckpt").iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]  # no staging folder left behind


def test_package_never_unpickles_untrusted_data():
    import pathlib
    import re

    sources = pathlib.Path(hv.__file__).parent.glob("*.py")
    offenders = []
    for source in sources:
        for number, line in enumerate(source.read_text().splitlines(), 1):
            if re.search(r"torch\.load\(", line) and "weights_only=True" not in line:
                offenders.append(f"{source.name}:{number}")
            if re.search(r"\bpickle\.loads?\(", line):
                offenders.append(f"{source.name}:{number}")
    assert offenders == []


def test_save_into_the_current_directory_keeps_subfolders(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "checkpoint-1").mkdir()
    (tmp_path / "checkpoint-1" / "optimizer.state").write_text("kept")
    model = tiny_model("decoder")
    save_pretrained_atomic(model, ".")
    assert (tmp_path / "checkpoint-1" / "optimizer.state").read_text() == "kept"
    reloaded = hv.VanillaForCausalLM.from_pretrained(".")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), reloaded.state_dict().values(), strict=True))
