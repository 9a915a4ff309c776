"""Recognise the ops that the folding and fusion passes rewrite, at either graph level.

Introduced in chapter 5. A captured graph says the same thing two ways: aten level
(`aten.conv2d` reading `get_attr` weights) and module level (`call_module` to an
`nn.Conv2d`). These helpers answer "is this a conv?" and "what are its weights?" for
both, so the passes are written once.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.fx import GraphModule, Node

from ..ops import _submodule, op_name
from .activations import ACTIVATIONS, RELU, hardtanh


@dataclass
class ConvParts:
    """A 2-d convolution's operands: nodes (aten level) or tensors (module level).

    Introduced in chapter 4.
    """

    input: Node
    weight: Any
    bias: Any
    stride: Any
    padding: Any
    dilation: Any
    groups: int


@dataclass
class BNParts:
    """An eval-mode batch norm's operands and epsilon (ch. 4)."""

    input: Node
    weight: Any
    bias: Any
    mean: Any
    var: Any
    eps: float


def _arg(n: Node, i: int, name: str, default=None):
    if len(n.args) > i:
        return n.args[i]
    return n.kwargs.get(name, default)


def conv_parts(n: Node) -> ConvParts | None:
    """The operands of a 2-d, non-transposed convolution node, else None (ch. 4).
    A padding given as a word ("valid", "same") comes back as numbers."""
    if n.op == "call_module":
        m = _submodule(n)
        if type(m) is not nn.Conv2d or m.padding_mode != "zeros" or len(n.args) != 1:
            return None
        padding = numeric_padding(m.padding, m.weight, m.dilation)
        return None if padding is None else ConvParts(
            n.args[0], m.weight, m.bias, m.stride, padding, m.dilation, m.groups)
    name = op_name(n)
    if n.op != "call_function" or name not in ("conv2d", "convolution"):
        return None
    if name == "convolution" and (_arg(n, 6, "transposed") or not _is_4d(n.args[1])):
        return None
    if name == "conv2d" and n.target not in _CONV2D:
        return None
    groups = _arg(n, 8 if name == "convolution" else 6, "groups", 1)
    dilation = _arg(n, 5, "dilation", 1)
    default = "valid" if n.target is torch.ops.aten.conv2d.padding else 0
    padding = numeric_padding(_arg(n, 4, "padding", default), n.args[1], dilation)
    return None if padding is None else ConvParts(
        n.args[0], n.args[1], _arg(n, 2, "bias"), _arg(n, 3, "stride", 1), padding,
        dilation, groups)


# aten's conv2d, its overload that takes padding as a word, and the torch function
_CONV2D = (torch.ops.aten.conv2d.default, torch.ops.aten.conv2d.padding, F.conv2d)


def numeric_padding(padding, weight, dilation):
    """`padding` as numbers: "valid" is 0; "same" (stride 1) is half of each
    dilated kernel's extent, where that is even on both sides, else None (torch
    then pads one side more, which a symmetric padding cannot say) (ch. 4)."""
    if not isinstance(padding, str):
        return padding
    if padding == "valid":
        return [0, 0]
    shape = weight_shape(weight)
    if padding != "same" or shape is None or len(shape) != 4:
        return None
    d = [dilation] * 2 if isinstance(dilation, int) else list(dilation)
    extent = [d[i] * (shape[2 + i] - 1) for i in range(2)]
    return None if any(e % 2 for e in extent) else [e // 2 for e in extent]


def _is_4d(weight) -> bool:
    val = weight.meta.get("val") if isinstance(weight, Node) else None
    return getattr(val, "dim", lambda: 4)() == 4


def bn_parts(n: Node) -> BNParts | None:
    """The operands of a batch-norm node (any mode), else None (ch. 4)."""
    if n.op == "call_module":
        m = _submodule(n)
        if not isinstance(m, nn.BatchNorm2d):
            return None
        return BNParts(
            n.args[0], m.weight, m.bias, m.running_mean, m.running_var, m.eps
        )
    name = op_name(n)
    if name == "batch_norm":
        return BNParts(*n.args[:5], eps=_arg(n, 7, "eps", 1e-5))
    if name == "_native_batch_norm_legit_no_training":
        return BNParts(*n.args[:5], eps=_arg(n, 6, "eps", 1e-5))
    return None


def bn_output_users(bn: Node) -> list[Node] | None:
    """The nodes reading BN's normalised output: BN itself, or its getitem-0 nodes.

    `_native_batch_norm_legit_no_training` returns (out, mean, rstd); when anything
    reads mean or rstd the BN cannot be folded away, so None is returned (ch. 4).
    """
    if op_name(bn) != "_native_batch_norm_legit_no_training":
        return [bn]
    if all(u.target is operator.getitem and u.args[1] == 0 for u in bn.users):
        return list(bn.users)
    return None


def value(root: GraphModule, x):
    """A get_attr node's tensor, or `x` itself when it is already a tensor or None.

    Introduced in chapter 4.
    """
    if isinstance(x, Node):
        obj = root
        for part in str(x.target).split("."):
            obj = getattr(obj, part)
        return obj
    return x


_RELU = {torch.relu, F.relu, torch.ops.aten.relu.default}
_ADD = {operator.add, torch.add, torch.ops.aten.add.Tensor}


def is_relu(n: Node) -> bool:
    """relu as an aten op, a torch function, a method or an nn.ReLU module (ch. 4)."""
    if n.op == "call_module":
        return type(_submodule(n)) is nn.ReLU
    if n.op == "call_method":
        return n.target == "relu"
    return n.op == "call_function" and n.target in _RELU and not n.kwargs.get("inplace")


def activation(n: Node):
    """The activation `n` applies, as an `activations.Activation`, else None (ch. 4).

    ReLU, ReLU6/Hardtanh, Hardswish, SiLU and GELU (exact or tanh) at aten level, as
    torch functions or as nn modules: the post-ops oneDNN can fuse. In-place forms
    (`relu_`, `inplace=True` in a call) are refused: they write memory.
    """

    if is_relu(n):
        return RELU
    if n.op == "call_module":
        m = _submodule(n)
        if type(m) in (nn.ReLU6, nn.Hardtanh):
            return hardtanh(m.min_val, m.max_val)
        name = {nn.Hardswish: "hardswish", nn.SiLU: "silu"}.get(type(m))
        if type(m) is nn.GELU:
            name = "gelu" if m.approximate == "none" else "gelu_tanh"
        return ACTIVATIONS[name] if name else None
    if n.op != "call_function" or n.kwargs.get("inplace"):
        return None
    t = n.target
    if t in (torch.ops.aten.hardtanh.default, F.hardtanh, F.relu6):
        lo = _arg(n, 1, "min_val", -1.0) if t is not F.relu6 else 0.0
        hi = _arg(n, 2, "max_val", 1.0) if t is not F.relu6 else 6.0
        ok = isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and lo <= hi
        return hardtanh(lo, hi) if ok else None
    if t in (torch.ops.aten.hardswish.default, F.hardswish):
        return ACTIVATIONS["hardswish"]
    if t in (torch.ops.aten.silu.default, F.silu):
        return ACTIVATIONS["silu"]
    if t in (torch.ops.aten.gelu.default, F.gelu):
        approx = _arg(n, 1, "approximate", "none")
        return {"none": ACTIVATIONS["gelu"],
                "tanh": ACTIVATIONS["gelu_tanh"]}.get(approx)
    return None


def is_add(n: Node) -> bool:
    """A plain two-tensor add (no alpha scaling) (ch. 4)."""
    return _two_tensor_call(n, "add", _ADD)


def _two_tensor_call(n: Node, method: str, functions) -> bool:
    """`n` calls `method` (as a method) or one of `functions` on exactly two tensor
    nodes, with no keyword (an add's alpha, say)."""
    if n.op == "call_method":
        ok = n.target == method
    else:
        ok = n.op == "call_function" and n.target in functions
    return (ok and len(n.args) == 2 and not n.kwargs
            and all(isinstance(a, Node) for a in n.args))


_MUL = {operator.mul, torch.mul, torch.ops.aten.mul.Tensor}
_GATES = {torch.ops.aten.hardsigmoid.default: "hardsigmoid",
          F.hardsigmoid: "hardsigmoid", nn.Hardsigmoid: "hardsigmoid",
          torch.ops.aten.sigmoid.default: "sigmoid", torch.sigmoid: "sigmoid",
          nn.Sigmoid: "sigmoid"}


def is_mul(n: Node) -> bool:
    """A plain two-tensor multiply (ch. 4)."""
    return _two_tensor_call(n, "mul", _MUL)


def gate(n: Node) -> str | None:
    """'hardsigmoid' or 'sigmoid' where `n` applies that gate out of place (ch. 4)."""
    if n.op == "call_module":
        return _GATES.get(type(_submodule(n)))
    if n.op == "call_method":
        return n.target if n.target in ("sigmoid", "hardsigmoid") else None
    if n.op != "call_function" or n.kwargs.get("inplace"):
        return None
    return _GATES.get(n.target)


def global_mean_input(n: Node) -> Node | None:
    """x where `n` averages x over its whole map, keeping (N, C, 1, 1): an adaptive
    average pool to 1x1 (op or module), or a mean over dims 2 and 3 (ch. 4)."""
    if n.op == "call_module":
        m = _submodule(n)
        ok = type(m) is nn.AdaptiveAvgPool2d and m.output_size in (1, (1, 1), [1, 1])
    elif op_name(n) == "adaptive_avg_pool2d" and n.op == "call_function":
        ok = _arg(n, 1, "output_size") in (1, (1, 1), [1, 1])
    elif op_name(n) == "mean" and n.op == "call_function":
        dims = _arg(n, 1, "dim")
        ok = isinstance(dims, (list, tuple)) and sorted(dims) in ([2, 3], [-2, -1]) \
            and _arg(n, 2, "keepdim", False) is True and _arg(n, 3, "dtype") is None
    else:
        ok = False
    x = n.args[0] if ok and n.args else None
    return x if isinstance(x, Node) else None


def weight_shape(weight) -> tuple | None:
    """A conv weight's shape: a module's tensor, or a node's recorded value (ch. 4)."""
    if isinstance(weight, torch.Tensor):
        return tuple(weight.shape)
    val = weight.meta.get("val") if isinstance(weight, Node) else None
    return tuple(val.shape) if isinstance(val, torch.Tensor) else None
