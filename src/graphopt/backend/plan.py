"""One plan per fused pattern node: how it runs once the backend bound it (chapter 7).

The backend stage gives each fused pattern module ONE `Plan`, and everything that
runs the node reads that plan:

- the module's `forward` checks `plan.guard(module, *inputs)` on every call (dtype,
  device, autograd, shapes) and runs `plan.call(module, *inputs)`, or else its
  reference ops;
- the wrapper asks the guard once, on the recorded inputs (its own entry guard pins
  them), and then calls `plan.call` with the module bound in: no check per call;
- the interpreter reads the plan from the node's metadata (`node.meta["graphopt_plan"]`,
  written by the stage) and counts `plan.kernels` where the plan ran a kernel torch's
  dispatcher cannot see (numba, Triton).

A call reads its module's pack (`module._pack`: source weight, its version, the
packed weight, the key it was packed for) and uses it only while the source is the
same tensor, unchanged (`version`, spelled out: a call is a frame), and the input
has the key; else it runs the same kernel on the plain weight, so a weight changed
in place is never run stale. The check is written out in each call: a call is one
Python frame, then the kernel. With oneDNN's own library (`onednn_capi`), a conv
or linear runs a primitive made once (`onednn_direct`), not torch's mkldnn op.

CPU, float32: oneDNN with a post-op (the activation, or the residual add and ReLU),
MKL's packed GEMM with the bias then torch's activation ("mkl": a linear, or a
pointwise conv), eager conv2d on a 1x1 map ("eager"), or a numba kernel.
CUDA: cuDNN's fused conv+ReLU and conv+add+ReLU, Triton for linear+act and
LayerNorm+Add (`patterns_gpu`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import torch
import torch.nn.functional as F

from ..passes.activations import RELU
from ..passes.fused_modules import (
    AddLayerNorm,
    ConvAddReLU,
    ConvReLU,
    LinearReLU,
    SqueezeExcite,
)
from ..torch_internals import counter, op_entry
from . import conv_gemm, onednn, onednn_direct, patterns_gpu, rowwise, squeeze_excite


@dataclass(frozen=True)
class Plan:
    """How one fused node runs (chapter 7): `kernel` names it ("onednn", "mkl",
    "numba", "eager", "cudnn", "triton"); `guard(module, *inputs)` says whether it
    may run on these inputs; `call(module, *inputs)` runs it; `kernels` is the count
    of launches torch cannot see (a numba or Triton kernel: 1), None where the
    interpreter counts what ran."""

    kernel: str
    guard: Callable[..., bool]
    call: Callable
    kernels: int | None = None
    device: str = "cpu"  # the device type it was made for

    def hidden_kernels(self, module, *inputs) -> int | None:
        """What the interpreter counts for a call on `inputs`: `kernels` where the
        plan runs, None (count what ran: the reference ops) where it does not."""
        return self.kernels if self.guard(module, *inputs) else None

    def __deepcopy__(self, memo):
        return self  # immutable, and its calls take their module as an argument

    def __reduce__(self):
        # its calls are closures: pickled (torch.save) as a note to plan again
        return (Replan, (self.device,))


class Replan:
    """A plan read back from a pickle: planned again on first use (ch. 7)."""

    def __init__(self, device: str):
        self.device = device

    def _plan(self, module) -> Plan | None:
        plan = module.plan if module.plan is not self else plan_for(module,
                                                                    self.device)
        module.plan = plan
        return plan

    def guard(self, module, *inputs) -> bool:
        plan = self._plan(module)
        return plan is not None and plan.guard(module, *inputs)

    def call(self, module, *inputs):
        return self._plan(module).call(module, *inputs)

    def hidden_kernels(self, module, *inputs) -> int | None:
        plan = self._plan(module)
        return None if plan is None else plan.hidden_kernels(module, *inputs)


def plan_for(module, device: str) -> Plan | None:
    """The plan for `module` as the stage configured it (`module.kernel`, its pack)
    on inputs recorded on `device`; None where it runs its reference ops (ch. 7)."""
    for cls, build in _BUILDERS:
        if isinstance(module, cls):
            plan = build(module, device)
            return None if plan is None else replace(plan, device=device)
    return None


def _onednn_ok(module, *tensors) -> bool:
    return onednn.why_not(*tensors) is None and not onednn.needs_autograd(*tensors)


def _conv_plan(module: ConvReLU, device: str) -> Plan | None:
    pad, stride, dil, groups = (module.padding, module.stride, module.dilation,
                                module.groups)
    act = module.act
    if device == "cuda":
        return Plan("cudnn", _cudnn_relu_ok, lambda m, x, w, b: patterns_gpu.conv_relu(
            x, w, b, m)) if act == RELU else None
    if module.kernel == "eager":  # a 1x1 map: conv2d, then the activation
        if act.attr == "none":
            return Plan("eager", _onednn_ok, lambda m, x, w, b: F.conv2d(
                x, w, b, stride, pad, dil, groups))
        eager = act.eager
        return Plan("eager", _onednn_ok, lambda m, x, w, b: eager(F.conv2d(
            x, w, b, stride, pad, dil, groups)))
    if module.kernel == "mkl":
        return _conv_gemm_plan(module)
    if module.kernel != "onednn":
        return None
    kernel = op_entry(torch.ops.mkldnn._convolution_pointwise.default)
    attr, scalars, algorithm = act.attr, list(act.scalars), act.algorithm

    def call(m, x, weight, bias):
        p = m._pack  # the pack, while its source is unchanged and x has its shape
        w = p[2] if p is not None and p[0] is weight and x.shape == p[3] and \
            p[1] == (counter(weight), weight.data_ptr()) else weight
        return kernel(x, w, bias, pad, stride, dil, groups, attr, scalars, algorithm)

    if onednn_direct.supported(act):  # made once, not per call: see the module
        return Plan("onednn", _onednn_ok, onednn_direct.plan_call(module, call), 1)
    return Plan("onednn", _onednn_ok, call)


def _conv_gemm_plan(module: ConvReLU) -> Plan:
    """A pointwise conv as MKL's packed GEMM over the channels, then its activation
    in place (`conv_gemm`): 2 kernels, 1 without an activation, which the
    interpreter counts as they run. An input of another layout or pixel count
    takes the general path, eager conv2d then the activation."""
    gemm = op_entry(torch.ops.mkl._mkl_linear.default)
    act = conv_gemm.in_place(module.act)
    args = (module.stride, module.padding, module.dilation, module.groups)
    channels_last = torch.channels_last

    def call(m, x, weight, bias):
        p = m._pack  # MKL's pack, while its source is unchanged and x has its rows
        if p is not None and p[0] is weight and x.numel() == p[3] * x.shape[1] and \
                p[1] == (counter(weight), weight.data_ptr()) and \
                x.is_contiguous(memory_format=channels_last):
            y = gemm(x.permute(0, 2, 3, 1), p[2], weight, bias, p[3])
            return act(y.permute(0, 3, 1, 2))
        return act(F.conv2d(x, weight, bias, *args))

    return Plan("mkl", _gemm_ok, call)


def _gemm_ok(module, x, weight, bias) -> bool:
    return x.dim() == 4 and _onednn_ok(module, x, weight, bias)


def _cudnn_relu_ok(module, x, weight, bias) -> bool:
    return x.is_cuda and not onednn.needs_autograd(x, weight)


def _conv_add_plan(module: ConvAddReLU, device: str) -> Plan | None:
    relu = module.act == RELU  # else none: Conv+Add
    if device == "cuda":  # cuDNN fuses the add with a ReLU only
        return Plan("cudnn", _cudnn_add_ok, lambda m, x, w, b, other:
                    patterns_gpu.conv_add_relu(x, w, b, other, m)) if relu else None
    if module.kernel != "onednn":
        return None
    pad, stride, dil, groups = (module.padding, module.stride, module.dilation,
                                module.groups)
    kernel = op_entry(torch.ops.mkldnn._convolution_pointwise.binary)
    unary = "relu" if relu else None

    def call(m, x, weight, bias, other):
        p = m._pack
        w = p[2] if p is not None and p[0] is weight and x.shape == p[3] and \
            p[1] == (counter(weight), weight.data_ptr()) else weight
        return kernel(x, other, w, bias, pad, stride, dil, groups, "add", 1.0, unary,
                      [], "")

    if onednn_direct.supported(module.act):
        return Plan("onednn", _conv_add_ok, onednn_direct.plan_call(module, call), 1)
    return Plan("onednn", _conv_add_ok, call)


def _conv_add_ok(module, x, weight, bias, other) -> bool:
    return _onednn_ok(module, x, weight, bias, other) and \
        other.shape == module.out_shape(x, weight)


def _cudnn_add_ok(module, x, weight, bias, other) -> bool:
    return x.is_cuda and not onednn.needs_autograd(x, weight, other)


def _linear_plan(module: LinearReLU, device: str) -> Plan | None:
    if device == "cuda":
        return Plan("triton", _triton_linear_ok, _triton_linear, kernels=1)
    if module.kernel not in ("mkl", "onednn"):
        return None
    act = None if module.act.attr == "none" else module.act.eager
    if module.kernel == "mkl":
        kernel = op_entry(torch.ops.mkl._mkl_linear.default)

        def call(m, x, weight, bias):
            p = m._pack
            if p is not None and p[0] is weight and p[3] == math.prod(x.shape[:-1]) \
                    and p[1] == (counter(weight), weight.data_ptr()):
                y = kernel(x, p[2], weight, bias, p[3])
            else:
                y = F.linear(x, weight, bias)
            return y if act is None else act(y)

        return Plan("mkl", _linear_ok, call)
    kernel = op_entry(torch.ops.mkldnn._linear_pointwise.default)
    attr, scalars, algorithm = module.act.attr, list(module.act.scalars), \
        module.act.algorithm

    def call(m, x, weight, bias):
        p = m._pack
        w = p[2] if p is not None and p[0] is weight and \
            p[3] == math.prod(x.shape[:-1]) and \
            p[1] == (counter(weight), weight.data_ptr()) else weight
        return kernel(x, w, bias, attr, scalars, algorithm)

    if onednn_direct.supported(module.act):
        return Plan("onednn", _linear_ok, onednn_direct.plan_call(module, call), 1)
    return Plan("onednn", _linear_ok, call)


def _linear_ok(module, x, weight, bias) -> bool:
    return x.dim() >= 2 and _onednn_ok(module, x, weight, bias)


def _triton_linear_ok(module, x, weight, bias) -> bool:
    return x.is_cuda and patterns_gpu.triton_linear_ok(x, weight, module.act)


def _triton_linear(module, x, weight, bias):
    return patterns_gpu.linear_act(x, weight, bias, module.act)


def _add_layer_norm_plan(module: AddLayerNorm, device: str) -> Plan | None:
    if len(module.normalized_shape) != 1:
        return None
    if device == "cuda":
        return Plan("triton", _triton_rows_ok, _triton_rows, kernels=1)
    if module.kernel != "numba":
        return None
    kernel, eps, at = rowwise.add_layer_norm, module.eps, module.row_parallel_numel
    return Plan("numba", _rows_ok, lambda m, a, b, w, bias: kernel(
        a, b, w, bias, eps, parallel_numel=at), kernels=1)


def _rows_ok(module, a, b, weight, bias) -> bool:
    return rowwise.usable(a, b, weight, bias)


def _triton_rows_ok(module, a, b, weight, bias) -> bool:
    return patterns_gpu.triton_rows_ok(a, b, weight, bias)


def _triton_rows(module, a, b, weight, bias):
    return patterns_gpu.add_layer_norm(a, b, weight, bias, module.eps)


def _squeeze_excite_plan(module: SqueezeExcite, device: str) -> Plan | None:
    if device == "cuda" or module.kernel != "numba":
        return None
    kernel, act, gate = squeeze_excite.gate, module.act.attr, module.gate
    weights = squeeze_excite.Weights()  # numpy views, while the weights are these
    return Plan("numba", _squeeze_excite_ok, lambda m, x, w1, b1, w2, b2: kernel(
        x, weights(w1, b1, w2, b2), act, gate), kernels=1)


def _squeeze_excite_ok(module, x, w1, b1, w2, b2) -> bool:
    return squeeze_excite.usable(x, w1, b1, w2, b2)


# The first class that matches: ConvAddReLU before the ConvReLU it subclasses
# (PackedConv and PackedLinear are ConvReLU and LinearReLU).
_BUILDERS = ((ConvAddReLU, _conv_add_plan), (ConvReLU, _conv_plan),
             (LinearReLU, _linear_plan), (AddLayerNorm, _add_layer_norm_plan),
             (SqueezeExcite, _squeeze_excite_plan))
