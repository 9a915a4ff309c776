"""Layout regions: where channels-last pays, and which ops may live in it (chapter 7).

The legality half of `convert_layout` (its note explains the whole pass): `keeps_layout`
says whether a node takes and gives channels-last with the same values, `find_regions`
groups such nodes around convolutions, `same_in_both` spots the tensors whose bytes do
not depend on the layout.
"""

from __future__ import annotations

import operator

import torch
from torch import nn
from torch.fx import GraphModule, Node

from ..ops import _submodule, dtype, op_name, shape
from ..torch_internals import op_schema
from .fuse_elementwise import FusedElementwise
from .fused_modules import ConvReLU, SqueezeExcite
from .matching import conv_parts

# pools and module-level ops whose channels-last output tests verify
POOLS = {"max_pool2d", "max_pool2d_with_indices", "avg_pool2d", "adaptive_avg_pool2d"}
UNTAGGED = {"hardswish"}  # pointwise, but torch gives it no pointwise tag
MODULES = (nn.Conv2d, nn.ReLU, nn.ReLU6, nn.Hardswish, nn.Hardsigmoid, nn.SiLU,
           nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d)
FUNCTIONS = (operator.add, operator.mul, torch.relu, torch.add, torch.mul)


def is_conv(gm: GraphModule, n: Node) -> bool:
    """A 2-d convolution: aten's, nn.Conv2d, or a fused conv module (ConvReLU...).

    Introduced in chapter 7.
    """
    if n.op == "call_module":
        return isinstance(_submodule(n), (ConvReLU, nn.Conv2d))
    return conv_parts(n) is not None


def is_4d_float(n) -> bool:
    """A node whose value is a 4-d floating-point tensor (ch. 7)."""
    s = shape(n) if isinstance(n, Node) else None
    d = dtype(n) if s is not None else None
    return s is not None and len(s) == 4 and d is not None and d.is_floating_point


def activations(gm: GraphModule, n: Node) -> list[Node]:
    """The inputs of `n` that carry activations, not a conv's weights (ch. 7)."""
    if n.op == "call_module" and isinstance(_submodule(n), ConvReLU):
        picked = [n.args[0]] + list(n.args[3:4])  # x, and ConvAddReLU's `other`
        return [a for a in picked if isinstance(a, Node)]
    if is_conv(gm, n) and n.op == "call_function":
        return [n.args[0]]
    if n.op == "call_module" and isinstance(_submodule(n), SqueezeExcite):
        return [n.args[0]]  # x; the rest are the two convs' weights
    return list(n.all_input_nodes)


def keeps_layout(gm: GraphModule, n: Node) -> bool:
    """Legality guard: `n` takes channels-last inputs and gives a channels-last output
    with the same values, so it can live inside a region (ch. 7)."""
    if not is_4d_float(n) or n.kwargs.get("memory_format") is not None:
        return False
    tensors = [a for a in activations(gm, n) if shape(a) is not None]
    if any(len(shape(a)) not in (0, 4) for a in tensors):
        return False  # broadcasting across ranks would pair the wrong dimensions
    if is_conv(gm, n):
        return True
    if n.op == "call_module":
        m = _submodule(n)
        return isinstance(m, (FusedElementwise, SqueezeExcite)) or \
            (isinstance(m, MODULES) and not getattr(m, "inplace", False))
    if n.op != "call_function":
        return False
    if n.target in FUNCTIONS:
        return True
    schema = op_schema(n.target)
    if schema is None or schema.is_mutable or op_name(n) in ("clone", "_to_copy"):
        return False
    tags = getattr(n.target, "tags", ())
    return op_name(n) in POOLS | UNTAGGED or (torch.Tag.pointwise in tags
                                   and torch.Tag.nondeterministic_seeded not in tags)


def find_regions(gm: GraphModule, keeps=keeps_layout) -> list[list[Node]]:
    """Connected groups of layout-keeping nodes that grow forward from convolutions.

    A node joins when it is a conv or reads a value already in a region (an add of
    two NCHW inputs gains nothing from a conversion); groups joined by an edge merge.
    `keeps(gm, n)` is the legality guard: channels-last's `keeps_layout` by default,
    `blocked_regions.keeps_blocked` for oneDNN's blocked layout.

    Introduced in chapter 7.
    """
    parent: dict[Node, Node] = {}

    def root(n):
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for n in gm.graph.nodes:
        legal = keeps(gm, n)
        inside = [a for a in activations(gm, n) if a in parent] if legal else []
        if inside or (legal and is_conv(gm, n)):
            parent[n] = n
            for a in inside:
                parent[root(a)] = n
    groups: dict[Node, list[Node]] = {}
    for n in parent:
        groups.setdefault(root(n), []).append(n)
    return list(groups.values())


def same_in_both(n: Node) -> bool:
    """NCHW and channels-last are the same bytes when H*W == 1 or C == 1 (ch. 7)."""
    s = shape(n)
    return s is not None and len(s) == 4 and (s[1] == 1 or s[2] * s[3] == 1)
