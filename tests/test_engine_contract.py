"""What serving engines rely on, checked without them (vLLM's Transformers backend is a 3.5 GB install).

vLLM builds the bare model with ``AutoModel.from_config`` (first on the meta device), wraps the class that
``get_decoder()`` returns in its compile decorator (the config the only positional argument), calls
``model(input_ids, position_ids=[1, T], use_cache=False, return_dict=False)`` with every request flattened into
one row, attends through a function it registers in transformers' ``AttentionInterface`` that receives queries,
keys and values only, and swaps in its fused kernels where a norm or gated FFN computes as Llama's does.
"""

import ast
import inspect
import json
import operator
import textwrap

import pytest
import torch
from torch import fx, nn
from transformers import (
    AttentionInterface,
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    LlamaConfig,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaMLP, LlamaRMSNorm

import hf_vanilla as hv
from hf_vanilla import modeling_vanilla, positional, variants
from tests.factories import FAMILIES, SCHEMES, run_without_package, tiny_config, tiny_model

BIAS_SCHEMES = variants.values_where("position_embedding_type", attention_bias=True)
UNBIASED_SCHEMES = tuple(scheme for scheme in SCHEMES if scheme not in BIAS_SCHEMES)
AUTO_FOR_FAMILY = {"encoder": AutoModelForMaskedLM, "decoder": AutoModelForCausalLM}

# ----------------------------------------------------------------------------------------------
# auto_map: every Auto class that fits the family, so the saved folder loads without the package


#: What a saved folder must name, written out per family (not derived from the code under test).
EXPECTED_AUTO_MAP = {
    "decoder": {
        "AutoConfig": "configuration_vanilla.VanillaConfig",
        "AutoModel": "modeling_vanilla.VanillaModel",
        "AutoModelForCausalLM": "modeling_vanilla.VanillaForCausalLM",
        "AutoModelForSequenceClassification": "modeling_vanilla.VanillaForSequenceClassification",
        "AutoModelForTokenClassification": "modeling_vanilla.VanillaForTokenClassification",
        "AutoModelForQuestionAnswering": "modeling_vanilla.VanillaForQuestionAnswering",
    },
    "encoder": {
        "AutoConfig": "configuration_vanilla.VanillaConfig",
        "AutoModel": "modeling_vanilla.VanillaModel",
        "AutoModelForMaskedLM": "modeling_vanilla.VanillaForMaskedLM",
        "AutoModelForSequenceClassification": "modeling_vanilla.VanillaForSequenceClassification",
        "AutoModelForTokenClassification": "modeling_vanilla.VanillaForTokenClassification",
        "AutoModelForQuestionAnswering": "modeling_vanilla.VanillaForQuestionAnswering",
    },
    "encoder-decoder": {
        "AutoConfig": "configuration_vanilla.VanillaConfig",
        "AutoModel": "modeling_vanilla.VanillaModel",
        "AutoModelForSeq2SeqLM": "modeling_vanilla.VanillaForSeq2SeqLM",
        "AutoModelForSequenceClassification": "modeling_vanilla.VanillaForSequenceClassification",
    },
}


@pytest.mark.parametrize(
    ("family", "head"),
    [(family, head) for family, entries in EXPECTED_AUTO_MAP.items() for head in entries.values()
     if head.startswith("modeling_vanilla.")],
)
def test_a_saved_folder_names_every_auto_class_that_fits_its_family(family, head, tmp_path):
    head_class = getattr(hv, head.split(".")[1])
    torch.manual_seed(0)
    head_class(tiny_config(family, "rope", num_labels=3)).save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["auto_map"] == EXPECTED_AUTO_MAP[family]


def test_an_auto_map_entry_already_in_the_config_is_kept(tmp_path):
    model = tiny_model("decoder", "rope")
    mine = {"AutoModelForSequenceClassification": "my_code.MyClassifier", "AutoTokenizer": [None, "tok.MyTokenizer"]}
    model.config.auto_map = dict(mine)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert {key: saved[key] for key in mine} == mine
    assert saved["AutoModel"] == "modeling_vanilla.VanillaModel"


def test_the_saved_card_still_loads_the_saved_head():
    from hf_vanilla.publishing.card import saved_auto_class

    config = {"architectures": ["VanillaForCausalLM"], "auto_map": EXPECTED_AUTO_MAP["decoder"]}
    assert saved_auto_class(config) == "AutoModelForCausalLM"


def test_automodel_loads_and_builds_every_family_in_a_process_without_the_package(tmp_path):
    """As vLLM does it: the config and the bare model from the folder's own code, on the meta device too, and the
    decoder class rebuilt from the config alone."""
    cases = {}
    for family in FAMILIES:
        folder = tmp_path / family
        model = tiny_model(family, "rope")
        model.save_pretrained(folder)
        ids = torch.tensor([[5, 6, 7, 8]])
        inputs = dict(input_ids=ids) if family != "encoder-decoder" else dict(input_ids=ids, decoder_input_ids=ids)
        with torch.no_grad():
            expected = model.model(**inputs).last_hidden_state
        torch.save({"inputs": inputs, "expected": expected}, folder / "io.pt")
        cases[family] = str(folder)
    script = textwrap.dedent(f"""
        import torch
        from transformers import AutoConfig, AutoModel
        for family, folder in {cases!r}.items():
            model = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
            assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
            io = torch.load(folder + "/io.pt", weights_only=True)
            with torch.no_grad():
                torch.testing.assert_close(model(**io["inputs"]).last_hidden_state, io["expected"], rtol=0, atol=0)
            config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
            with torch.device("meta"):
                on_meta = AutoModel.from_config(config, trust_remote_code=True)
            assert {{p.device.type for p in on_meta.parameters()}} == {{"meta"}}
            decoder_class = type(on_meta.get_decoder())
            with torch.device("meta"):
                decoder_class(config)
            print("LOADED", family, type(on_meta).__name__, decoder_class.__name__)
    """)
    result = run_without_package(script, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[:3] == [
        "LOADED encoder VanillaModel VanillaModel",
        "LOADED decoder VanillaModel VanillaModel",
        "LOADED encoder-decoder VanillaModel VanillaDecoder",
    ]


def test_a_bare_lora_config_adapts_every_family_loaded_through_remote_code_alone(tmp_path):
    """PEFT keys LoRA's default targets by model_type and reads nothing else from the model: the model files tell an
    imported PEFT when a model is built, so ``LoraConfig()`` works without ``import hf_vanilla`` (it failed:
    'Please specify `target_modules`')."""
    pytest.importorskip("peft")
    folders = {}
    for family in FAMILIES:
        tiny_model(family, "rope").save_pretrained(tmp_path / family)
        folders[family] = str(tmp_path / family)
    script = textwrap.dedent(f"""
        import peft
        from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSeq2SeqLM
        heads = {{"encoder": AutoModelForMaskedLM, "decoder": AutoModelForCausalLM,
                  "encoder-decoder": AutoModelForSeq2SeqLM}}
        for family, folder in {folders!r}.items():
            model = heads[family].from_pretrained(folder, trust_remote_code=True)
            assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
            adapted = peft.get_peft_model(model, peft.LoraConfig())
            targeted = sorted({{name.split(".")[-1] for name, module in adapted.named_modules() if hasattr(module, "lora_A")}})
            print("LORA", family, *targeted)
    """)
    result = run_without_package(script, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[:3] == [f"LORA {family} q_proj v_proj" for family in FAMILIES]


# ----------------------------------------------------------------------------------------------
# Construction: the stacks from the config alone, everything on the meta device


@pytest.mark.parametrize("stack", [modeling_vanilla.VanillaEncoder, modeling_vanilla.VanillaDecoder])
def test_a_stack_takes_the_config_as_its_only_positional_argument(stack):
    parameters = list(inspect.signature(stack.__init__).parameters.values())[1:]
    assert parameters[0].name == "config" and parameters[0].annotation is hv.VanillaConfig
    assert all(p.kind is p.KEYWORD_ONLY and p.default is not p.empty for p in parameters[1:]), parameters


@pytest.mark.parametrize("family", FAMILIES)
def test_the_class_an_engine_compiles_takes_the_config_alone_and_the_inputs_it_marks(family):
    """vLLM decorates ``type(model.get_decoder())``: its __init__ gets the config as the only positional argument
    and its forward must name the arguments whose length varies (input_ids, inputs_embeds, position_ids)."""
    compiled = type(hv.VanillaModel(tiny_config(family, "rope")).get_decoder())
    parameters = list(inspect.signature(compiled.__init__).parameters.values())[1:]
    assert [p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD] == ["config"]
    assert {"input_ids", "inputs_embeds", "position_ids"} <= set(inspect.signature(compiled.forward).parameters)


def refusing_positional_arguments(init):
    """vLLM's compile decorator replaces ``__init__`` with one that refuses any positional argument but the config."""

    def guarded(self, *args, **kwargs):
        if len(args) != 1 or not isinstance(args[0], hv.VanillaConfig):
            raise TypeError(f"{type(self).__name__} got positional arguments {[type(a).__name__ for a in args]}")
        init(self, *args, **kwargs)

    return guarded


@pytest.mark.parametrize("family", FAMILIES)
def test_the_bare_model_builds_its_stacks_as_an_engine_wraps_them(family, monkeypatch):
    # the decoder family's bare model is its own causal stack: what an engine wraps
    for stack in (modeling_vanilla.VanillaEncoder, modeling_vanilla.VanillaDecoder, hv.VanillaModel):
        monkeypatch.setattr(stack, "__init__", refusing_positional_arguments(stack.__init__))
    config = tiny_config(family, "rope", num_decoder_layers=3 if family == "encoder-decoder" else None)
    with torch.device("meta"):
        model = AutoModel.from_config(config)
    assert {p.device.type for p in model.parameters()} == {"meta"}
    # one token embedding, the bare model's; the stacks borrow it
    assert [name for name, _ in model.named_parameters() if "embed_tokens" in name] == ["embed_tokens.weight"]
    if family != "encoder":
        causal = model.get_decoder()
        assert (causal is model) == (family == "decoder")
        assert len(causal.layers) == (3 if family == "encoder-decoder" else 2)
        assert causal.has_cross_attention == (family == "encoder-decoder")


@pytest.mark.parametrize("family", ["encoder", "decoder"])
def test_a_stack_built_alone_computes_what_it_computes_inside_the_bare_model(family):
    torch.manual_seed(0)
    model = hv.VanillaModel(tiny_config(family, "learned")).eval()
    if family == "encoder":
        alone = modeling_vanilla.VanillaEncoder(model.config).eval()
        weights = {"embed_tokens.weight": model.embed_tokens.weight, **model.encoder.state_dict()}
    else:  # the decoder family's bare model is its own causal stack: the same parts, under the same names
        alone = modeling_vanilla.VanillaDecoder(model.config).eval()
        weights = model.state_dict()
    assert [name for name, _ in alone.named_parameters()] == list(weights)
    alone.load_state_dict(weights)
    ids = torch.tensor([[3, 9, 4, 7]])
    with torch.no_grad():
        torch.testing.assert_close(alone(input_ids=ids).last_hidden_state, model(input_ids=ids).last_hidden_state,
                                   rtol=0, atol=0)


def test_replacing_the_input_embeddings_reaches_the_stacks():
    """vLLM swaps in its own embedding through ``set_input_embeddings``; the stacks must embed with it."""
    model = hv.VanillaModel(tiny_config("encoder-decoder", "rope")).eval()
    replacement = nn.Embedding(model.config.vocab_size, model.config.hidden_size)
    model.set_input_embeddings(replacement)
    assert model.encoder.get_input_embeddings() is replacement and model.decoder.get_input_embeddings() is replacement
    alone = modeling_vanilla.VanillaDecoder(tiny_config("decoder", "rope"))
    alone.set_input_embeddings(replacement)
    assert alone.embed_tokens is replacement and alone.get_input_embeddings() is replacement


class ScaledEmbedding(nn.Embedding):
    """vLLM's replacement for a model's token embedding: a plain lookup, times the ``embed_scale`` it read off the
    model's own embedding (ScaledVocabParallelEmbedding), if that has one."""

    def __init__(self, original: nn.Embedding):
        super().__init__(original.num_embeddings, original.embedding_dim, _weight=original.weight.detach().clone())
        self.factor = getattr(original, "embed_scale", None)

    def forward(self, input_ids):
        embeddings = super().forward(input_ids)
        return embeddings * float(self.factor) if self.factor is not None else embeddings


@pytest.mark.parametrize("scale_embedding", [True, False])
def test_an_engine_replacing_the_token_embedding_keeps_its_scale(scale_embedding):
    model = hv.VanillaModel(tiny_config("decoder", "sinusoidal", scale_embedding=scale_embedding)).eval()
    ids = torch.tensor([[3, 9, 4, 7]])
    with torch.no_grad():
        expected = model(input_ids=ids).last_hidden_state
        model.set_input_embeddings(ScaledEmbedding(model.get_input_embeddings()))
        torch.testing.assert_close(model(input_ids=ids).last_hidden_state, expected, rtol=0, atol=0)


# ----------------------------------------------------------------------------------------------
# Attention through the interface: one call per layer; an engine's q/k/v-only function


def whole_row_attention(module, query, key, value, scaling):
    """Causal (or not) over the whole row, as a kernel that knows nothing of masks computes it."""
    output = nn.functional.scaled_dot_product_attention(
        query, key, value, is_causal=module.is_causal, scale=scaling, enable_gqa=True)
    return output.transpose(1, 2)


def qkv_only_attention(module, query, key, value, attention_mask, scaling=None, attention_instances=None, **kwargs):
    """Registered as vLLM registers its own: queries, keys and values reach the kernel (its attention layer for
    ``module.layer_idx``); the mask and every other keyword (an additive ``position_bias`` included) do not."""
    kernel = attention_instances[module.layer_idx] if attention_instances is not None else whole_row_attention
    return kernel(module, query, key, value, scaling), None


@pytest.fixture
def qkv_only():
    AttentionInterface.register("qkv_only", qkv_only_attention)
    yield "qkv_only"
    del ALL_ATTENTION_FUNCTIONS._global_mapping["qkv_only"]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_bias_schemes_module_adds_a_bias_and_no_other_does(scheme):
    """The table says which schemes add a bias; the built module must do what its row says."""
    module = positional.build_positional_scheme(tiny_config("decoder", scheme), causal=True)
    hidden = torch.zeros(1, 3, 32)
    inputs = module.attention_inputs(hidden, torch.arange(3)[None], torch.arange(3)[None])
    assert (inputs.bias is not None) == (scheme in BIAS_SCHEMES) == module.uses_attention_bias


def assert_refused(scheme: str, implementation: str):
    return pytest.raises(ValueError, match=rf"'{implementation}'.*'{scheme}'.*no additive attention bias.*"
                                           r"'eager', 'sdpa' or 'flex_attention'.*without a bias")


@pytest.mark.parametrize("scheme", BIAS_SCHEMES)
def test_a_bias_scheme_refuses_a_qkv_only_attention_function_however_it_is_chosen(scheme, qkv_only, tmp_path):
    with assert_refused(scheme, qkv_only):
        tiny_config("decoder", scheme, attn_implementation=qkv_only)
    with assert_refused(scheme, qkv_only):
        AutoModelForCausalLM.from_config(tiny_config("decoder", scheme), attn_implementation=qkv_only)
    tiny_model("decoder", scheme).save_pretrained(tmp_path)
    with assert_refused(scheme, qkv_only):
        AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation=qkv_only)
    model = tiny_model("decoder", scheme)
    with assert_refused(scheme, qkv_only):
        model.set_attn_implementation(qkv_only)
    config = tiny_config("decoder", scheme)  # as vLLM does: set on the config (refused there), then build the model
    with assert_refused(scheme, qkv_only):
        config._attn_implementation = qkv_only
    config = tiny_config("decoder", "rope", attn_implementation=qkv_only)  # the scheme changed after the backend
    config.position_embedding_type = scheme
    with assert_refused(scheme, qkv_only):
        AutoModel.from_config(config)
    with assert_refused(scheme, qkv_only):  # after init, as an engine may: refused where it is set, before a forward
        model.config._attn_implementation = qkv_only
    assert model.config._attn_implementation != qkv_only  # the refused value never took effect


@pytest.mark.parametrize("implementation", ["flash_attention_2", "paged|eager", "kernels-community/not-loaded-yet"])
def test_a_bias_scheme_refuses_every_attention_function_without_a_position_bias_parameter(implementation):
    with assert_refused("alibi", implementation.replace("|", r"\|")):
        tiny_config("decoder", "alibi", attn_implementation=implementation)


@pytest.mark.parametrize("scheme", BIAS_SCHEMES)
def test_a_name_no_attention_function_has_gets_transformers_own_refusal(scheme):
    """As for any model (transformers' common test_can_set_attention_dynamically): not a bias refusal, which would
    claim a function is registered under the name; and the model keeps the backend it had."""
    model = tiny_model("decoder", scheme)
    model.set_attn_implementation("sdpa")
    with pytest.raises(ValueError, match='Specified `attn_implementation="foo"` is not supported'):
        model.set_attn_implementation("foo")
    assert model.config._attn_implementation == "sdpa"
    with pytest.raises(ValueError, match='Specified `attn_implementation="foo"` is not supported'):
        AutoModelForCausalLM.from_config(tiny_config("decoder", scheme), attn_implementation="foo")


def test_a_function_that_names_position_bias_declares_it_applies_the_bias(qkv_only):
    def bias_aware(module, query, key, value, attention_mask, scaling=None, position_bias=None, **kwargs):
        return ALL_ATTENTION_FUNCTIONS["sdpa"](module, query, key, value, attention_mask, scaling=scaling,
                                               position_bias=position_bias, **kwargs)

    AttentionInterface.register(qkv_only, bias_aware)
    model = tiny_model("decoder", "alibi")
    ids = torch.tensor([[3, 4, 5, 6]])
    with torch.no_grad():
        expected = model(input_ids=ids).logits
        model.config._attn_implementation = qkv_only
        torch.testing.assert_close(model(input_ids=ids).logits, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scheme", UNBIASED_SCHEMES)
@pytest.mark.parametrize("family", ["encoder", "decoder"])
def test_a_scheme_without_a_bias_runs_through_a_qkv_only_function_as_through_sdpa(family, scheme, qkv_only):
    ids = torch.tensor([[3, 14, 15, 92, 65, 35, 89]])
    with torch.no_grad():
        expected = tiny_model(family, scheme, attn_implementation="sdpa")(input_ids=ids).logits
        model = AUTO_FOR_FAMILY[family].from_config(tiny_config(family, scheme), attn_implementation=qkv_only)
        model.load_state_dict(tiny_model(family, scheme).state_dict())
        torch.testing.assert_close(model.eval()(input_ids=ids).logits, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_each_attention_layer_calls_the_interface_once_with_a_numeric_scale_and_an_int_layer_index(family, qkv_only):
    calls = []

    def counting(module, query, key, value, attention_mask, scaling=None, **kwargs):
        calls.append((module, module.layer_idx, scaling))
        return whole_row_attention(module, query, key, value, scaling), None

    AttentionInterface.register(qkv_only, counting)
    model = tiny_model(family, "rope", num_decoder_layers=3 if family == "encoder-decoder" else None)
    model.config._attn_implementation = qkv_only
    ids = torch.tensor([[3, 4, 5, 6]])
    with torch.no_grad():
        model(input_ids=ids, **({"decoder_input_ids": ids} if family == "encoder-decoder" else {}), use_cache=False)
    attention_layers = [m for m in model.modules() if isinstance(m, modeling_vanilla.VanillaAttention)]
    assert sorted(map(id, (module for module, _, _ in calls))) == sorted(map(id, attention_layers))
    assert all(type(index) is int and isinstance(scale, float) for _, index, scale in calls)
    assert all(index == module.layer_idx and scale == module.scaling for module, index, scale in calls)


# ----------------------------------------------------------------------------------------------
# The flattened batch: every request in one row, positions from position_ids, no mask


class RequestwiseAttention:
    """What vLLM's attention layer does with the flattened row: causal attention within each request, whose
    extent it knows from its own metadata (here the request lengths), never from a mask the model builds."""

    def __init__(self, lengths: list[int]):
        self.lengths = lengths

    def __call__(self, module, query, key, value, scaling):
        pieces = zip(*(tensor.split(self.lengths, dim=2) for tensor in (query, key, value)), strict=True)
        return torch.cat([whole_row_attention(module, q, k, v, scaling) for q, k, v in pieces], dim=1)


@pytest.mark.parametrize("scheme", UNBIASED_SCHEMES)
@pytest.mark.parametrize("family", ["encoder", "decoder"])
def test_requests_flattened_into_one_row_give_each_request_its_own_hidden_states(family, scheme, qkv_only):
    """vLLM's call: ``model(input_ids, position_ids=..., use_cache=False, return_dict=False, attention_instances=...)``
    with every request in one row and no mask; an encoder also gets token types (zeros), as vLLM pads them."""
    torch.manual_seed(0)
    config = tiny_config(family, scheme, num_hidden_layers=3, type_vocab_size=2 if family == "encoder" else 0)
    model = AutoModel.from_config(config, attn_implementation="sdpa").eval()
    prompts = [torch.tensor([[3, 14, 15, 92, 65]]), torch.tensor([[35, 89, 79]]), torch.tensor([[32, 38, 46, 26]])]
    lengths = [prompt.shape[1] for prompt in prompts]
    token_types = {"token_type_ids": torch.zeros(1, sum(lengths), dtype=torch.long)} if family == "encoder" else {}
    with torch.no_grad():
        separate = [model(input_ids=prompt).last_hidden_state[0] for prompt in prompts]
        model.config._attn_implementation = qkv_only
        attention = RequestwiseAttention(lengths)
        flattened = model(
            torch.cat(prompts, dim=1),
            position_ids=torch.cat([torch.arange(length) for length in lengths])[None],
            use_cache=False,
            return_dict=False,
            attention_instances=dict.fromkeys(range(3), attention),  # vLLM's keyword, handed through to attention
            **token_types,
        )[0][0]
    for got, expected in zip(flattened.split(lengths), separate, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------------------------
# Fusers: the norm and the gated FFN compute as Llama's do, in the same dataflow


class EveryModuleALeaf(fx.Tracer):
    """Traces a module's own forward with its submodules as single calls, as vLLM's fusers trace it."""

    def is_leaf_module(self, module: nn.Module, name: str) -> bool:
        return True


def dataflow(module: nn.Module) -> list[tuple]:
    """Each node's operation and operands, operands that are nodes replaced by their position (names dropped)."""
    graph = EveryModuleALeaf().trace(module)
    index = {node: i for i, node in enumerate(graph.nodes)}

    def operand(value):
        return fx.node.map_aggregate(value, lambda v: ("node", index[v]) if isinstance(v, fx.Node) else v)

    return [(node.op, None if node.op == "placeholder" else node.target, operand(node.args), operand(node.kwargs))
            for node in graph.nodes]


def test_the_rms_norm_has_llamas_dataflow_and_numbers():
    ours, llama = modeling_vanilla.VanillaRMSNorm(48, eps=1e-6), LlamaRMSNorm(48, eps=1e-6)
    assert dataflow(ours) == dataflow(llama)
    with torch.no_grad():
        weight = torch.randn(48)
        ours.weight.copy_(weight)
        llama.weight.copy_(weight)
    x = torch.randn(3, 5, 48) * 4
    for dtype in (torch.float32, torch.bfloat16):
        assert torch.equal(ours.to(dtype)(x.to(dtype)), llama.to(dtype)(x.to(dtype)))
    # vLLM's older replacement path rebuilds the class from a size alone to see where the weight starts
    assert torch.equal(modeling_vanilla.VanillaRMSNorm(1).weight.detach(), torch.ones(1))


@pytest.mark.parametrize("activation", ["silu", "gelu"])
def test_the_gated_feed_forward_has_llamas_dataflow_and_numbers(activation):
    config = tiny_config("decoder", "rope", gated_ffn=True, hidden_act=activation, mlp_bias=False)
    ours = modeling_vanilla.build_feed_forward(config).eval()
    llama = LlamaMLP(LlamaConfig(hidden_size=config.hidden_size, intermediate_size=config.intermediate_size,
                                 hidden_act=activation, mlp_bias=False))
    assert dataflow(ours) == dataflow(llama)
    llama.load_state_dict(ours.state_dict())
    x = torch.randn(2, 6, config.hidden_size)
    with torch.no_grad():
        for dtype in (torch.float32, torch.bfloat16):
            assert torch.equal(ours.to(dtype)(x.to(dtype)), llama.to(dtype)(x.to(dtype)))


def forward_syntax(forward) -> ast.AST:
    return ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(forward))))


def self_calls(forward) -> dict[str, int]:
    """How often the forward's source calls each ``self.<name>(...)``."""
    calls = [node.func.attr for node in ast.walk(forward_syntax(forward))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
             and isinstance(node.func.value, ast.Name) and node.func.value.id == "self"]
    return {name: calls.count(name) for name in set(calls)}


def test_the_gated_product_is_one_expression_in_the_forward_as_in_llamas():
    """vLLM rewrites the forward's source, ``act_fn(gate_proj(x)) * up_proj(x)`` -> ``act_fn(gate_up_proj(x))``:
    each of the three must be called once, in that one product, with no closure over the class."""
    forward = modeling_vanilla.VanillaGatedFeedForward.forward
    ours, llamas = self_calls(forward), self_calls(LlamaMLP.forward)
    assert {name: ours[name] for name in ("gate_proj", "up_proj", "act_fn")} == dict.fromkeys(
        ("gate_proj", "up_proj", "act_fn"), 1) == {name: llamas[name] for name in ("gate_proj", "up_proj", "act_fn")}
    assert forward.__code__.co_freevars == ()
    products = [node for node in ast.walk(forward_syntax(forward))
                if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)]
    assert len(products) == 1
    left, right = products[0].left, products[0].right
    assert (left.func.attr, left.args[0].func.attr, right.func.attr) == ("act_fn", "gate_proj", "up_proj")
    assert operator.mul in {node.target for node in EveryModuleALeaf().trace(
        modeling_vanilla.build_feed_forward(tiny_config("decoder", "rope", gated_ffn=True)).eval()).nodes}


def interface_calls(forward) -> list[ast.Call]:
    """Calls in the forward's source of a name assigned from ``ALL_ATTENTION_FUNCTIONS`` (how vLLM finds them)."""
    tree = forward_syntax(forward)
    lookups = {target.id for node in ast.walk(tree) if isinstance(node, (ast.Assign, ast.AnnAssign))
               for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
               if isinstance(target, ast.Name) and "ALL_ATTENTION_FUNCTIONS" in ast.unparse(node.value)}
    return [node for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in lookups]


def test_the_self_attention_forward_is_written_in_one_piece_as_llamas():
    """vLLM reads the attention forward's source: it needs the one attention-interface call there (else "Layer 0
    does not dispatch through the Transformers attention interface"), and fuses q/k/v only where the forward itself
    calls each projection once, all on the same input written the same way."""
    ours, llamas = modeling_vanilla.VanillaAttention.forward, LlamaAttention.forward
    for forward in (ours, llamas):
        (call,) = interface_calls(forward)
        assert [keyword.arg for keyword in call.keywords if keyword.arg == "scaling"] == ["scaling"]
        projections = [node for node in ast.walk(forward_syntax(forward)) if isinstance(node, ast.Call)
                       and isinstance(node.func, ast.Attribute) and node.func.attr in ("q_proj", "k_proj", "v_proj")]
        assert sorted(node.func.attr for node in projections) == ["k_proj", "q_proj", "v_proj"]
        assert len({ast.dump(node.args[0]) for node in projections}) == 1
    assert len(interface_calls(modeling_vanilla.VanillaCrossAttention.forward)) == 1


def test_the_self_attention_forward_is_one_vllm_can_trace():
    """vLLM fx-traces the attention module with shapes run on meta tensors: a forward behind a ``*args`` wrapper
    cannot be traced at all ("co_varnames is too small"), and splatting an input of unknown shape (the rotary
    tables) ends the trace before q/k/v are fused. Only shapes may be splatted."""
    forward = modeling_vanilla.VanillaAttention.forward
    assert not hasattr(forward, "__wrapped__")
    assert list(inspect.signature(forward).parameters)[:2] == ["self", "hidden_states"]
    splatted = [ast.unparse(node.value) for node in ast.walk(forward_syntax(forward)) if isinstance(node, ast.Starred)]
    assert splatted and all(".shape" in value for value in splatted), splatted


# ----------------------------------------------------------------------------------------------
# Encoder-only serving: what marks a model as one


@pytest.mark.parametrize("family", FAMILIES)
def test_only_a_model_with_an_encoder_has_a_non_causal_module(family):
    """vLLM treats a text model holding any module with ``is_causal=False`` as encoder-only (pooling)."""
    model = hv.VanillaModel(tiny_config(family, "rope"))
    non_causal = [name for name, module in model.named_modules() if not getattr(module, "is_causal", True)]
    assert bool(non_causal) == (family != "decoder")
    assert all(name.startswith("encoder") or name.endswith("cross_attn") for name in non_causal), non_causal


def test_a_config_built_for_an_engine_loads_with_automodel(tmp_path):
    """AutoConfig + AutoModel from a causal-LM folder with the package present (vLLM's path with trust_remote_code
    on a machine that has hf_vanilla installed)."""
    tiny_model("decoder", "rope").save_pretrained(tmp_path)
    config = AutoConfig.from_pretrained(tmp_path, trust_remote_code=True)
    assert type(AutoModel.from_config(config, trust_remote_code=True)).__name__ == "VanillaModel"
