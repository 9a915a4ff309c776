"""The library kernels the backend binds to fused pattern modules (chapter 7).

Each function here is a `FusedPattern.binding`: called as `binding(module, *inputs)`
in place of the module's reference ops. It runs ONE library kernel where one fuses
the pattern, and otherwise the module's reference, checked on every call:

- CPU, float32: oneDNN with a post-op (`onednn`): the activation, or the residual
  add and ReLU, applied to each output tile before it is stored, on the weight the
  stage prepacked; or MKL's packed GEMM with the bias, then torch's activation
  (`kernel == "mkl"`, two kernels with an activation). LayerNorm+Add: a numba row
  kernel (`rowwise`).
- CUDA: cuDNN's fused conv+ReLU and conv+add+ReLU, Triton for linear+act and
  LayerNorm+Add (`patterns_gpu`).
- Anything else (float64, autograd recording, a weight changed since it was packed
  and no pack for this shape): the reference ops.

`module.kernel` names what the stage chose; the interpreter counts what ran.
"""

from __future__ import annotations

import math

import torch.nn.functional as F

from ..passes.activations import RELU
from . import onednn, patterns_gpu, rowwise


def _usable(*tensors) -> bool:
    return onednn.why_not(*tensors) is None and not onednn.needs_autograd(*tensors)


def _packed_or_plain(module, x, weight):
    packed = module.packed(weight, tuple(x.shape))
    return weight if packed is None else packed


def conv_act(module, x, weight, bias):
    """ConvReLU, PackedConv: oneDNN conv with the activation as a post-op."""
    if module.kernel == "onednn" and _usable(x, weight, bias):
        return onednn.conv_act(x, _packed_or_plain(module, x, weight), bias,
                               module.padding, module.stride, module.dilation,
                               module.groups, module.act)
    if x.is_cuda and module.act == RELU and not onednn.needs_autograd(x, weight):
        return patterns_gpu.conv_relu(x, weight, bias, module)
    return module.reference(x, weight, bias)


def conv_add_relu(module, x, weight, bias, other):
    """ConvAddReLU: oneDNN conv with the residual add and ReLU as post-ops."""
    if module.kernel == "onednn" and _usable(x, weight, bias, other) \
            and other.shape == module.out_shape(x, weight):
        return onednn.conv_add_relu(x, _packed_or_plain(module, x, weight), bias,
                                    other, module.padding, module.stride,
                                    module.dilation, module.groups)
    if x.is_cuda and not onednn.needs_autograd(x, weight, other):
        return patterns_gpu.conv_add_relu(x, weight, bias, other, module)
    return module.reference(x, weight, bias, other)


def linear_act(module, x, weight, bias):
    """LinearReLU, PackedLinear: MKL's GEMM (+ act) or oneDNN's matmul + post-op."""
    rows = math.prod(x.shape[:-1])
    if module.kernel == "mkl" and _usable(x, weight, bias) and x.dim() >= 2:
        packed = module.packed(weight, rows)
        y = F.linear(x, weight, bias) if packed is None else \
            onednn.mkl_linear(x, packed, weight, bias, rows)
        return module.act.eager(y)
    if module.kernel == "onednn" and _usable(x, weight, bias) and x.dim() >= 2:
        packed = module.packed(weight, rows)
        return onednn.linear_act(x, weight if packed is None else packed, bias,
                                 module.act)
    if x.is_cuda and patterns_gpu.triton_linear_ok(x, weight, module.act):
        module._hidden_launch = True
        return patterns_gpu.linear_act(x, weight, bias, module.act)
    return module.reference(x, weight, bias)


def add_layer_norm(module, a, b, weight, bias):
    """AddLayerNorm: one row kernel, numba on a CPU, Triton on a GPU."""
    if len(module.normalized_shape) == 1:
        if module.kernel == "numba" and rowwise.usable(a, b, weight, bias):
            module._hidden_launch = True
            return rowwise.add_layer_norm(a, b, weight, bias, module.eps)
        if patterns_gpu.triton_rows_ok(a, b, weight, bias):
            module._hidden_launch = True
            return patterns_gpu.add_layer_norm(a, b, weight, bias, module.eps)
    return module.reference(a, b, weight, bias)
