"""transformers' own common model tests held against hf_vanilla's three families, as a built-in model's tests are.

scripts/transformers_common.sh puts this file beside test_modeling_common.py and test_configuration_common.py from
the sdist of the installed transformers and runs pytest there; the default suite never collects it. Each family
runs with one absolute, one rotary and one additive-bias positional scheme. The inputs are prepared as the
built-in testers prepare theirs (BART's for the encoder-decoder: every row ends with its one EOS). A tester's config
is a test input: as GPT-2's and Llama's testers take their own defaults, the decoder's takes its twins' head scale.

Nothing here skips a test of the mixins: a test that does not apply is skipped by the mixin itself, from the model's
own properties, as for GPT-2, BERT and BART (the RoPE tests ask ``hasattr(config, "rope_parameters")``, which only a
config with RoPE has). tests/test_transformers_common.py refuses any skip written here.
"""

import unittest

import transformers
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    T5Config,
    T5ForConditionalGeneration,
)
from transformers.models.auto import modeling_auto

import hf_vanilla as hv
from hf_vanilla import variants

from .generation.test_utils import GenerationTesterMixin
from .test_configuration_common import ConfigTester
from .test_modeling_common import ModelTesterMixin, ids_tensor, random_attention_mask

# The mixin finds the base model and builds each head's labels from transformers' name tables, which list built-in
# models only: enter each class in the table behind the Auto class hf_vanilla registers it with.
for class_name, auto_name in variants.AUTO_CLASSES.items():
    getattr(transformers, auto_name)._model_mapping._model_mapping[hv.VanillaConfig.model_type] = class_name
assert modeling_auto.MODEL_MAPPING_NAMES[hv.VanillaConfig.model_type] == "VanillaModel"

#: Absolute embeddings added to the input, rotation of q and k, a learned bias added to the scores (T5).
SCHEMES = ("sinusoidal", "rope", "relative")
PAD, BOS, EOS = 0, 1, 2


def classes_of(family: str) -> tuple[type, ...]:
    """Every model class hf_vanilla offers for this family, as its saved configs' auto_map lists them."""
    return tuple(getattr(hv, name) for name in variants.row("architecture", family).heads)


#: Options a family's tester takes from its twins. The decoder's head at GPT-2's and Llama's scale, N(0, 0.02), no
#: sqrt(d) on the embeddings: the paper's tied N(0, d^-1/2) embeddings give untrained logits of |8| (theirs 0.8, 0.5),
#: where two bfloat16 steps exceed the padding-free test's rtol = atol = eps (docs/testing.md).
TWIN_SHAPE = {"decoder": {"scale_embedding": False}}


class VanillaModelTester:
    """Sizes as BART's and BERT's testers (13 rows of 7 tokens), inputs as theirs for each family."""

    batch_size, seq_length, vocab_size, hidden_size = 13, 7, 99, 32
    num_hidden_layers, num_attention_heads, is_training = 2, 4, True

    def __init__(self, parent: unittest.TestCase, family: str, scheme: str):
        self.parent, self.family, self.scheme = parent, family, scheme
        self.encoder_seq_length = self.decoder_seq_length = self.seq_length

    def config_kwargs(self) -> dict:
        return dict(architecture=self.family, position_embedding_type=self.scheme, vocab_size=self.vocab_size,
                    hidden_size=self.hidden_size, intermediate_size=37, num_hidden_layers=self.num_hidden_layers,
                    num_attention_heads=self.num_attention_heads, max_position_embeddings=64, hidden_dropout=0.0,
                    pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS, **TWIN_SHAPE.get(self.family, {}))

    def get_config(self) -> hv.VanillaConfig:
        return hv.VanillaConfig(**self.config_kwargs())

    def prepare_config_and_inputs_for_common(self) -> tuple[hv.VanillaConfig, dict]:
        shape = [self.batch_size, self.seq_length]
        input_ids = ids_tensor(shape, self.vocab_size).clamp(min=EOS + 1)
        if self.family != "encoder-decoder":  # as BERT's and GPT-2's testers: a random mask
            return self.get_config(), {"input_ids": input_ids, "attention_mask": random_attention_mask(shape)}
        input_ids[:, -1] = EOS  # as BART's tester: each row ends with its one EOS, where the classifier reads
        attention_mask = input_ids.ne(PAD)
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask,
                  "decoder_input_ids": ids_tensor(shape, self.vocab_size), "decoder_attention_mask": attention_mask}
        return self.get_config(), inputs


class VanillaCommonTests(ModelTesterMixin):
    family: str
    scheme: str

    def setUp(self):
        self.model_tester = VanillaModelTester(self, self.family, self.scheme)
        self.config_tester = ConfigTester(self, config_class=hv.VanillaConfig, **self.model_tester.config_kwargs())

    def test_config(self):
        self.config_tester.run_common_tests()

    def test_inputs_embeds(self):
        if self.is_encoder_decoder:  # as BART's tester: the classifier finds its EOS in input_ids, so it needs them
            self.all_model_classes = tuple(c for c in self.all_model_classes
                                           if c is not hv.VanillaForSequenceClassification)
        super().test_inputs_embeds()


def family_test_case(family: str, scheme: str) -> type:
    """As Llama's and BART's testers: a family with a class that can generate also runs GenerationTesterMixin's tests
    (on every such class, ``all_generative_model_classes``, which the mixins derive from ``can_generate()``)."""
    name = "".join(word.capitalize() for word in (*family.split("-"), scheme)) + "Test"
    classes = classes_of(family)
    generates = (GenerationTesterMixin,) if any(c.can_generate() for c in classes) else ()
    attributes = {"family": family, "scheme": scheme, "all_model_classes": classes,
                  "is_encoder_decoder": family == "encoder-decoder", "__module__": __name__}
    return type(name, (VanillaCommonTests, *generates, unittest.TestCase), attributes)


CASES = [family_test_case(family, scheme) for family in variants.values("architecture") for scheme in SCHEMES]


# The twins: built-in models run through the same GenerationTesterMixin with the same tester (sizes, inputs), so a
# generate() test that fails on ours is read beside the built-in model that has the same position scheme.
def gpt2_config(tester: VanillaModelTester) -> GPT2Config:
    return GPT2Config(vocab_size=tester.vocab_size, n_embd=tester.hidden_size, n_inner=37, n_layer=2, n_head=4,
                      n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, pad_token_id=PAD,
                      bos_token_id=BOS, eos_token_id=EOS)


def llama_config(tester: VanillaModelTester) -> LlamaConfig:
    return LlamaConfig(vocab_size=tester.vocab_size, hidden_size=tester.hidden_size, intermediate_size=37,
                       num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64, pad_token_id=PAD,
                       bos_token_id=BOS, eos_token_id=EOS)


def bart_config(tester: VanillaModelTester) -> BartConfig:
    return BartConfig(vocab_size=tester.vocab_size, d_model=tester.hidden_size, encoder_layers=2, decoder_layers=2,
                      encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37,
                      max_position_embeddings=64, dropout=0.0, attention_dropout=0.0, pad_token_id=PAD,
                      bos_token_id=BOS, eos_token_id=EOS, decoder_start_token_id=BOS)


def t5_config(tester: VanillaModelTester) -> T5Config:
    return T5Config(vocab_size=tester.vocab_size, d_model=tester.hidden_size, d_kv=8, d_ff=37, num_layers=2,
                    num_heads=4, dropout_rate=0.0, pad_token_id=PAD, eos_token_id=EOS, decoder_start_token_id=BOS)


#: (twin, its config at the tester's sizes, the family and scheme of ours it stands beside).
TWINS = ((GPT2LMHeadModel, gpt2_config, "decoder", "sinusoidal"), (LlamaForCausalLM, llama_config, "decoder", "rope"),
         (BartForConditionalGeneration, bart_config, "encoder-decoder", "sinusoidal"),
         (T5ForConditionalGeneration, t5_config, "encoder-decoder", "relative"))


class TwinModelTester(VanillaModelTester):
    """Ours' tester with the twin's config: the same sizes and inputs, so only the model differs."""

    def __init__(self, parent: unittest.TestCase, family: str, scheme: str, make_config):
        super().__init__(parent, family, scheme)
        self.make_config = make_config

    def get_config(self):
        return self.make_config(self)


def twin_test_case(model_class: type, make_config, family: str, scheme: str) -> type:
    """GenerationTesterMixin alone on the twin (its ModelTesterMixin tests are transformers' own to run)."""
    def set_up(self):
        self.model_tester = TwinModelTester(self, family, scheme, make_config)

    attributes = {"setUp": set_up, "all_model_classes": (model_class,), "all_generative_model_classes": (model_class,),
                  "has_attentions": True, "is_encoder_decoder": family == "encoder-decoder", "__module__": __name__}
    return type(f"Twin{model_class.__name__}Test", (GenerationTesterMixin, unittest.TestCase), attributes)


CASES += [twin_test_case(*twin) for twin in TWINS]
globals().update({case.__name__: case for case in CASES})
