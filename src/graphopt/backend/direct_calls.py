"""The direct call the wrapper makes for each fused module (chapter 7).

A fused module's `forward` decides, on every call, which kernel may run: dtype,
device, autograd, whether its packed weight is still valid. The wrapper
(`backend.wrapper`) runs only when its entry guard has already settled the first
three for the whole graph, so it can call the kernel the module chose at optimize
time directly. What is left per call is one check: the weight passed in is the
tensor the pack came from, unchanged since (an in-place write bumps its version).
If not, the call falls back to the module's own `forward`, which repacks or runs
the eager ops.

`direct_call(module, node)` gives that call, or None where the module has none
(the wrapper then calls its `forward`).
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch.fx import Node

from ..passes.fused_modules import AddLayerNorm, ConvAddReLU, ConvReLU, LinearReLU
from ..torch_internals import op_entry
from . import onednn


def direct_call(module, node) -> Callable | None:
    """The kernel call for `node`, valid while the wrapper's guard holds, or None.

    Introduced in chapter 7.
    """
    metas = [a.meta.get("val") if isinstance(a, Node) else a for a in node.args]
    if any(m is None for a, m in zip(node.args, metas) if isinstance(a, Node)) or \
            onednn.why_not(*metas) is not None:
        return None  # not the float32 CPU tensors the direct calls are written for
    # the first class that matches: ConvAddReLU before the ConvReLU it subclasses
    binder = next((fn for cls, fn in _BINDERS.items() if isinstance(module, cls)), None)
    return binder(module, node, metas) if binder else None


def _pack(module):
    """(source weight, its version, packed weight, forward): what every call checks."""
    src, version, packed, _ = module._pack
    return src, version, packed, module.forward


def _conv(module: ConvReLU, node, metas):
    pad, stride, dil, groups = (module.padding, module.stride, module.dilation,
                                module.groups)
    if module.kernel == "eager":  # a 1x1 map: conv2d, then the activation
        conv, act = F.conv2d, module.act.eager
        if module.act.attr == "none":
            return lambda x, w, b: conv(x, w, b, stride, pad, dil, groups)
        return lambda x, w, b: act(conv(x, w, b, stride, pad, dil, groups))
    if module.kernel != "onednn" or not _packed_for(module, tuple(metas[0].shape)):
        return None
    a = module.act
    attr, scalars, algorithm = a.attr, list(a.scalars), a.algorithm
    kernel = op_entry(torch.ops.mkldnn._convolution_pointwise.default)
    src, version, packed, forward = _pack(module)

    def call(x, weight, bias):
        if weight is src and weight._version == version:
            return kernel(x, packed, bias, pad, stride, dil, groups, attr, scalars,
                          algorithm)
        return forward(x, weight, bias)

    return call


def _conv_add(module: ConvAddReLU, node, metas):
    x, w, other = metas[0], metas[1], metas[3]
    if module.kernel != "onednn" or not _packed_for(module, tuple(x.shape)) or \
            other is None or other.shape != module.out_shape(x, w):
        return None
    pad, stride, dil, groups = (module.padding, module.stride, module.dilation,
                                module.groups)
    kernel = op_entry(torch.ops.mkldnn._convolution_pointwise.binary)
    src, version, packed, forward = _pack(module)

    def call(x, weight, bias, other):
        if weight is src and weight._version == version:
            return kernel(x, other, packed, bias, pad, stride, dil, groups, "add", 1.0,
                          "relu", [], "")
        return forward(x, weight, bias, other)

    return call


def _linear(module: LinearReLU, node, metas):
    x = metas[0]
    if x.dim() < 2 or not _packed_for(module, math.prod(x.shape[:-1])):
        return None
    if module.kernel == "mkl":
        return _mkl(module)
    if module.kernel != "onednn":
        return None
    a = module.act
    kernel = op_entry(torch.ops.mkldnn._linear_pointwise.default)
    attr, scalars, algorithm = a.attr, list(a.scalars), a.algorithm
    src, version, packed, forward = _pack(module)

    def call(x, weight, bias):
        if weight is src and weight._version == version:
            return kernel(x, packed, bias, attr, scalars, algorithm)
        return forward(x, weight, bias)

    return call


def _mkl(module: LinearReLU):
    """MKL's packed GEMM with the bias, then torch's activation (if any)."""
    kernel, rows = op_entry(torch.ops.mkl._mkl_linear.default), module._pack[3]
    act = None if module.act.attr == "none" else module.act.eager
    src, version, packed, forward = _pack(module)

    def call(x, weight, bias):
        if weight is src and weight._version == version:
            y = kernel(x, packed, src, bias, rows)
            return y if act is None else act(y)
        return forward(x, weight, bias)

    return call


def _add_layer_norm(module: AddLayerNorm, node, metas):
    from ..codegen import numba_available
    from . import rowwise

    a, b, *affine = metas
    rows_ok = a.shape == b.shape and a.dim() >= 1 and a.numel() > 0 and all(
        t.shape == a.shape[-1:] for t in affine if t is not None)
    if len(module.normalized_shape) != 1 or module.kernel != "numba" or \
            not numba_available()[0] or not rows_ok or \
            not all(t.is_contiguous() for t in metas if t is not None):
        return None  # forward's `rowwise.usable`, decided once on the recorded meta
    kernel, eps = rowwise.add_layer_norm, module.eps
    return lambda a, b, w, bias: kernel(a, b, w, bias, eps)


def _packed_for(module, key) -> bool:
    """The module holds a pack made for this key (input shape, or rows)."""
    return module._pack is not None and module._pack[3] == key


_BINDERS = {ConvAddReLU: _conv_add, ConvReLU: _conv, LinearReLU: _linear,
            AddLayerNorm: _add_layer_norm}
