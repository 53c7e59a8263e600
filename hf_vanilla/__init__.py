"""hf_vanilla: the transformer of "Attention Is All You Need" as first-class Hugging Face models.

``import hf_vanilla`` registers the classes with transformers' Auto classes (``AutoConfig``,
``AutoModelForCausalLM``, ...), so a saved model loads without ``trust_remote_code``. The public names
below load on first use.
"""

import importlib
import sys
from pathlib import Path

__version__ = "0.1.0"

#: Public name -> the submodule that defines it.
_PUBLIC = {
    "PRESETS": "presets",
    "VanillaConfig": "configuration_vanilla",
    **{name: "modeling_vanilla" for name in (
        "VanillaPreTrainedModel", "VanillaModel", "VanillaForCausalLM", "VanillaForMaskedLM", "VanillaForSeq2SeqLM",
        "VanillaForSequenceClassification", "VanillaForTokenClassification", "VanillaForQuestionAnswering")},
}

__all__ = list(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
    globals()[name] = value
    return value


def register() -> None:
    """Register the classes with the Auto classes (idempotent). ``import hf_vanilla`` calls it, except in
    the ``hf-vanilla`` command, which calls it once a subcommand runs (so ``hf-vanilla --help`` imports no torch).

    Local registration makes AutoModel* find the classes; ``register_for_auto_class`` makes every
    ``save_pretrained`` write ``auto_map`` and copy the code, so ``trust_remote_code=True`` loads it elsewhere.
    """
    # torch and transformers when registration runs, not at `import hf_vanilla.cli` (start-up time of --help)
    import transformers

    from . import modeling_vanilla
    from .configuration_vanilla import AUTO_CLASSES, VanillaConfig

    transformers.AutoConfig.register(VanillaConfig.model_type, VanillaConfig, exist_ok=True)
    VanillaConfig.register_for_auto_class()
    for name, auto_name in AUTO_CLASSES.items():
        model = getattr(modeling_vanilla, name)
        getattr(transformers, auto_name).register(VanillaConfig, model, exist_ok=True)
        model.register_for_auto_class(auto_name)
    _register_peft_defaults()


def _register_peft_defaults() -> None:
    """Tell PEFT which modules LoRA adapts by default, so `LoraConfig()` needs no `target_modules`."""
    import importlib.util  # start-up time: only registration asks

    if importlib.util.find_spec("peft") is None:
        return
    import peft.utils.constants  # noqa: F401  (the package may import PEFT; the model files only tell an imported one)

    from .modeling_vanilla import tell_peft_lora_targets  # torch, once registration runs (start-up time)

    tell_peft_lora_targets()


#: Commands that register the Auto classes themselves once their arguments are checked, so that a refusal needs
#: no torch: the ``hf-vanilla`` console script and the README's main job (scripts/main_job.py).
_SELF_REGISTERING = ("hf-vanilla", "main_job")


def _started_as_command() -> bool:
    """Whether this process is one of :data:`_SELF_REGISTERING`: a console script (``hf-vanilla.exe`` on Windows), a script,
    or ``python -m hf_vanilla.cli`` (as ``accelerate launch -m hf_vanilla.cli`` starts it)."""
    argv = getattr(sys, "orig_argv", [])
    by_module = any(a == "-m" and b == "hf_vanilla.cli" for a, b in zip(argv, argv[1:], strict=False))
    return by_module or Path(sys.argv[0]).stem in _SELF_REGISTERING


if not _started_as_command():  # the command registers when a subcommand runs
    register()
