"""The files that travel to the Hub with a model are plain transformers model code (issue 13).

They import only torch, transformers and each other, build plain ``nn.Linear`` layers, reach attention only
through transformers' ``ALL_ATTENTION_FUNCTIONS`` by the name the user chose, override no private method of
transformers, and leave a folder written by ``save_pretrained`` as ordinary as transformers does.
"""

import ast
import inspect
import os
import stat

import pytest
import torch
from torch import nn
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSeq2SeqLM,
    PreTrainedConfig,
)
from transformers.generation import GenerationMixin
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel

from hf_vanilla import configuration_vanilla, modeling_vanilla, positional
from hf_vanilla.checkpoint import code_files
from tests.factories import FAMILIES, model_inputs, padded_batch, tiny_model

TRAVELLING = {"modeling_vanilla.py", "configuration_vanilla.py", "positional.py", "variants.py", "rules.py",
              "engines.py", "transformers_releases.py"}
#: Standard-library modules a model file legitimately needs: none of them touches the file system or the host.
PURE_STDLIB = {"__future__", "typing", "math", "copy", "dataclasses", "collections", "functools", "itertools",
               "inspect",  # inspect: the signature of a registered attention function (does it take position_bias)
               "contextlib",
               "importlib",  # importlib: VanillaConfig.from_preset asks for the package's presets by name
               "re",  # re: older checkpoints' norm names, read by one pattern (LEGACY_KEY_NAMES) as key_mapping reads it
               "sys"}  # sys: sys.modules, whether PEFT is imported (to tell it LoRA's default targets)
#: transformers' own configuration files import `strict` from here (a hard dependency of transformers).
TRANSFORMERS_CONFIG_HELPER = "huggingface_hub.dataclasses"
AUTO_FOR_FAMILY = {"encoder": AutoModelForMaskedLM, "decoder": AutoModelForCausalLM,
                   "encoder-decoder": AutoModelForSeq2SeqLM}


def imported_modules(source: str) -> list[tuple[str, int]]:
    """(module, relative level) of every import statement, wherever it sits in the file."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.module or "", node.level))
    return found


def test_the_travelling_files_are_the_model_files_and_the_table():
    assert {path.name for path in code_files()} == TRAVELLING


def test_the_portable_tests_see_the_checkpoint_as_hf_vanilla_writes_it():
    """tests/test_model_files_portable.py runs without the package (on the oldest transformers): it must copy the
    same files and register the same Auto classes as hf_vanilla.register(), so its saved folders are the package's."""
    from tests import test_model_files_portable as portable

    assert portable.travelling_files() == code_files()
    assert configuration_vanilla.VanillaConfig._auto_class == "AutoConfig"
    registered = {name: getattr(modeling_vanilla, name)._auto_class for name in modeling_vanilla.__all__
                  if getattr(getattr(modeling_vanilla, name), "_auto_class", None) is not None}
    assert registered == portable.AUTO_CLASS_OF


@pytest.mark.parametrize("name", sorted(TRAVELLING))
def test_travelling_file_imports_only_torch_transformers_and_its_siblings(name):
    source = (code_files()[0].parent / name).read_text(encoding="utf-8")
    offenders = []
    for module, level in imported_modules(source):
        top = module.split(".")[0]
        if level == 1 and module.removesuffix(".py") + ".py" in TRAVELLING:
            continue
        if level == 0 and (top in {"torch", "transformers"} | PURE_STDLIB or module == TRANSFORMERS_CONFIG_HELPER):
            continue
        offenders.append("." * level + module)
    assert offenders == [], f"{name} imports {offenders}"


@pytest.mark.parametrize("module", [modeling_vanilla, configuration_vanilla, positional])
def test_no_private_transformers_method_is_overridden(module):
    """Hooks transformers asks models to define (``_init_weights``) are the only underscore methods allowed."""
    bases = (PreTrainedModel, GenerationMixin, PreTrainedConfig, nn.Module)
    overridden = [
        f"{cls.__name__}.{name}"
        for cls in vars(module).values()
        if inspect.isclass(cls) and cls.__module__ == module.__name__
        for name, value in vars(cls).items()
        if name.startswith("_") and not name.startswith("__") and name != "_init_weights"
        and (callable(value) or isinstance(value, classmethod | staticmethod | property))
        and any(hasattr(base, name) for base in bases)
    ]
    assert overridden == []


@pytest.mark.parametrize("family", FAMILIES)
def test_models_loaded_by_from_pretrained_have_plain_linear_layers(family, tmp_path):
    tiny_model(family, "rope").save_pretrained(tmp_path)
    for model in (AUTO_FOR_FAMILY[family].from_pretrained(tmp_path), AutoModel.from_pretrained(tmp_path)):
        linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
        assert linears and {type(m) for m in linears} == {nn.Linear}


@pytest.mark.parametrize("family", ["decoder", "encoder-decoder"])
def test_sdpa_means_the_registered_sdpa_function_even_for_one_cached_token(family, monkeypatch):
    """No kernel is swapped in behind the name the user chose: every call goes through ALL_ATTENTION_FUNCTIONS."""
    registered = ALL_ATTENTION_FUNCTIONS["sdpa"]
    calls = []

    def counting_sdpa(module, query, *args, **kwargs):
        calls.append(query.shape[2])
        return registered(module, query, *args, **kwargs)

    monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS._global_mapping, "sdpa", counting_sdpa)
    model = tiny_model(family, "rope", attn_implementation="sdpa")
    ids, mask = padded_batch(batch=1, length=5)
    model.generate(**model_inputs(family, ids, mask) if family == "decoder" else dict(input_ids=ids),
                   max_new_tokens=3, do_sample=False, eos_token_id=None)
    layers = model.config.num_hidden_layers * (2 if family == "encoder-decoder" else 1)
    assert calls.count(1) >= 2 * layers  # the single-token decoding steps went through the registered function


def module_calls_of_one_decoding_step(model: PreTrainedModel, prompt: torch.Tensor) -> int:
    """Module calls of one cached single-token forward after ``prompt`` (the prefill is not counted)."""
    with torch.no_grad():
        cache = model(input_ids=prompt, use_cache=True).cache
        calls = []
        handle = nn.modules.module.register_module_forward_pre_hook(lambda module, args: calls.append(module))
        try:
            model(input_ids=prompt[:, -1:], cache=cache, use_cache=True)
        finally:
            handle.remove()
    return len(calls)


def test_a_decoding_step_makes_no_more_module_calls_than_llama():
    """At batch 1 a decoding step is mostly Python, module calls its largest part: ours may make one more than
    LlamaForCausalLM with the same shape (the bare model that wraps the stack for all three families), no more."""
    from hf_vanilla.tools import bench

    pair = bench.build_pair("llama", bench.TINY)
    prompt = torch.randint(0, bench.TINY.vocab, (1, 4), generator=torch.Generator().manual_seed(0))
    ours = module_calls_of_one_decoding_step(pair.ours.eval(), prompt)
    assert ours <= module_calls_of_one_decoding_step(pair.reference.eval(), prompt) + 1


def test_token_ids_outside_the_vocabulary_are_refused_on_cpu():
    model = tiny_model("decoder")
    with pytest.raises(ValueError, match=r"Token id 97 is outside the vocabulary \[0, 97\)"):
        model(input_ids=torch.tensor([[3, 97]]))


def modes(folder) -> dict[str, int]:
    return {".": stat.S_IMODE(folder.stat().st_mode)} | {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()}


@pytest.mark.parametrize("family", FAMILIES)
def test_save_pretrained_writes_an_ordinary_folder(family, tmp_path):
    """The modes transformers gives a built-in model's folder (0755 under umask 022), not a private 0700 one."""
    from transformers import LlamaConfig, LlamaForCausalLM

    mask = os.umask(0o022)
    try:
        tiny_model(family).save_pretrained(tmp_path / "ours")
        LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                     num_attention_heads=2)).save_pretrained(tmp_path / "builtin")
    finally:
        os.umask(mask)
    ours, builtin = modes(tmp_path / "ours"), modes(tmp_path / "builtin")
    assert ours["."] == builtin["."] == 0o755
    shared = ours.keys() & builtin.keys()
    assert {"config.json", "model.safetensors"} <= shared
    assert {name: ours[name] for name in shared} == {name: builtin[name] for name in shared}
    assert {ours[name] for name in TRAVELLING} == {builtin["config.json"]}  # the code files: plain files too
