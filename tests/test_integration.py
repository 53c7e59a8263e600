"""Everything users do with a native transformers model: checkpointing, resizing, device maps, pipelines, PEFT."""

import pytest
import torch
from transformers import pipeline

import hf_vanilla as hv
from tests.factories import FAMILIES, model_inputs, padded_batch, tiny_config, tiny_model, tiny_tokenizer


@pytest.mark.parametrize("reentrant", [False, True])
@pytest.mark.parametrize("scheme", ["rope", "alibi", "relative", "learned"])
@pytest.mark.parametrize("family", FAMILIES)
def test_gradient_checkpointing_gives_the_same_gradients(family, scheme, reentrant):
    """Reentrant checkpointing sees only tensors passed as arguments: a learned bias shared by the layers
    must reach each one as an argument, or its graph is backpropagated once per layer (and fails)."""
    ids, mask = padded_batch()
    inputs = model_inputs(family, ids, mask)
    labels = inputs.get("decoder_input_ids", ids)
    grads = []
    for checkpointing in (False, True):
        model = tiny_model(family, scheme).train()
        if checkpointing:
            model.activation_checkpointing_enable({"use_reentrant": reentrant})
            assert model.is_activation_checkpointing
        model(**inputs, labels=labels).loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, rtol=1e-5, atol=1e-6, msg=name)


def test_resize_token_embeddings_keeps_tying_and_old_rows():
    model = tiny_model("encoder-decoder", "sinusoidal")
    old = model.get_input_embeddings().weight.detach().clone()
    model.resize_token_embeddings(120)
    embedding = model.get_input_embeddings()
    assert embedding.num_embeddings == 120 and model.config.vocab_size == 120
    assert model.model.encoder.get_input_embeddings() is embedding is model.model.decoder.get_input_embeddings()
    assert model.lm_head.weight is embedding.weight and model.lm_head.out_features == 120
    torch.testing.assert_close(embedding.weight[:97], old, rtol=0, atol=0)
    out = model(input_ids=torch.tensor([[110, 5]]), decoder_input_ids=torch.tensor([[1, 119]]))
    assert out.logits.shape == (1, 2, 120)


def test_num_parameters_counts_tied_weights_once():
    model = tiny_model("decoder", "learned")
    unique = {p.data_ptr(): p.numel() for p in model.parameters()}
    assert model.num_parameters() == sum(unique.values())
    embeddings = model.model.embed_tokens.weight.numel() + model.model.positions.embeddings.weight.numel()
    assert model.num_parameters(exclude_embeddings=True) == model.num_parameters() - embeddings


def test_device_map_auto_loads_and_matches(tmp_path):
    model = tiny_model("decoder", "rope")
    model.save_pretrained(tmp_path)
    mapped = hv.VanillaForCausalLM.from_pretrained(tmp_path, device_map="auto").eval()
    assert {p.device.type for p in mapped.parameters()} == {"cpu"}  # the only device here
    ids, mask = padded_batch(left=True)
    with torch.no_grad():
        torch.testing.assert_close(mapped(input_ids=ids, attention_mask=mask).logits,
                                   model(input_ids=ids, attention_mask=mask).logits, rtol=0, atol=0)


def test_text_generation_pipeline():
    model, tokenizer = tiny_model("decoder", "rope"), tiny_tokenizer("decoder")
    generator = pipeline("text-generation", model=model, tokenizer=tokenizer)
    for prompt in ("the king", "thou hear the"):
        out = generator(prompt, max_new_tokens=5, do_sample=False, return_tensors=True)
        ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
        expected = model.generate(input_ids=ids, max_new_tokens=5, do_sample=False)
        assert out[0]["generated_token_ids"] == expected[0].tolist()
        assert generator(prompt, max_new_tokens=5, do_sample=False)[0]["generated_text"].startswith(prompt)


def test_fill_mask_pipeline():
    model, tokenizer = tiny_model("encoder", "learned"), tiny_tokenizer("encoder")
    out = pipeline("fill-mask", model=model, tokenizer=tokenizer)("the <mask> speak", top_k=3)
    encoded = tokenizer("the <mask> speak", return_tensors="pt")
    with torch.no_grad():
        probabilities = model(**encoded).logits[0, 1].softmax(-1)
    top = probabilities.topk(3)
    assert [r["token"] for r in out] == top.indices.tolist()
    torch.testing.assert_close(torch.tensor([r["score"] for r in out]), top.values, rtol=1e-5, atol=1e-6)


def test_text_classification_pipeline():
    torch.manual_seed(0)
    config = tiny_config("encoder", "learned", num_labels=3, id2label={0: "war", 1: "peace", 2: "love"})
    model = hv.VanillaForSequenceClassification(config).eval()
    out = pipeline("text-classification", model=model, tokenizer=tiny_tokenizer("encoder"))("the queen speak")
    assert out[0]["label"] in {"war", "peace", "love"} and 0 < out[0]["score"] <= 1


def test_feature_extraction_pipeline_on_a_bare_encoder_decoder():
    """The pipeline passes input_ids alone: the decoder reads them shifted right, as with BartModel."""
    torch.manual_seed(0)
    model, tokenizer = hv.VanillaModel(tiny_config("encoder-decoder")).eval(), tiny_tokenizer("encoder")
    features = pipeline("feature-extraction", model=model, tokenizer=tokenizer)("the queen speak", return_tensors=True)
    encoded = tokenizer("the queen speak", return_tensors="pt")
    decoder_input_ids = hv.modeling_vanilla.shift_tokens_right(encoded["input_ids"], 0, model.config.decoder_start_token_id)
    with torch.no_grad():
        expected = model(**encoded, decoder_input_ids=decoder_input_ids).last_hidden_state
    torch.testing.assert_close(features, expected, rtol=0, atol=0)


def test_peft_lora_with_default_targets_saves_and_reloads(tmp_path):
    peft = pytest.importorskip("peft")
    model = tiny_model("decoder", "rope")
    lora = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, init_lora_weights=False))
    targeted = {n.split(".")[-1] for n, m in lora.named_modules() if hasattr(m, "lora_A")}
    assert targeted == {"q_proj", "v_proj"}
    trainable = [n for n, p in lora.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    ids, mask = padded_batch(left=True)
    with torch.no_grad():
        expected = lora(input_ids=ids, attention_mask=mask).logits
    lora.save_pretrained(tmp_path)
    base = tiny_model("decoder", "rope")
    torch.manual_seed(1)  # the reloaded adapter's layers start from other draws: only loading makes them equal
    reloaded = peft.PeftModel.from_pretrained(base, tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids, attention_mask=mask).logits, expected, rtol=0, atol=0)


@pytest.mark.parametrize("base_class", ["VanillaForCausalLM", "VanillaModel"])
def test_a_lora_adapter_saved_under_the_decoders_older_names_loads_exactly(base_class, tmp_path):
    """An adapter saved before the decoder family's bare model was its own stack names its layers
    ``base_model.model.model.decoder.layers.N`` (a bare model's ``...model.decoder.layers.N``): PEFT maps them through
    the base model's ``_checkpoint_conversion_mapping``, as for transformers' own renamed models."""
    peft = pytest.importorskip("peft")
    from safetensors.torch import load_file, save_file

    def base():
        head = tiny_model("decoder", "rope")
        return head if base_class == "VanillaForCausalLM" else head.model

    lora = peft.get_peft_model(base(), peft.LoraConfig(r=4, lora_alpha=8, init_lora_weights=False)).eval()
    ids = torch.tensor([[3, 4, 5, 6, 7]])
    with torch.no_grad():
        expected = lora(input_ids=ids).last_hidden_state if base_class == "VanillaModel" else lora(input_ids=ids).logits
    lora.save_pretrained(tmp_path)
    weights = tmp_path / "adapter_model.safetensors"
    stack = "base_model.model.model." if base_class == "VanillaForCausalLM" else "base_model.model."
    old = {name.replace(stack, stack + "decoder.", 1): tensor for name, tensor in load_file(weights).items()}
    assert all(".decoder.layers." in name for name in old)
    save_file(old, weights, metadata={"format": "pt"})
    fresh = base()
    torch.manual_seed(1)  # the reloaded adapter's layers start from other draws: only loading makes them equal
    reloaded = peft.PeftModel.from_pretrained(fresh, tmp_path).eval()
    with torch.no_grad():
        outputs = reloaded(input_ids=ids)
        got = outputs.last_hidden_state if base_class == "VanillaModel" else outputs.logits
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
