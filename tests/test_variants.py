"""The table of variants (hf_vanilla/variants.py) against the code that reads it: every row builds, initialises
itself on the meta device and from a checkpoint missing its weights, and every engine honours it or refuses it.

Every grid here reads the table, so a new row is tested without an edit; ``test_a_scheme_added_as_one_class_and_one_row``
adds a KERPLE-log scheme (per-head additive bias with parameters) the way a contributor would and runs the grid on it.
"""

import dataclasses
import functools
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn
from transformers import AttentionInterface, AutoModel
from transformers import initialization as init
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

import hf_vanilla as hv
from hf_vanilla import engines, modeling_vanilla, positional, support_matrix, variants
from hf_vanilla.variants import rows_of
from tests.factories import HEAD_FOR_FAMILY, config_for_row


def row_id(row: variants.Variant) -> str:
    return f"{row.option}={row.value}"


def head_model(config: hv.VanillaConfig, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return HEAD_FOR_FAMILY[config.architecture](config).eval()


def every_tensor(model: nn.Module) -> dict[str, torch.Tensor]:
    """Parameters and buffers, persistent or not (a meta build leaves non-persistent tables empty too)."""
    return {**dict(model.named_parameters()), **dict(model.named_buffers())}


def assert_drawn_as_a_fresh_build_draws(loaded: nn.Module, fresh: nn.Module, names: set[str]) -> None:
    """Each named tensor finite; a constant or deterministic one (norm weights, biases, sinusoid, ALiBi and RoPE
    tables) equal to the fresh build's; a random one with the fresh build's spread."""
    got, expected = every_tensor(loaded), every_tensor(fresh)
    for name in sorted(names):
        tensor, reference = got[name].detach().float(), expected[name].detach().float()
        assert torch.isfinite(tensor).all(), f"{name} holds non-finite values after initialisation"
        deterministic = name in dict(fresh.named_buffers()) or reference.numel() < 2 or bool(
            (reference == reference.flatten()[0]).all())
        if deterministic:
            torch.testing.assert_close(tensor, reference, msg=f"{name} differs from a fresh build's")
        else:
            ratio = tensor.std().item() / reference.std().item()
            assert 0.7 < ratio < 1.4, f"{name}: std {tensor.std().item():.4g}, a fresh build's {reference.std():.4g}"


def check_row_initialises_itself(row: variants.Variant, folder, **overrides) -> None:
    """Saved with only the token embedding: transformers builds on the meta device and initialises every other
    tensor with the model's ``_init_weights``; each must be drawn as a fresh build draws it."""
    check_initialises_itself(config_for_row(row, **overrides), folder)


def check_initialises_itself(config: hv.VanillaConfig, folder, head: type | None = None) -> None:
    fresh = head_model(config) if head is None else head(config).eval()
    fresh.save_pretrained(folder)
    kept = {"model.embed_tokens.weight": fresh.model.embed_tokens.weight.detach().clone()}
    save_file(kept, str(folder / "model.safetensors"), metadata={"format": "pt"})
    loaded = type(fresh).from_pretrained(folder).eval()
    missing = set(every_tensor(fresh)) - set(kept) - {"lm_head.weight"}  # the tied head is the embedding
    assert_drawn_as_a_fresh_build_draws(loaded, fresh, missing)


def check_scheme_weights_initialise_themselves(scheme: str, folder) -> None:
    """A checkpoint without the scheme's own tensors (they were added after it was saved): only those are drawn."""
    config = config_for_row(variants.row("position_embedding_type", scheme))
    fresh = head_model(config)
    fresh.save_pretrained(folder)
    held_as = f".{variants.row('position_embedding_type', scheme).module_name}."  # RoPE's rotary_emb, the others' positions
    state = {k: v.detach().clone() for k, v in fresh.state_dict().items() if held_as not in k}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    loaded = type(fresh).from_pretrained(folder).eval()
    positions = {name for name in every_tensor(fresh) if held_as in name}
    assert positions or scheme == "none", "the scheme's tensors are not where the test looks for them"
    assert_drawn_as_a_fresh_build_draws(loaded, fresh, positions)
    for name, tensor in loaded.state_dict().items():  # the others exactly as saved
        if name in state:
            assert torch.equal(tensor, state[name]), name


@pytest.mark.parametrize("row", variants.VARIANTS, ids=row_id)
def test_every_row_initialises_itself_on_the_meta_device(row, tmp_path):
    check_row_initialises_itself(row, tmp_path)


@pytest.mark.parametrize("row", variants.VARIANTS, ids=row_id)
def test_every_row_initialises_itself_on_the_meta_device_as_t5_does(row, tmp_path):
    """T5's initialisation (initializer_factor): each module draws its own spread (attention and FFN too, which
    transformers skips in custom code for holding no parameters of their own)."""
    check_row_initialises_itself(row, tmp_path, initializer_factor=1.0, tie_word_embeddings=False)


@pytest.mark.parametrize("factor", [None, 1.0])
@pytest.mark.parametrize("head", ["VanillaForSequenceClassification", "VanillaForTokenClassification",
                                  "VanillaForQuestionAnswering"])
def test_every_understanding_head_initialises_itself_on_the_meta_device(head, factor, tmp_path):
    config = config_for_row(variants.row("architecture", "encoder"), pooler=True, num_labels=3,
                            initializer_factor=factor)
    check_initialises_itself(config, tmp_path, head=getattr(hv, head))


@pytest.mark.parametrize("scheme", variants.values("position_embedding_type"))
def test_every_scheme_initialises_its_weights_missing_from_a_checkpoint(scheme, tmp_path):
    check_scheme_weights_initialise_themselves(scheme, tmp_path)


def test_every_scheme_in_the_table_has_its_class():
    assert set(variants.values("position_embedding_type")) <= set(positional.SCHEME_CLASSES)


# ----------------------------------------------------------------------------------------------
# Engines: vLLM serves a row, serves it through the attribute it reads, or the model refuses before any token


def engine_attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """Registered as vLLM registers its own (from a package that is neither transformers nor hf_vanilla)."""
    out = nn.functional.scaled_dot_product_attention(query, key, value, is_causal=module.is_causal, scale=scaling,
                                                     enable_gqa=True)
    return out.transpose(1, 2), None


@pytest.fixture
def engine():
    AttentionInterface.register("engine_like_vllm", engine_attention)
    yield "engine_like_vllm"
    del ALL_ATTENTION_FUNCTIONS._global_mapping["engine_like_vllm"]


def build_as_vllm_does(config: hv.VanillaConfig, implementation: str) -> nn.Module:
    config._attn_implementation = implementation  # vLLM sets it on the config, then builds the bare model
    return AutoModel.from_config(config)


def check_engine_refuses_or_builds(row: variants.Variant, implementation: str) -> None:
    config = config_for_row(row)
    if row.served_by_vllm:
        build_as_vllm_does(config, implementation)
    else:
        value = config_for_row(row).to_dict()[row.option]
        with pytest.raises(ValueError, match=rf"{row.option}={value!r}"):
            build_as_vllm_does(config, implementation)


@pytest.mark.parametrize("row", variants.VARIANTS, ids=row_id)
def test_vllm_serves_each_row_or_the_model_refuses_it_in_our_words(row, engine):
    check_engine_refuses_or_builds(row, engine)


def test_the_refusal_names_each_option_vllm_cannot_carry_and_where_to_look(engine):
    config = config_for_row(variants.row("lm_head_transform", True), lm_head_bias=True, lm_head_scale=0.5)
    with pytest.raises(ValueError) as refused:
        build_as_vllm_does(config, engine)
    message = str(refused.value)
    assert "lm_head_transform=True" in message and "lm_head_bias=True with lm_head_scale=0.5" in message
    assert "vLLM builds its own output layer" in message and "support-matrix" in message
    assert "the output bias included" in message


def test_an_output_bias_serves_alone_and_is_refused_beside_a_logit_scale(engine):
    """vLLM 0.32 loads the output bias, then multiplies the whole logits by logit_scale: the bias too."""
    build_as_vllm_does(config_for_row(variants.row("lm_head_bias", True)), engine)
    with pytest.raises(ValueError, match=r"lm_head_bias=True with lm_head_scale=0\.5: vLLM multiplies its logits"):
        build_as_vllm_does(config_for_row(variants.row("lm_head_bias", True), lm_head_scale=0.5), engine)
    build_as_vllm_does(config_for_row(variants.row("lm_head_bias", True), lm_head_scale=0.5, architecture="encoder"),
                       engine)  # an encoder's hidden states are pooled: no output layer in vLLM


@pytest.mark.parametrize("family", ["encoder", "decoder"])
def test_a_sequence_classifier_is_refused_in_our_words_when_an_engine_builds_it(family, engine):
    """vLLM builds VanillaForSequenceClassification to take its head, then pools and classifies its own way."""
    config = config_for_row(variants.row("architecture", family), num_labels=3)
    config._attn_implementation = engine
    with pytest.raises(ValueError, match="cannot serve VanillaForSequenceClassification") as refused:
        hv.VanillaForSequenceClassification(config)
    assert engines.VLLM_CLASSIFIER_REFUSAL in str(refused.value)
    hv.VanillaForSequenceClassification(config_for_row(variants.row("architecture", family), num_labels=3))


def test_transformers_own_attention_functions_are_not_taken_for_an_engine():
    for implementation in ("eager", "sdpa", "flex_attention"):
        build_as_vllm_does(config_for_row(variants.row("lm_head_transform", True)), implementation)


@pytest.mark.parametrize("row", [row for row in variants.VARIANTS if row.vllm_reads], ids=lambda row: row.option)
def test_a_row_vllm_reads_through_another_attribute_gives_the_same_logits_that_way(row):
    """vLLM computes ``logit_scale * lm_head(h)``; with no output bias that equals our ``lm_head(scale * h)``."""
    config = config_for_row(row)
    model = head_model(config)
    setting = getattr(config, row.option)
    assert getattr(config, row.vllm_reads) == setting != 1.0
    ids = torch.tensor([[3, 14, 15, 9, 26]])
    with torch.no_grad():
        hidden = model.model(input_ids=ids).last_hidden_state
        as_vllm = getattr(config, row.vllm_reads) * (hidden @ model.lm_head.weight.T)
        torch.testing.assert_close(model(input_ids=ids).logits, as_vllm, rtol=1e-5, atol=1e-5)


def test_the_rows_of_a_config_are_one_per_option():
    """Set to every NON_DEFAULT row's example, a config uses exactly one row of each option; at its defaults, none
    of those rows (MQA's 1 is a value of its own, not one more NON_DEFAULT setting)."""
    examples = {row.option: row.setting for row in variants.VARIANTS if row.value == variants.NON_DEFAULT}
    options = [row.option for row in rows_of(config_for_row(variants.row("architecture", "decoder"), **examples))]
    assert sorted(options) == sorted(variants.options())
    plain = rows_of(config_for_row(variants.row("architecture", "decoder"), num_key_value_heads=4))
    assert not [row for row in plain if row.value == variants.NON_DEFAULT]
    assert [row.value for row in rows_of(config_for_row(variants.row("num_key_value_heads", 1)))
            if row.option == "num_key_value_heads"] == [1]


@pytest.mark.parametrize("row", variants.VARIANTS, ids=row_id)
def test_every_grid_builds_the_row_not_the_default(row):
    """The config each grid builds for a row uses that row, and differs from the same config without it."""
    config = config_for_row(row)
    assert row in rows_of(config)
    if row.value == variants.NON_DEFAULT:
        default = row.default_of(config) if row.default_of else hv.VanillaConfig().to_dict().get(row.option)
        assert getattr(config, row.option) != default


# ----------------------------------------------------------------------------------------------
# A new scheme is one class and one row


class KerpleLogPositions(positional.PositionalScheme):
    """KERPLE-log (Chi et al. 2022): each head adds -r1 * log(1 + r2 * |i - j|), r1 and r2 > 0 learned per head."""

    scheme = "kerple_log"

    def __init__(self, config: hv.VanillaConfig):
        super().__init__()
        self.bias_strength = nn.Parameter(torch.empty(config.num_attention_heads))
        self.distance_scale = nn.Parameter(torch.empty(config.num_attention_heads))

    def init_own_weights(self, config: hv.VanillaConfig) -> None:
        init.ones_(self.bias_strength)
        init.ones_(self.distance_scale)

    def attention_inputs(self, hidden_states, position_ids, key_positions):
        distance = positional.position_distances(position_ids, key_positions).abs()[:, None]  # (batch, 1, q, k)
        r1, r2 = self.bias_strength.abs()[:, None, None], self.distance_scale.abs()[:, None, None]
        bias = -r1 * torch.log1p(r2 * distance)
        return positional.PositionalAttentionInputs(bias=bias.to(hidden_states.dtype).expand(len(hidden_states), -1, -1, -1))


KERPLE = variants.Variant(
    "position_embedding_type", "kerple_log", "log distance penalty per head, two learned numbers a head",
    attention_bias=True, parameters=True, tensor_parallel=variants.TP_WHOLE,
    vllm_refusal="vLLM's attention takes queries, keys and values only: the additive bias would be dropped",
    engines=(variants.PIPELINE_PARALLEL, *variants.EXPORTERS),  # what test_a_scheme_added_as_one_class... checks
)


@pytest.fixture
def kerple():
    with variants.registered(KERPLE) as row:  # the class registered itself when it was defined
        yield row


def test_a_scheme_added_as_one_class_and_one_row(kerple, engine, tmp_path):
    config = config_for_row(kerple)
    assert config.base_model_pp_plan is not None  # acts inside attention: a stage's hidden states need nothing added
    assert not any(".self_attn." in name for name in config.base_model_tp_plan)  # its row keeps heads whole
    model = head_model(config)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[3, 4, 5, 6]])).logits
    assert torch.isfinite(logits).all() and model.model.positions.uses_attention_bias
    check_row_initialises_itself(kerple, tmp_path / "meta")
    check_scheme_weights_initialise_themselves(kerple.value, tmp_path / "missing")
    check_engine_refuses_or_builds(kerple, engine)
    with pytest.raises(ValueError, match="flash_attention_2.*'kerple_log'.*no additive attention bias"):
        config_for_row(kerple, attn_implementation="flash_attention_2")
    for exporter in variants.EXPORTERS:  # the row names no exporter's failure: each must give the model's logits
        check_row_exports_or_fails_as_declared(kerple, exporter, tmp_path)
    for target in variants.TO_HF_TARGETS:  # the row names no target: each refuses it
        check_target_converts_or_refuses(kerple, target)


# ----------------------------------------------------------------------------------------------
# A new norm and a new activation are one row each, and one class each where they have parameters


SCALENORM = variants.Variant("norm_type", "scalenorm", "ScaleNorm: g * x / ||x||, one learned g (Nguyen & Salazar)",
                             parameters=True, engines=(variants.TORCH_EXPORT,))
SWISH_BETA = variants.Variant("hidden_act", "swish_beta", "x * sigmoid(beta * x), beta learned (Ramachandran et al.)",
                              parameters=True, engines=(variants.TORCH_EXPORT,))


@pytest.fixture
def scalenorm_and_swish_beta():
    """Both rows and both classes, registered for this test alone and taken out again afterwards."""

    class ScaleNorm(modeling_vanilla.VanillaNorm, nn.Module):
        norm_type = "scalenorm"

        def __init__(self, config: hv.VanillaConfig):
            super().__init__()
            self.gain = nn.Parameter(torch.empty(1))
            self.eps = config.norm_eps

        @classmethod
        def from_config(cls, config: hv.VanillaConfig) -> "ScaleNorm":
            return cls(config)

        def init_own_weights(self, config: hv.VanillaConfig) -> None:
            init.constant_(self.gain, config.hidden_size**0.5)

        def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
            return self.gain * hidden_states / hidden_states.norm(dim=-1, keepdim=True).clamp_min(self.eps)

    class SwishBeta(positional.InitialisesItself, modeling_vanilla.RowActivation):
        activations = ("swish_beta",)

        def __init__(self, config: hv.VanillaConfig):
            super().__init__()
            self.beta = nn.Parameter(torch.empty(1))

        def init_own_weights(self, config: hv.VanillaConfig) -> None:
            init.constant_(self.beta, 1.5)

        def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
            return hidden_states * torch.sigmoid(self.beta * hidden_states)

    try:
        with variants.registered(SCALENORM), variants.registered(SWISH_BETA):
            yield ScaleNorm, SwishBeta
    finally:
        del modeling_vanilla.NORM_CLASSES["scalenorm"], modeling_vanilla.ACTIVATION_CLASSES["swish_beta"]


def test_a_norm_and_an_activation_added_as_one_row_and_one_class_each(scalenorm_and_swish_beta, engine, tmp_path):
    """What docs/architecture.md counts: no package file changes; the grids' checks run on both rows as they are."""
    norm_class, activation_class = scalenorm_and_swish_beta
    for row, module_class in ((SCALENORM, norm_class), (SWISH_BETA, activation_class)):
        config = config_for_row(row)
        model = head_model(config)
        assert any(isinstance(module, module_class) for module in model.modules())
        ids = torch.tensor([[3, 4, 5, 6, 7]])
        with torch.no_grad():
            logits = model(input_ids=ids).logits
        assert torch.isfinite(logits).all()
        model.save_pretrained(tmp_path / row.value)
        loaded = type(model).from_pretrained(tmp_path / row.value).eval()
        with torch.no_grad():
            torch.testing.assert_close(loaded(input_ids=ids).logits, logits, rtol=0, atol=0)
        check_row_initialises_itself(row, tmp_path / f"{row.value}-meta")
        check_engine_refuses_or_builds(row, engine)
        check_row_exports_or_fails_as_declared(row, variants.TORCH_EXPORT, tmp_path)
        for target in variants.TO_HF_TARGETS:  # the rows name no target: each refuses them, naming the value
            check_target_converts_or_refuses(row, target)
    from hf_vanilla.convert import to_hf

    with pytest.raises(ValueError, match=r"hidden_act='swish_beta' \(llama has no such hidden_act; the table of "
                                         r"variants converts it to no target\)"):
        to_hf(head_model(config_for_row(SWISH_BETA, gated_ffn=True)), model_type="llama")


#: Written as a contributor writes them: a row each, through the table's own helper for activations, naming no
#: conversion target and no engine (none was checked).
CENTRED_NORM = variants.Variant("norm_type", "centred", "x - mean(x), times a weight, plus a bias", parameters=True)
SQUAREPLUS = variants._activation("squareplus", "(x + sqrt(x^2 + 4)) / 2, a smooth relu (So, 2021)")


@pytest.fixture
def centred_norm_and_squareplus():
    """A norm named neither LayerNorm nor RMSNorm whose weight starts at 1 and bias at 0 (VanillaNorm's
    docstring), drawing nothing itself; and a parameter-free activation outside ACT2FN."""
    from transformers.activations import ACT2FN

    assert "squareplus" not in ACT2FN

    class CentredNorm(modeling_vanilla.VanillaNorm, nn.Module):
        norm_type = "centred"

        def __init__(self, config: hv.VanillaConfig):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(config.hidden_size))
            self.bias = nn.Parameter(torch.zeros(config.hidden_size))

        @classmethod
        def from_config(cls, config: hv.VanillaConfig) -> "CentredNorm":
            return cls(config)

        def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
            return self.weight * (hidden_states - hidden_states.mean(-1, keepdim=True)) + self.bias

    class Squareplus(modeling_vanilla.RowActivation):
        activations = ("squareplus",)

        def __init__(self, config: hv.VanillaConfig):
            super().__init__()

        def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
            return (hidden_states + torch.sqrt(hidden_states * hidden_states + 4)) / 2

    try:
        with variants.registered(CENTRED_NORM), variants.registered(SQUAREPLUS):
            yield CentredNorm, Squareplus
    finally:
        del modeling_vanilla.NORM_CLASSES["centred"], modeling_vanilla.ACTIVATION_CLASSES["squareplus"]


def test_rows_added_without_declarations_initialise_themselves_and_every_target_and_engine_refuses_them(
        centred_norm_and_squareplus, engine, tmp_path):
    """Rows fail closed: a row claims no conversion target and no engine it does not name, and each refuses it in
    our words (never the native model's KeyError); a norm initialises itself whatever its class is called
    (transformers draws only norms named LayerNorm or RMSNorm)."""
    from hf_vanilla.convert import to_hf
    from hf_vanilla.engines import vllm_refusals

    norm_class, _ = centred_norm_and_squareplus
    for row in (CENTRED_NORM, SQUAREPLUS):
        assert row.to_hf == () and row.engines == ()
        config = config_for_row(row)
        check_row_initialises_itself(row, tmp_path / f"{row.value}-meta")  # missing weights, drawn on the meta device
        check_row_initialises_itself(row, tmp_path / f"{row.value}-t5", initializer_factor=1.0)
        setting = f"{row.option}={row.setting!r}"
        assert f"{setting}: {variants.undeclared(variants.VLLM)}" in vllm_refusals(config)
        check_engine_refuses_or_builds(row, engine)
        assert config.base_model_pp_plan is None and not any(".self_attn." in name for name in config.base_model_tp_plan)
        assert all(row.export_refusal(exporter) == variants.undeclared(exporter) for exporter in variants.EXPORTERS)
        for target in variants.TO_HF_TARGETS:
            check_target_converts_or_refuses(row, target)
            with pytest.raises(ValueError) as refused:  # ours, naming the value: not the native model's KeyError
                to_hf(head_model(with_row(native_form_config(target), row)), model_type=target)
            assert "has options with no native transformers counterpart" in str(refused.value)
            assert f"as {target} " in str(refused.value) and f"{setting} ({target} has " in str(refused.value)
    folder = tmp_path / "norm"
    head_model(config_for_row(CENTRED_NORM)).save_pretrained(folder)
    save_file({}, str(folder / "model.safetensors"), metadata={"format": "pt"})  # every weight missing
    loaded = hv.VanillaForCausalLM.from_pretrained(folder)
    norms = [module for module in loaded.modules() if isinstance(module, norm_class)]
    assert norms and all(bool((n.weight == 1).all()) and bool((n.bias == 0).all()) for n in norms)


def test_a_module_with_parameters_nothing_initialises_is_refused_when_the_model_is_built():
    class Gate(nn.Module):  # neither a linear nor an embedding nor an InitialisesItself
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(torch.empty(1))

    model = head_model(config_for_row(variants.row("architecture", "decoder")))
    model.model.gate = Gate()
    with pytest.raises(TypeError, match="Gate holds parameters that nothing initialises"):
        model.initialize_weights()


def test_a_norm_or_activation_row_without_its_class_is_refused_when_the_model_is_built():
    unbuilt_norm = variants.Variant("norm_type", "not_written_yet", "a norm whose class is missing")
    with variants.registered(unbuilt_norm), pytest.raises(ValueError, match="no norm class names it"):
        head_model(config_for_row(unbuilt_norm))
    unbuilt_activation = variants.Variant("hidden_act", "not_written_yet", "an activation whose class is missing")
    with variants.registered(unbuilt_activation), pytest.raises(ValueError, match="neither transformers' ACT2FN"):
        head_model(config_for_row(unbuilt_activation))


def test_a_class_naming_a_value_already_built_is_refused_and_the_shipped_class_stays():
    with pytest.raises(ValueError, match=r"position_embedding_type='alibi' is already built by "
                                         r"hf_vanilla.positional.ALiBiPositions"):
        type("MyALiBi", (positional.PositionalScheme,), {"scheme": "alibi"})
    with pytest.raises(ValueError, match=r"norm_type='rmsnorm' is already built by .*VanillaRMSNorm"):
        type("MyRMSNorm", (modeling_vanilla.VanillaNorm, nn.Module), {"norm_type": "rmsnorm"})
    with pytest.raises(ValueError, match=r"hidden_act='gelu_new' is already built by .*FusedTanhGELU"):
        type("MyGELU", (modeling_vanilla.RowActivation,), {"activations": ("gelu_new",)})
    assert positional.SCHEME_CLASSES["alibi"] is positional.ALiBiPositions
    assert modeling_vanilla.NORM_CLASSES["rmsnorm"] is modeling_vanilla.VanillaRMSNorm
    assert modeling_vanilla.ACTIVATION_CLASSES["gelu_new"] is modeling_vanilla.FusedTanhGELU
    type("PatchedRope", (positional.RotaryPositions,), {})  # a subclass naming no value of its own takes none
    assert positional.SCHEME_CLASSES["rope"] is positional.RotaryPositions


def test_every_norm_and_activation_of_the_table_is_built_by_its_class_or_transformers():
    from transformers.activations import ACT2FN

    assert set(variants.values("norm_type")) <= set(modeling_vanilla.NORM_CLASSES)
    # the row for any other ACT2FN activation is built with its example
    assert {r.setting for r in variants.rows("hidden_act")} <= set(modeling_vanilla.ACTIVATION_CLASSES) | set(ACT2FN)


def test_the_config_reads_the_table_when_asked_not_a_copy_made_at_import():
    """Issue 38 item 5: a row registered after import is seen by the names engines read and by validation."""
    config = config_for_row(variants.row("architecture", "decoder"), lm_head_scale=0.25)
    aliased = variants.Variant("lm_head_scale", 0.25, "a quarter, read by an engine under another name",
                               output_layer=True, vllm_reads="quarter_logit_scale")
    with pytest.raises(AttributeError, match="quarter_logit_scale"):
        config.quarter_logit_scale  # noqa: B018
    with variants.registered(aliased):
        assert config.quarter_logit_scale == 0.25
    sandwich = variants.Variant("norm_position", "sandwich", "a norm before and after each sub-layer")
    with pytest.raises(ValueError, match="norm_position='sandwich' is not supported"):
        config_for_row(sandwich)
    with variants.registered(sandwich):
        assert config_for_row(sandwich).norm_position == "sandwich"


def test_a_row_without_its_class_is_refused_when_the_model_is_built():
    row = variants.Variant("position_embedding_type", "not_written_yet", "a scheme whose class is missing")
    with variants.registered(row), pytest.raises(ValueError, match="no PositionalScheme subclass names it"):
        head_model(config_for_row(row))


def test_a_row_naming_an_unknown_exporter_or_target_is_refused_when_written():
    with pytest.raises(ValueError, match=r"\['onnx'\] unknown exporter.*no unknown target"):
        variants.Variant("norm_type", "scalenorm", "ScaleNorm", export_refusals=(("onnx", "lower case"),))
    with pytest.raises(ValueError, match=r"no unknown exporter.*\['mistral', 't5'\] unknown target"):
        variants.Variant("norm_type", "scalenorm", "ScaleNorm", to_hf=("mistral",), to_hf_conditions=(("t5", "x"),))


def test_a_non_default_row_names_the_example_its_checks_build_and_only_such_a_row_does():
    with pytest.raises(ValueError, match="names the example value"):
        variants.Variant("lm_head_scale", variants.NON_DEFAULT, "a scale with nothing to build it with")
    with pytest.raises(ValueError, match="names the example value"):
        variants.Variant("norm_type", "scalenorm", "ScaleNorm", example="scalenorm")
    assert variants.row("lm_head_scale", variants.NON_DEFAULT).setting == 0.5


def test_a_value_is_in_the_table_once():
    with pytest.raises(ValueError, match="already in the table"):
        variants.register(variants.row("position_embedding_type", "alibi"))
    assert len({(row.option, row.value) for row in variants.VARIANTS}) == len(variants.VARIANTS)


def test_output_layer_rows_are_refused_only_where_vllm_builds_an_output_layer(engine):
    """vLLM pools an encoder's hidden states (no output layer), and a head class computes its own logits."""
    for row in (row for row in variants.VARIANTS if row.output_layer and not row.served_by_vllm):
        build_as_vllm_does(config_for_row(row, architecture="encoder"), engine)
        head_model(config_for_row(row, attn_implementation=engine))


# ----------------------------------------------------------------------------------------------
# Parallel plans and the support matrix read the same rows


def check_parallel_plans(row: variants.Variant) -> None:
    """The plans of the tiny model using ``row`` do what the row says, and every entry names a module or tensor
    the model has (a layer's, through the plan's ``*``)."""
    config = config_for_row(row)
    model = head_model(config)
    assert (config.base_model_pp_plan is None) == bool(row.pipeline_refusal or row.adds_to_embeddings)
    plan = config.base_model_tp_plan
    split = all(used.tensor_parallel == variants.TP_SPLIT for used in rows_of(config))
    assert any(".self_attn." in name for name in plan) == split
    module_names = {name for name, _ in model.model.named_modules()} | {n for n, _ in model.model.named_parameters()}
    assert not [key for key in plan if key.replace(".*.", ".0.") not in module_names], module_names
    for name, style in row.tensor_parallel_plan:  # the row's own entries, under the name its row holds it by
        entries = [key for key in plan if f".{key}".endswith(f".{row.module_name}.{name}")]
        assert entries and all(plan[key] == style for key in entries)


@pytest.mark.parametrize("row", variants.VARIANTS, ids=row_id)
def test_the_parallel_plans_do_what_each_row_says(row):
    check_parallel_plans(row)


class RenamedRelativeBias(positional.RelativePositionBias):
    """T5's bias, held by each stack under a name of its own."""

    scheme = "relative_renamed"


RENAMED_RELATIVE = variants.Variant(
    "position_embedding_type", "relative_renamed", "T5's bucketed bias under another module name",
    attention_bias=True, parameters=True, module_name="relative_bias",
    tensor_parallel_plan=variants.row("position_embedding_type", "relative").tensor_parallel_plan,
    engines=(variants.TENSOR_PARALLEL,),
)


def test_a_scheme_held_under_another_name_is_split_under_that_name():
    """A scheme's own plan entries follow the name its row states (RoPE's is rotary_emb), not `positions`."""
    with variants.registered(RENAMED_RELATIVE):
        check_parallel_plans(RENAMED_RELATIVE)
        assert hasattr(head_model(config_for_row(RENAMED_RELATIVE)).model, "relative_bias")


def test_the_support_matrix_page_is_generated_from_the_tables():
    page = (Path(__file__).resolve().parents[1] / "docs" / "support-matrix.md").read_text(encoding="utf-8")
    assert page == support_matrix.page(), "regenerate: python -m hf_vanilla.support_matrix > docs/support-matrix.md"


def test_the_support_matrix_shows_a_new_row(kerple):
    (line,) = [line for line in support_matrix.matrix().splitlines() if "`position_embedding_type='kerple_log'`" in line]
    for target in variants.TO_HF_TARGETS:  # refused with the value each target has instead
        (native,) = variants.native_values("position_embedding_type", target)
        assert f"refused: {target} has `position_embedding_type={native!r}`" in line
    assert line.count("| yes |") >= len(variants.EXPORTERS)


# ----------------------------------------------------------------------------------------------
# Exporters: a row exports exactly with each exporter, or the exporter fails as the row says


class Logits(nn.Module):
    """One tensor out and no cache, as docs/deploying.md exports a model."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, decoder_input_ids=None):
        seq2seq = {} if decoder_input_ids is None else {"decoder_input_ids": decoder_input_ids}
        return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **seq2seq).logits


def export_inputs(config: hv.VanillaConfig) -> tuple[torch.Tensor, ...]:
    """A batch with a padded row (right padding: every query of a decoder has a real key to attend)."""
    ids = torch.tensor([[3, 14, 15, 9, 26, 5, 35], [8, 40, 7, 9, 3, 0, 0]])  # < every tiny vocabulary
    mask = (ids != 0).long()
    return (ids, mask, ids[:, :5]) if config.is_encoder_decoder else (ids, mask)


def exported_logits(exporter: str, module: nn.Module, inputs: tuple[torch.Tensor, ...], folder) -> torch.Tensor:
    if exporter == variants.TORCH_EXPORT:
        return torch.export.export(module, inputs).module()(*inputs)
    onnxruntime = pytest.importorskip("onnxruntime", reason="ONNX export needs onnx, onnxscript and onnxruntime")
    program = torch.onnx.export(module, inputs, dynamo=True, verbose=False)
    program.save(str(folder / "model.onnx"))
    session = onnxruntime.InferenceSession(str(folder / "model.onnx"))
    feed = {spec.name: tensor.numpy() for spec, tensor in zip(session.get_inputs(), inputs, strict=True)}
    return torch.from_numpy(session.run(None, feed)[0])


Exported = tuple[Exception | None, torch.Tensor | None, torch.Tensor, tuple[torch.Tensor, ...]]

#: What each exporter did with each model the table's rows build, by config (the rows at their default value build
#: one model, exported once): the failure or None, the exported logits, the model's own, the inputs.
EXPORTED_BY_CONFIG: dict[tuple[str, str], Exported] = {}


def export_outcome(exporter: str, config: hv.VanillaConfig, folder) -> Exported:
    module, inputs = Logits(head_model(config)).eval(), export_inputs(config)
    with torch.no_grad():
        expected = module(*inputs)
        try:
            return None, exported_logits(exporter, module, inputs, folder), expected, inputs
        except Exception as failed:  # noqa: BLE001  (judged against the row's declared failure)
            return failed, None, expected, inputs


def check_row_exports_or_fails_as_declared(row: variants.Variant, exporter: str, folder,
                                           outcomes: dict[tuple[str, str], Exported] | None = None) -> None:
    """``outcomes``: earlier exports of the same models to reuse (a row added by a test is exported afresh)."""
    config = config_for_row(row, num_hidden_layers=1)
    key = (exporter, config.to_json_string(use_diff=False))
    outcomes = {} if outcomes is None else outcomes
    if key not in outcomes:
        outcomes[key] = export_outcome(exporter, config, folder)
    failed, got, expected, inputs = outcomes[key]
    refusal = row.export_refusal(exporter)
    if refusal:
        assert failed is not None, f"{exporter} now exports {row_id(row)}: update the row's reason"
        first_sentence = str(failed).split(".")[0]
        assert first_sentence in refusal, f"{exporter} now fails with {first_sentence!r}: update the row's reason"
        return
    if failed is not None:
        raise failed
    assert_same_logits_where_real(got, expected, inputs)


def assert_same_logits_where_real(got: torch.Tensor, expected: torch.Tensor, inputs: tuple[torch.Tensor, ...]) -> None:
    """Compared at the real tokens (a decoder's logits follow the decoder inputs, all real)."""
    real = inputs[1].bool() if len(inputs) == 2 else torch.ones(expected.shape[:2], dtype=torch.bool)
    torch.testing.assert_close(got[real], expected[real], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("row", variants.VARIANTS, ids=row_id)
def test_torch_export_carries_each_row_or_fails_as_it_says(row, tmp_path):
    check_row_exports_or_fails_as_declared(row, variants.TORCH_EXPORT, tmp_path, EXPORTED_BY_CONFIG)


#: Checked by ONNX in the default run: the refused rows, and those whose attention bias has parameters (torch 2.13's
#: ONNX decomposition fails on a bias that requires grad; under torch.no_grad(), as exported here, it carries it).
ONNX_CHECKED = [row for row in variants.VARIANTS
                if row.export_refusal(variants.ONNX) or (row.attention_bias and row.parameters)]


@pytest.mark.parametrize("row", ONNX_CHECKED, ids=row_id)
def test_onnx_carries_each_row_or_fails_as_it_says(row, tmp_path):
    check_row_exports_or_fails_as_declared(row, variants.ONNX, tmp_path)


@pytest.mark.slow  # about 8 s a row on one core
@pytest.mark.parametrize("row", [row for row in variants.VARIANTS if row not in ONNX_CHECKED],
                         ids=row_id)
def test_onnx_carries_every_other_row_or_fails_as_it_says(row, tmp_path):
    check_row_exports_or_fails_as_declared(row, variants.ONNX, tmp_path)


# ----------------------------------------------------------------------------------------------
# to_hf: a row a target carries converts exactly; a row it does not is refused, naming the option


#: A tiny native model of each to_hf target (tests/test_convert.py's cases); its hf_vanilla twin is the base config.
NATIVE_CASE = {"llama": "llama-gqa-untied-linear-rope", "gpt2": "gpt2", "bert": "bert-mlm", "bart": "bart",
               "marian": "marian", "t5": "t5-relu-tied"}


def test_the_table_names_the_targets_convert_has():
    from hf_vanilla.convert import ARCHITECTURES

    assert variants.TO_HF_TARGETS == tuple(ARCHITECTURES) == tuple(NATIVE_CASE)


def with_row(config: hv.VanillaConfig, row: variants.Variant) -> hv.VanillaConfig:
    """``config`` switched to ``row``'s value, without the fields only its old value read (they would be refused)."""
    fields = config.to_dict()
    fields.pop("architectures", None)  # the head class follows the family, which the row may change
    fields["decoder_start_token_id"] = fields.get("decoder_start_token_id") or fields["pad_token_id"] or 0
    # an option in effect only under another's value (rope_parameters: RoPE) switches that one to it too
    switches = {option: allowed[0] for option, allowed in variants.activating_values(row.option).items()
                if fields[option] not in allowed}
    for option, value in {**switches, row.option: row.setting}.items():
        if fields.get(option) != value:
            for old in (r for r in rows_of(config) if r.option == option):
                for name in old.active_fields:
                    fields.pop(name, None)
        fields[option] = value
    return hv.VanillaConfig.from_dict(fields)


@functools.cache
def native_form_config(target: str) -> hv.VanillaConfig:
    from hf_vanilla.convert import from_hf
    from tests.test_convert import build

    return from_hf(build(NATIVE_CASE[target])[0]).config


Converted = tuple[ValueError | None, torch.Tensor | None, torch.Tensor, tuple[torch.Tensor, ...]]

#: What to_hf did with each model the table's rows build, by target and config (rows at the native model's value
#: build that model, converted once): the refusal or None, the converted model's logits, the model's own, the inputs.
CONVERTED_BY_CONFIG: dict[tuple[str, str], Converted] = {}


def conversion_outcome(target: str, config: hv.VanillaConfig) -> Converted:
    from hf_vanilla.convert import to_hf

    model, inputs = head_model(config), export_inputs(config)
    with torch.no_grad():
        expected = Logits(model)(*inputs)
    try:
        converted = to_hf(model, model_type=target)
    except ValueError as refused:
        return refused, None, expected, inputs
    with torch.no_grad():
        return None, Logits(converted).eval()(*inputs), expected, inputs


def check_target_converts_or_refuses(row: variants.Variant, target: str,
                                     outcomes: dict[tuple[str, str], Converted] | None = None) -> None:
    """``outcomes``: earlier conversions of the same models to reuse (a row added by a test is converted afresh)."""
    config = with_row(native_form_config(target), row)
    key = (target, config.to_json_string(use_diff=False))
    outcomes = {} if outcomes is None else outcomes
    if key not in outcomes:
        outcomes[key] = conversion_outcome(target, config)
    refused, got, expected, inputs = outcomes[key]
    carried = target in row.to_hf
    if refused is not None:
        value = getattr(config, row.option)
        assert f"{row.option}={value!r}" in str(refused), str(refused)
        assert not carried or row.to_hf_condition(target), f"{target} refused a row that says it converts exactly"
        return
    assert carried, f"to_hf gave a {target} for {row.option}={getattr(config, row.option)!r}, which the row refuses"
    assert_same_logits_where_real(got, expected, inputs)


@pytest.mark.parametrize("target", variants.TO_HF_TARGETS)
@pytest.mark.parametrize("row", variants.VARIANTS, ids=row_id)
def test_to_hf_converts_each_row_its_target_carries_and_refuses_the_others(row, target):
    check_target_converts_or_refuses(row, target, CONVERTED_BY_CONFIG)


@pytest.mark.parametrize("target", ["gpt2", "llama"])
@pytest.mark.parametrize("activation", ["tanh", "laplace"])
def test_an_act2fn_activation_no_row_names_converts_with_the_same_logits(activation, target):
    """The row standing for every other ACT2FN activation is checked with its example (mish) by the grids; others
    it stands for convert as it says: the native model takes the name from ACT2FN as hf_vanilla does."""
    (generic,) = (row for row in variants.rows("hidden_act") if row.value == variants.NON_DEFAULT)
    assert target in generic.to_hf and activation not in variants.values("hidden_act")
    check_target_converts_or_refuses(dataclasses.replace(generic, example=activation), target)
