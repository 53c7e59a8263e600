"""Positions, not cache places: every scheme, the bias schemes (ALiBi, T5 relative) included, gives a token the same
output whether its batch is padded with holes inside the mask (as transformers' testers and generate() build them)
or the same tokens run packed without padding, and whether its keys come from the cache or from one full forward."""

import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import Cache, DynamicCache, EncoderDecoderCache

from hf_vanilla import variants
from tests.factories import SCHEMES, VOCAB, tiny_model

BIAS_SCHEMES = variants.values_where("position_embedding_type", attention_bias=True)
FAST = settings(max_examples=25, deadline=None)
FEW = settings(max_examples=8, deadline=None)  # each example generates three times


@functools.cache
def model(family: str, scheme: str, backend: str = "eager"):
    return tiny_model(family, scheme, attn_implementation=backend)


@st.composite
def holey_batch(draw, max_batch: int = 3, min_length: int = 2, max_length: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and a mask whose rows hold padding anywhere (left padding and holes), each row ending in a token."""
    batch = draw(st.integers(1, max_batch))
    length = draw(st.integers(min_length, max_length))
    rows = draw(st.lists(st.lists(st.booleans(), min_size=length - 1, max_size=length - 1), min_size=batch,
                         max_size=batch))
    mask = torch.tensor([[*row, True] for row in rows], dtype=torch.long)
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    ids = torch.randint(3, VOCAB, mask.shape, generator=generator).masked_fill(mask == 0, 0)
    return ids, mask


def generate_positions(mask: torch.Tensor) -> torch.Tensor:
    """generate()'s position_ids: the number of unmasked tokens before each, 0 on padding."""
    return (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)


def packed(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The real tokens of every row in one row, positions restarting at 0 per sequence (padding-free training)."""
    positions = torch.cat([torch.arange(int(n)) for n in mask.sum(-1)])
    return ids[mask.bool()][None], positions[None]


def assert_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
@pytest.mark.parametrize("scheme", SCHEMES)
@given(batch=holey_batch())
@FAST
def test_a_decoder_padded_with_holes_equals_it_packed(scheme, backend, batch):
    ids, mask = batch
    decoder = model("decoder", scheme, backend)
    packed_ids, packed_positions = packed(ids, mask)
    with torch.no_grad():
        padded = decoder(input_ids=ids, attention_mask=mask, position_ids=generate_positions(mask)).logits
        free = decoder(input_ids=packed_ids, position_ids=packed_positions, use_cache=False).logits  # a cache hides packing
    assert_close(padded[mask.bool()], free[0])


@pytest.mark.parametrize("scheme", SCHEMES)
@given(batch=holey_batch())
@FAST
def test_an_encoder_padded_with_holes_equals_each_row_alone(scheme, batch):
    ids, mask = batch
    encoder = model("encoder", scheme)
    with torch.no_grad():
        padded = encoder(input_ids=ids, attention_mask=mask, position_ids=generate_positions(mask)).logits
        for row in range(len(ids)):
            alone = encoder(input_ids=ids[row][mask[row].bool()][None]).logits[0]
            assert_close(padded[row][mask[row].bool()], alone)


@pytest.mark.parametrize("scheme", BIAS_SCHEMES)
@given(source=holey_batch(max_batch=2), target=holey_batch(max_batch=2))
@FAST
def test_an_encoder_decoder_padded_with_holes_equals_each_row_alone(scheme, source, target):
    (source_ids, source_mask), (target_ids, target_mask) = source, target
    rows = min(len(source_ids), len(target_ids))
    source_ids, source_mask, target_ids, target_mask = (t[:rows] for t in (source_ids, source_mask, target_ids,
                                                                          target_mask))
    seq2seq = model("encoder-decoder", scheme)
    with torch.no_grad():
        padded = seq2seq(input_ids=source_ids, attention_mask=source_mask, position_ids=generate_positions(source_mask),
                         decoder_input_ids=target_ids, decoder_attention_mask=target_mask,
                         decoder_position_ids=generate_positions(target_mask)).logits
        for row in range(rows):
            source_real, target_real = source_mask[row].bool(), target_mask[row].bool()
            alone = seq2seq(input_ids=source_ids[row][source_real][None],
                            decoder_input_ids=target_ids[row][target_real][None]).logits[0]
            assert_close(padded[row][target_real], alone)


def cached_run(step, ids: torch.Tensor, mask: torch.Tensor, prefill: int, cache: Cache) -> torch.Tensor:
    """Logits of a prefill of ``prefill`` tokens, then one token a step through the cache, as generate() feeds them:
    the mask so far, and the tokens' generate()-style positions."""
    positions, logits = generate_positions(mask), []
    for start, end in [(0, prefill), *((t, t + 1) for t in range(prefill, ids.shape[1]))]:
        logits.append(step(ids[:, start:end], mask[:, :end], positions[:, start:end], cache))
    return torch.cat(logits, dim=1)


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
@pytest.mark.parametrize("scheme", BIAS_SCHEMES)
@given(batch=holey_batch(min_length=3), data=st.data())
@FAST
def test_a_decoders_prefill_and_cached_steps_equal_one_full_forward(scheme, backend, batch, data):
    ids, mask = batch
    prefill = data.draw(st.integers(1, ids.shape[1] - 1))
    decoder = model("decoder", scheme, backend)

    def step(ids, mask, positions, cache):
        return decoder(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True).logits

    with torch.no_grad():
        full = decoder(input_ids=ids, attention_mask=mask, position_ids=generate_positions(mask)).logits
        cached = cached_run(step, ids, mask, prefill, DynamicCache())
    assert_close(cached[mask.bool()], full[mask.bool()])


@pytest.mark.parametrize("scheme", BIAS_SCHEMES)
@given(source=holey_batch(max_batch=1), target=holey_batch(max_batch=1, min_length=3), data=st.data())
@FAST
def test_an_encoder_decoders_prefill_and_cached_steps_equal_one_full_forward(scheme, source, target, data):
    (source_ids, source_mask), (ids, mask) = source, target
    prefill = data.draw(st.integers(1, ids.shape[1] - 1))
    seq2seq = model("encoder-decoder", scheme)
    with torch.no_grad():
        encoded = seq2seq.get_encoder()(input_ids=source_ids, attention_mask=source_mask)

        def step(ids, mask, positions, cache):
            return seq2seq(encoder_outputs=encoded, attention_mask=source_mask, decoder_input_ids=ids,
                           decoder_attention_mask=mask, decoder_position_ids=positions, cache=cache,
                           use_cache=True).logits

        full = step(ids, mask, generate_positions(mask), None)
        cached = cached_run(step, ids, mask, prefill, EncoderDecoderCache(DynamicCache(), DynamicCache()))
    assert_close(cached[mask.bool()], full[mask.bool()])


def greedy(generator, **inputs) -> tuple[torch.Tensor, torch.Tensor]:
    out = generator.generate(**inputs, max_new_tokens=4, do_sample=False, eos_token_id=None, output_logits=True,
                             return_dict_in_generate=True)
    return out.sequences, torch.stack(out.logits, dim=1)


@pytest.mark.parametrize("family", ["decoder", "encoder-decoder"])
@pytest.mark.parametrize("scheme", BIAS_SCHEMES)
@given(batch=holey_batch())
@FEW
def test_greedy_generation_with_holes_is_the_same_with_and_without_a_cache(family, scheme, batch):
    prompt = dict(zip(("input_ids", "attention_mask"), batch, strict=True))
    generator = model(family, scheme, "sdpa")
    uncached = greedy(generator, **prompt, use_cache=False)
    for cache in ({"use_cache": True}, {"cache_implementation": "static"}):  # a static cache's mask is 4D
        tokens, logits = greedy(generator, **prompt, **cache)
        assert torch.equal(tokens, uncached[0]), cache
        assert_close(logits, uncached[1])


@pytest.mark.parametrize("scheme", BIAS_SCHEMES)
def test_a_compiled_static_cache_generates_as_eager_with_holes(scheme):
    """torch.compile(fullgraph) traces the keys' positions: no shape may depend on a static cache's (tensor) length."""
    generator = tiny_model("decoder", scheme)
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 0, 1, 0, 1]])  # left padding, and holes
    ids = torch.tensor([[0, 0, 5, 9, 7], [4, 0, 6, 0, 8]])
    settings = dict(input_ids=ids, attention_mask=mask, max_new_tokens=3, do_sample=False, eos_token_id=None)
    eager = generator.generate(**settings, use_cache=False)
    generator.forward = torch.compile(generator.forward, dynamic=False, fullgraph=True)
    assert torch.equal(generator.generate(**settings, cache_implementation="static"), eager)
