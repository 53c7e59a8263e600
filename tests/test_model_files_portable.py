"""The model files that travel with a checkpoint run on every supported transformers release (issue 22).

The package needs the newest transformers; the model files (configuration_vanilla.py, modeling_vanilla.py,
positional.py, variants.py, rules.py, engines.py, transformers_releases.py) run on every release from 5.16.1, the
oldest vLLM supports. This module imports neither hf_vanilla nor the other test helpers, so scripts/test.sh runs it
in a second environment with the oldest release, where the package itself does not install (``pytest --noconftest tests/test_model_files_portable.py``). It loads the files as
``trust_remote_code=True`` does, registers them for the Auto classes as ``hf_vanilla.register()`` does (pinned by
tests/test_model_files.py), and checks forward, cached generation and save-then-reload on the release it finds.
"""

import ast
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from types import ModuleType

import pytest
import torch
from transformers.dynamic_module_utils import get_class_from_dynamic_module, get_relative_import_files

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # with --noconftest nothing else says so; nothing here needs the Hub

PACKAGE = Path(__file__).resolve().parents[1] / "hf_vanilla"


def table_values(option: str) -> tuple:
    """The values of ``option`` in the table of variants, read from variants.py as it travels (standard library only)."""
    spec = importlib.util.spec_from_file_location("travelling_variants", PACKAGE / "variants.py")
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    return table.values(option)


FAMILIES = table_values("architecture")
SCHEMES = table_values("position_embedding_type")
HEAD_FOR_FAMILY = {"encoder": "VanillaForMaskedLM", "decoder": "VanillaForCausalLM",
                   "encoder-decoder": "VanillaForSeq2SeqLM"}
AUTO_FOR_FAMILY = {"encoder": "AutoModelForMaskedLM", "decoder": "AutoModelForCausalLM",
                   "encoder-decoder": "AutoModelForSeq2SeqLM"}
#: The Auto class hf_vanilla.register() registers each model class for (tests/test_model_files.py checks it still does).
AUTO_CLASS_OF = {
    "VanillaModel": "AutoModel",
    "VanillaForCausalLM": "AutoModelForCausalLM",
    "VanillaForMaskedLM": "AutoModelForMaskedLM",
    "VanillaForSeq2SeqLM": "AutoModelForSeq2SeqLM",
    "VanillaForSequenceClassification": "AutoModelForSequenceClassification",
    "VanillaForTokenClassification": "AutoModelForTokenClassification",
    "VanillaForQuestionAnswering": "AutoModelForQuestionAnswering",
}
VOCAB = 97


def travelling_files() -> list[Path]:
    """What hf_vanilla.checkpoint.code_files() lists: the modeling module and everything it imports relatively."""
    module = PACKAGE / "modeling_vanilla.py"
    return [module, *sorted({Path(p) for p in get_relative_import_files(str(module))})]  # each file once


def copy_model_files(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for path in travelling_files():
        shutil.copy(path, folder / path.name)
    return folder


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> ModuleType:
    """The modeling module, imported from a copy of the files the way trust_remote_code imports it, its classes
    registered for the Auto classes as hf_vanilla.register() registers the package's."""
    folder = copy_model_files(tmp_path_factory.mktemp("model_files"))
    modeling = sys.modules[get_class_from_dynamic_module("modeling_vanilla.VanillaModel", str(folder)).__module__]
    modeling.VanillaConfig.register_for_auto_class()
    for name, auto_class in AUTO_CLASS_OF.items():
        getattr(modeling, name).register_for_auto_class(auto_class)
    return modeling


def tiny_model(files: ModuleType, family: str, scheme: str, **overrides):
    config = files.VanillaConfig(
        architecture=family, position_embedding_type=scheme, vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        hidden_dropout=0.0, pad_token_id=0, bos_token_id=1, eos_token_id=2, **overrides,
    )
    torch.manual_seed(0)
    return getattr(files, HEAD_FOR_FAMILY[family])(config).eval()


def padded_inputs(family: str) -> dict[str, torch.Tensor]:
    """Three rows of 7 tokens with 0, 2 and 4 padding tokens (on the left for a decoder, which generates on the right)."""
    ids = torch.randint(3, VOCAB, (3, 7), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    for row, pad in enumerate((0, 2, 4)):
        span = slice(0, pad) if family == "decoder" else slice(7 - pad, 7)
        ids[row, span], mask[row, span] = 0, 0
    inputs = dict(input_ids=ids, attention_mask=mask)
    if family == "encoder-decoder":
        inputs.update(decoder_input_ids=ids[:, :5], decoder_attention_mask=torch.ones_like(ids[:, :5]))
    return inputs


def logits_of(model, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        return model(**inputs).logits


def test_the_model_files_are_loaded_from_their_copy_not_from_the_package(files):
    assert files.__name__.startswith("transformers_modules.model_files")
    assert Path(files.__file__).read_bytes() == (PACKAGE / "modeling_vanilla.py").read_bytes()


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("family", FAMILIES)
def test_forward_on_this_transformers_release(files, family, scheme):
    """Every family and scheme runs, and the backends agree at every real (unpadded) position: sdpa computes what
    the written-out eager reference does."""
    inputs = padded_inputs(family)
    model = tiny_model(files, family, scheme, attn_implementation="eager")
    eager = logits_of(model, inputs)
    model.set_attn_implementation("sdpa")
    real = inputs["decoder_attention_mask" if family == "encoder-decoder" else "attention_mask"].bool()
    assert eager.shape == (*real.shape, VOCAB) and eager.isfinite().all()
    torch.testing.assert_close(logits_of(model, inputs)[real], eager[real], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("family", ["decoder", "encoder-decoder"])
def test_cached_greedy_generation_equals_uncached(files, family, scheme):
    """generate() of this release hands the KV cache back and forth under its own name, without a deprecation
    warning about that name; the scores say the cache was used right (ignored or double-filled, they change)."""
    model = tiny_model(files, family, scheme)
    inputs = padded_inputs(family)
    settings = dict(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], max_new_tokens=6,
                    do_sample=False, eos_token_id=None, output_scores=True, return_dict_in_generate=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        cached = model.generate(**settings, use_cache=True)
    uncached = model.generate(**settings, use_cache=False)
    assert cached.sequences.shape[1] == (7 if family == "decoder" else 1) + 6
    torch.testing.assert_close(cached.sequences, uncached.sequences, rtol=0, atol=0)
    torch.testing.assert_close(torch.stack(cached.scores), torch.stack(uncached.scores), rtol=1e-4, atol=1e-5)


def test_a_forward_returns_the_cache_under_the_name_generate_reads(files):
    model = tiny_model(files, "decoder", "rope")
    inputs = padded_inputs("decoder")
    with torch.no_grad():
        outputs = model(**inputs, use_cache=True)
        name = "cache" if "cache" in outputs.__dataclass_fields__ else "past_key_values"
        cache = getattr(outputs, name)
        assert cache is not None and cache.get_seq_length() == 7
        step = model(input_ids=inputs["input_ids"][:, -1:], **{name: cache}, use_cache=True,
                     attention_mask=torch.cat([inputs["attention_mask"], torch.ones(3, 1, dtype=torch.long)], 1))
    assert getattr(step, name).get_seq_length() == 8


RELOAD = """
import sys
sys.modules["hf_vanilla"] = None  # a user's interpreter: the saved folder, not the package
import torch
import transformers
for folder, auto_name in {cases!r}:
    model = getattr(transformers, auto_name).from_pretrained(folder, trust_remote_code=True).eval()
    # The copy save_pretrained wrote beside the weights runs, not the files the test imported.
    assert type(model).__module__.startswith("transformers_modules.saved_"), type(model).__module__
    io = torch.load(folder + ".pt", weights_only=True)
    with torch.no_grad():
        torch.testing.assert_close(model(**io["inputs"]).logits, io["logits"], rtol=0, atol=0)
    print("RELOADED", auto_name)
"""


def test_save_and_reload_with_trust_remote_code_gives_the_same_logits(files, tmp_path):
    """save_pretrained writes auto_map and the code beside the weights; a fresh interpreter without hf_vanilla
    loads the folder with trust_remote_code=True (where hf_vanilla is imported, transformers >= 5.24 prefers its
    registered classes to the folder's code) and computes the same logits."""
    cases = []
    for family in FAMILIES:
        folder = tmp_path / f"saved_{family.replace('-', '_')}"
        model = tiny_model(files, family, "rope" if family == "decoder" else "alibi")
        model.save_pretrained(folder)
        auto_map = json.loads((folder / "config.json").read_text())["auto_map"]
        assert auto_map["AutoConfig"] == "configuration_vanilla.VanillaConfig"
        assert auto_map[AUTO_FOR_FAMILY[family]] == f"modeling_vanilla.{HEAD_FOR_FAMILY[family]}"
        assert [(folder / p.name).read_bytes() for p in travelling_files()] == [p.read_bytes() for p in travelling_files()]
        inputs = padded_inputs(family)
        torch.save({"inputs": inputs, "logits": logits_of(model, inputs)}, f"{folder}.pt")
        cases.append((str(folder), AUTO_FOR_FAMILY[family]))
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", RELOAD.format(cases=cases)], capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=600)
    assert result.stdout.split() == [word for _, auto in cases for word in ("RELOADED", auto)], result.stderr[-3000:]


def test_a_decoder_folder_under_older_names_loads_exactly_on_this_release(files, tmp_path):
    """A decoder saved before its bare model was its own stack (``model.decoder.layers.N``), with the norm names from
    before each block held its norms (``self_attn_step.norm``): transformers' weight renaming on this release reads
    both, and the logits are the model's."""
    from safetensors.torch import load_file, save_file

    model = tiny_model(files, "decoder", "rope", norm_position="pre")
    with torch.no_grad():  # away from their initial values: a tensor left unread could not pass for loaded
        for tensor in model.parameters():
            tensor.normal_()
    model.save_pretrained(tmp_path)
    saved = load_file(tmp_path / "model.safetensors")
    old = {}
    for name, tensor in saved.items():
        if not name.startswith("model.embed_tokens."):
            name = name.replace("model.", "model.decoder.", 1)
        for sublayer in ("self_attn", "mlp"):
            name = name.replace(f".{sublayer}_norm.", f".{sublayer}_step.norm.")
        old[name] = tensor
    assert sum(name.startswith("model.decoder.layers.") for name in old) >= 8  # the folder really has the old names
    save_file(old, tmp_path / "model.safetensors", metadata={"format": "pt"})
    loaded, info = type(model).from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    inputs = padded_inputs("decoder")
    torch.testing.assert_close(logits_of(loaded.eval(), inputs), logits_of(model, inputs), rtol=0, atol=0)


def test_release_numbers_reads_released_and_development_versions(files):
    release_numbers = sys.modules[files.__name__.rpartition(".")[0] + ".transformers_releases"].release_numbers
    assert release_numbers("5.16.1") == (5, 16, 1)
    assert release_numbers("5.17.0.dev0") == (5, 17, 0)
    assert release_numbers("5.20.0rc1") == (5, 20, 0)
    assert release_numbers("5.9") == (5, 9) < (5, 16, 1)


def test_presets_from_the_travelling_files_without_the_package_say_what_they_need(files, monkeypatch):
    """Presets are package data: the travelling config asks for them by name, and says so in one line where the
    package is absent (simulated here where it is installed)."""
    monkeypatch.setitem(sys.modules, "hf_vanilla", None)
    monkeypatch.delitem(sys.modules, "hf_vanilla.presets", raising=False)
    with pytest.raises(ImportError, match=r"^VanillaConfig.from_preset: presets need the hf_vanilla package "
                                          r"\(pip install hf_vanilla\)$"):
        files.VanillaConfig.from_preset("tiny-gpt2")


REFUSAL = (
    "ImportError: hf_vanilla's model files need transformers>=5.16.1 (found 5.16.0); "
    "pip install -U 'transformers>=5.16.1'"
)


@pytest.mark.parametrize("entry", ["configuration_vanilla", "modeling_vanilla", "positional", "auto_config"])
def test_an_older_transformers_is_refused_at_import_in_one_line(entry, tmp_path):
    """Below 5.16.1 the files stop at import, with one line naming the release needed (simulated: the running
    transformers reports 5.16.0 before any model file is imported, in a fresh interpreter)."""
    folder = copy_model_files(tmp_path / "vanilla_files")
    (folder / "__init__.py").touch()
    (folder / "config.json").write_text(json.dumps(
        {"model_type": "vanilla", "auto_map": {"AutoConfig": "configuration_vanilla.VanillaConfig"}}))
    load = (f"AutoConfig.from_pretrained({str(tmp_path / 'vanilla_files')!r}, trust_remote_code=True)"
            if entry == "auto_config" else f"importlib.import_module('vanilla_files.{entry}')")
    script = textwrap.dedent(f"""
        import importlib, sys
        import transformers
        transformers.__version__ = "5.16.0"
        from transformers import AutoConfig
        sys.path.insert(0, {str(tmp_path)!r})
        {load}
    """)
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 1 and result.stderr.strip().splitlines()[-1] == REFUSAL, result.stderr[-3000:]


def test_this_module_needs_neither_the_package_nor_the_other_test_helpers():
    """It runs where hf_vanilla cannot be installed (an older transformers), with --noconftest."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    imported += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert [name for name in imported if name.split(".")[0] in ("hf_vanilla", "tests")] == []
