"""``Linear``: ``nn.Linear`` whose float32 matmuls on x86 CPUs run on oneDNN instead of MKL.

PyTorch sends a float32 ``F.linear`` on the CPU to MKL's GEMM. On the AMD EPYC (Zen 4) machine this
project is measured on, MKL takes a slower path than oneDNN (which PyTorch also ships, as ``mkldnn``)
at every shape a transformer uses: about 1.1-1.2x for a training-sized projection (2048 tokens), 1.3x
for the few rows of batched decoding and 1.4-2x for one token (a matrix-vector product bound by
reading the weight). ``docs/performance.md`` has the figures.

So the layer does the same maths through oneDNN where it can: the forward product and the input
gradient on oneDNN, the weight gradient on MKL (oneDNN is slower there: the reduction runs over the
token axis). Results agree with ``F.linear`` to float32 rounding (a different summation order), not
bit for bit. Anything outside the measured case -- other dtypes and devices, autocast, tensor
subclasses, ``torch.compile`` (inductor picks its own kernels), ``torch.jit.trace``, functorch
transforms -- takes ``F.linear`` unchanged, and a backward that is itself differentiated
(``create_graph=True``) uses differentiable ops. ``HF_VANILLA_ONEDNN_LINEAR=0`` (or
:func:`set_onednn_linear`) turns the path off.

Checkpoints are unaffected: the module is an ``nn.Linear`` (same parameters, names, shapes, and
``isinstance`` checks, so PEFT, quantisation and conversion see a plain linear layer).
"""

from __future__ import annotations

import os
import platform

import torch
import torch.nn.functional as F  # noqa: N812 -- the usual alias
from torch import nn


def _onednn_product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x @ weight.T + bias on oneDNN (the op inductor itself emits for CPU linear layers)."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def _probe() -> bool:
    """Whether this build runs the oneDNN op and gets F.linear's answer (not every build has oneDNN)."""
    if platform.machine().lower() not in {"x86_64", "amd64"} or not torch.backends.mkldnn.is_available():
        return False  # measured on x86 only; elsewhere (e.g. oneDNN over ARM's library) nothing is known
    try:
        # Fixed values, not torch.randn: importing the package must not move the user's random stream.
        x = torch.linspace(-1.0, 1.0, 24).reshape(3, 8)
        weight, bias = torch.linspace(0.5, -0.5, 40).reshape(5, 8), torch.linspace(-0.2, 0.2, 5)
        return torch.allclose(_onednn_product(x, weight, bias), F.linear(x, weight, bias), atol=1e-5)
    except (RuntimeError, AttributeError, NotImplementedError):
        return False


_ENABLED = os.environ.get("HF_VANILLA_ONEDNN_LINEAR", "1") != "0" and _probe()


def set_onednn_linear(enabled: bool) -> bool:
    """Turn the oneDNN path on or off for the whole process; returns the previous setting.

    Turning it on where the probe failed (no oneDNN in this build) leaves it off.
    """
    global _ENABLED
    previous = _ENABLED
    _ENABLED = bool(enabled) and _probe()
    return previous


def onednn_linear_enabled() -> bool:
    return _ENABLED


def _takes_onednn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    return (
        _ENABLED
        and type(x) is torch.Tensor
        and type(weight) in (torch.Tensor, nn.Parameter)
        and (bias is None or type(bias) in (torch.Tensor, nn.Parameter))
        and x.device.type == "cpu"
        and weight.device.type == "cpu"
        and x.dtype == weight.dtype == torch.float32
        and (bias is None or bias.dtype == torch.float32)
        and x.dim() >= 2
        and x.numel() > 0
        and not torch.is_autocast_enabled("cpu")  # autocast would cast F.linear's inputs; it does not know this op
        and not torch.compiler.is_compiling()
        and not torch.jit.is_tracing()  # a traced graph must hold portable ops (e.g. for ONNX export)
        and not torch._C._are_functorch_transforms_active()
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


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear``, through oneDNN where that is the faster kernel (see the module docstring)."""
    if not _takes_onednn(x, weight, bias):
        return F.linear(x, weight, bias)
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)):
        return _OneDNNLinearFunction.apply(x, weight, bias)
    return _onednn_product(x, weight, bias)


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters and checkpoint keys) computed by :func:`linear`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
