"""KV cache: cached and uncached generation agree for every scheme, with left padding, in every decoding mode."""

import pytest
import torch
from transformers import DynamicCache, EncoderDecoderCache, StaticCache

from hf_vanilla import variants
from tests.factories import BACKENDS, SCHEMES, padded_batch, tiny_model

GENERATING = ("decoder", "encoder-decoder")


def prompts(family):
    # Decoders pad on the left (generation appends on the right); encoders conventionally on the right.
    return padded_batch(batch=3, length=7, seed=1, left=family == "decoder")


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("family", GENERATING)
def test_cached_equals_uncached_greedy_with_padding(family, scheme):
    model = tiny_model(family, scheme)
    ids, mask = prompts(family)
    settings = dict(input_ids=ids, attention_mask=mask, max_new_tokens=10, do_sample=False, eos_token_id=None)
    cached = model.generate(**settings, use_cache=True)
    uncached = model.generate(**settings, use_cache=False)
    static = model.generate(**settings, cache_implementation="static")
    torch.testing.assert_close(cached, uncached, rtol=0, atol=0)
    torch.testing.assert_close(cached, static, rtol=0, atol=0)


BIAS_SCHEMES = variants.values_where("position_embedding_type", attention_bias=True)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("family", GENERATING)
def test_generate_on_every_backend_cached_equals_uncached(family, scheme, backend):
    # One prompt shape and length for every case, so the flex kernels compiled for one scheme serve the next.
    model = tiny_model(family, scheme, attn_implementation=backend)
    ids, mask = prompts(family)
    settings = dict(input_ids=ids, attention_mask=mask, max_new_tokens=3, do_sample=False, eos_token_id=None)
    if backend == "flex_attention":
        # torch's CPU flex kernel does not compile a captured bias or padding mask once generation changes lengths.
        reason = f"the {scheme} attention bias" if scheme in BIAS_SCHEMES else "a padded attention_mask"
        with pytest.raises(ValueError, match=rf"flex_attention.*CPU cannot use {reason}.*'sdpa'"):
            model.generate(**settings)
        if scheme not in BIAS_SCHEMES:  # without padding the kernels compile: flex generates, cached as uncached
            settings.update(input_ids=ids[:1, -5:], attention_mask=mask[:1, -5:])
        else:
            model.set_attn_implementation("sdpa")  # the alternative the refusal names
    uncached = model.generate(**settings, use_cache=False)
    cached = model.generate(**settings, use_cache=True)
    torch.testing.assert_close(cached, uncached, rtol=0, atol=0)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_left_padding_does_not_change_a_decoders_continuation(scheme):
    model = tiny_model("decoder", scheme)
    ids, mask = prompts("decoder")
    batch = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, do_sample=False, eos_token_id=None)
    for row in range(ids.shape[0]):
        real = ids[row][mask[row].bool()][None]
        alone = model.generate(input_ids=real, max_new_tokens=8, do_sample=False, eos_token_id=None)
        torch.testing.assert_close(batch[row, -8:], alone[0, -8:], rtol=0, atol=0)


@pytest.mark.parametrize("scheme", ["rope", "relative", "sinusoidal"])
@pytest.mark.parametrize("family", GENERATING)
def test_incremental_logits_match_full_forward(family, scheme):
    """Feeding tokens one at a time through the cache gives the same logits as one full forward."""
    model = tiny_model(family, scheme)
    ids, mask = padded_batch(batch=2, length=6, seed=3, left=True)
    if family == "decoder":
        full = model(input_ids=ids, attention_mask=mask).logits
        cache, steps = DynamicCache(), []
        for t in range(ids.shape[1]):
            out = model(input_ids=ids[:, t : t + 1], attention_mask=mask[:, : t + 1], cache=cache, use_cache=True)
            steps.append(out.logits)
    else:
        source, source_mask = padded_batch(batch=2, length=5, seed=4)
        full = model(input_ids=source, attention_mask=source_mask, decoder_input_ids=ids).logits
        encoder_outputs = model.get_encoder()(input_ids=source, attention_mask=source_mask)
        cache, steps = EncoderDecoderCache(DynamicCache(), DynamicCache()), []
        for t in range(ids.shape[1]):
            out = model(encoder_outputs=encoder_outputs, attention_mask=source_mask,
                        decoder_input_ids=ids[:, t : t + 1], cache=cache, use_cache=True)
            steps.append(out.logits)
    keep = mask.bool() if family == "decoder" else torch.ones_like(mask, dtype=torch.bool)
    torch.testing.assert_close(torch.cat(steps, 1)[keep], full[keep], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", GENERATING)
def test_sampling_and_beam_search_match_without_cache(family):
    model = tiny_model(family, "rope")
    ids, mask = prompts(family)
    for settings in (dict(do_sample=True, top_k=20, temperature=0.9), dict(num_beams=3, do_sample=False)):
        results = []
        for use_cache in (True, False):
            torch.manual_seed(11)
            results.append(model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6, eos_token_id=None,
                                          use_cache=use_cache, **settings))
        torch.testing.assert_close(results[0], results[1], rtol=0, atol=0)
        assert results[0].shape[1] == (7 if family == "decoder" else 1) + 6


def test_static_cache_with_torch_compile_on_cpu():
    model = tiny_model("decoder", "rope")
    ids, mask = prompts("decoder")
    settings = dict(input_ids=ids, attention_mask=mask, max_new_tokens=6, do_sample=False, eos_token_id=None)
    eager_tokens = model.generate(**settings, cache_implementation="static")
    model.forward = torch.compile(model.forward, dynamic=False)
    compiled_tokens = model.generate(**settings, cache_implementation="static")
    torch.testing.assert_close(compiled_tokens, eager_tokens, rtol=0, atol=0)


def test_explicit_static_cache_object():
    model = tiny_model("decoder", "alibi")
    ids, mask = prompts("decoder")
    cache = StaticCache(config=model.config, max_cache_len=20)
    out = model.generate(input_ids=ids, attention_mask=mask, cache=cache, max_new_tokens=5, do_sample=False,
                         eos_token_id=None)
    reference = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=5, do_sample=False,
                               eos_token_id=None, use_cache=False)
    torch.testing.assert_close(out, reference, rtol=0, atol=0)


def cached_step_inputs(model, family: str, cache_keyword: str) -> tuple[dict, dict]:
    """A prompt run that fills a fresh cache, and the next step's inputs handing that cache over as ``cache_keyword``."""
    ids = padded_batch(batch=2, length=8, seed=3)[0]
    with torch.no_grad():
        if family == "encoder-decoder":
            cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
            model(input_ids=ids, decoder_input_ids=ids[:, :5], cache=cache, use_cache=True)
            step = dict(input_ids=ids, decoder_input_ids=ids[:, 5:6])
        else:
            cache = DynamicCache()
            model(input_ids=ids[:, :5], cache=cache, use_cache=True)
            step = dict(input_ids=ids[:, 5:6], attention_mask=torch.ones_like(ids[:, :6]))
    return step, {cache_keyword: cache, "use_cache": True}


@pytest.mark.parametrize("family", GENERATING)
def test_past_key_values_is_a_deprecated_alias_of_cache(family):
    """As in the 5.24 built-ins: the old keyword warns and is used as `cache`, never dropped into **kwargs."""
    model = tiny_model(family, "rope")
    step, new = cached_step_inputs(model, family, "cache")
    with torch.no_grad():
        expected = model(**step, **new).logits
    step, old = cached_step_inputs(model, family, "past_key_values")
    with pytest.warns(FutureWarning, match="`past_key_values` is deprecated .* Use `cache` instead"), torch.no_grad():
        logits = model(**step, **old).logits
    torch.testing.assert_close(logits, expected, rtol=0, atol=0)
    assert old["past_key_values"].get_seq_length() == 6  # the step extended the cache it was given
    with pytest.warns(FutureWarning, match="`past_key_values` is deprecated"), torch.no_grad():
        base = model.model(**step, **cached_step_inputs(model, family, "past_key_values")[1])  # the bare model too
    torch.testing.assert_close(model._logits(base.last_hidden_state), expected, rtol=0, atol=0)
