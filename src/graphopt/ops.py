"""The operator vocabulary: what kind of op a node is, its shape, bytes and FLOPs.

Introduced in chapter 1. Learners call `kind(node)`, `shape(node)` and `nbytes(node)`
instead of digging in `node.meta`. The classes follow the book:

- ELEMENTWISE (逐元素): every output element depends on one element of each input
  (add, mul, relu, and batch norm in inference, which is a per-channel affine map).
- REDUCTION (归约): many input elements combine into one (sum, mean, softmax,
  layer norm).
- LAYOUT (变换): shape or order changes, no arithmetic (view, permute, cat).
- COMPUTE (计算密集): matrix products and convolutions, where FLOPs dominate bytes.
- OTHER: inputs, constants, outputs and anything else.

Aten ops are classified by torch's own tags (`torch.Tag.pointwise`,
`torch.Tag.reduction`, `OpOverload.is_view`); the table `_BY_NAME` covers what
carries no tag. `shape`, `dtype` and `nbytes` live in `shapes.py`, re-exported
here.
"""

from __future__ import annotations

import enum
import math
import operator

import torch
from torch import nn
from torch.fx import Node

from .shapes import dtype as dtype
from .shapes import nbytes as nbytes
from .shapes import shape
from .shapes import tensor_meta as tensor_meta
from .torch_internals import OpOverload, op_schema


class OpKind(enum.Enum):
    """What an operator does to its data, the classes of chapter 1 listed above."""

    ELEMENTWISE = "elementwise"
    REDUCTION = "reduction"
    LAYOUT = "layout"
    COMPUTE = "compute"
    OTHER = "other"


# Ops with no class tag in torch, by base name. One row each, deterministic.
_BY_NAME: dict[str, OpKind] = {
    # compute-heavy: FLOPs grow faster than bytes
    "conv1d": OpKind.COMPUTE, "conv2d": OpKind.COMPUTE, "conv3d": OpKind.COMPUTE,
    "convolution": OpKind.COMPUTE, "linear": OpKind.COMPUTE, "matmul": OpKind.COMPUTE,
    "mm": OpKind.COMPUTE, "bmm": OpKind.COMPUTE, "addmm": OpKind.COMPUTE,
    "baddbmm": OpKind.COMPUTE, "einsum": OpKind.COMPUTE,
    "scaled_dot_product_attention": OpKind.COMPUTE,
    # reductions: many inputs per output element
    "softmax": OpKind.REDUCTION, "_softmax": OpKind.REDUCTION,
    "log_softmax": OpKind.REDUCTION, "layer_norm": OpKind.REDUCTION,
    "native_layer_norm": OpKind.REDUCTION, "sum": OpKind.REDUCTION,
    "mean": OpKind.REDUCTION, "amax": OpKind.REDUCTION, "max": OpKind.REDUCTION,
    "min": OpKind.REDUCTION, "var": OpKind.REDUCTION, "std": OpKind.REDUCTION,
    "adaptive_avg_pool2d": OpKind.REDUCTION, "avg_pool2d": OpKind.REDUCTION,
    "max_pool2d": OpKind.REDUCTION, "norm": OpKind.REDUCTION,
    # batch norm in inference is a per-channel affine map (training mode: see kind())
    "batch_norm": OpKind.ELEMENTWISE,
    "_native_batch_norm_legit_no_training": OpKind.ELEMENTWISE,
    "dropout": OpKind.ELEMENTWISE,
    # layout: data moves or is re-described, nothing is computed
    "cat": OpKind.LAYOUT, "stack": OpKind.LAYOUT, "flatten": OpKind.LAYOUT,
    "reshape": OpKind.LAYOUT, "view": OpKind.LAYOUT, "permute": OpKind.LAYOUT,
    "transpose": OpKind.LAYOUT, "t": OpKind.LAYOUT, "contiguous": OpKind.LAYOUT,
    "unsqueeze": OpKind.LAYOUT, "squeeze": OpKind.LAYOUT, "expand": OpKind.LAYOUT,
    "split": OpKind.LAYOUT, "chunk": OpKind.LAYOUT, "getitem": OpKind.LAYOUT,
    "slice": OpKind.LAYOUT, "select": OpKind.LAYOUT, "_unsafe_view": OpKind.LAYOUT,
    "clone": OpKind.LAYOUT, "to": OpKind.LAYOUT,
}

_MODULE_KINDS: list[tuple[type, OpKind]] = [
    (
        (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear, nn.MultiheadAttention),
        OpKind.COMPUTE,
    ),
    (
        (
            nn.LayerNorm,
            nn.GroupNorm,
            nn.Softmax,
            nn.LogSoftmax,
            nn.MaxPool2d,
            nn.AvgPool2d,
            nn.AdaptiveAvgPool2d,
        ),
        OpKind.REDUCTION,
    ),
    (
        (
            nn.ReLU,
            nn.GELU,
            nn.SiLU,
            nn.Sigmoid,
            nn.Tanh,
            nn.LeakyReLU,
            nn.Dropout,
            nn.Identity,
        ),
        OpKind.ELEMENTWISE,
    ),
    ((nn.Flatten, nn.Unflatten), OpKind.LAYOUT),
]

# Python operators seen in module-level (symbolic_trace) graphs, by the aten name
# they lower to.
_OPERATOR_NAMES = {
    operator.add: "add", operator.sub: "sub", operator.mul: "mul",
    operator.truediv: "div", operator.neg: "neg", operator.pow: "pow",
    operator.matmul: "matmul", operator.getitem: "getitem",
}


def op_name(node: Node) -> str:
    """A short, stable name for what a node computes: 'add', 'conv2d', 'Conv2d', 'x'.

    Introduced in chapter 1.
    """
    if node.op in ("placeholder", "get_attr", "output"):
        return node.op
    if node.op == "call_module":
        return type(_submodule(node)).__name__
    if node.op == "call_method":
        return str(node.target)
    target = node.target
    if isinstance(target, OpOverload):
        return op_schema(target).name.split("::")[-1]
    if target in _OPERATOR_NAMES:
        return _OPERATOR_NAMES[target]
    return getattr(target, "__name__", str(target))


def _submodule(node: Node) -> nn.Module | None:
    root = node.graph.owning_module
    if root is None:
        return None
    try:
        return root.get_submodule(str(node.target))
    except AttributeError:
        return None


def _aten_overload(node: Node) -> OpOverload | None:
    """The aten overload behind a node, when torch's registry knows one by that name."""
    if isinstance(node.target, OpOverload):
        return node.target
    name = op_name(node)
    packet = getattr(torch.ops.aten, name, None) if name.isidentifier() else None
    if packet is None:
        return None
    for overload in ("Tensor", "default"):
        if overload in packet.overloads():
            return getattr(packet, overload)
    return None


def kind(node: Node) -> OpKind:
    """Classify a node as ELEMENTWISE, REDUCTION, LAYOUT, COMPUTE or OTHER (ch. 1)."""
    if node.op in ("placeholder", "get_attr", "output"):
        return OpKind.OTHER
    custom = getattr(_submodule(node) if node.op == "call_module" else node.target,
                     "graphopt_kind", None)
    if custom is not None:  # fused nodes say what they are
        return custom
    if node.op == "call_module":
        return _module_kind(_submodule(node))
    name = op_name(node)
    if name in ("batch_norm", "_native_batch_norm_legit") and _bn_training(node):
        return OpKind.REDUCTION
    overload = _aten_overload(node)
    if overload is not None:
        tags = set(overload.tags)
        if torch.Tag.pointwise in tags:
            return OpKind.ELEMENTWISE
        if torch.Tag.reduction in tags:
            return OpKind.REDUCTION
        if overload.is_view:
            return OpKind.LAYOUT
    return _BY_NAME.get(name.rstrip("_"), OpKind.OTHER)


def _bn_training(node: Node) -> bool:
    # aten.batch_norm(input, weight, bias, mean, var, training, momentum, eps, cudnn)
    if len(node.args) > 5:
        return bool(node.args[5])
    return bool(node.kwargs.get("training", False))


def _module_kind(module: nn.Module | None) -> OpKind:
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        return OpKind.REDUCTION if module.training else OpKind.ELEMENTWISE
    for types, k in _MODULE_KINDS:
        if isinstance(module, types):
            return k
    return OpKind.OTHER


def is_random(node: Node) -> bool:
    """True for ops whose result depends on the random generator (never fold, merge).

    Introduced in chapter 1.
    """
    if node.op == "call_module":
        return isinstance(_submodule(node), nn.Dropout) and _submodule(node).training
    overload = _aten_overload(node)
    if overload is not None and torch.Tag.nondeterministic_seeded in overload.tags:
        return True
    return op_name(node) in ("rand", "randn", "randint", "rand_like", "randn_like",
                             "bernoulli", "normal", "dropout", "multinomial")


def is_impure(node: Node) -> bool:
    """True for nodes with side effects or randomness: passes must leave them alone.

    Introduced in chapter 1.
    """
    if node.op in ("placeholder", "output"):
        return True
    if is_random(node):
        return True
    if node.op == "call_module" and str(node.target).startswith("_guards"):
        return True
    try:
        if node.is_impure():
            return True
    except Exception:  # is_impure looks up modules; a detached node has none
        pass
    overload = _aten_overload(node) if node.op != "call_module" else None
    if overload is not None and op_schema(overload).is_mutable:
        return True
    return op_name(node).endswith("_") and not op_name(node).startswith("_")


def flops(node: Node) -> int:
    """Floating-point operations of one node (a multiply-add counts as two).

    A fused node (chapter 4) counts what its members counted, so fusion moves bytes
    and kernels, never FLOPs: its module says so in `graphopt_flops(node)`.
    """
    if node.op == "call_module":
        counted = getattr(_submodule(node), "graphopt_flops", None)
        if counted is not None:
            return int(counted(node))
    k = kind(node)
    out = shape(node)
    if k is OpKind.COMPUTE:
        return _compute_flops(node)
    if k is OpKind.ELEMENTWISE and out is not None:
        return math.prod(out)
    if k is OpKind.REDUCTION:
        first = node.all_input_nodes[0] if node.all_input_nodes else None
        return math.prod(shape(first)) if first is not None and shape(first) else 0
    return 0


def _compute_flops(node: Node) -> int:
    out = shape(node)
    if out is None:
        return 0
    name = op_name(node).lower()
    inputs = [n for n in node.all_input_nodes if shape(n) is not None]
    if node.op == "call_module":
        module = _submodule(node)
        if isinstance(module, nn.Linear):
            return 2 * math.prod(out) * module.in_features
        if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
            per_out = (
                module.in_channels // module.groups * math.prod(module.kernel_size)
            )
            return 2 * math.prod(out) * per_out
        return 0
    if name.startswith("conv"):
        weight = shape(node.args[1]) if isinstance(node.args[1], Node) else None
        return 2 * math.prod(out) * math.prod(weight[1:]) if weight else 0
    if name == "scaled_dot_product_attention" and len(inputs) >= 3:
        # q kᵀ (2·L·S·E per batch) and probs · v (2·L·S·Ev); softmax is not counted
        q, k, v = (shape(n) for n in node.args[:3])
        batch = math.prod(q[:-2])
        return 2 * batch * q[-2] * k[-2] * (q[-1] + v[-1])
    if name in ("linear", "mm", "matmul", "bmm", "addmm", "baddbmm") and inputs:
        # the contracted dimension is the last one of the first matrix operand
        first = node.args[1] if name in ("addmm", "baddbmm") else node.args[0]
        k_dim = shape(first)[-1] if isinstance(first, Node) and shape(first) else 0
        return 2 * math.prod(out) * k_dim
    return 0
