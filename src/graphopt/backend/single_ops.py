"""Lone convolutions and linears: a prepacked kernel for each (chapter 7).

After pattern fusion, a conv or linear that no pattern took still gains from
running on its prepacked weight (what inductor's freezing does to every conv). The
backend stage rewrites each into a `PackedConv` / `PackedLinear` module (a pattern
of one op, act "none") with the same machinery as `fuse_patterns`, then binds and
prepacks it like the others.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.fx import GraphModule, Node

from ..ops import _submodule, dtype, op_name
from ..passes.activations import ACTIVATIONS
from ..passes.fused_modules import ConvReLU, LinearReLU
from ..passes.legality import has_no_side_effects
from ..passes.matching import _arg, conv_parts, value
from ..passes.patterns import Match, Pattern, conv_inputs, conv_module, is_param
from . import onednn


class PackedConv(ConvReLU):
    """A conv no pattern took: oneDNN on its prepacked weight, act "none" (ch. 7)."""


class PackedLinear(LinearReLU):
    """A linear no pattern took: oneDNN on its prepacked weight, act "none" (ch. 7)."""


def _packable(gm: GraphModule, node: Node, weight) -> bool:
    """A float32 op whose weight is a constant: oneDNN with the weight prepacked."""
    w = weight
    if isinstance(weight, str):
        w = gm.get_parameter(weight) if is_param(gm, weight) else gm.get_buffer(weight)
    elif isinstance(weight, Node):
        w = value(gm, weight) if weight.op == "get_attr" else None
    return (onednn.available() and isinstance(w, torch.Tensor) and not w.is_cuda
            and w.dtype is torch.float32 and dtype(node) is torch.float32
            and has_no_side_effects(node))


def match_conv(gm: GraphModule, conv: Node) -> Match | None:
    """A conv no pattern took, with a constant weight: oneDNN, weight prepacked
    (ch. 7)."""
    if conv_parts(conv) is None:
        return None
    inputs = conv_inputs(conv)
    if not _packable(gm, conv, inputs[1]):
        return None
    return Match([conv], conv_module(conv, PackedConv, ACTIVATIONS["none"]),
                 inputs)


def match_linear(gm: GraphModule, lin: Node) -> Match | None:
    """A linear no pattern took, with a constant weight: oneDNN, weight
    prepacked (ch. 7)."""
    if op_name(lin) == "linear" and lin.op == "call_function":
        inputs = [lin.args[0], lin.args[1], _arg(lin, 2, "bias")]
    elif lin.op == "call_module" and type(_submodule(lin)) is nn.Linear:
        base, has_bias = str(lin.target), _submodule(lin).bias is not None
        inputs = [lin.args[0], f"{base}.weight", f"{base}.bias" if has_bias else None]
    else:
        return None
    if not _packable(gm, lin, inputs[1]):
        return None
    return Match([lin], PackedLinear(ACTIVATIONS["none"]), inputs)


# Second sweep, after every pattern had its chance: a lone conv or linear still gains
# from running on its prepacked weight (what inductor's freezing does to every conv).
SINGLE_OPS: list[Pattern] = [Pattern("Conv", match_conv),
                             Pattern("Linear", match_linear)]

