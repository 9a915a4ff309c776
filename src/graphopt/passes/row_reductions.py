"""Row reductions' legality: which reductions fuse with elementwise ops (chapter 6).

A *row reduction* combines the elements of the innermost dimension into one value per
row: sum, mean, amax, amin over dim -1 with keepdim=True, and the composite ops built
from them, softmax / log_softmax over the last dim, layer norm and RMSNorm over the
last dim only. The legality rule for fusing them with elementwise ops into ONE
kernel (fuse_elementwise applies it; `codegen.reduce_rows.plan_rows` re-checks rule 1
per call):

1. the reduction runs over the innermost dimension, which is the contiguous one of
   the group's output, and its operand has the group's full row shape;
2. its producers inside the group are elementwise (or earlier row reductions);
3. its consumers inside the group are elementwise, broadcasting the reduced value
   back over the row (shape [..., 1] against [..., D]);
4. no value inside the group is read outside it (fuse_elementwise's single-output
   rule), so nothing in the middle has to reach memory.

`parse` reads a node into (kind, parameters). The rule is a graph question, so it
sits with the passes (`grouping` asks it); what a kind becomes in a kernel (the
one-pass online softmax and Welford statements) is `codegen.reduce_program`, one
call's rows and its reading passes `codegen.reduce_rows`.
"""

from __future__ import annotations

from torch import nn
from torch.fx import Node

from ..errors import UnsupportedOpError
from ..ops import op_name, shape

_SIMPLE = {"sum": "row_sum", "mean": "row_mean", "amax": "row_max", "amin": "row_min"}
_COMPOSITE = {"softmax": "softmax", "_softmax": "softmax", "log_softmax": "log_softmax",
              "_log_softmax": "log_softmax", "layer_norm": "layer_norm",
              "rms_norm": "rms_norm"}
_MODULES = {nn.Softmax: "softmax", nn.LogSoftmax: "log_softmax",
            nn.LayerNorm: "layer_norm", nn.RMSNorm: "rms_norm"}


def _arg(node: Node, pos: int, name: str, default=None):
    if len(node.args) > pos:
        return node.args[pos]
    return node.kwargs.get(name, default)


def _last_dim(dim, ndim: int) -> bool:
    if isinstance(dim, (list, tuple)):
        if len(dim) != 1:
            return False
        dim = dim[0]
    return isinstance(dim, int) and (dim == -1 or (ndim > 0 and dim == ndim - 1))


def describe(node: Node) -> tuple[str, dict] | None:
    """(kind, parameters) of a row reduction the template fuses, else None (ch. 6)."""
    try:
        return parse(node)
    except UnsupportedOpError:
        return None


def parse(node: Node) -> tuple[str, dict] | None:
    """Like describe, but says why a reduction-looking node does not fit (ch. 6)."""
    if node.op == "call_module":
        module = node.graph.owning_module.get_submodule(str(node.target))
        kind = _MODULES.get(type(module))
        return None if kind is None else _module(node, module, kind)
    if node.op not in ("call_function", "call_method"):
        return None
    name = op_name(node)
    if name in _SIMPLE:
        return _simple(node, _SIMPLE[name])
    if name in _COMPOSITE:
        return _composite(node, _COMPOSITE[name])
    return None


def _ndim(node: Node) -> int:
    """The input's rank; -1 when unknown (a symbolic trace: only dim=-1 then fuses)."""
    x = node.args[0] if node.args else None
    s = shape(x) if isinstance(x, Node) else None
    return -1 if s is None else len(s)


def _simple(node: Node, kind: str):
    ndim = _ndim(node)
    dim = _arg(node, 1, "dim")
    keepdim = _arg(node, 2, "keepdim", False)
    if node.kwargs.get("dtype") is not None or not _last_dim(dim, ndim) or not keepdim:
        raise UnsupportedOpError(
            f"node {node.name!r}: only {kind[4:]} over the last dim with keepdim=True "
            "fuses into a row kernel.")
    return kind, {"x": node.args[0]}


def _composite(node: Node, kind: str):
    ndim = _ndim(node)
    x = node.args[0]
    if kind in ("softmax", "log_softmax"):
        if node.kwargs.get("dtype") is not None or (
                len(node.args) > 2 and node.args[2] is True
                and op_name(node).startswith("_")):
            raise UnsupportedOpError(
                f"node {node.name!r}: softmax with a dtype change.")
        if not _last_dim(_arg(node, 1, "dim"), ndim):
            raise UnsupportedOpError(
                f"node {node.name!r}: softmax over a dim other than the last.")
        return kind, {"x": x}
    normalized = _arg(node, 1, "normalized_shape")
    if not isinstance(normalized, (list, tuple)) or len(normalized) != 1:
        raise UnsupportedOpError(
            f"node {node.name!r}: {kind} over more than the last dim.")
    if kind == "layer_norm":
        return kind, {"x": x, "weight": _arg(node, 2, "weight"),
                      "bias": _arg(node, 3, "bias"), "eps": _arg(node, 4, "eps", 1e-5)}
    return kind, {"x": x, "weight": _arg(node, 2, "weight"),
                  "eps": _arg(node, 3, "eps", None)}


def _module(node: Node, module, kind: str):
    ndim = _ndim(node)
    if kind in ("softmax", "log_softmax"):
        if not _last_dim(module.dim, ndim):
            raise UnsupportedOpError(
                f"node {node.name!r}: {type(module).__name__}(dim={module.dim}).")
        return kind, {"x": node.args[0]}
    if len(module.normalized_shape) != 1:
        raise UnsupportedOpError(
            f"node {node.name!r}: {kind} over more than the last dim.")
    params = {"x": node.args[0], "weight": module.weight, "eps": module.eps}
    if kind == "layer_norm":
        params["bias"] = module.bias
    return kind, params
