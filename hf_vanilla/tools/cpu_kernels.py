"""Opt-in CPU kernels, each chosen per host by measuring it against plain torch on the shapes it meets.

Off by default: importing hf_vanilla (or this module) changes nothing, and a model loaded with
``from_pretrained`` computes with plain ``nn.Linear`` and SDPA. :func:`enable_cpu_kernels` turns the
kernels on for one model; :func:`disable_cpu_kernels` turns them off again.

Two kernels, each with a plain twin it must beat:

* **oneDNN linear** (plain: ``F.linear``, i.e. MKL for float32 on x86). The forward product and the input
  gradient run on oneDNN (``torch.ops.mkldnn._linear_pointwise``, the op inductor emits for CPU linear
  layers); the weight gradient stays on MKL. On some AMD EPYC hosts oneDNN is 1.1-2x faster than MKL, on
  others slower: hence the measurement. Results agree with ``F.linear`` to float32 rounding.
* **single-token attention**, registered with transformers' ``AttentionInterface`` under its own name
  :data:`ATTENTION_NAME` (plain: SDPA). One new query token over a short cache is microseconds of work that
  SDPA's CPU kernel hands to the thread pool; element-wise products below ATen's grain stay on the
  calling thread, which pays off when other processes hold the cores.

Like ``torch.backends.cudnn.benchmark``, the first call with a new key (the shape, bucketed to a power of
two in the token axis, the dtype, whether a backward follows, and torch's thread count) times both
kernels on the actual inputs -- a few alternating repetitions, medians -- and keeps the tuned one only if
it wins by :data:`MARGIN`, so noise never flips a choice towards the slower kernel. Where a backward
follows (a training step), each repetition is what the step pays for the layer: the forward and the
backward through autograd, of either path. The single-token attention has no such measurement and steps
aside whenever autograd records. :data:`TUNER` keeps the choices for the process; the report
:func:`enable_cpu_kernels` returns shows them.

A kernel that wins alone can still lose inside the model (the other layers' weights pass through the cache
between two calls; one kernel's threads can leave the next op waiting), so an enabled model also checks
itself as a whole: for each shape of its inputs (and with or without autograd), its calls alternate between
all plain and the per-shape choices until each has :data:`REPEATS` timed calls -- a forward, or a forward and
its backward -- and keep the per-shape choices only if they are :data:`MARGIN` faster (:class:`ModelCheck`).

Anything the measurement does not cover takes the plain path unchanged: other dtypes and devices,
autocast, tensor subclasses, ``torch.compile`` (inductor picks its own kernels), ``torch.jit.trace`` and
``torch.export`` (a graph must hold portable ops), functorch transforms. A backward that is itself
differentiated (``create_graph=True``) uses differentiable ops. Parameters and state-dict keys never
change: an enabled layer is an ``nn.Linear`` whose class is swapped, so checkpoints, PEFT and
``save_pretrained`` see a plain linear layer.
"""

from __future__ import annotations

import contextvars
import functools
import math
import platform
import statistics
import time
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F  # noqa: N812 -- the usual alias
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

ATTENTION_NAME = "hf_vanilla_cpu_sdpa"  # SDPA, except one CPU query token where the inline path measured faster
MARGIN = 0.05  # the tuned kernel must be this much faster (median) to be chosen
REPEATS = 5  # timed calls of each kernel per measurement, alternating, after one warm-up call each
INLINE_ELEMENTS = 32768  # ATen's grain: element-wise work below this many elements runs on the calling thread


# ----------------------------------------------------------------------------------------------
# Measuring: the first call of each key times both kernels and keeps the faster


@dataclass(frozen=True)
class Choice:
    """What one key measured: the median milliseconds of each kernel, and which one runs."""

    kernel: str
    plain_ms: float
    tuned_ms: float
    tuned: bool


def median_times(plain: Callable[[], object], tuned: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median seconds per call of each; one warm-up call each, then alternating calls (the order flips each round)."""
    plain(), tuned()
    times: dict[str, list[float]] = {"plain": [], "tuned": []}
    runs = [("plain", plain), ("tuned", tuned)]
    for round_ in range(repeats):
        for name, run in runs if round_ % 2 == 0 else runs[::-1]:
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return statistics.median(times["plain"]), statistics.median(times["tuned"])


@dataclass
class Autotuner:
    """Per-process memory of which kernel won for each key (like cuDNN's benchmark cache)."""

    margin: float = MARGIN
    repeats: int = REPEATS
    choices: dict[Hashable, Choice] = field(default_factory=dict)

    def prefers_tuned(
        self, key: Hashable, kernel: str, candidates: Callable[[], tuple[Callable[[], object], Callable[[], object]]]
    ) -> bool:
        """Whether the tuned kernel runs for ``key``; measured the first time the key is seen.

        ``candidates()`` builds the two timed calls (plain, tuned), only when a measurement is due: setting them
        up may cost work a step that was already measured must not pay. Each is the whole work its path costs
        (a forward, or a forward and its backward), so they set their own autograd mode.
        """
        choice = self.choices.get(key)
        if choice is None:
            plain_s, tuned_s = median_times(*candidates(), self.repeats)
            choice = Choice(kernel, 1e3 * plain_s, 1e3 * tuned_s, tuned_s < plain_s * (1 - self.margin))
            self.choices[key] = choice
        return choice.tuned

    def clear(self) -> None:
        self.choices.clear()


TUNER = Autotuner()
#: True while an enabled model's forward runs all plain (its :class:`ModelCheck` chose, or is timing, plain torch).
FORCED_PLAIN: contextvars.ContextVar[bool] = contextvars.ContextVar("hf_vanilla_cpu_kernels_plain", default=False)


def forced_plain() -> bool:
    """Whether this call belongs to a forward its model check runs all plain: the first thing each kernel asks, so
    such a forward pays no per-call checks. Never under dynamo (it cannot trace a ``ContextVar``, and a graph takes
    the portable ops anyway)."""
    return not torch.compiler.is_compiling() and FORCED_PLAIN.get()


def rows_bucket(rows: int) -> int:
    """The next power of two: sequences of similar length share one measurement."""
    return 1 << max(0, rows - 1).bit_length()


def runs_plain_only() -> bool:
    """Graph capture and transforms must see the portable ops, and autocast must cast them."""
    return (
        torch.compiler.is_compiling()
        or torch.jit.is_tracing()
        or torch._C._are_functorch_transforms_active()
        or torch.is_autocast_enabled("cpu")
    )


# ----------------------------------------------------------------------------------------------
# oneDNN linear


def _onednn_product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x @ weight.T + bias on oneDNN (the op inductor itself emits for CPU linear layers)."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


@functools.cache
def onednn_available() -> bool:
    """Whether this build runs the oneDNN op and gets F.linear's answer (asked on first use, never at import)."""
    if platform.machine().lower() not in {"x86_64", "amd64"} or not torch.backends.mkldnn.is_available():
        return False  # only x86 was measured; elsewhere (e.g. oneDNN over ARM's library) nothing is known
    try:
        # Fixed values, not torch.randn: the probe must not move the user's random stream.
        x = torch.linspace(-1.0, 1.0, 24).reshape(3, 8)
        weight, bias = torch.linspace(0.5, -0.5, 40).reshape(5, 8), torch.linspace(-0.2, 0.2, 5)
        return torch.allclose(_onednn_product(x, weight, bias), F.linear(x, weight, bias), atol=1e-5)
    except (RuntimeError, AttributeError, NotImplementedError):
        return False


def _dense(tensor: torch.Tensor | None) -> bool:
    return tensor is None or type(tensor) in (torch.Tensor, nn.Parameter)


def onednn_applies(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """The measured case: plain float32 CPU tensors, a batch of rows, outside capture, transforms and autocast."""
    return (
        not runs_plain_only()  # first: under tracing the shape checks below would be recorded as constants
        and type(x) is torch.Tensor
        and _dense(weight)
        and _dense(bias)
        and x.is_cpu  # is_cpu, not device.type: this runs on every call, and building a device costs a microsecond
        and weight.is_cpu
        and x.dtype == weight.dtype == torch.float32
        and (bias is None or bias.dtype == torch.float32)
        and x.dim() >= 2
        and x.numel() > 0
        and onednn_available()
    )


class _OneDNNLinearFunction(torch.autograd.Function):
    """F.linear with oneDNN for the forward product and the input gradient, MKL for the weight gradient."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _onednn_product(x, weight, bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        grad_x = grad_weight = grad_bias = None
        rows = grad.reshape(-1, grad.shape[-1])
        if ctx.needs_input_grad[0]:
            # With create_graph the backward itself is differentiated: take differentiable ops.
            grad_x = grad @ weight if torch.is_grad_enabled() else _onednn_product(grad, weight.t(), None)
        if ctx.needs_input_grad[1]:
            grad_weight = rows.t() @ x.reshape(-1, x.shape[-1])
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = rows.sum(0)
        return grad_x, grad_weight, grad_bias


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` computed on oneDNN (forward and input gradient); callers check :func:`onednn_applies` first."""
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)):
        return _OneDNNLinearFunction.apply(x, weight, bias)
    return _onednn_product(x, weight, bias)


Linear = Callable[..., torch.Tensor]  # (x, weight, bias) -> x @ weight.T + bias, as F.linear


def _training_step(
    linear: Linear, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, grad: torch.Tensor
) -> Callable[[], None]:
    """What a training step pays for one layer: ``linear``'s forward and its backward through autograd.

    The gradients go to the inputs that need them in the real step, and are dropped: the layer's ``.grad``
    fields are never touched.
    """
    leaves = [None if t is None else t.detach().requires_grad_(t.requires_grad) for t in (x, weight, bias)]
    wanted = [leaf for leaf in leaves if leaf is not None and leaf.requires_grad]

    def step() -> None:
        with torch.enable_grad():
            torch.autograd.grad(linear(*leaves), wanted, grad)

    return step


def _linear_candidates(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    backward: bool,
    plain: Linear = F.linear,
    tuned: Linear = onednn_linear,
) -> tuple[Callable[[], object], Callable[[], object]]:
    """Both paths on the real shape: the forward product, or with ``backward`` the forward and backward."""
    if not backward:
        x, weight = x.detach(), weight.detach()
        bias = bias.detach() if bias is not None else None
        return (lambda: plain(x, weight, bias)), (lambda: tuned(x, weight, bias))
    with torch.no_grad():
        grad = F.linear(x, weight, bias)  # an output-shaped stand-in for the incoming gradient
    return _training_step(plain, x, weight, bias, grad), _training_step(tuned, x, weight, bias, grad)


def tuned_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear``, or the oneDNN product where :data:`TUNER` measured it faster for this shape on this host."""
    if forced_plain() or not onednn_applies(x, weight, bias):
        return F.linear(x, weight, bias)
    backward = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias))
    rows = x.numel() // x.shape[-1]
    key = ("linear", rows_bucket(rows), weight.shape[1], weight.shape[0], bias is not None, backward, x.dtype,
           torch.get_num_threads())
    if TUNER.prefers_tuned(key, "oneDNN", lambda: _linear_candidates(x, weight, bias, backward)):
        return onednn_linear(x, weight, bias)
    return F.linear(x, weight, bias)


class TunedLinear(nn.Linear):
    """``nn.Linear`` computed by :func:`tuned_linear`; :func:`enable_cpu_kernels` swaps a layer's class to it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return tuned_linear(x, self.weight, self.bias)


# ----------------------------------------------------------------------------------------------
# Single-token attention, under its own name in transformers' AttentionInterface


def single_token_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    position_bias: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q K^T) V for one new token over a short cache, as element-wise products and sums.

    Element-wise ops this small stay on the calling thread where SDPA's kernel (like bmm, softmax and MKL's
    exp) wakes the thread pool; exp2 stands in for exp, which MKL threads. Each key/value head serves its
    group of query heads without being repeated. Masks come in SDPA's format (boolean, True = attend) or
    additive.
    """
    batch, heads, _, dim = query.shape
    kv_heads, length = key.shape[1], key.shape[2]
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, 1, dim)
    scores = ((grouped * key[:, :, None]).sum(-1) * scaling).view(batch, heads, 1, length)
    if position_bias is not None:
        scores = scores + position_bias
    if attention_mask is not None:
        attention_mask = attention_mask[..., :length]
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    scores = scores.float() if scores.dtype != torch.float32 else scores
    weights = torch.exp2((scores - scores.amax(-1, keepdim=True)) * math.log2(math.e))
    weights = (weights / weights.sum(-1, keepdim=True)).to(query.dtype)
    if dropout:
        weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    output = (weights.view(batch, kv_heads, -1, length, 1) * value[:, :, None]).sum(-2)
    return output.reshape(batch, 1, heads, dim), weights


def single_token_applies(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **kwargs) -> bool:
    """One query token on CPU, the whole product small enough to run inline, no attention weights asked for, and
    no backward to follow (the measurement times forwards only)."""
    batch, heads, query_length, dim = query.shape
    return (
        not runs_plain_only()
        and not (torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value)))
        and query_length == 1
        and query.is_cpu
        and batch * heads * key.shape[2] * dim <= INLINE_ELEMENTS
        and not kwargs.get("output_attentions")
    )


def cpu_sdpa_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """transformers' SDPA attention, or :func:`single_token_attention` where :data:`TUNER` measured it faster."""
    def plain():
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    if forced_plain() or not single_token_applies(query, key, value, **kwargs):
        return plain()

    def tuned():
        return single_token_attention(module, query, key, value, attention_mask, **kwargs)

    batch, heads, _, dim = query.shape
    mask = None if attention_mask is None else attention_mask.dtype
    key_ = ("attention", batch, heads, key.shape[1], rows_bucket(key.shape[2]), dim, mask,
            kwargs.get("position_bias") is not None, query.dtype, torch.get_num_threads())
    return tuned() if TUNER.prefers_tuned(key_, "single-token", lambda: (plain, tuned)) else plain()


def register_attention() -> None:
    """Register :data:`ATTENTION_NAME` with transformers (the function, and SDPA's mask format for it)."""
    AttentionInterface.register(ATTENTION_NAME, cpu_sdpa_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)


# ----------------------------------------------------------------------------------------------
# The whole model: per-shape choices kept only where the whole forward is faster with them


@dataclass
class ModelCheck:
    """One enabled model's calls, per input shape and autograd mode: all plain against the per-shape choices.

    Until both paths have ``repeats`` timed forwards for a key, calls alternate (plain first, so a one-off
    forward pays no measurement); then the per-shape choices stay for that key only if their median is
    ``margin`` faster. A forward during which the tuner measured a shape is not a sample: it paid for measuring.
    """

    margin: float = MARGIN
    repeats: int = REPEATS
    samples: dict[Hashable, dict[str, list[float]]] = field(default_factory=dict)
    decided: dict[Hashable, Choice] = field(default_factory=dict)

    def path(self, key: Hashable) -> str:
        """"plain" or "tuned": which path the next forward with this key takes."""
        if key not in self.decided:
            samples = self.samples.setdefault(key, {"plain": [], "tuned": []})
            if min(map(len, samples.values())) < self.repeats:
                return "plain" if len(samples["plain"]) <= len(samples["tuned"]) else "tuned"
            plain_s, tuned_s = statistics.median(samples["plain"]), statistics.median(samples["tuned"])
            self.decided[key] = Choice("per-shape kernels", 1e3 * plain_s, 1e3 * tuned_s,
                                       tuned_s < plain_s * (1 - self.margin))
        return "tuned" if self.decided[key].tuned else "plain"

    def record(self, key: Hashable, path: str, seconds: float) -> None:
        if key not in self.decided:
            self.samples[key][path].append(seconds)


def input_key(args: tuple, kwargs: dict) -> Hashable:
    """The shapes of a forward's tensor inputs, each dimension bucketed to a power of two, and the thread count."""
    tensors = [(str(i), value) for i, value in enumerate(args)] + sorted(kwargs.items())
    shapes = tuple((name, tuple(map(rows_bucket, value.shape))) for name, value in tensors
                   if isinstance(value, torch.Tensor))
    return shapes, torch.get_num_threads()


def last_gradient(model: nn.Module) -> nn.Parameter | None:
    """The trained parameter whose gradient a backward computes last: the input embeddings (the first op of the
    forward), else the first trained parameter; None when nothing is trained. One hook on it marks the end of a
    backward without a hook waiting on every gradient."""
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    weight = getattr(embeddings, "weight", None)
    if isinstance(weight, nn.Parameter) and weight.requires_grad:
        return weight
    return next((p for p in model.parameters() if p.requires_grad), None)


def attach_model_check(model: nn.Module, check: ModelCheck, tuner: Autotuner) -> list:
    """Hooks on ``model``'s forward that choose each call's path and time it; returns their handles.

    An inference call is timed from the start to the end of its forward; a training call from the start of its
    forward until its backward has accumulated the gradient of :func:`last_gradient`. A forward whose backward
    never comes (the next forward starts first) is no sample.
    """
    running: list[tuple[Hashable, str, int, contextvars.Token, float]] = []
    awaiting_backward: list = []  # the gradient hook of the last training forward, until its backward runs

    def before(module: nn.Module, args: tuple, kwargs: dict) -> None:
        if runs_plain_only():
            return
        while awaiting_backward:
            awaiting_backward.pop().remove()
        key = (input_key(args, kwargs), torch.is_grad_enabled())
        path = check.path(key)
        running.append((key, path, len(tuner.choices), FORCED_PLAIN.set(path == "plain"), time.perf_counter()))

    def after(module: nn.Module, args: tuple, kwargs: dict, output: object) -> None:
        if not running:
            return
        key, path, measured, token, start = running.pop()
        FORCED_PLAIN.reset(token)
        if key in check.decided or len(tuner.choices) != measured:
            return  # no sample wanted, or this call paid for measuring shapes
        last = last_gradient(module) if key[1] else None
        if last is None:
            check.record(key, path, time.perf_counter() - start)
            return

        def backward_done(parameter: torch.Tensor) -> None:
            check.record(key, path, time.perf_counter() - start)
            awaiting_backward.pop().remove()

        awaiting_backward.append(last.register_post_accumulate_grad_hook(backward_done))

    return [model.register_forward_pre_hook(before, with_kwargs=True),
            model.register_forward_hook(after, with_kwargs=True, always_call=True)]


# ----------------------------------------------------------------------------------------------
# Turning the kernels on and off for a model


@dataclass
class CpuKernelsReport:
    """What :func:`enable_cpu_kernels` changed, and (filled in as the model runs) what each shape chose."""

    linear_layers: int
    attention: str
    tuner: Autotuner = field(repr=False)
    model_check: ModelCheck = field(default_factory=ModelCheck, repr=False)

    def choices(self) -> list[dict[str, object]]:
        return [
            {"key": key, "kernel": choice.kernel, "chosen": choice.kernel if choice.tuned else "torch",
             "plain_ms": choice.plain_ms, "tuned_ms": choice.tuned_ms}
            for key, choice in self.tuner.choices.items()
        ]

    def format(self) -> str:
        lines = [f"cpu kernels: {self.linear_layers} linear layers tuned; attention: {self.attention}"]
        for row in self.choices():
            lines.append(f"  {row['key']}: {row['chosen']} (torch {row['plain_ms']:.3f} ms, "
                         f"{row['kernel']} {row['tuned_ms']:.3f} ms)")
        for key, choice in self.model_check.decided.items():
            lines.append(f"  whole forward {key}: {'per-shape kernels' if choice.tuned else 'all plain'} "
                         f"(all plain {choice.plain_ms:.2f} ms, per-shape kernels {choice.tuned_ms:.2f} ms)")
        return "\n".join(lines)


#: The model check of each enabled model and its hooks, so that disabling (or enabling again) finds them.
_CHECK_HOOKS: weakref.WeakKeyDictionary[nn.Module, tuple[ModelCheck, list]] = weakref.WeakKeyDictionary()


def enable_cpu_kernels(model: nn.Module) -> CpuKernelsReport:
    """Let ``model`` use the CPU kernels where they measure faster; returns a report of what changed.

    Every plain ``nn.Linear`` becomes a :class:`TunedLinear` (the class only: parameters, names and the state
    dict stay as they are), and a transformers model whose attention is ``"sdpa"`` switches to
    :data:`ATTENTION_NAME` through ``set_attn_implementation``. Other attention backends are left alone. The
    model's forward gets a :class:`ModelCheck` (two hooks; removed by :func:`disable_cpu_kernels`).
    """
    swapped = 0
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = TunedLinear
            swapped += 1
    config = getattr(model, "config", None)
    attention = getattr(config, "_attn_implementation", None)
    if attention == "sdpa" and hasattr(model, "set_attn_implementation"):
        register_attention()
        model.set_attn_implementation(ATTENTION_NAME)
        attention = f"{ATTENTION_NAME} (was sdpa)"
    else:
        attention = f"{attention} (unchanged: only sdpa has a tuned twin)"
    if model not in _CHECK_HOOKS:
        check = ModelCheck()
        _CHECK_HOOKS[model] = (check, attach_model_check(model, check, TUNER))
    return CpuKernelsReport(swapped, attention, TUNER, _CHECK_HOOKS[model][0])


def disable_cpu_kernels(model: nn.Module) -> None:
    """Undo :func:`enable_cpu_kernels`: plain ``nn.Linear`` layers and SDPA."""
    for module in model.modules():
        if type(module) is TunedLinear:
            module.__class__ = nn.Linear
    if getattr(getattr(model, "config", None), "_attn_implementation", None) == ATTENTION_NAME:
        model.set_attn_implementation("sdpa")
    for handle in _CHECK_HOOKS.pop(model, (None, []))[1]:
        handle.remove()
