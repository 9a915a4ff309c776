"""The pattern table (模式表) of `fuse_patterns`: rules as data (chapter 4).

Note
----
`PATTERNS` is a table, one row per pattern, each with a matcher anchored at the
pattern's LAST node and a one-line comment. A matcher checks the legality guards by
name (`single_consumer`, `is_eval_mode`, `has_no_side_effects`, `same_shape`) and
returns a `Match`: the nodes to remove, the fused module, and its inputs. Matching
never edits the graph; `fuse_patterns` does the one rewrite every row shares.

Rows are tried in order on each node, in graph order, so Conv+BN+ReLU wins over
Conv+ReLU. "ReLU" in a row's name stands for any activation oneDNN fuses (ReLU,
ReLU6/Hardtanh, Hardswish, SiLU, GELU; `matching.activation`), except in
Conv+Add+ReLU. Rows match aten-level graphs and module-level graphs (nn.Conv2d,
nn.Linear, nn.LayerNorm); weights stay parameters of the model and become
attribute paths (str), except folded Conv+BN weights, which are new tensors.
A lone conv or linear is no pattern: the backend stage prepacks it
(`backend.single_ops`).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn
from torch.fx import GraphModule, Node

from ..ops import _submodule, op_name, shape
from ..torch_internals import pair
from .activations import ACTIVATIONS, RELU
from .fold_conv_bn import foldable_pair, folded_weights
from .fused_modules import (
    AddLayerNorm,
    ConvAddReLU,
    ConvReLU,
    LinearReLU,
    MatMulAddReLU,
    SqueezeExcite,
)
from .legality import has_no_side_effects, is_training, same_shape, single_consumer
from .matching import (
    _arg,
    activation,
    conv_parts,
    gate,
    global_mean_input,
    is_add,
    is_mul,
    is_relu,
    value,
    weight_shape,
)


@dataclass
class Match:
    """What a matcher found: nodes to replace (last = anchor), module, its inputs.

    An input is a Node, None, an attribute path of the model (str, a weight), or a
    new tensor to store as a buffer (folded weights) (ch. 4).
    """

    nodes: list[Node]
    module: nn.Module
    inputs: list = field(default_factory=list)


@dataclass
class Pattern:
    """One row of the table: a name the book uses, and its matcher (ch. 4)."""

    name: str
    match: Callable[[GraphModule, Node], Match | None]


def _chain_ok(nodes: list[Node]) -> bool:
    """Every node but the last feeds only the next one, and none has side effects."""
    return has_no_side_effects(*nodes) and all(single_consumer(n) for n in nodes[:-1])


def conv_inputs(conv: Node) -> list:
    """(x, weight, bias) of a conv; module weights become attribute paths (ch. 4)."""
    c = conv_parts(conv)
    if conv.op != "call_module":
        return [c.input, c.weight, c.bias]
    base = str(conv.target)
    return [c.input, f"{base}.weight", None if c.bias is None else f"{base}.bias"]


def conv_module(conv: Node, cls, act=None):
    """A `cls` (ConvReLU or a subclass) with the geometry of `conv` (ch. 4)."""
    c = conv_parts(conv)
    if act is None:
        return cls(c.stride, c.padding, c.dilation, c.groups)
    return cls(c.stride, c.padding, c.dilation, c.groups, act=act)


def _act_input(n: Node):
    """(activation, its input) when `n` is a fusable activation, else (None, None)."""
    act = activation(n)
    if act is None or not n.args or not isinstance(n.args[0], Node):
        return None, None
    return act, n.args[0]


def match_conv_bn_relu(gm: GraphModule, relu: Node) -> Match | None:
    """act(bn(conv(x))) with eval-mode BN foldable into the conv (ReLU, ReLU6, ...).

    Introduced in chapter 4.
    """
    act, bn_out = _act_input(relu)
    if act is None:
        return None
    bn = bn_out.args[0] if bn_out.target is operator.getitem else bn_out
    if not isinstance(bn, Node):
        return None
    conv = foldable_pair(gm, bn)  # checks is_eval_mode and single_consumer(conv)
    nodes = [conv, bn] + ([bn_out] if bn_out is not bn else []) + [relu]
    if conv is None or not _chain_ok(nodes):
        return None
    weight, bias = folded_weights(gm, conv, bn)
    x = conv_parts(conv).input
    return Match(nodes, conv_module(conv, ConvReLU, act), [x, weight, bias])


def match_conv_relu(gm: GraphModule, relu: Node) -> Match | None:
    """act(conv(x)): what Conv+BN+ReLU becomes after fold_conv_bn (ch. 4)."""
    act, conv = _act_input(relu)
    if act is None or conv_parts(conv) is None or not _chain_ok([conv, relu]):
        return None
    return Match([conv, relu], conv_module(conv, ConvReLU, act), conv_inputs(conv))


def match_conv_add_relu(gm: GraphModule, relu: Node) -> Match | None:
    """relu(conv(x) + other), the residual block's tail: oneDNN's binary post-op.

    Introduced in chapter 4.
    """
    if not is_relu(relu) or not isinstance(relu.args[0], Node) \
            or not is_add(relu.args[0]):
        return None
    add = relu.args[0]
    for conv, other in (add.args, add.args[::-1]):
        if conv_parts(conv) is not None and conv is not other \
                and _chain_ok([conv, add, relu]) and same_shape(conv, add):
            return Match([conv, add, relu], conv_module(conv, ConvAddReLU),
                         conv_inputs(conv) + [other])
    return None


def match_conv_add(gm: GraphModule, add: Node) -> Match | None:
    """conv(x) + other with no ReLU after it: an inverted residual's tail
    (MobileNetV2 and V3, EfficientNet), the same binary post-op.

    Introduced in chapter 4. An add whose one reader is a ReLU is left to
    Conv+Add+ReLU, anchored at that ReLU.
    """
    if not is_add(add) or (len(add.users) == 1 and is_relu(next(iter(add.users)))):
        return None
    for conv, other in (add.args, add.args[::-1]):
        if conv_parts(conv) is not None and conv is not other \
                and _chain_ok([conv, add]) and same_shape(conv, add):
            module = conv_module(conv, ConvAddReLU, ACTIVATIONS["none"])
            return Match([conv, add], module, conv_inputs(conv) + [other])
    return None


def match_matmul_add_relu(gm: GraphModule, relu: Node) -> Match | None:
    """act(x @ W.T + b) as linear/nn.Linear, or relu(matmul(a, b) + c) (ch. 4)."""
    act, src = _act_input(relu)
    if act is None or not _chain_ok([src, relu]):
        return None
    if op_name(src) == "linear" and src.op == "call_function":
        return Match([src, relu], LinearReLU(act),
                     [src.args[0], src.args[1], _arg(src, 2, "bias")])
    if src.op == "call_module" and type(_submodule(src)) is nn.Linear:
        base, has_bias = str(src.target), _submodule(src).bias is not None
        return Match([src, relu], LinearReLU(act),
                     [src.args[0], f"{base}.weight",
                      f"{base}.bias" if has_bias else None])
    if not is_add(src) or not is_relu(relu):
        return None
    for mm, c in (src.args, src.args[::-1]):
        if op_name(mm) in ("matmul", "mm") and mm.op == "call_function" \
                and mm is not c \
                and _chain_ok([mm, src, relu]) and same_shape(mm, src):
            return _matmul_match(gm, [mm, src, relu], mm.args[0], mm.args[1], c)
    return None


def _matmul_match(gm: GraphModule, nodes, a, b, c) -> Match:
    """A constant 2-d `b` and a bias-shaped `c` make a linear: b.T is folded once.

    Folded out of autograd (a constant, like every folded weight); in training mode
    `b` is a weight the optimiser changes, so the product stays as written.
    """
    w = value(gm, b) if isinstance(b, Node) and b.op == "get_attr" else None
    if isinstance(w, torch.Tensor) and w.dim() == 2 and shape(c) == (w.shape[1],) \
            and not is_training(gm):
        return Match(nodes, LinearReLU(RELU),
                     [a, w.detach().t().contiguous(), c])
    return Match(nodes, MatMulAddReLU(), [a, b, c])


def match_add_layer_norm(gm: GraphModule, norm: Node) -> Match | None:
    """layer_norm(a + b): a residual add feeding a layer norm (post-norm block).

    Introduced in chapter 4.
    """
    if norm.op == "call_module" and type(_submodule(norm)) is nn.LayerNorm:
        m, base = _submodule(norm), str(norm.target)
        shape, eps = m.normalized_shape, m.eps
        weight = f"{base}.weight" if m.weight is not None else None
        bias = f"{base}.bias" if m.bias is not None else None
    elif norm.op == "call_function" \
            and norm.target is torch.ops.aten.layer_norm.default:
        shape, eps = norm.args[1], _arg(norm, 4, "eps", 1e-5)
        weight, bias = _arg(norm, 2, "weight"), _arg(norm, 3, "bias")
    else:
        return None
    add = norm.args[0]
    if not isinstance(add, Node) or not is_add(add) or not _chain_ok([add, norm]) \
            or not same_shape(add.args[0], add.args[1]):
        return None  # the row kernel reads a and b element for element: no broadcast
    return Match([add, norm], AddLayerNorm(shape, eps), [*add.args, weight, bias])


def _only_user(n: Node) -> Node | None:
    return next(iter(n.users)) if len(n.users) == 1 else None


def _on_one_pixel(conv: Node | None, x: Node) -> bool:
    """`conv` is a 1x1, unpadded, one-group conv of `x`: on a 1x1 map, a
    matrix-vector product per image."""
    c = conv_parts(conv) if conv is not None else None
    if c is None or c.input is not x or c.groups != 1:
        return False
    w_shape = weight_shape(c.weight)
    return w_shape is not None and tuple(w_shape[2:]) == (1, 1) and \
        all(p == 0 for p in pair(c.padding))


def match_squeeze_excite(gm: GraphModule, pool: Node) -> Match | None:
    """x * gate(conv(act(conv(mean(x))))): a squeeze-excite gate (ReLU or SiLU,
    hardsigmoid or sigmoid). Anchored at its FIRST node, the mean, so that it is
    tried before Conv+ReLU, anchored at the act, could take its first conv (ch. 4).
    """
    x = global_mean_input(pool)
    conv1 = _only_user(pool) if x is not None else None
    act_node = _only_user(conv1) if _on_one_pixel(conv1, pool) else None
    act = activation(act_node) if act_node is not None else None
    if act is None or act.attr not in ("relu", "swish"):
        return None
    conv2 = _only_user(act_node)
    gate_node = _only_user(conv2) if _on_one_pixel(conv2, act_node) else None
    kind = gate(gate_node) if gate_node is not None else None
    mul = _only_user(gate_node) if kind is not None else None
    nodes = [pool, conv1, act_node, conv2, gate_node, mul]
    if mul is None or not is_mul(mul) or set(mul.args) != {gate_node, x} or \
            len(shape(x) or ()) != 4 or not _chain_ok(nodes):
        return None
    return Match(nodes, SqueezeExcite(act, kind),
                 [x, *conv_inputs(conv1)[1:], *conv_inputs(conv2)[1:]])


# The table: pattern -> rewrite, tried in this order on every node.
PATTERNS: list[Pattern] = [
    # conv -> eval BN -> act: BN folded into the conv's weights, act a oneDNN post-op
    Pattern("Conv+BN+ReLU", match_conv_bn_relu),
    # conv -> act: the same fused module once fold_conv_bn has removed the BN
    Pattern("Conv+ReLU", match_conv_relu),
    # conv -> add(other) -> relu: residual tail, add and relu as post-ops
    Pattern("Conv+Add+ReLU", match_conv_add_relu),
    # conv -> add(other), no relu: an inverted residual's tail, the add a post-op
    Pattern("Conv+Add", match_conv_add),
    # linear / matmul -> add(bias) -> act: one matmul, bias and act in its epilogue
    Pattern("MatMul+Add+ReLU", match_matmul_add_relu),
    # add -> layer_norm: one row kernel reads a and b once, writes the norm
    Pattern("LayerNorm+Add", match_add_layer_norm),
    # mean -> conv -> act -> conv -> gate -> mul(x): one kernel scales x by its gate
    Pattern("Squeeze+Excite", match_squeeze_excite),
]


def is_param(gm: GraphModule, path: str) -> bool:
    """True when `path` names a parameter of `gm` (else it is a buffer) (ch. 4)."""
    try:
        gm.get_parameter(path)
        return True
    except AttributeError:
        return False
