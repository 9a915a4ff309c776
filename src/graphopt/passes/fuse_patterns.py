"""Pattern fusion (模式融合): replace known op sequences by one fused module (chapter 4).

Note
----
The rules are data: `PATTERNS` is a table, one row per pattern, each with a matcher
anchored at the pattern's LAST node and a one-line comment. A matcher checks the
legality guards by name (`single_consumer`, `is_eval_mode`, `has_no_side_effects`,
`same_shape`) and returns a `Match`: the nodes to remove, the fused module, and its
inputs. One rewrite serves every row:

    conv ─► bn ─► relu      ──►   ConvReLU(x, W', b')      (call_module)

Rows are tried in order on each node, in graph order, so Conv+BN+ReLU wins over
Conv+ReLU. Works on aten-level graphs and on module-level graphs (nn.Conv2d, nn.Linear,
nn.LayerNorm); weights stay parameters of the model and are passed in as `get_attr`
inputs, except folded Conv+BN weights, which are new buffers.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn
from torch.fx import GraphModule, Node

from ..ops import _submodule, op_name
from .fold_conv_bn import foldable_pair, folded_weights
from .fused_modules import AddLayerNorm, ConvAddReLU, ConvReLU, LinearReLU, MatMulAddReLU
from .legality import has_no_side_effects, same_shape, single_consumer
from .matching import _arg, conv_parts, is_add, is_relu
from .result import (PassResult, add_constant, copy_meta, drop_unused_weights, finish,
                     set_value_meta, working_copy)


@dataclass
class Match:
    """What a matcher found: nodes to replace (last = anchor), module, its inputs.

    An input is a Node, None, an attribute path of the model (str, a weight), or a
    new tensor to store as a buffer (folded weights).
    """

    nodes: list[Node]
    module: nn.Module
    inputs: list = field(default_factory=list)


@dataclass
class Pattern:
    name: str
    match: Callable[[GraphModule, Node], Match | None]


def _chain_ok(nodes: list[Node]) -> bool:
    """Every node but the last feeds only the next one, and none has side effects."""
    return has_no_side_effects(*nodes) and all(single_consumer(n) for n in nodes[:-1])


def _conv_inputs(conv: Node) -> list:
    """(x, weight, bias) of a conv node; module-level weights become attribute paths."""
    c = conv_parts(conv)
    if conv.op != "call_module":
        return [c.input, c.weight, c.bias]
    base = str(conv.target)
    return [c.input, f"{base}.weight", None if c.bias is None else f"{base}.bias"]


def _conv_module(conv: Node, cls):
    c = conv_parts(conv)
    return cls(c.stride, c.padding, c.dilation, c.groups)


def match_conv_bn_relu(gm: GraphModule, relu: Node) -> Match | None:
    """relu(bn(conv(x))) with eval-mode BN foldable into the conv."""
    if not is_relu(relu) or not isinstance(relu.args[0], Node):
        return None
    bn_out = relu.args[0]
    bn = bn_out.args[0] if bn_out.target is operator.getitem else bn_out
    if not isinstance(bn, Node):
        return None
    conv = foldable_pair(gm, bn)  # checks is_eval_mode and single_consumer(conv)
    nodes = [conv, bn] + ([bn_out] if bn_out is not bn else []) + [relu]
    if conv is None or not _chain_ok(nodes):
        return None
    weight, bias = folded_weights(gm, conv, bn)
    x = conv_parts(conv).input
    return Match(nodes, _conv_module(conv, ConvReLU), [x, weight, bias])


def match_conv_relu(gm: GraphModule, relu: Node) -> Match | None:
    """relu(conv(x)): what Conv+BN+ReLU becomes after fold_conv_bn."""
    if not is_relu(relu) or not isinstance(relu.args[0], Node):
        return None
    conv = relu.args[0]
    if conv_parts(conv) is None or not _chain_ok([conv, relu]):
        return None
    return Match([conv, relu], _conv_module(conv, ConvReLU), _conv_inputs(conv))


def match_conv_add_relu(gm: GraphModule, relu: Node) -> Match | None:
    """relu(conv(x) + other), the residual block's tail; add runs in place on conv."""
    if not is_relu(relu) or not isinstance(relu.args[0], Node) or not is_add(relu.args[0]):
        return None
    add = relu.args[0]
    for conv, other in (add.args, add.args[::-1]):
        if conv_parts(conv) is not None and conv is not other \
                and _chain_ok([conv, add, relu]) and same_shape(conv, add):
            return Match([conv, add, relu], _conv_module(conv, ConvAddReLU),
                         _conv_inputs(conv) + [other])
    return None


def match_matmul_add_relu(gm: GraphModule, relu: Node) -> Match | None:
    """relu(x @ W.T + b) as linear/nn.Linear, or relu(matmul(a, b) + c)."""
    if not is_relu(relu) or not isinstance(relu.args[0], Node):
        return None
    src = relu.args[0]
    if op_name(src) == "linear" and src.op == "call_function" and \
            _arg(src, 2, "bias") is not None and _chain_ok([src, relu]):
        return Match([src, relu], LinearReLU(), [src.args[0], src.args[1], _arg(src, 2, "bias")])
    if src.op == "call_module" and type(_submodule(src)) is nn.Linear \
            and _submodule(src).bias is not None and _chain_ok([src, relu]):
        base = str(src.target)
        return Match([src, relu], LinearReLU(), [src.args[0], f"{base}.weight", f"{base}.bias"])
    if not is_add(src):
        return None
    for mm, c in (src.args, src.args[::-1]):
        if op_name(mm) in ("matmul", "mm") and mm.op == "call_function" and mm is not c \
                and _chain_ok([mm, src, relu]) and same_shape(mm, src):
            return Match([mm, src, relu], MatMulAddReLU(), [mm.args[0], mm.args[1], c])
    return None


def match_add_layer_norm(gm: GraphModule, norm: Node) -> Match | None:
    """layer_norm(a + b): a residual add feeding a layer norm (post-norm Transformer)."""
    if norm.op == "call_module" and type(_submodule(norm)) is nn.LayerNorm:
        m, base = _submodule(norm), str(norm.target)
        shape, eps = m.normalized_shape, m.eps
        weight = f"{base}.weight" if m.weight is not None else None
        bias = f"{base}.bias" if m.bias is not None else None
    elif norm.op == "call_function" and norm.target is torch.ops.aten.layer_norm.default:
        shape, eps = norm.args[1], _arg(norm, 4, "eps", 1e-5)
        weight, bias = _arg(norm, 2, "weight"), _arg(norm, 3, "bias")
    else:
        return None
    add = norm.args[0]
    if not isinstance(add, Node) or not is_add(add) or not _chain_ok([add, norm]):
        return None
    return Match([add, norm], AddLayerNorm(shape, eps), [*add.args, weight, bias])


# The table: pattern -> rewrite, tried in this order on every node.
PATTERNS: list[Pattern] = [
    # conv -> eval BN -> relu: BN folded into the conv's weights, relu in place
    Pattern("Conv+BN+ReLU", match_conv_bn_relu),
    # conv -> relu: the same fused module once fold_conv_bn has removed the BN
    Pattern("Conv+ReLU", match_conv_relu),
    # conv -> add(other) -> relu: residual tail, add and relu in place on conv's output
    Pattern("Conv+Add+ReLU", match_conv_add_relu),
    # linear / matmul -> add(bias) -> relu: one addmm-style product, relu in place
    Pattern("MatMul+Add+ReLU", match_matmul_add_relu),
    # add -> layer_norm: the residual add and the norm in one module
    Pattern("LayerNorm+Add", match_add_layer_norm),
]


def fuse_patterns(gm: GraphModule, inplace: bool = False) -> PassResult:
    """Replace every match of a row of `PATTERNS` by one fused module (chapter 4)."""
    gm = working_copy(gm, inplace)
    removed, added, rewritten, weights, modules = [], [], [], [], []
    erased: set[Node] = set()
    for anchor in list(gm.graph.nodes):
        if anchor in erased:
            continue
        for pattern in PATTERNS:
            match = pattern.match(gm, anchor)
            if match is not None and not erased.intersection(match.nodes):
                weights += [a for n in match.nodes for a in n.all_input_nodes
                            if a.op == "get_attr"]
                modules += [n.target for n in match.nodes if n.op == "call_module"]
                node, readers = rewrite(gm, match, pattern.name)
                erased.update(match.nodes)
                removed += match.nodes
                added.append(node)
                rewritten += readers
                break
    drop_unused_weights(gm, weights, modules)
    return finish(gm, removed, added, [r for r in rewritten if r not in erased])


def rewrite(gm: GraphModule, match: Match, name: str) -> tuple[Node, list[Node]]:
    """Put one call_module node to `match.module` in place of the matched nodes."""
    anchor = match.nodes[-1]
    target = _free_name(gm, "fused_" + name.lower().replace("+", "_") + "_" + anchor.name)
    gm.add_submodule(target, match.module)
    with gm.graph.inserting_before(match.nodes[0]):
        args = [_input_node(gm, x, f"{match.nodes[0].name}_folded_{_ROLE[i]}")
                for i, x in enumerate(match.inputs)]
    with gm.graph.inserting_before(anchor):
        node = gm.graph.call_module(target, tuple(args))
    copy_meta(anchor, node)
    readers = list(anchor.users)
    anchor.replace_all_uses_with(node)
    for n in reversed(match.nodes):
        gm.graph.erase_node(n)
    return node, readers


_ROLE = ("input", "weight", "bias", "other", "extra")  # names for new folded tensors


def _input_node(gm: GraphModule, x, name: str):
    if x is None or isinstance(x, Node):
        return x
    if isinstance(x, str):  # an existing weight of the model
        node = gm.graph.get_attr(x)
        set_value_meta(node, gm.get_parameter(x) if _is_param(gm, x) else gm.get_buffer(x))
        return node
    node = gm.graph.get_attr(add_constant(gm, name, x))
    set_value_meta(node, x)
    return node


def _is_param(gm: GraphModule, path: str) -> bool:
    try:
        gm.get_parameter(path)
        return True
    except AttributeError:
        return False


def _free_name(gm: GraphModule, base: str) -> str:
    name, i = base, 1
    while hasattr(gm, name):
        name, i = f"{base}_{i}", i + 1
    return name
