"""Blocked-layout regions: which ops oneDNN runs on its blocked tensors (chapter 7).

The legality half of the backend's `blocked_layout` stage (`backend/blocked.py`
explains the whole mechanism). oneDNN's blocked layout (nChw16c on AVX-512, nChw8c
on AVX2: the channels cut into blocks of 16 or 8, each block's values for one pixel
side by side) is what torch calls an "mkldnn" tensor: opaque, and only a few ops
take it. `keeps_blocked` names them, as tried on torch 2.13's CPU build
(`benchmarks/results/blocked_layout.md` has the whole table):

    takes and gives mkldnn            refuses an mkldnn tensor
    ------------------------------    ------------------------------------------
    conv2d (dense, depthwise)         hardswish, hardsigmoid, silu (layout error)
    oneDNN conv + unary post-op       mul with broadcasting (a squeeze-excite gate)
    relu, add (same shapes)           mean, any reduction; view-based ops
    max_pool2d, adaptive_avg_pool2d   conv + binary add post-op (refused: "bias
                                      type", or "ChannelsLast" memory format)

so a squeeze-and-excitation gate, a hardswish outside a conv, or anything the
elementwise fusion grouped ends a region.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from ..ops import _submodule, dtype, op_name, shape
from .fused_modules import ConvReLU
from .layout_regions import is_4d_float, is_conv

aten = torch.ops.aten
# the unary post-ops oneDNN's conv applies to an mkldnn output (tried: each equal to
# eager's conv then activation)
BLOCKED_ACTS = {"none", "relu", "hardswish", "hardsigmoid", "swish"}
# aten ops whose mkldnn kernel gives an mkldnn output with eager's values
BLOCKED_OPS = {aten.relu.default, aten.add.Tensor, aten.max_pool2d.default,
               aten.adaptive_avg_pool2d.default}


def keeps_blocked(gm: GraphModule, n: Node) -> bool:
    """Legality guard: oneDNN runs `n` on blocked (mkldnn) inputs and gives a blocked
    output with eager's values, so `n` can live inside a blocked region (ch. 7)."""
    if not is_4d_float(n) or dtype(n) is not torch.float32:
        return False  # oneDNN's other dtypes need CPU support we do not check
    if n.op == "call_module":
        m = _submodule(n)
        return isinstance(m, ConvReLU) and m.act.attr in BLOCKED_ACTS
    if n.op != "call_function":
        return False
    if is_conv(gm, n):
        return n.target is aten.conv2d.default
    if n.target not in BLOCKED_OPS or n.kwargs:
        return False
    if n.target is aten.add.Tensor:
        return _same_shape_add(n)
    if n.target is aten.adaptive_avg_pool2d.default:
        return _divides(n)
    if n.target is aten.max_pool2d.default:
        return _plain_pool(n)
    return True


def _same_shape_add(n: Node) -> bool:
    """oneDNN's sum takes two tensors of one shape: no broadcasting, no alpha."""
    a, b = (n.args + (None,))[:2]
    return len(n.args) == 2 and isinstance(a, Node) and isinstance(b, Node) \
        and shape(a) is not None and shape(a) == shape(b) == shape(n)


def _divides(n: Node) -> bool:
    """oneDNN's adaptive pool needs each output cell to cover whole input cells."""
    src, out = shape(n.args[0]), shape(n)
    return src is not None and all(i % o == 0 for i, o in zip(src[2:], out[2:]))


def _plain_pool(n: Node) -> bool:
    """max_pool2d without dilation (oneDNN's pooling has none) and no ceil mode."""
    dilation = n.args[4] if len(n.args) > 4 else 1
    ceil = n.args[5] if len(n.args) > 5 else False
    return dilation in (1, [1, 1], (1, 1)) and not ceil


def describe(gm: GraphModule, n: Node) -> str:
    """The node's name and op for a note (ch. 7)."""
    what = type(_submodule(n)).__name__ if n.op == "call_module" else op_name(n)
    return f"{n.name} ({what})"
