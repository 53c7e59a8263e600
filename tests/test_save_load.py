"""Checkpoints: safetensors, tied weights stored once, exact reloads, loading as transformers loads built-in models."""

import contextlib
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
from tests.factories import FAMILIES, model_inputs, padded_batch, run_without_package, tiny_config, tiny_model

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


def with_old_norm_names(name: str) -> str:
    """The checkpoint name a norm had before each block held its norms itself (``layers.0.self_attn_step.norm.weight``)."""
    for sublayer in ("self_attn", "cross_attn", "mlp"):
        name = name.replace(f".{sublayer}_norm.", f".{sublayer}_step.norm.")
    return name


@pytest.mark.parametrize("family", FAMILIES)
def test_a_folder_saved_with_the_old_norm_names_loads_exactly_and_is_saved_again_with_the_modules_names(
        family, tmp_path):
    model = tiny_model(family, "rope" if family == "decoder" else "learned", norm_position="pre")
    with torch.no_grad():  # norms away from their initial 1 and 0: a norm left unread could not pass for loaded
        for name, tensor in model.named_parameters():
            if "_norm." in name:
                tensor.normal_()
    ids, mask = padded_batch()
    inputs = model_inputs(family, ids, mask)
    model.save_pretrained(tmp_path / "old")
    saved = load_file(tmp_path / "old" / "model.safetensors")
    old = {with_old_norm_names(name): tensor for name, tensor in saved.items()}
    assert len(set(old) - set(saved)) >= 2 * model.config.num_hidden_layers  # the folder really has the old names
    save_file(old, tmp_path / "old" / "model.safetensors", metadata={"format": "pt"})
    loaded, info = type(model).from_pretrained(tmp_path / "old", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval()(**inputs).logits, model(**inputs).logits, rtol=0, atol=0)
    loaded.save_pretrained(tmp_path / "again")  # the names of the modules on disk, as any folder saved now
    assert sorted(stored_names(tmp_path / "again")) == sorted(saved)
    resumed = type(model)(model.config).eval()  # Trainer's resume and PEFT read a checkpoint by load_state_dict
    result = resumed.load_state_dict(old, strict=False)  # strict=False as Trainer: the tied head is not stored
    assert not result.unexpected_keys and set(result.missing_keys) <= {"lm_head.weight"}, result
    with torch.no_grad():
        torch.testing.assert_close(resumed(**inputs).logits, model(**inputs).logits, rtol=0, atol=0)


def with_old_stack_names(name: str, prefix: str) -> str:
    """A decoder-family name as saved before its bare model was its own causal stack: every part but the token
    embedding under ``decoder.`` (``model.decoder.layers.0...``; a bare model's ``decoder.layers.0...``)."""
    if not name.startswith(prefix) or name.startswith(prefix + "embed_tokens."):
        return name
    return f"{prefix}decoder.{name.removeprefix(prefix)}"


@pytest.mark.parametrize("saved_class", ["VanillaForCausalLM", "VanillaModel"])
def test_a_decoder_folder_saved_with_the_stack_names_before_it_loads_exactly_and_is_saved_again_with_todays(
        saved_class, tmp_path):
    """Folders saved before the decoder family's bare model was its own stack (as LlamaModel) load into either
    class, by from_pretrained and by load_state_dict (Trainer's resume, PEFT), the older norm names too; a folder
    saved again holds the names of the modules. An encoder-decoder's ``model.decoder`` keeps its name (every
    other test that reloads one)."""
    head = tiny_model("decoder", "learned", norm_position="pre", embedding_norm=True)
    with torch.no_grad():  # away from their initial values: a tensor left unread could not pass for loaded
        for tensor in head.parameters():
            tensor.normal_()
    model = head if saved_class == "VanillaForCausalLM" else head.model
    prefix = "model." if model is head else ""
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    with torch.no_grad():
        expected = head.model(input_ids=ids).last_hidden_state
    model.save_pretrained(tmp_path / "old")
    saved = load_file(tmp_path / "old" / "model.safetensors")
    old = {with_old_norm_names(with_old_stack_names(name, prefix)): tensor for name, tensor in saved.items()}
    assert sum(name.startswith(prefix + "decoder.layers.") for name in old) >= 8  # the folder has the old names
    save_file(old, tmp_path / "old" / "model.safetensors", metadata={"format": "pt"})
    for auto in (AutoModel, AutoModelForCausalLM):
        loaded, info = auto.from_pretrained(tmp_path / "old", output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"], (auto, info)
        bare = loaded.eval() if isinstance(loaded, hv.VanillaModel) else loaded.model.eval()
        with torch.no_grad():
            torch.testing.assert_close(bare(input_ids=ids).last_hidden_state, expected, rtol=0, atol=0)
    loaded = type(model).from_pretrained(tmp_path / "old")
    loaded.save_pretrained(tmp_path / "again")
    assert sorted(stored_names(tmp_path / "again")) == sorted(saved)
    resumed = type(model)(model.config)
    result = resumed.load_state_dict(old, strict=False)  # strict=False as Trainer: the tied head is not stored
    assert not result.unexpected_keys and set(result.missing_keys) <= {"lm_head.weight"}, result
    with torch.no_grad():
        bare = resumed.eval() if isinstance(resumed, hv.VanillaModel) else resumed.model.eval()
        torch.testing.assert_close(bare(input_ids=ids).last_hidden_state, expected, rtol=0, atol=0)


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


# ----------------------------------------------------------------------------------------------
# Loading follows transformers' contract: each case runs on a built-in model and on ours, and both must behave alike.


def builtin_pair(family: str):
    """(head class, bare class, config) of a tiny built-in model of the family: BERT, Llama, BART."""
    from transformers import (
        BartConfig,
        BartForConditionalGeneration,
        BartModel,
        BertConfig,
        BertForSequenceClassification,
        BertModel,
        LlamaConfig,
        LlamaForSequenceClassification,
        LlamaModel,
    )

    sizes = dict(vocab_size=50, hidden_size=16, intermediate_size=32, num_attention_heads=2, num_hidden_layers=1)
    if family == "encoder":
        return BertForSequenceClassification, BertModel, BertConfig(**sizes)
    if family == "decoder":
        return LlamaForSequenceClassification, LlamaModel, LlamaConfig(**sizes, pad_token_id=0)
    return BartForConditionalGeneration, BartModel, BartConfig(
        vocab_size=50, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
    )


def our_pair(family: str):
    head = hv.VanillaForSeq2SeqLM if family == "encoder-decoder" else hv.VanillaForSequenceClassification
    return head, hv.VanillaModel, tiny_config(family, "learned", pooler=family == "encoder")


def pairs(family: str) -> dict:
    return {"builtin": builtin_pair(family), "ours": our_pair(family)}


@pytest.mark.parametrize("family", FAMILIES)
def test_bare_model_loads_the_backbone_of_a_head_checkpoint(family, tmp_path):
    """BertModel loads the backbone of a fine-tuned BertForSequenceClassification; VanillaModel does too."""
    for name, (head_class, bare_class, config) in pairs(family).items():
        torch.manual_seed(0)
        head = head_class(config)
        head.save_pretrained(tmp_path / name)
        bare, info = bare_class.from_pretrained(tmp_path / name, output_loading_info=True)
        prefix = f"{head.base_model_prefix}."
        head_only = {key for key in head.state_dict() if not key.startswith(prefix)}
        assert type(bare) is bare_class and info["missing_keys"] == set() and info["mismatched_keys"] == set(), name
        assert info["unexpected_keys"] <= head_only, name  # only the head's weights are left out
        backbone = {key.removeprefix(prefix): value for key, value in head.state_dict().items() if key.startswith(prefix)}
        for key, value in bare.state_dict().items():
            torch.testing.assert_close(value, backbone[key], rtol=0, atol=0, msg=f"{name}: {key}")


@pytest.mark.parametrize("family", FAMILIES)
def test_from_pretrained_without_a_checkpoint_takes_config_and_state_dict(family):
    for name, (head_class, _, config) in pairs(family).items():
        torch.manual_seed(0)
        reference = head_class(config)
        empty, info = head_class.from_pretrained(None, config=config, state_dict={}, output_loading_info=True)
        assert type(empty) is head_class, name
        persistent = {key for key in reference.state_dict()}
        assert info["missing_keys"] and info["missing_keys"] <= persistent and info["unexpected_keys"] == set(), name
        loaded = head_class.from_pretrained(None, config=config, state_dict=reference.state_dict())
        for key, value in reference.state_dict().items():
            torch.testing.assert_close(loaded.state_dict()[key], value, rtol=0, atol=0, msg=f"{name}: {key}")


def resized(config, family: str):
    """A config whose task head no longer fits the checkpoint's: three labels instead of two, or a larger vocabulary."""
    if family == "encoder-decoder":
        return {"vocab_size": config.vocab_size + 7}
    return {"num_labels": 3}


@pytest.mark.parametrize("family", FAMILIES)
def test_ignore_mismatched_sizes_reinitialises_what_does_not_fit(family, tmp_path):
    for name, (head_class, _, config) in pairs(family).items():
        torch.manual_seed(0)
        saved = head_class(config)
        saved.save_pretrained(tmp_path / name)
        with pytest.raises(RuntimeError, match="ignore_mismatched_sizes"):
            head_class.from_pretrained(tmp_path / name, **resized(config, family))
        model, info = head_class.from_pretrained(tmp_path / name, ignore_mismatched_sizes=True,
                                                 output_loading_info=True, **resized(config, family))
        mismatched = {key for key, *_ in info["mismatched_keys"]}
        fresh = model.state_dict()
        resized_keys = {key for key, value in saved.state_dict().items() if fresh[key].shape != value.shape}
        assert mismatched and mismatched <= resized_keys, name  # tied copies are reported once, by their source
        for key, value in saved.state_dict().items():
            if key not in resized_keys:
                torch.testing.assert_close(fresh[key], value, rtol=0, atol=0, msg=f"{name}: {key}")


@contextlib.contextmanager
def transformers_warnings():
    """Captures what transformers' loader logs (its load report is a warning on this logger), whatever verbosity
    an earlier test left behind (bench silences transformers)."""
    from transformers.testing_utils import CaptureLogger
    from transformers.utils import logging

    verbosity = logging.get_verbosity()
    logging.set_verbosity_warning()
    try:
        with CaptureLogger(logging.get_logger("transformers.modeling_utils")) as captured:
            yield captured
    finally:
        logging.set_verbosity(verbosity)


@pytest.mark.parametrize("edit", ["missing", "unexpected"])
def test_a_checkpoint_that_does_not_fit_is_reported_with_the_folder_and_keys(edit, tmp_path):
    """As for built-ins: a warning that names the folder and the weights, and the same keys in the loading info."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    models = {"builtin": LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32,
                                                      num_attention_heads=2, num_hidden_layers=1)),
              "ours": tiny_model("decoder", "learned")}
    for name, model in models.items():
        folder = tmp_path / name
        model.save_pretrained(folder)
        weights = load_file(folder / "model.safetensors")
        key = next(k for k in weights if ".mlp.up_proj.weight" in k)
        if edit == "missing":
            del weights[key]
        else:
            key = key.replace("layers.0.", "layers.7.")
            weights[key] = torch.zeros(2, 2)
        save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
        with transformers_warnings() as report:
            _, info = type(model).from_pretrained(folder, output_loading_info=True)
        assert str(folder) in report.out and key.split(".layers.")[0] in report.out, name
        assert edit.upper() in report.out and info[f"{edit}_keys"] == {key}, name


def test_intended_drops_are_silent(tmp_path):
    """A BERT-shaped checkpoint's pooler is only used by the sequence classifier: other heads drop it quietly."""
    torch.manual_seed(0)
    hv.VanillaForSequenceClassification(tiny_config("encoder", "learned", pooler=True)).save_pretrained(tmp_path)
    model, info = hv.VanillaForMaskedLM.from_pretrained(tmp_path, output_loading_info=True)
    assert info["unexpected_keys"] == {"score.weight", "score.bias"}


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
    assert {"modeling_vanilla.py", "configuration_vanilla.py", "positional.py", "variants.py"} <= set(os.listdir(tmp_path))
    torch.save({"ids": ids, "mask": mask, "expected": expected}, tmp_path / "io.pt")
    script = textwrap.dedent(f"""
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
    result = run_without_package(script, tmp_path)
    assert "REMOTE-OK transformers_modules" in result.stdout, result.stderr[-3000:]


@pytest.mark.parametrize("activation", ["tanh", "laplace"])
def test_an_act2fn_activation_no_row_names_saves_and_reloads_with_trust_remote_code(activation, tmp_path):
    """Built-in configs take any name of transformers' ACT2FN (issue 38): so does VanillaConfig, and the folder's own
    code builds it where the package is not installed, with the same logits."""
    model = tiny_model("decoder", "rope", hidden_act=activation)
    ids, mask = padded_batch()
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).logits
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["hidden_act"] == activation
    torch.save({"ids": ids, "mask": mask, "expected": expected}, tmp_path / "io.pt")
    script = textwrap.dedent(f"""
        import torch
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained({str(tmp_path)!r}, trust_remote_code=True).eval()
        assert model.config.hidden_act == {activation!r}, model.config.hidden_act
        io = torch.load({str(tmp_path / "io.pt")!r}, weights_only=True)
        with torch.no_grad():
            logits = model(input_ids=io["ids"], attention_mask=io["mask"]).logits
        torch.testing.assert_close(logits, io["expected"], rtol=0, atol=0)
        print("REMOTE-OK", type(model).__module__)
    """)
    result = run_without_package(script, tmp_path)
    assert "REMOTE-OK transformers_modules" in result.stdout, result.stderr[-3000:]


@pytest.mark.parametrize("activation, refusal", [
    ("swishy", r"hidden_act='swishy' is not an activation hf_vanilla or transformers knows; choose one of 'relu'.*"
               r"`sorted\(ACT2FN\)` lists them"),
    ("prelu", r"hidden_act='prelu' has trained parameters of its own"),
])
def test_an_activation_transformers_lacks_or_that_has_parameters_is_refused_in_one_sentence(activation, refusal):
    with pytest.raises(ValueError, match=refusal):
        tiny_config("decoder", hidden_act=activation)


#: What transformers prints before it waits for an answer (transformers.dynamic_module_utils.resolve_trust_remote_code).
PROMPT = "Do you wish to run the custom code?"


def load_tokenizer_without_the_package(folder, call: str) -> subprocess.CompletedProcess:
    """``call`` in a fresh Python where hf_vanilla cannot be imported, with no stdin (a prompt reads end of file
    instead of waiting) and a time limit; it prints the tokenizer's class and the ids of a sentence."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_MODULES_CACHE=str(folder / "modules"), HF_HUB_OFFLINE="1")
    script = textwrap.dedent(f"""
        import sys
        sys.modules["hf_vanilla"] = None  # any import of the package fails
        from transformers import AutoTokenizer
        tokenizer = {call}
        print("TOKENIZER", type(tokenizer).__name__, tokenizer("the cat sat").input_ids)
    """)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=folder,
                          stdin=subprocess.DEVNULL, timeout=300)


def test_a_saved_tokenizer_loads_with_auto_tokenizer_and_no_prompt_as_far_as_transformers_allows(tmp_path):
    """Issue 38 item 8a. The tokenizer is a standard one (tokenizer_class TokenizersBackend), but transformers 5.25's
    AutoTokenizer.from_pretrained calls AutoConfig.from_pretrained before it reads tokenizer_config.json, and
    AutoConfig asks before running code whenever config.json's auto_map names AutoConfig and its model_type is not
    registered: nothing in the saved files can skip the question (docs/hub.md). What holds: trust_remote_code=False
    loads it with no prompt and runs none of the folder's code; with no stdin the plain call loads it too, after the
    question; with hf_vanilla imported (registered) the plain call asks nothing."""
    from hf_vanilla.files.atomic import save_pretrained_atomic
    from tests.factories import tiny_tokenizer

    folder = tmp_path / "run"
    tokenizer = tiny_tokenizer("decoder")
    save_pretrained_atomic(tokenizer, folder)
    save_pretrained_atomic(tiny_model("decoder"), folder)
    assert {"config.json", "tokenizer.json", "tokenizer_config.json"} <= set(os.listdir(folder))
    expected = f"TOKENIZER {type(tokenizer).__name__} {tokenizer('the cat sat').input_ids}"

    declined = load_tokenizer_without_the_package(folder, "AutoTokenizer.from_pretrained('.', trust_remote_code=False)")
    assert expected in declined.stdout and PROMPT not in declined.stdout + declined.stderr, declined.stderr[-3000:]
    assert not (folder / "modules").exists() or not any((folder / "modules").rglob("*.py"))  # no code was loaded

    plain = load_tokenizer_without_the_package(folder, "AutoTokenizer.from_pretrained('.')")
    assert expected in plain.stdout, plain.stderr[-3000:]
    # transformers' limitation, pinned: when this fails, transformers stopped asking; say so in docs/hub.md
    assert PROMPT in plain.stdout, plain.stdout

    with_package = subprocess.run(
        [sys.executable, "-c", "import hf_vanilla\nfrom transformers import AutoTokenizer\n"
                               f"print(AutoTokenizer.from_pretrained({str(folder)!r})('the cat sat').input_ids)"],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert with_package.stdout.strip() == str(tokenizer("the cat sat").input_ids), with_package.stderr[-3000:]
    assert PROMPT not in with_package.stdout + with_package.stderr
