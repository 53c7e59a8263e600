"""hf_vanilla: the transformer of "Attention Is All You Need" as first-class Hugging Face models."""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForQuestionAnswering,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from .configuration_vanilla import PRESETS, VanillaConfig
from .modeling_vanilla import (
    VanillaForCausalLM,
    VanillaForMaskedLM,
    VanillaForQuestionAnswering,
    VanillaForSeq2SeqLM,
    VanillaForSequenceClassification,
    VanillaForTokenClassification,
    VanillaModel,
    VanillaPreTrainedModel,
)

__version__ = "0.1.0"

# Local registration makes AutoModel* find the classes when hf_vanilla is imported; `register_for_auto_class`
# makes every save_pretrained write `auto_map` and copy the code, so `trust_remote_code=True` loads it elsewhere.
AutoConfig.register(VanillaConfig.model_type, VanillaConfig, exist_ok=True)
VanillaConfig.register_for_auto_class()
for _auto, _model in (
    (AutoModel, VanillaModel),
    (AutoModelForCausalLM, VanillaForCausalLM),
    (AutoModelForMaskedLM, VanillaForMaskedLM),
    (AutoModelForSeq2SeqLM, VanillaForSeq2SeqLM),
    (AutoModelForSequenceClassification, VanillaForSequenceClassification),
    (AutoModelForTokenClassification, VanillaForTokenClassification),
    (AutoModelForQuestionAnswering, VanillaForQuestionAnswering),
):
    _auto.register(VanillaConfig, _model, exist_ok=True)
    _model.register_for_auto_class(_auto.__name__)



def _register_peft_defaults() -> None:
    """Tell PEFT which modules LoRA adapts by default, so `LoraConfig()` needs no `target_modules`."""
    import importlib.util

    if importlib.util.find_spec("peft") is None:
        return
    from peft.utils import constants

    constants.TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING.setdefault(VanillaConfig.model_type, ["q_proj", "v_proj"])


_register_peft_defaults()

__all__ = [
    "PRESETS",
    "VanillaConfig",
    "VanillaPreTrainedModel",
    "VanillaModel",
    "VanillaForCausalLM",
    "VanillaForMaskedLM",
    "VanillaForSeq2SeqLM",
    "VanillaForSequenceClassification",
    "VanillaForTokenClassification",
    "VanillaForQuestionAnswering",
]
