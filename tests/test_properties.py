"""The properties the paper and its tutorials state, checked numerically."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hf_vanilla as hv
from hf_vanilla.modeling_vanilla import VanillaAttention
from hf_vanilla.positional import RotaryPositions, rotate, sinusoid_table
from tests.factories import SCHEMES, VOCAB, tiny_config, tiny_model

FAST = settings(max_examples=25, deadline=None)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_decoder_output_at_t_ignores_later_tokens(scheme):
    model = tiny_model("decoder", scheme)
    generator = torch.Generator().manual_seed(5)
    ids = torch.randint(3, VOCAB, (2, 12), generator=generator)
    changed = ids.clone()
    changed[:, 7:] = torch.randint(3, VOCAB, (2, 5), generator=generator)
    with torch.no_grad():
        before, after = model(input_ids=ids).logits, model(input_ids=changed).logits
    torch.testing.assert_close(before[:, :7], after[:, :7], rtol=0, atol=0)
    assert not torch.allclose(before[:, 7:], after[:, 7:])


@given(permutation=st.permutations(list(range(8))))
@FAST
def test_encoder_without_positions_is_permutation_equivariant(permutation):
    model = tiny_model("encoder", "none")
    ids = torch.arange(10, 18)[None]
    order = torch.tensor(permutation)
    with torch.no_grad():
        out = model.model(input_ids=ids).last_hidden_state
        permuted = model.model(input_ids=ids[:, order]).last_hidden_state
    torch.testing.assert_close(permuted, out[:, order], rtol=1e-5, atol=1e-5)


@given(offset=st.integers(0, 200), start=st.integers(0, 300), layout=st.sampled_from([True, False]))
@FAST
def test_sinusoidal_encoding_of_pos_plus_k_is_a_fixed_linear_map(offset, start, layout):
    dim = 16
    positions = torch.arange(start, start + 40)
    table = sinusoid_table(positions, dim, interleaved=layout).double()
    shifted = sinusoid_table(positions + offset, dim, interleaved=layout).double()
    # The map depends on the offset alone: one rotation by angle w_i * offset per frequency pair.
    inv_freq = torch.exp(-math.log(10000.0) * torch.arange(dim // 2, dtype=torch.float64) * 2 / dim)
    transform = torch.zeros(dim, dim, dtype=torch.float64)
    for i, w in enumerate(inv_freq):
        sin_i, cos_i = (2 * i, 2 * i + 1) if layout else (i, dim // 2 + i)
        c, s = math.cos(w * offset), math.sin(w * offset)
        transform[sin_i, sin_i], transform[sin_i, cos_i] = c, s  # sin(a+b) = sin a cos b + cos a sin b
        transform[cos_i, sin_i], transform[cos_i, cos_i] = -s, c  # cos(a+b) = cos a cos b - sin a sin b
    torch.testing.assert_close(table @ transform.T, shifted, rtol=0, atol=1e-5)


@given(m=st.integers(0, 500), n=st.integers(0, 500), shift=st.integers(-400, 400))
@FAST
def test_rope_scores_depend_only_on_relative_position(m, n, shift):
    config = tiny_config("decoder", "rope")
    rope = RotaryPositions(config)
    generator = torch.Generator().manual_seed(0)
    query, key = torch.randn(2, 1, 1, 1, config.head_dim, generator=generator).double()

    def score(qpos, kpos):
        positions = torch.tensor([[qpos, kpos]])
        cos, sin = rope(query.float(), positions)
        rotated_q = rotate(query, cos[:, :1].double(), sin[:, :1].double())
        rotated_k = rotate(key, cos[:, 1:].double(), sin[:, 1:].double())
        return (rotated_q * rotated_k).sum()

    if min(m, n) + shift >= 0:
        torch.testing.assert_close(score(m, n), score(m + shift, n + shift), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("heads", [1, 2, 4, 8, 16])
def test_multi_head_parameter_count_does_not_depend_on_heads(heads):
    config = tiny_config("decoder", hidden_size=64, num_attention_heads=heads, num_key_value_heads=heads)
    attention = VanillaAttention(config, 0, is_causal=False)
    assert sum(p.numel() for p in attention.parameters()) == 4 * (64 * 64 + 64)


def test_eager_attention_is_softmax_qk_over_sqrt_dk_times_v():
    torch.manual_seed(0)
    config = tiny_config("encoder", "none", num_key_value_heads=4, attn_implementation="eager")
    attention = VanillaAttention(config, 0, is_causal=False).eval()
    x = torch.randn(2, 5, 32)
    out, weights = attention(x)
    heads, d_k = 4, 8
    q, k, v = (proj(x).view(2, 5, heads, d_k).transpose(1, 2) for proj in (attention.q_proj, attention.k_proj,
                                                                             attention.v_proj))
    expected_weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d_k), dim=-1)
    expected = attention.o_proj((expected_weights @ v).transpose(1, 2).reshape(2, 5, 32))
    torch.testing.assert_close(weights, expected_weights, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)


def test_embeddings_are_scaled_by_sqrt_d_model():
    model = hv.VanillaModel(tiny_config("encoder", "none", scale_embedding=True))
    ids = torch.tensor([[5, 6]])
    torch.testing.assert_close(model.embed_tokens(ids), model.embed_tokens.weight[ids] * math.sqrt(32))


@pytest.mark.parametrize("scheme", ["sinusoidal", "rope", "alibi", "relative"])
def test_extrapolating_schemes_run_beyond_max_position_embeddings(scheme):
    model = tiny_model("decoder", scheme, max_position_embeddings=16)
    with torch.no_grad():
        logits = model(input_ids=torch.randint(3, VOCAB, (1, 40))).logits
    assert torch.isfinite(logits).all()
