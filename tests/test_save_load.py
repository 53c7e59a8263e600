"""Checkpoints: safetensors, tied weights stored once, exact reloads, strict about missing weights."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSeq2SeqLM

import hf_vanilla as hv
from tests.factories import FAMILIES, model_inputs, padded_batch, tiny_model

AUTO_FOR_FAMILY = {"encoder": AutoModelForMaskedLM, "decoder": AutoModelForCausalLM,
                   "encoder-decoder": AutoModelForSeq2SeqLM}


def stored_names(directory) -> list[str]:
    names = []
    for file in sorted(os.listdir(directory)):
        if file.endswith(".safetensors"):
            with safe_open(os.path.join(directory, file), "pt") as handle:
                names += list(handle.keys())
    return names


@pytest.mark.parametrize("family", FAMILIES)
def test_save_and_reload_with_auto_classes_is_exact(family, tmp_path):
    model = tiny_model(family, "relative")
    ids, mask = padded_batch()
    inputs = model_inputs(family, ids, mask)
    with torch.no_grad():
        expected = model(**inputs).logits
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists() and not list(tmp_path.glob("*.bin"))
    names = stored_names(tmp_path)
    assert names.count("model.embed_tokens.weight") == 1 and "lm_head.weight" not in names  # tied: stored once
    reloaded = AUTO_FOR_FAMILY[family].from_pretrained(tmp_path).eval()
    assert type(reloaded) is type(model)
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**inputs).logits, expected, rtol=0, atol=0)
    bare = AutoModel.from_pretrained(tmp_path)  # the backbone alone from a checkpoint with a head
    assert isinstance(bare, hv.VanillaModel)


def test_untied_output_projection_is_stored(tmp_path):
    model = tiny_model("decoder", "rope", tie_word_embeddings=False)
    model.save_pretrained(tmp_path)
    assert "lm_head.weight" in stored_names(tmp_path)
    reloaded = hv.VanillaForCausalLM.from_pretrained(tmp_path)
    assert reloaded.lm_head.weight is not reloaded.model.embed_tokens.weight
    torch.testing.assert_close(reloaded.lm_head.weight, model.lm_head.weight, rtol=0, atol=0)


def test_sharded_checkpoint_and_bfloat16(tmp_path):
    model = tiny_model("encoder-decoder", "sinusoidal")
    model.save_pretrained(tmp_path, max_shard_size="20KB")
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    ids, mask = padded_batch()
    inputs = model_inputs("encoder-decoder", ids, mask)
    reloaded = hv.VanillaForSeq2SeqLM.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**inputs).logits, model(**inputs).logits, rtol=0, atol=0)
    half = hv.VanillaForSeq2SeqLM.from_pretrained(tmp_path, dtype=torch.bfloat16).eval()
    assert all(p.dtype == torch.bfloat16 for p in half.parameters())
    with torch.no_grad():
        logits = half(**inputs).logits
        expected = model.to(torch.bfloat16)(**inputs).logits
    assert torch.isfinite(logits).all()
    torch.testing.assert_close(logits, expected, rtol=0, atol=0)


def test_missing_weights_are_an_error_not_random(tmp_path):
    model = tiny_model("decoder", "learned")
    model.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    del weights["model.decoder.layers.1.mlp.up_proj.weight"]
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"missing weights \['model.decoder.layers.1.mlp.up_proj.weight'\]"):
        hv.VanillaForCausalLM.from_pretrained(tmp_path)


def test_unexpected_weights_are_an_error(tmp_path):
    model = tiny_model("decoder", "learned")
    model.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    weights["model.decoder.layers.7.mlp.up_proj.weight"] = torch.zeros(2, 2)
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"unexpected weights \['model.decoder.layers.7.mlp.up_proj.weight'\]"):
        AutoModelForCausalLM.from_pretrained(tmp_path)


def test_new_head_on_pretrained_backbone_is_allowed(tmp_path):
    tiny_model("encoder", "learned").save_pretrained(tmp_path)
    classifier, info = hv.VanillaForSequenceClassification.from_pretrained(tmp_path, num_labels=4,
                                                                           output_loading_info=True)
    assert set(info["missing_keys"]) == {"score.weight", "score.bias"}
    assert classifier.score.out_features == 4


def test_loads_with_trust_remote_code_without_the_package(tmp_path):
    model = tiny_model("encoder-decoder", "alibi")
    ids, mask = padded_batch()
    with torch.no_grad():
        expected = model(**model_inputs("encoder-decoder", ids, mask)).logits
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["auto_map"]["AutoModelForSeq2SeqLM"] == "modeling_vanilla.VanillaForSeq2SeqLM"
    assert {"modeling_vanilla.py", "configuration_vanilla.py", "positional.py"} <= set(os.listdir(tmp_path))
    torch.save({"ids": ids, "mask": mask, "expected": expected}, tmp_path / "io.pt")
    script = textwrap.dedent(f"""
        import sys
        sys.modules["hf_vanilla"] = None  # the package is unavailable: any import of it fails
        import torch
        from transformers import AutoModelForSeq2SeqLM
        model = AutoModelForSeq2SeqLM.from_pretrained({str(tmp_path)!r}, trust_remote_code=True).eval()
        assert "hf_vanilla" not in type(model).__module__, type(model).__module__
        io = torch.load({str(tmp_path / "io.pt")!r}, weights_only=True)
        with torch.no_grad():
            logits = model(input_ids=io["ids"], attention_mask=io["mask"], decoder_input_ids=io["ids"][:, :6],
                           decoder_attention_mask=io["mask"][:, :6]).logits
        torch.testing.assert_close(logits, io["expected"], rtol=0, atol=0)
        print("REMOTE-OK", type(model).__module__)
    """)
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert "REMOTE-OK transformers_modules" in result.stdout, result.stderr[-3000:]
