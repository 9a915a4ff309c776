"""The row-reduction template: which reductions fuse, and what they become (ch. 6).

A *row reduction* combines the elements of the innermost dimension into one value per
row: sum, mean, amax, amin over dim -1 with keepdim=True, and the composite ops built
from them, softmax / log_softmax over the last dim, layer norm and RMSNorm over the
last dim only. The legality rule for fusing them with elementwise ops into ONE
kernel (fuse_elementwise applies it, `check_rows` re-checks it per call):

1. the reduction runs over the innermost dimension, which is the contiguous one of
   the group's output, and its operand has the group's full row shape;
2. its producers inside the group are elementwise (or earlier row reductions);
3. its consumers inside the group are elementwise, broadcasting the reduced value
   back over the row (shape [..., 1] against [..., D]);
4. no value inside the group is read outside it (fuse_elementwise's single-output
   rule), so nothing in the middle has to reach memory.

Under that rule one program per row does everything: a pass over the row for each
level of reductions (recomputing the elementwise producers from the inputs instead
of storing them), then a final pass that writes the outputs. Two pass-merges keep
the common norms at one reading pass plus the write pass:

- softmax: online softmax (Milakov & Gimelshein, 2018). One pass keeps the running
  max m and the sum s of exp(x - m); when a larger x arrives, s is rescaled by
  exp(m_old - m_new). The write pass then computes exp(x - m) * (1 / s), one
  division per row.
- layer norm, variance: Welford's algorithm, merged per block with Chan's formula
  (the block's own mean and squared deviations, then one update of the running
  mean and M2): one pass, without the cancellation of E[x^2] - E[x]^2.

Program statements (common.Stmt) for reductions: `row_sum`, `row_max`, `row_min`,
`row_mean`, the online pair `softmax_max`/`softmax_sum(x, m)` and the Welford pair
`welford_mean`/`welford_var(x, mean)`; each yields one value per row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.fx import Node

from ..errors import UnsupportedOpError
from ..ops import op_name, shape

REDUCTIONS = {"row_sum", "row_max", "row_min", "row_mean", "softmax_max",
              "softmax_sum", "welford_mean", "welford_var"}
# which statements a pass computes together: the second of each pair needs the first
PAIRED = {"softmax_sum": "softmax_max", "welford_var": "welford_mean"}

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
    """(kind, parameters) of a row reduction the template fuses, else None."""
    try:
        return parse(node)
    except UnsupportedOpError:
        return None


def parse(node: Node) -> tuple[str, dict] | None:
    """Like describe, but says why a reduction-looking node does not fit."""
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


def rewrite_online(stmts: list) -> list:
    """Merge hand-written softmax / variance chains into the one-pass pairs.

    max m = row_max(v); s = row_sum(exp(v - m))  ->  softmax_max / softmax_sum
    mu = row_mean(v); row_mean(square(v - mu))   ->  welford_mean / welford_var
    """
    from .common import Stmt
    by_var = {s.var: s for s in stmts}
    renamed = {}

    def operand(stmt, name="x"):
        return dict(stmt.args).get(name)

    for s in stmts:
        inner = by_var.get(operand(s))
        if inner is None:
            continue
        if s.op == "row_sum" and inner.op == "exp":
            diff = by_var.get(operand(inner))
            pair = ("softmax_max", "softmax_sum", "row_max")
        elif s.op == "row_mean" and inner.op == "square":
            diff = by_var.get(operand(inner))
            pair = ("welford_mean", "welford_var", "row_mean")
        else:
            continue
        if diff is None or diff.op != "sub":
            continue
        first = by_var.get(operand(diff, "y"))
        v = operand(diff)
        if first is None or first.op != pair[2] or operand(first) != v:
            continue
        renamed[first.var] = Stmt(first.var, pair[0], first.args)
        renamed[s.var] = Stmt(s.var, pair[1], (("x", v), ("m", first.var)))
    return [renamed.get(s.var, s) for s in stmts]


def is_row_program(prog) -> bool:
    return any(s.op in REDUCTIONS for s in prog.stmts)


def expand(kind: str, params: dict, var: str, operand, constant) -> list:
    """The statements of one row reduction; `operand(v)` maps graph values to names,
    `constant(t)` registers a weight tensor and returns its name."""
    from .common import Const, Stmt
    x = operand(params["x"])
    s = lambda suffix, op, **a: Stmt(f"{var}{suffix}", op, tuple(a.items()))  # noqa
    if kind in _SIMPLE.values():
        return [Stmt(var, kind, (("x", x),))]
    if kind in ("softmax", "log_softmax"):
        out = [s("_m", "softmax_max", x=x), s("_s", "softmax_sum", x=x, m=f"{var}_m"),
               s("_d", "sub", x=x, y=f"{var}_m")]
        if kind == "softmax":  # one division per row, a product per element
            return out + [s("_e", "exp", x=f"{var}_d"),
                          s("_i", "div", x=Const(1.0), y=f"{var}_s"),
                          Stmt(var, "mul", (("x", f"{var}_e"), ("y", f"{var}_i")))]
        return out + [s("_l", "log", x=f"{var}_s"),
                      Stmt(var, "sub", (("x", f"{var}_d"), ("y", f"{var}_l")))]
    eps = params["eps"]
    if kind == "layer_norm":
        out = [s("_mu", "welford_mean", x=x),
               s("_var", "welford_var", x=x, m=f"{var}_mu"),
               s("_d", "sub", x=x, y=f"{var}_mu"),
               s("_ve", "add", x=f"{var}_var", y=Const(float(eps))),
               s("_r", "rsqrt", x=f"{var}_ve"), s("_n", "mul", x=f"{var}_d",
                                                  y=f"{var}_r")]
    else:  # rms_norm; eps=None means the dtype's machine epsilon, as torch does
        out = [s("_sq", "square", x=x), s("_ms", "row_mean", x=f"{var}_sq"),
               s("_ve", "add", x=f"{var}_ms", y=Const(float(eps))),
               s("_r", "rsqrt", x=f"{var}_ve"), s("_n", "mul", x=x, y=f"{var}_r")]
    last = f"{var}_n"
    for name, op in (("weight", "mul"), ("bias", "add")):
        t = params.get(name)
        if t is not None:
            out.append(s(f"_{name[0]}", op, x=last, y=constant(t)))
            last = f"{var}_{name[0]}"
    out.append(Stmt(var, "identity", (("x", last),)))
    return out


def reduced_shape(s: tuple) -> tuple:
    return tuple(s[:-1]) + (1,)


def torch_eps(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps


# ---------------------------------------------------------------- one call's rows

@dataclass(frozen=True)
class RowLayout:
    """The (rows, D) view of one call. Per input: a pattern ("contig": stride 1 along
    the row; "rowconst": one value per row; "scalar"; "strided"), the strides of the
    leading dims (0 where broadcast) and the stride along the row."""

    lead: tuple[int, ...]
    D: int
    patterns: tuple[str, ...]
    lead_strides: tuple[tuple[int, ...], ...]
    col_strides: tuple[int, ...]
    out_kinds: tuple[str, ...]            # "row" ([..., D]) or "stat" ([..., 1])
    out_shapes: tuple[tuple[int, ...], ...]

    @property
    def rows(self) -> int:
        return math.prod(self.lead)

    @property
    def numel(self) -> int:
        return self.rows * self.D


def plan_rows(prog, inputs) -> RowLayout:
    """Check rule 1 of the module docstring for these inputs and lay the rows out."""
    from .common import broadcast_strides, shapes_of
    shapes = shapes_of(prog, inputs)
    full = tuple(torch.broadcast_shapes(*shapes.values()))
    if not full or full[-1] <= 1:
        raise UnsupportedOpError(
            "a row reduction needs a last dimension longer than 1.")
    for st in prog.stmts:
        if st.op in REDUCTIONS and shapes[dict(st.args)["x"]] != full:
            raise UnsupportedOpError(
                f"{st.op} reduces a value of shape {shapes[dict(st.args)['x']]}, "
                "not the "
                f"group's full row shape {full}: not a row reduction of this group.")
    patterns, leads, cols = [], [], []
    for t in inputs:
        st = broadcast_strides(t.shape, t.stride(), full)
        leads.append(st[:-1])
        cols.append(st[-1])
        patterns.append("scalar" if not any(st) else "rowconst" if st[-1] == 0
                        else "contig" if st[-1] == 1 else "strided")
    out_kinds, out_shapes = [], []
    for v in prog.outputs:
        kind = "row" if shapes[v] == full else "stat" if \
            shapes[v] == reduced_shape(full) else None
        if kind is None:
            raise UnsupportedOpError(
                f"group output of shape {shapes[v]} is neither a full row {full} nor "
                "one value per row.")
        out_kinds.append(kind)
        out_shapes.append(shapes[v])
    return RowLayout(full[:-1], full[-1], tuple(patterns), tuple(leads), tuple(cols),
                     tuple(out_kinds), tuple(out_shapes))


def stat_vars(prog, layout: RowLayout) -> set[str]:
    """Values with one number per row: reductions, per-row inputs, math on them."""
    stat = {v for v, p in zip(prog.inputs, layout.patterns)
            if p in ("rowconst", "scalar")}
    for st in prog.stmts:
        ops = prog.operands(st)
        if st.op in REDUCTIONS or (ops and all(o in stat for o in ops)):
            stat.add(st.var)
    return stat


def passes(prog) -> dict[str, int]:
    """The reading pass in which each value is known (0: before any pass)."""
    level: dict[str, int] = {v: 0 for v in prog.inputs}
    for st in prog.stmts:
        if st.op in REDUCTIONS:
            level[st.var] = 1 + level[dict(st.args)["x"]]
        else:
            level[st.var] = max([level[o] for o in prog.operands(st)], default=0)
    return level


def needed(prog, roots, known: set[str]) -> list:
    """The elementwise statements that compute `roots`, in program order."""
    by_var = {s.var: s for s in prog.stmts}
    want, stack = set(), list(roots)
    while stack:
        v = stack.pop()
        if v in want or v in known or v not in by_var:
            continue
        want.add(v)
        if by_var[v].op not in REDUCTIONS:
            stack += prog.operands(by_var[v])
    return [s for s in prog.stmts if s.var in want and s.op not in REDUCTIONS]
