"""Every family x positional scheme x norm placement x norm type trains, and every attention backend agrees."""

import dataclasses
import inspect
import itertools

import pytest
import torch

import hf_vanilla as hv
from tests.factories import (
    BACKENDS,
    FAMILIES,
    NORM_POSITIONS,
    NORM_TYPES,
    SCHEMES,
    model_inputs,
    padded_batch,
    tiny_config,
    tiny_model,
)

GRID = list(itertools.product(FAMILIES, SCHEMES, NORM_POSITIONS, NORM_TYPES))


@pytest.mark.parametrize("family, scheme, norm_position, norm_type", GRID)
def test_trains_with_finite_loss_and_gradients(family, scheme, norm_position, norm_type):
    model = tiny_model(family, scheme, norm_position=norm_position, norm_type=norm_type,
                       hidden_dropout=0.1, attention_dropout=0.1).train()
    ids, mask = padded_batch()
    inputs = model_inputs(family, ids, mask)
    labels = (inputs.get("decoder_input_ids", ids)).masked_fill(
        (inputs.get("decoder_attention_mask", mask)) == 0, -100
    )
    loss = model(**inputs, labels=labels).loss
    loss.backward()
    assert torch.isfinite(loss) and loss.item() > 0
    grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values()), [n for n, g in grads.items() if g is None]
    # One optimiser step on the same batch lowers the loss: the gradients point somewhere useful.
    torch.optim.SGD(model.parameters(), lr=0.5).step()
    model.eval()
    with torch.no_grad():
        assert model(**inputs, labels=labels).loss < loss


@pytest.mark.parametrize("family, scheme", list(itertools.product(FAMILIES, SCHEMES)))
def test_attention_backends_agree_with_padding(family, scheme):
    model = tiny_model(family, scheme)
    ids, mask = padded_batch(left=family == "decoder")
    inputs = model_inputs(family, ids, mask)
    logits = {}
    for backend in BACKENDS:
        model.set_attn_implementation(backend)
        with torch.no_grad():
            logits[backend] = model(**inputs).logits
    keep = (inputs.get("decoder_attention_mask", mask)).bool()  # padded positions are free to differ
    for backend in BACKENDS[1:]:
        torch.testing.assert_close(logits[backend][keep], logits["eager"][keep], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_output_attentions_and_hidden_states(family):
    depth = dict(num_decoder_layers=3) if family == "encoder-decoder" else {}  # only an encoder-decoder has one
    config = tiny_config(family, "alibi", **depth, attn_implementation="eager")
    model = hv.VanillaModel(config).eval()
    ids, mask = padded_batch()
    out = model(**model_inputs(family, ids, mask), output_attentions=True, output_hidden_states=True)
    if family == "encoder-decoder":
        assert len(out.encoder_hidden_states) == 3 and len(out.decoder_hidden_states) == 4
        assert len(out.encoder_attentions) == 2 and len(out.decoder_attentions) == 3 and len(out.cross_attentions) == 3
        assert out.cross_attentions[0].shape == (3, 4, 6, 9)  # decoder queries over encoder keys
        # Cross-attention gives padded encoder positions no weight.
        assert out.cross_attentions[0][2, :, :, -4:].abs().max() == 0
        attentions = out.decoder_attentions
    else:
        assert len(out.hidden_states) == 3 and len(out.attentions) == 2
        torch.testing.assert_close(out.hidden_states[-1], out.last_hidden_state)
        attentions = out.attentions
    for weights in attentions:
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
    if family != "encoder":
        assert torch.triu(attentions[0][0], diagonal=1).abs().max() == 0  # causal


def test_encoder_decoder_decoder_uses_the_encoder():
    model = tiny_model("encoder-decoder")
    ids, mask = padded_batch()
    inputs = model_inputs("encoder-decoder", ids, mask)
    other = dict(inputs, input_ids=torch.flip(ids, dims=[0]), attention_mask=torch.flip(mask, dims=[0]))
    with torch.no_grad():
        assert not torch.allclose(model(**inputs).logits[0], model(**other).logits[0])


def test_decoder_depth_can_differ_from_encoder_depth():
    model = hv.VanillaForSeq2SeqLM(tiny_config("encoder-decoder", num_hidden_layers=1, num_decoder_layers=3)).eval()
    assert len(model.model.encoder.layers) == 1 and len(model.model.decoder.layers) == 3
    ids, mask = padded_batch()
    generated = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4, do_sample=False)
    assert generated.shape == (3, 5)


def test_encoder_and_decoder_share_one_embedding_matrix():
    model = tiny_model("encoder-decoder")
    embedding = model.get_input_embeddings()
    assert model.model.encoder.get_input_embeddings() is embedding is model.model.decoder.get_input_embeddings()
    assert model.lm_head.weight is embedding.weight  # tie_word_embeddings=True
    names = [n for n, _ in model.named_parameters()]
    assert sum("embed_tokens" in n for n in names) == 1


@pytest.mark.parametrize(
    "head, family",
    [
        (hv.VanillaForSequenceClassification, "encoder"),
        (hv.VanillaForSequenceClassification, "decoder"),
        (hv.VanillaForTokenClassification, "encoder"),
        (hv.VanillaForQuestionAnswering, "encoder"),
    ],
)
def test_understanding_heads(head, family):
    torch.manual_seed(0)
    model = head(tiny_config(family, "rope", num_labels=3)).eval()
    ids, mask = padded_batch()
    if head is hv.VanillaForQuestionAnswering:
        out = model(input_ids=ids, attention_mask=mask, start_positions=torch.tensor([1, 2, 0]),
                    end_positions=torch.tensor([3, 4, 1]))
        assert out.start_logits.shape == out.end_logits.shape == (3, 9)
    elif head is hv.VanillaForTokenClassification:
        out = model(input_ids=ids, attention_mask=mask, labels=torch.randint(0, 3, (3, 9)))
        assert out.logits.shape == (3, 9, 3)
    else:
        out = model(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 1, 2]))
        assert out.logits.shape == (3, 3)
        # The pooled token ignores padding: extra pads do not change a row's prediction.
        longer = torch.cat([ids, torch.zeros(3, 4, dtype=torch.long)], 1)
        longer_mask = torch.cat([mask, torch.zeros(3, 4, dtype=torch.long)], 1)
        torch.testing.assert_close(model(input_ids=longer, attention_mask=longer_mask).logits, out.logits)
    assert torch.isfinite(out.loss)


def test_bad_inputs_get_clear_errors():
    decoder = tiny_model("decoder", "learned")
    with pytest.raises(ValueError, match=r"Token id 97 is outside the vocabulary \[0, 97\)"):
        decoder(input_ids=torch.tensor([[3, 97]]))
    with pytest.raises(ValueError, match=r"Token id -1 is outside"):
        decoder(input_ids=torch.tensor([[3, -1]]))
    with pytest.raises(ValueError, match=r"Position 64 is beyond the 64 learned positions.*truncation=True"):
        decoder(input_ids=torch.full((1, 65), 5))
    with pytest.raises(ValueError, match=r"input_ids is empty"):
        decoder(input_ids=torch.zeros((0, 4), dtype=torch.long))
    with pytest.raises(ValueError, match=r"input_ids is empty"):
        decoder(input_ids=torch.zeros((2, 0), dtype=torch.long))
    encoder = tiny_model("encoder")
    with pytest.raises(ValueError, match=r"decoder_input_ids given to a encoder-only model"):
        encoder.model(input_ids=torch.tensor([[3, 4]]), decoder_input_ids=torch.tensor([[3]]))
    seq2seq = tiny_model("encoder-decoder")
    with pytest.raises(ValueError, match="Pass exactly one of input_ids or inputs_embeds"):
        seq2seq(decoder_input_ids=torch.tensor([[3]]))


def test_bare_encoder_decoder_given_input_ids_alone_shifts_them_into_the_decoder_as_bart_does():
    """BartModel builds decoder_input_ids from input_ids shifted right when none are given; tools that know only
    input_ids (the feature-extraction pipeline) rely on it."""
    from transformers.models.bart.modeling_bart import shift_tokens_right as bart_shift

    torch.manual_seed(0)
    config = tiny_config("encoder-decoder", bos_token_id=1, decoder_start_token_id=2)
    model = hv.VanillaModel(config).eval()
    ids, mask = padded_batch()
    with torch.no_grad():
        alone = model(input_ids=ids, attention_mask=mask).last_hidden_state
        explicit = model(input_ids=ids, attention_mask=mask, decoder_input_ids=bart_shift(ids, 0, 2)).last_hidden_state
    torch.testing.assert_close(alone, explicit, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"neither decoder_input_ids nor decoder_inputs_embeds.*Pass input_ids"):
        model(inputs_embeds=torch.randn(2, 5, 32))


@pytest.mark.parametrize("name", [n for n in hv.modeling_vanilla.__all__ if n != "VanillaPreTrainedModel"])
def test_forward_signatures_advertise_transformers_kwargs(name):
    """Tools read `**kwargs: Unpack[TransformersKwargs]` from the signature (auto_docstring's kwargs probe:
    `parameter.annotation.__args__[0]`); a string annotation (from __future__) hides output_attentions & co."""
    from transformers.utils import TransformersKwargs

    forward = getattr(hv.modeling_vanilla, name).forward
    kwargs = [p for p in inspect.signature(forward).parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD]
    assert len(kwargs) == 1 and hasattr(kwargs[0].annotation, "__args__"), kwargs
    advertised = kwargs[0].annotation.__args__[0]
    assert advertised is TransformersKwargs
    assert {"output_attentions", "output_hidden_states", "num_items_in_batch"} <= advertised.__optional_keys__


#: Modules a model has beyond its twin's, (once, per layer of each stack), each for a reason: BART's, the feed-forward
#: network held as one module (``mlp``, as Llama's: vLLM's GLU fusion traces it as a unit) where BART holds fc1/fc2 on
#: the layer. The decoder family's bare model is its own stack, as LlamaModel: nothing beyond Llama's.
MODULES_BEYOND_THE_TWINS = {"llama": (0, 0), "gpt2": (0, 0), "bert": (0, 0), "bart": (0, 1)}


@pytest.mark.parametrize("pair_name", sorted(MODULES_BEYOND_THE_TWINS))
def test_the_module_tree_is_no_larger_than_the_twins_but_for_the_modules_declared(pair_name):
    """Building and loading walk every module: each block holds its norms itself (no container a sub-layer), dropout
    is a probability held as an attribute (as Llama holds its attention dropout), a parameter-free function held by
    an activation is no child module. Counted at two depths, so a module added to each layer shows as one."""
    from hf_vanilla.tools import bench

    once, per_layer = MODULES_BEYOND_THE_TWINS[pair_name]
    for layers in (2, 4):
        pair = bench.build_pair(pair_name, dataclasses.replace(bench.TINY, layers=layers))
        stacks_layers = pair.ours.config.num_hidden_layers
        ours, twin = len(list(pair.ours.named_modules())), len(list(pair.reference.named_modules()))
        assert not [name for name, module in pair.ours.named_modules() if isinstance(module, torch.nn.Dropout)]
        assert ours <= twin + once + per_layer * stacks_layers * (2 if pair.kind == "seq2seq" else 1), (ours, twin)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_rope_module_is_found_where_transformers_rope_tests_look_and_scales_as_llamas(family):
    """transformers' test_model_rope_scaling_frequencies finds a model's RoPE module by a name holding `rotary_emb`
    or `pos_emb` whose class takes `config` first, builds it from a config and calls it as (x, position_ids)."""
    config = tiny_config(family, "rope")
    model = hv.VanillaModel(config)
    found = [(name, module) for name, module in model.named_modules()
             if any(part in name for part in ("rotary_emb", "pos_emb"))
             and list(inspect.signature(module.__init__).parameters)[:1] == ["config"]]
    assert found and all(name.split(".")[-1] == "rotary_emb" for name, _ in found), [name for name, _ in found]
    rope_class = type(found[0][1])
    x, positions = torch.randn(1), torch.arange(30)[None]
    cos, sin = rope_class(config=config)(x, positions)
    assert cos.shape == sin.shape == (1, 30, config.head_dim)
    config.rope_parameters = {"rope_type": "linear", "factor": 10.0, "rope_theta": config.rope_parameters["rope_theta"]}
    linear_cos, _ = rope_class(config=config)(x, positions)
    torch.testing.assert_close(linear_cos[:, 20], cos[:, 2])  # position 20 at factor 10 is position 2 unscaled


@pytest.mark.parametrize("name", [n for n in hv.modeling_vanilla.__all__ if n.startswith("VanillaFor")])
def test_trainer_finds_each_heads_targets_in_its_signature(name):
    """The heads share one forward; Trainer reads a head's targets from its signature (``find_labels``) and computes
    the evaluation loss only when all of them are in the batch: a QA head's are its two positions and no ``labels``."""
    from transformers.utils import find_labels

    expected = ["start_positions", "end_positions"] if "QuestionAnswering" in name else ["labels"]
    assert find_labels(getattr(hv, name)) == expected


TWIN_HEADS = {
    "VanillaForCausalLM": "LlamaForCausalLM",
    "VanillaForMaskedLM": "BertForMaskedLM",
    "VanillaForSeq2SeqLM": "BartForConditionalGeneration",
    "VanillaForSequenceClassification": "BertForSequenceClassification",
    "VanillaForTokenClassification": "BertForTokenClassification",
    "VanillaForQuestionAnswering": "BertForQuestionAnswering",
}


@pytest.mark.parametrize("ours", sorted(TWIN_HEADS))
def test_each_head_takes_its_twins_inputs_in_the_twins_order(ours):
    """Positional calls and signature readers (Trainer's columns, generate's argument check, PEFT) see a head's
    forward: the inputs both heads take come in the twin's order, from the first on (BART's third input is
    decoder_input_ids), and no head takes another family's inputs (a causal LM has no decoder_input_ids)."""
    import inspect

    import transformers

    import hf_vanilla

    def names(cls):
        return [n for n in inspect.signature(cls.forward).parameters if n not in ("self", "kwargs")]

    mine, twin = names(getattr(hf_vanilla, ours)), names(getattr(transformers, TWIN_HEADS[ours]))
    assert [n for n in mine if n in twin] == [n for n in twin if n in mine]
    shared_prefix = next((i for i, (a, b) in enumerate(zip(mine, twin, strict=False)) if a != b), min(len(mine), len(twin)))
    assert shared_prefix >= min(5, len(twin)) or mine[shared_prefix] not in twin, (mine, twin)
    if "decoder_input_ids" not in twin and "SequenceClassification" not in ours:
        assert not any(name.startswith("decoder_") for name in mine), mine
