"""hf_vanilla.tools.cpu_kernels: off by default; when on, each kernel computes what plain torch does, steps aside
wherever it was not measured, and runs only where its measurement on this host chose it."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from hf_vanilla import VanillaForCausalLM, VanillaForSeq2SeqLM
from hf_vanilla.tools import cpu_kernels as kernels
from hf_vanilla.tools.cpu_kernels import (
    ATTENTION_NAME,
    Autotuner,
    TunedLinear,
    disable_cpu_kernels,
    enable_cpu_kernels,
    onednn_linear,
    single_token_applies,
    single_token_attention,
    tuned_linear,
)
from tests.factories import tiny_config

X86 = platform.machine().lower() in {"x86_64", "amd64"} and torch.backends.mkldnn.is_available()
needs_onednn = pytest.mark.skipif(not X86, reason="the oneDNN kernel is measured on x86 builds with oneDNN only")


@pytest.fixture
def onednn_calls(monkeypatch) -> list[tuple[int, ...]]:
    """Records the input shape of every oneDNN product the model runs (not the tuner's timing calls)."""
    calls: list[tuple[int, ...]] = []
    product = kernels._onednn_product

    def counting(x, weight, bias):
        calls.append(tuple(x.shape))
        return product(x, weight, bias)

    monkeypatch.setattr(kernels, "_onednn_product", counting)
    monkeypatch.setattr(kernels, "median_times", lambda plain, tuned, repeats: (1.0, 1.0))  # timing calls unrecorded
    return calls


@pytest.fixture
def always_tuned(monkeypatch):
    """A tuner that picks the tuned kernel whatever it measured (the margin is a bonus, not a hurdle)."""
    monkeypatch.setattr(kernels, "TUNER", Autotuner(margin=-1e9))
    return kernels.TUNER


@pytest.fixture
def never_tuned(monkeypatch):
    monkeypatch.setattr(kernels, "TUNER", Autotuner(margin=1.0))  # the tuned kernel would have to take no time
    return kernels.TUNER


# ----------------------------------------------------------------------------------------------
# Off by default


def test_importing_the_package_changes_nothing():
    """No kernel module, no registered attention, no draw from the random stream at import."""
    script = (
        "import sys, torch\n"
        "torch.manual_seed(0); expected = torch.rand(3); torch.manual_seed(0)\n"
        "import hf_vanilla\n"
        "from transformers import AttentionInterface\n"
        "assert 'hf_vanilla.tools.cpu_kernels' not in sys.modules, 'imported'\n"
        f"assert {ATTENTION_NAME!r} not in AttentionInterface._global_mapping, 'registered'\n"
        "assert torch.equal(torch.rand(3), expected), 'random stream moved'\n"
        "import hf_vanilla.tools.cpu_kernels\n"
        f"assert {ATTENTION_NAME!r} not in AttentionInterface._global_mapping, 'registered by the module import'\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]


def test_a_loaded_model_has_plain_linear_layers_and_sdpa(tmp_path):
    model = VanillaForCausalLM(tiny_config("decoder"))
    model.save_pretrained(tmp_path)
    loaded = VanillaForCausalLM.from_pretrained(tmp_path)
    linears = [m for m in loaded.modules() if isinstance(m, nn.Linear)]
    assert linears and all(type(m) is nn.Linear for m in linears)
    assert loaded.config._attn_implementation == "sdpa"


# ----------------------------------------------------------------------------------------------
# The tuner


class FakeClock:
    """perf_counter that advances by the declared cost of whatever ran, so choices do not depend on load."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def kernel(self, seconds: float, calls: list[str], name: str):
        def run():
            calls.append(name)
            self.now += seconds

        return run


@pytest.mark.parametrize(
    "plain_s, tuned_s, chosen",
    [(2.0, 1.0, True), (1.0, 2.0, False), (1.0, 0.97, False)],  # the last: inside the margin, plain stays
    ids=["tuned-faster", "plain-faster", "within-margin"],
)
def test_tuner_keeps_the_faster_kernel_and_measures_once(monkeypatch, plain_s, tuned_s, chosen):
    clock, calls = FakeClock(), []
    monkeypatch.setattr(kernels.time, "perf_counter", clock)
    tuner = Autotuner(margin=0.05, repeats=3)
    built = []

    def candidates():
        built.append(1)
        return clock.kernel(plain_s, calls, "plain"), clock.kernel(tuned_s, calls, "tuned")

    assert tuner.prefers_tuned("k", "test", candidates) is chosen
    # one warm-up each, then alternating rounds whose order flips
    assert calls == ["plain", "tuned", "plain", "tuned", "tuned", "plain", "plain", "tuned"]
    assert tuner.prefers_tuned("k", "test", candidates) is chosen and len(calls) == 8  # remembered
    assert len(built) == 1  # a measured key costs nothing to set up again
    choice = tuner.choices["k"]
    assert choice.tuned is chosen and (choice.plain_ms, choice.tuned_ms) == pytest.approx((1e3 * plain_s, 1e3 * tuned_s))


def clocked_linear(clock: FakeClock, forward_s: float, backward_s: float, calls: list[str], name: str):
    """F.linear whose forward and backward advance the fake clock by the given costs."""

    class Timed(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, bias):
            calls.append(f"{name} forward")
            clock.now += forward_s
            ctx.save_for_backward(x, weight)
            return F.linear(x, weight, bias)

        @staticmethod
        def backward(ctx, grad):
            calls.append(f"{name} backward")
            clock.now += backward_s
            x, weight = ctx.saved_tensors
            return grad @ weight, grad.t() @ x, grad.sum(0)

    return lambda x, weight, bias: Timed.apply(x, weight, bias)


@pytest.mark.parametrize(
    "backward, tuned_backward_s, chosen",
    [(True, 3.0, False), (True, 1.0, True), (False, 3.0, True)],
    ids=["slow-backward", "fast-backward", "inference"],
)
def test_training_shapes_are_timed_forward_and_backward(monkeypatch, backward, tuned_backward_s, chosen):
    """The tuned forward is twice as fast; in a training step its backward decides (plain: 1 s + 2 s)."""
    clock, calls = FakeClock(), []
    monkeypatch.setattr(kernels.time, "perf_counter", clock)
    layer = nn.Linear(16, 8)
    x = torch.randn(3, 16, requires_grad=backward)
    with torch.set_grad_enabled(backward):
        plain, tuned = kernels._linear_candidates(
            x, layer.weight, layer.bias, backward,
            plain=clocked_linear(clock, 1.0, 2.0, calls, "plain"),
            tuned=clocked_linear(clock, 0.5, tuned_backward_s, calls, "tuned"),
        )
        assert Autotuner(repeats=3).prefers_tuned("k", "test", lambda: (plain, tuned)) is chosen
    passes = ["forward", "backward"] if backward else ["forward"]
    assert sorted(calls) == sorted(f"{side} {p}" for side in ("plain", "tuned") for p in passes for _ in range(4))
    assert layer.weight.grad is None and x.grad is None  # measuring leaves the model's gradients alone


@needs_onednn
def test_measuring_a_training_shape_runs_the_tuned_backward(monkeypatch, always_tuned):
    """The step's real cost includes the custom autograd Function's backward: the measurement must run it."""
    backwards = []
    original = kernels._OneDNNLinearFunction.backward

    def counted(ctx, grad):
        backwards.append(grad.shape)
        return original(ctx, grad)

    monkeypatch.setattr(kernels._OneDNNLinearFunction, "backward", staticmethod(counted))
    layer = nn.Linear(16, 8)
    tuned_linear(torch.randn(5, 16, requires_grad=True), layer.weight, layer.bias)
    assert len(backwards) == 1 + always_tuned.repeats  # the warm-up and every timed repetition
    assert layer.weight.grad is None


@needs_onednn
@pytest.mark.parametrize("tuner", ["always_tuned", "never_tuned"])
def test_a_measured_training_layer_costs_one_product(tuner, request):
    """Once a key is measured, a step runs the chosen product and nothing else (no stand-in for the timing)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    request.getfixturevalue(tuner)

    class Products(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    layer, x = nn.Linear(16, 8), torch.randn(5, 16, requires_grad=True)
    tuned_linear(x, layer.weight, layer.bias)  # measures
    with Products() as products:
        tuned_linear(x, layer.weight, layer.bias)
    products_run = [op for op in products.ops if op in {"aten.addmm", "aten.mm", "mkldnn._linear_pointwise"}]
    assert len(products_run) == 1, products.ops


@needs_onednn
def test_keys_separate_shapes_backward_and_threads(always_tuned):
    layer = nn.Linear(16, 8)
    tuned_linear(torch.randn(3, 16), layer.weight, layer.bias)  # backward follows: the weight needs grad
    tuned_linear(torch.randn(4, 16), layer.weight, layer.bias)  # 3 and 4 rows: one bucket
    with torch.no_grad():
        tuned_linear(torch.randn(4, 16), layer.weight, layer.bias)
    tuned_linear(torch.randn(5, 16), layer.weight, layer.bias)
    threads = torch.get_num_threads()
    keys = set(always_tuned.choices)
    assert keys == {
        ("linear", 4, 16, 8, True, True, torch.float32, threads),
        ("linear", 4, 16, 8, True, False, torch.float32, threads),
        ("linear", 8, 16, 8, True, True, torch.float32, threads),
    }


# ----------------------------------------------------------------------------------------------
# oneDNN linear: the same maths as F.linear, only where measured


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

    ours, ours_grads = run(onednn_linear)
    expected, expected_grads = run(F.linear)
    torch.testing.assert_close(ours, expected)
    for got, want in zip(ours_grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want)


@needs_onednn
def test_chosen_onednn_runs_forward_and_input_gradient(always_tuned, onednn_calls):
    x = torch.randn(4, 6, 16, requires_grad=True)
    layer = TunedLinear(16, 24)
    layer(x).sum().backward()
    assert onednn_calls == [(4, 6, 16), (4, 6, 24)]  # forward; input gradient (the weight gradient is MKL's)
    with torch.no_grad():
        layer(x)
    assert len(onednn_calls) == 3  # no autograd: the product alone


def test_where_plain_torch_measured_faster_it_is_f_linear_bit_for_bit(never_tuned, onednn_calls):
    x, layer = torch.randn(7, 33, requires_grad=True), nn.Linear(33, 65)
    out = tuned_linear(x, layer.weight, layer.bias)
    torch.testing.assert_close(out, F.linear(x, layer.weight, layer.bias), rtol=0, atol=0)
    out.sum().backward()
    assert onednn_calls == []
    assert all(not choice.tuned for choice in never_tuned.choices.values())


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
def test_other_inputs_take_f_linear_exactly_and_are_not_measured(x, weight, always_tuned, onednn_calls):
    torch.testing.assert_close(tuned_linear(x, weight), F.linear(x, weight), rtol=0, atol=0)
    assert onednn_calls == [] and not always_tuned.choices


def test_autocast_still_casts(always_tuned, onednn_calls):
    """Under CPU autocast F.linear runs in bfloat16; the layer must not quietly stay in float32."""
    x, weight = torch.randn(4, 16), torch.randn(8, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, expected = tuned_linear(x, weight), F.linear(x, weight)
    assert out.dtype == expected.dtype == torch.bfloat16 and onednn_calls == []
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_traced_graphs_hold_the_portable_op(always_tuned):
    traced = torch.jit.trace(TunedLinear(16, 8), torch.randn(3, 16))
    kinds = {node.kind() for node in traced.inlined_graph.nodes()}
    assert "aten::linear" in kinds and not any(kind.startswith("mkldnn::") for kind in kinds)


@pytest.mark.parametrize("strict", [False, True])
def test_exported_programs_hold_the_portable_op(strict, always_tuned):
    program = torch.export.export(TunedLinear(16, 8), (torch.randn(3, 16),), strict=strict)
    targets = {str(node.target) for node in program.graph.nodes if node.op == "call_function"}
    assert targets == {"aten.linear.default"}


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
    ours, expected = penalty(onednn_linear), penalty(F.linear)
    assert (ours - expected).norm() / expected.norm() < 1e-5


def test_measuring_leaves_the_random_stream_alone(always_tuned):
    torch.manual_seed(0)
    expected = torch.rand(3)
    x, weight = torch.ones(4, 8), torch.ones(5, 8)
    torch.manual_seed(0)
    tuned_linear(x, weight)
    torch.testing.assert_close(torch.rand(3), expected, rtol=0, atol=0)


# ----------------------------------------------------------------------------------------------
# Single-token attention


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("mask_kind", [None, "bool", "additive", "bias"])
def test_single_token_attention_matches_sdpa(groups, mask_kind):
    torch.manual_seed(0)
    batch, heads, length, dim = 3, 4, 9, 8
    query = torch.randn(batch, heads, 1, dim)
    key, value = torch.randn(2, batch, heads // groups, length, dim)
    keep = torch.rand(batch, 1, 1, length) > 0.3
    keep[..., -1] = True  # the new token always sees itself
    mask = bias = None
    if mask_kind == "bool":
        mask = keep
    elif mask_kind == "additive":
        mask = torch.zeros(batch, 1, 1, length).masked_fill(~keep, torch.finfo(torch.float32).min)
    elif mask_kind == "bias":
        bias = torch.randn(batch, heads, 1, length)
    module = nn.Module()
    module.num_key_value_groups, module.training = groups, False
    assert single_token_applies(query, key, value)
    output, _ = single_token_attention(module, query, key, value, mask, scaling=0.3, position_bias=bias)
    sdpa_mask = mask if bias is None else bias
    expected = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=sdpa_mask, scale=0.3, enable_gqa=groups > 1
    ).transpose(1, 2)
    torch.testing.assert_close(output, expected, rtol=1e-5, atol=1e-6)


def test_single_token_path_only_for_one_small_cpu_query():
    query, key, value = torch.randn(1, 4, 1, 8), torch.randn(1, 4, 9, 8), torch.randn(1, 4, 9, 8)
    assert single_token_applies(query, key, value)
    assert not single_token_applies(torch.randn(1, 4, 2, 8), key, value)  # a prompt: SDPA
    long = torch.randn(1, 4, 2048, 8)
    assert not single_token_applies(query, long, long)  # past ATen's grain: the pool has work
    assert not single_token_applies(query, key, value, output_attentions=True)  # SDPA's answer to that request
    for needs_grad in range(3):  # a backward follows: its cost was never measured, so SDPA
        tensors = [t.clone().requires_grad_(i == needs_grad) for i, t in enumerate((query, key, value))]
        assert not single_token_applies(*tensors)
        with torch.no_grad():
            assert single_token_applies(*tensors)


# ----------------------------------------------------------------------------------------------
# Turning the kernels on and off


@pytest.mark.parametrize("family", ["decoder", "encoder-decoder"])
def test_enabled_model_keeps_its_checkpoint_and_computes_the_same(family, always_tuned, tmp_path):
    torch.manual_seed(0)
    head = VanillaForSeq2SeqLM if family == "encoder-decoder" else VanillaForCausalLM
    model = head(tiny_config(family)).eval()
    ids = torch.randint(3, model.config.vocab_size, (2, 9))
    inputs = {"input_ids": ids, "labels": ids}

    def step():
        model.zero_grad(set_to_none=True)
        out = model(**inputs)
        out.loss.backward()
        return out.logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    def greedy():
        with torch.no_grad():
            return model.generate(input_ids=ids[:, :4], max_new_tokens=6, do_sample=False, eos_token_id=None,
                                  pad_token_id=0)

    keys = list(model.state_dict())
    logits, grads = step()
    tokens = greedy()
    report = enable_cpu_kernels(model)
    assert model.config._attn_implementation == ATTENTION_NAME and ATTENTION_NAME in report.attention
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert report.linear_layers == len(linears) and all(type(m) is TunedLinear for m in linears)
    assert list(model.state_dict()) == keys
    tuned_logits, tuned_grads = step()
    torch.testing.assert_close(tuned_logits, logits)
    assert tuned_grads.keys() == grads.keys()
    for name in grads:
        torch.testing.assert_close(tuned_grads[name], grads[name], msg=name)
    assert torch.equal(greedy(), tokens)
    kinds = {row["kernel"] for row in report.choices()}
    assert kinds == ({"oneDNN", "single-token"} if X86 else {"single-token"})
    assert "single-token" in report.format()

    model.save_pretrained(tmp_path)  # an ordinary checkpoint: no kernel name in the config
    assert ATTENTION_NAME not in (tmp_path / "config.json").read_text()
    disable_cpu_kernels(model)
    assert all(type(m) is nn.Linear for m in linears) and model.config._attn_implementation == "sdpa"


def test_other_attention_backends_are_left_alone(always_tuned):
    config = tiny_config("decoder")
    config._attn_implementation = "eager"
    model = VanillaForCausalLM(config)
    report = enable_cpu_kernels(model)
    assert model.config._attn_implementation == "eager" and "unchanged" in report.attention


def test_subclasses_of_linear_are_not_swapped(always_tuned):
    class Special(nn.Linear):
        pass

    model = nn.Sequential(nn.Linear(4, 4), Special(4, 4))
    assert enable_cpu_kernels(model).linear_layers == 1
    assert [type(m) for m in model] == [TunedLinear, Special]



# ----------------------------------------------------------------------------------------------
# The whole model: per-shape choices kept only where the whole forward is faster with them


@pytest.mark.parametrize(("plain_s", "tuned_s", "chosen"), [(1.0, 0.5, "tuned"), (1.0, 0.97, "plain"),
                                                             (0.5, 1.0, "plain")])
def test_model_check_alternates_then_keeps_the_faster_path(plain_s, tuned_s, chosen):
    check = kernels.ModelCheck(repeats=3)
    paths = []
    for _ in range(6):
        paths.append(check.path("key"))
        check.record("key", paths[-1], plain_s if paths[-1] == "plain" else tuned_s)
    assert paths == ["plain", "tuned"] * 3  # plain first: a one-off forward pays no measurement
    assert check.path("key") == chosen and check.path("key") == chosen  # decided once, then kept
    assert check.decided["key"].plain_ms == 1e3 * plain_s and check.decided["key"].tuned_ms == 1e3 * tuned_s
    check.record("key", "plain", 100.0)  # after the decision, nothing moves it
    assert check.path("key") == chosen


@needs_onednn
def test_inference_forwards_alternate_and_a_measuring_forward_is_no_sample(always_tuned, onednn_calls):
    model = VanillaForCausalLM(tiny_config("decoder")).eval()
    report = enable_cpu_kernels(model)
    ids = torch.randint(3, model.config.vocab_size, (2, 5))
    with torch.no_grad():
        model(input_ids=ids)  # plain: no oneDNN product
        assert onednn_calls == []
        model(input_ids=ids)  # per-shape kernels, measuring every shape first: not a sample
        assert onednn_calls
        model(input_ids=ids)  # per-shape kernels again, measured already: a sample
    (key,) = report.model_check.samples
    assert [len(report.model_check.samples[key][path]) for path in ("plain", "tuned")] == [1, 1]
    assert kernels.FORCED_PLAIN.get() is False  # the forward's choice does not outlive it


@needs_onednn
@pytest.mark.parametrize("tuned_faster", [True, False])
def test_a_model_runs_the_path_its_whole_forward_chose(tuned_faster, always_tuned, onednn_calls, monkeypatch):
    model = VanillaForCausalLM(tiny_config("decoder")).eval()
    report = enable_cpu_kernels(model)
    ids = torch.randint(3, model.config.vocab_size, (2, 5))
    slow, fast = 2.0, 1.0
    record = report.model_check.record
    monkeypatch.setattr(report.model_check, "record", lambda key, path, seconds: record(
        key, path, fast if (path == "tuned") == tuned_faster else slow))  # a fake clock for whole forwards
    with torch.no_grad():
        for _ in range(2 * kernels.REPEATS + 2):
            model(input_ids=ids)
        onednn_calls.clear()
        model(input_ids=ids)
    assert [choice.tuned for choice in report.model_check.decided.values()] == [tuned_faster]
    assert bool(onednn_calls) is tuned_faster  # decided plain: every layer is F.linear again
    assert ("per-shape kernels (all plain" if tuned_faster else "all plain (all plain") in report.format()


def test_a_forward_run_all_plain_skips_the_per_call_checks(always_tuned, monkeypatch):
    """Where the whole forward chose plain torch, each layer asks one flag and nothing else: the checks are what
    made such a model slower than a plain one at batch-1 decoding."""
    asked = []
    monkeypatch.setattr(kernels, "onednn_applies", lambda *args: asked.append("linear") or True)
    monkeypatch.setattr(kernels, "single_token_applies", lambda *args, **kwargs: asked.append("attention") or True)
    x, weight = torch.randn(3, 16), torch.randn(8, 16)
    query, key = torch.randn(1, 2, 1, 8), torch.randn(1, 2, 5, 8)
    module = nn.Module()
    module.is_causal, module.training = False, False
    token = kernels.FORCED_PLAIN.set(True)
    try:
        linear_out = tuned_linear(x, weight)
        attention_out, _ = kernels.cpu_sdpa_attention(module, query, key, key, None, scaling=0.5)
    finally:
        kernels.FORCED_PLAIN.reset(token)
    assert asked == [] and not always_tuned.choices
    torch.testing.assert_close(linear_out, F.linear(x, weight), rtol=0, atol=0)
    expected = F.scaled_dot_product_attention(query, key, key, scale=0.5).transpose(1, 2)
    torch.testing.assert_close(attention_out, expected, rtol=0, atol=0)


def test_an_enabled_model_compiles_without_graph_breaks(always_tuned):
    """The flag is a ContextVar, which dynamo cannot trace: under capture it must not be read."""
    layer, x = TunedLinear(16, 8), torch.randn(3, 16)
    compiled = torch.compile(layer, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(x), F.linear(x, layer.weight, layer.bias))


@needs_onednn
def test_training_steps_are_timed_through_their_backward(always_tuned, onednn_calls):
    model = VanillaForCausalLM(tiny_config("decoder"))
    report = enable_cpu_kernels(model)
    ids = torch.randint(3, model.config.vocab_size, (2, 5))

    def samples() -> list[int]:
        (key,) = report.model_check.samples
        assert key[1] is True  # keyed as a training call
        return [len(report.model_check.samples[key][path]) for path in ("plain", "tuned")]

    loss = model(input_ids=ids, labels=ids).loss  # plain
    assert samples() == [0, 0] and onednn_calls == []  # not a sample until its backward has run
    loss.backward()
    assert samples() == [1, 0]
    model(input_ids=ids, labels=ids).loss.backward()  # per-shape kernels, measuring: no sample
    assert samples() == [1, 0] and onednn_calls
    model(input_ids=ids, labels=ids)  # per-shape kernels; its backward never comes
    model(input_ids=ids, labels=ids).loss.backward()  # the next forward dropped it: this one is the tuned sample
    model(input_ids=ids, labels=ids).loss.backward()
    assert samples() == [2, 1]


def test_a_failed_forward_resets_the_path(always_tuned):
    model = VanillaForCausalLM(tiny_config("decoder"))
    enable_cpu_kernels(model)
    with torch.no_grad(), pytest.raises(ValueError, match="outside the vocabulary"):
        model(input_ids=torch.full((1, 3), model.config.vocab_size))  # raises inside a plain-path forward
    assert kernels.FORCED_PLAIN.get() is False


def test_enabling_twice_checks_once_and_disabling_removes_the_check(always_tuned):
    model = VanillaForCausalLM(tiny_config("decoder"))
    first, second = enable_cpu_kernels(model), enable_cpu_kernels(model)
    assert first.model_check is second.model_check
    assert len(model._forward_pre_hooks) == 1 and len(model._forward_hooks) == 1
    disable_cpu_kernels(model)
    assert len(model._forward_pre_hooks) == 0 and len(model._forward_hooks) == 0


def test_a_training_step_is_timed_to_its_last_gradient_which_holds_no_gradient_alive():
    """The input embeddings' gradient comes last, so a hook on that one parameter marks the end of the backward
    without a hook waiting on every gradient."""
    model = VanillaForCausalLM(tiny_config("decoder"))
    assert kernels.last_gradient(model) is model.get_input_embeddings().weight
    model.get_input_embeddings().weight.requires_grad_(False)  # frozen embeddings (adapters): the first trained one
    assert kernels.last_gradient(model) is next(p for p in model.parameters() if p.requires_grad)
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    assert kernels.last_gradient(model) is None
