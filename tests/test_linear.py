"""hf_vanilla.linear: the oneDNN path computes F.linear (to float32 rounding) and its gradients, and steps
aside wherever it was not measured."""

from __future__ import annotations

import platform

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from hf_vanilla import linear as linear_module
from hf_vanilla.linear import Linear, linear, onednn_linear_enabled, set_onednn_linear
from tests.factories import tiny_config

X86 = platform.machine().lower() in {"x86_64", "amd64"} and torch.backends.mkldnn.is_available()
needs_onednn = pytest.mark.skipif(not X86, reason="the oneDNN path is enabled on x86 builds with oneDNN only")


@pytest.fixture
def onednn_calls(monkeypatch) -> list[tuple[int, ...]]:
    """Records the input shape of every oneDNN product, so a test knows which path ran."""
    calls: list[tuple[int, ...]] = []
    product = linear_module._onednn_product

    def counting(x, weight, bias):
        calls.append(tuple(x.shape))
        return product(x, weight, bias)

    monkeypatch.setattr(linear_module, "_onednn_product", counting)
    return calls


@pytest.fixture
def onednn_off():
    previous = set_onednn_linear(False)
    yield
    set_onednn_linear(previous)


@needs_onednn
def test_enabled_on_x86_with_onednn():
    assert onednn_linear_enabled()


@needs_onednn
@given(
    leading=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    features=st.tuples(st.integers(1, 70), st.integers(1, 70)),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_forward_and_gradients_match_f_linear(leading, features, bias, seed):
    generator = torch.Generator().manual_seed(seed)
    fan_in, fan_out = features
    x = torch.randn(*leading, fan_in, generator=generator)
    weight = torch.randn(fan_out, fan_in, generator=generator)
    b = torch.randn(fan_out, generator=generator) if bias else None
    grad = torch.randn(*leading, fan_out, generator=generator)

    def run(fn):
        leaves = [t.clone().requires_grad_() for t in (x, weight) + ((b,) if bias else ())]
        out = fn(leaves[0], leaves[1], leaves[2] if bias else None)
        out.backward(grad)
        return out.detach(), [leaf.grad for leaf in leaves]

    ours, ours_grads = run(linear)
    expected, expected_grads = run(F.linear)
    torch.testing.assert_close(ours, expected)
    for got, want in zip(ours_grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want)


@needs_onednn
def test_the_onednn_path_runs_forward_and_input_gradient(onednn_calls):
    x = torch.randn(4, 6, 16, requires_grad=True)
    layer = Linear(16, 24)
    layer(x).sum().backward()
    assert onednn_calls == [(4, 6, 16), (4, 6, 24)]  # forward; input gradient (the weight gradient is MKL's)
    with torch.no_grad():
        layer(x)
    assert len(onednn_calls) == 3  # no autograd: the product alone


@pytest.mark.parametrize(
    "x, weight",
    [
        (torch.randn(3, 8, dtype=torch.float64), torch.randn(5, 8, dtype=torch.float64)),
        (torch.randn(3, 8, dtype=torch.bfloat16), torch.randn(5, 8, dtype=torch.bfloat16)),
        (torch.randn(8), torch.randn(5, 8)),  # a vector: oneDNN's op wants a batch of rows
        (torch.randn(0, 8), torch.randn(5, 8)),
    ],
    ids=["float64", "bfloat16", "vector", "empty"],
)
def test_other_inputs_take_f_linear_exactly(x, weight, onednn_calls):
    torch.testing.assert_close(linear(x, weight), F.linear(x, weight), rtol=0, atol=0)
    assert onednn_calls == []


def test_autocast_still_casts(onednn_calls):
    """Under CPU autocast F.linear runs in bfloat16; the layer must not quietly stay in float32."""
    x, weight = torch.randn(4, 16), torch.randn(8, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, expected = linear(x, weight), F.linear(x, weight)
    assert out.dtype == expected.dtype == torch.bfloat16 and onednn_calls == []
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_traced_graphs_hold_the_portable_op():
    layer = Linear(16, 8)
    traced = torch.jit.trace(layer, torch.randn(3, 16))
    kinds = {node.kind() for node in traced.inlined_graph.nodes()}
    assert "aten::linear" in kinds and not any(kind.startswith("mkldnn::") for kind in kinds)


@pytest.mark.parametrize("strict", [False, True])
def test_exported_programs_hold_the_portable_op(strict):
    program = torch.export.export(Linear(16, 8), (torch.randn(3, 16),), strict=strict)
    targets = {str(node.target) for node in program.graph.nodes if node.op == "call_function"}
    assert targets == {"aten.linear.default"}


def test_switched_off_it_is_f_linear_bit_for_bit(onednn_off, onednn_calls):
    x, weight, bias = torch.randn(7, 33), torch.randn(65, 33), torch.randn(65)
    torch.testing.assert_close(linear(x, weight, bias), F.linear(x, weight, bias), rtol=0, atol=0)
    assert onednn_calls == [] and not onednn_linear_enabled()


@needs_onednn
def test_double_backward_matches_f_linear():
    """A gradient penalty differentiates the backward: the layer must not be once-differentiable."""
    generator = torch.Generator().manual_seed(0)
    x, weight = torch.randn(5, 12, generator=generator), torch.randn(7, 12, generator=generator)

    def penalty(fn):
        xs, ws = x.clone().requires_grad_(), weight.clone().requires_grad_()
        (grad_x,) = torch.autograd.grad(fn(xs, ws).pow(2).sum(), xs, create_graph=True)
        grad_x.pow(2).sum().backward()
        return ws.grad

    # Four chained products, each rounded in a different order, with cancellation: compare as a whole.
    ours, expected = penalty(linear), penalty(F.linear)
    assert (ours - expected).norm() / expected.norm() < 1e-5


def test_switching_leaves_the_random_stream_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    set_onednn_linear(set_onednn_linear(False))  # off and back on: turning it on runs the availability probe
    torch.testing.assert_close(torch.rand(3), expected, rtol=0, atol=0)


def test_is_an_nn_linear_with_the_same_checkpoint():
    layer = Linear(8, 4)
    plain = nn.Linear(8, 4)
    plain.load_state_dict(layer.state_dict())
    assert isinstance(layer, nn.Linear) and list(layer.state_dict()) == ["weight", "bias"]
    x = torch.randn(2, 8)
    torch.testing.assert_close(layer(x), plain(x))


@needs_onednn
@pytest.mark.parametrize("family", ["decoder", "encoder-decoder"])
def test_a_model_trains_the_same_either_way(family):
    """Logits and every gradient of a model agree with the plain-F.linear run to float32 rounding."""
    from hf_vanilla import VanillaForCausalLM, VanillaForSeq2SeqLM

    config = tiny_config(family)
    torch.manual_seed(0)
    model = (VanillaForSeq2SeqLM if family == "encoder-decoder" else VanillaForCausalLM)(config)
    ids = torch.randint(3, config.vocab_size, (2, 9))
    inputs = {"input_ids": ids, "labels": ids}

    def step():
        model.zero_grad(set_to_none=True)
        out = model(**inputs)
        out.loss.backward()
        return out.logits.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    logits, grads = step()
    previous = set_onednn_linear(False)
    try:
        plain_logits, plain_grads = step()
    finally:
        set_onednn_linear(previous)
    torch.testing.assert_close(logits, plain_logits)
    assert grads.keys() == plain_grads.keys()
    for name in grads:
        torch.testing.assert_close(grads[name], plain_grads[name], msg=name)
