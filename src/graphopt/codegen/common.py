"""What both kernel generators share: the op table and the group's program (chapter 6).

A fused group arrives as a small torch.fx GraphModule of elementwise ops. Before any
code is written it is turned into a *program*: a straight list of statements

    t_mul = mul(x=a0, y=2.0)
    t_add = add(x=t_mul, y=a1)
    t_relu = relu(x=t_add)

where `a0, a1` are the values loaded from the input tensors for one output element and
`2.0` is a constant baked into the graph. Each generator turns one statement into one
line of its own language by filling in the op's template from `OPS`. The table is data:
adding an op is adding a row, not writing a new code path.

The same op has several spellings in fx graphs (`operator.mul`, `torch.mul`, the
`.mul()` method, `aten.mul.Tensor`, `nn.ReLU`); `ALIASES` maps them to one row.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.fx import GraphModule, Node
from torch.utils._pytree import tree_unflatten

from ..errors import UnsupportedOpError
from ..ops import dtype, op_name
from . import reduce


@dataclass(frozen=True)
class OpSpec:
    """One elementwise op: its argument names, defaults and one template per backend.

    Templates use the argument names, e.g. "{x} + {y}". In numba templates the names
    ZERO, ONE, HALF, THREE and SIX are constants of the kernel's dtype (no float64
    promotion), and EXP is the kernel's exp (`cpu.exp_source`).
    """

    args: tuple[str, ...]
    numba: str
    triton: str
    defaults: tuple[tuple[str, Any], ...] = ()


_SIGMOID_NB = "ONE / (ONE + EXP(-{x}))"
# Rows: canonical name -> templates. Comments say why a row is not the obvious one.
OPS: dict[str, OpSpec] = {
    "add": OpSpec(("x", "y"), "{x} + {y}", "{x} + {y}"),
    "sub": OpSpec(("x", "y"), "{x} - {y}", "{x} - {y}"),
    "rsub": OpSpec(("x", "y"), "{y} - {x}", "{y} - {x}"),  # aten: y - x
    "mul": OpSpec(("x", "y"), "{x} * {y}", "{x} * {y}"),
    "div": OpSpec(("x", "y"), "{x} / {y}", "{x} / {y}"),
    "neg": OpSpec(("x",), "-{x}", "-{x}"),
    "abs": OpSpec(("x",), "abs({x})", "tl.abs({x})"),
    "square": OpSpec(("x",), "{x} * {x}", "{x} * {x}"),
    "reciprocal": OpSpec(("x",), "ONE / {x}", "1.0 / {x}"),
    # Triton rows use tl.where: tl.maximum(nan, 0.0) is 0.0, torch.relu(nan) is nan
    # (a comparison with NaN is false, so the where keeps x); numba's max keeps NaN.
    "relu": OpSpec(("x",), "max({x}, ZERO)", "tl.where({x} < 0.0, 0.0, {x})"),
    "relu6": OpSpec(("x",), "min(max({x}, ZERO), SIX)",
                    "tl.where({x} < 0.0, 0.0, tl.where({x} > 6.0, 6.0, {x}))"),
    "leaky_relu": OpSpec(("x", "negative_slope"),
                         "{x} if {x} > ZERO else {x} * {negative_slope}",
                         "tl.where({x} > 0.0, {x}, {x} * {negative_slope})",
                         (("negative_slope", 0.01),)),
    "clamp": OpSpec(("x", "min", "max"), "min(max({x}, {min}), {max})",
                    "tl.where({x} < {min}, {min}, tl.where({x} > {max}, {max}, {x}))",
                    (("min", None), ("max", None))),  # a None bound: see _one_sided
    "clamp_min": OpSpec(("x", "min"), "max({x}, {min})",
                        "tl.where({x} < {min}, {min}, {x})"),
    "clamp_max": OpSpec(("x", "max"), "min({x}, {max})",
                        "tl.where({x} > {max}, {max}, {x})"),
    "hardtanh": OpSpec(("x", "min_val", "max_val"),
                       "min(max({x}, {min_val}), {max_val})",
                       "tl.where({x} < {min_val}, {min_val}, "
                       "tl.where({x} > {max_val}, {max_val}, {x}))",
                       (("min_val", -1.0), ("max_val", 1.0))),
    # torch.maximum/minimum return NaN if either side is NaN (x + y is then NaN)
    # MobileNetV3's gates: relu6(x + 3) / 6, and x times it
    "hardsigmoid": OpSpec(("x",), "min(max({x} + THREE, ZERO), SIX) / SIX",
                          "tl.where({x} + 3.0 < 0.0, 0.0, tl.where({x} + 3.0 > 6.0, "
                          "6.0, {x} + 3.0)) / 6.0"),
    "hardswish": OpSpec(("x",), "{x} * min(max({x} + THREE, ZERO), SIX) / SIX",
                        "{x} * tl.where({x} + 3.0 < 0.0, 0.0, tl.where({x} + 3.0 > "
                        "6.0, 6.0, {x} + 3.0)) / 6.0"),
    "maximum": OpSpec(("x", "y"), "{x} + {y} if {x} != {x} or {y} != {y} else "
                      "max({x}, {y})",
                      "tl.where(({x} != {x}) | ({y} != {y}), {x} + {y}, "
                      "tl.maximum({x}, {y}))"),
    "minimum": OpSpec(("x", "y"), "{x} + {y} if {x} != {x} or {y} != {y} else "
                      "min({x}, {y})",
                      "tl.where(({x} != {x}) | ({y} != {y}), {x} + {y}, "
                      "tl.minimum({x}, {y}))"),
    # EXP: exp_numba.exp32 in float32 kernels (vectorises), math.exp in float64
    "exp": OpSpec(("x",), "EXP({x})", "tl.exp({x})"),
    "log": OpSpec(("x",), "math.log({x})", "tl.log({x})"),
    "sqrt": OpSpec(("x",), "math.sqrt({x})", "tl.sqrt({x})"),
    "rsqrt": OpSpec(("x",), "ONE / math.sqrt({x})", "tl.rsqrt({x})"),
    "sin": OpSpec(("x",), "math.sin({x})", "tl.sin({x})"),
    "cos": OpSpec(("x",), "math.cos({x})", "tl.cos({x})"),
    "sigmoid": OpSpec(("x",), _SIGMOID_NB, "tl.sigmoid({x})"),
    # Triton has no portable tanh outside libdevice: tanh(x) = 2 sigmoid(2x) - 1
    "tanh": OpSpec(("x",), "math.tanh({x})", "2.0 * tl.sigmoid(2.0 * {x}) - 1.0"),
    "silu": OpSpec(("x",), "{x} * " + _SIGMOID_NB, "{x} * tl.sigmoid({x})"),
    # exact GELU (approximate="none"): x * Phi(x) with Phi from erf
    "gelu": OpSpec(("x",), "HALF * {x} * (ONE + math.erf({x} * RSQRT2))",
                   "0.5 * {x} * (1.0 + tl.erf({x} * 0.7071067811865476))"),
    "identity": OpSpec(("x",), "{x}", "{x}"),
}

# Other spellings of the same op, as ops.op_name reports them (aten names, torch
# functions, methods, lower-cased module classes).
ALIASES: dict[str, str] = {
    "multiply": "mul", "true_divide": "div", "divide": "div", "subtract": "sub",
    "negative": "neg", "absolute": "abs", "clip": "clamp", "positive": "identity",
    "clone": "identity", "contiguous": "identity", "alias": "identity",
    "detach": "identity", "dropout": "identity", "feature_dropout": "identity",
    "silu": "silu", "hardtanh": "hardtanh", "leakyrelu": "leaky_relu",
}

# nn.Module classes that may sit inside a group, and how to read their arguments.
_MODULES: dict[type, tuple[str, Any]] = {
    nn.ReLU: ("relu", lambda m: {}), nn.ReLU6: ("relu6", lambda m: {}),
    nn.Sigmoid: ("sigmoid", lambda m: {}), nn.Tanh: ("tanh", lambda m: {}),
    nn.SiLU: ("silu", lambda m: {}), nn.Identity: ("identity", lambda m: {}),
    nn.Hardsigmoid: ("hardsigmoid", lambda m: {}),
    nn.Hardswish: ("hardswish", lambda m: {}),
    nn.LeakyReLU: ("leaky_relu", lambda m: {"negative_slope": m.negative_slope}),
    nn.Hardtanh: ("hardtanh", lambda m: {"min_val": m.min_val, "max_val": m.max_val}),
    nn.GELU: ("gelu", lambda m: {"approximate": m.approximate}),
    nn.Dropout: ("identity", lambda m: {"training": m.training}),
}

SUPPORTED_HINT = (
    "Supported elementwise ops: " + ", ".join(sorted(OPS)) + ". Leave this op out of "
    "the "
    "fused group (it then runs eagerly), or add a row to graphopt.codegen.common.OPS.")


@dataclass(frozen=True)
class Const:
    """A scalar baked into the graph; generators cast it to the kernel's dtype."""

    value: float


@dataclass(frozen=True)
class Stmt:
    """One line of the program: `var = op(**args)`; args map to var names or Consts."""

    var: str
    op: str
    args: tuple[tuple[str, Any], ...]

    def text(self) -> str:
        shown = ", ".join(f"{k}={v.value if isinstance(v, Const) else v}"
                          for k, v in self.args)
        return f"{self.var} = {self.op}({shown})"


@dataclass
class Program:
    """A fused group as straight-line code: inputs, statements, outputs."""

    inputs: list[str]                      # one load variable per input tensor
    constants: list[torch.Tensor] = field(default_factory=list)  # get_attr tensors
    stmts: list[Stmt] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    tuple_output: bool = False             # the graph returned a tuple/list
    out_spec: Any = None                   # torch.export's pytree spec of the result

    def pack(self, outputs: list):
        """Results in the structure the group's GraphModule returns them."""
        if self.out_spec is not None:
            return tree_unflatten(outputs, self.out_spec)
        return tuple(outputs) if self.tuple_output else outputs[0]

    def text(self) -> str:
        """The op sequence as text: the part of a kernel's cache key that is math."""
        lines = [f"inputs {', '.join(self.inputs)}"] + [s.text() for s in self.stmts]
        return "\n".join(lines + [f"return {', '.join(self.outputs)}"])

    def operands(self, stmt: Stmt) -> list[str]:
        return [v for _, v in stmt.args if isinstance(v, str)]


def canonical(node: Node, gm: GraphModule) -> tuple[str, dict[str, Any]]:
    """The OPS row of a node and the extra keyword arguments its spelling implies."""
    if node.op == "call_module":
        module = gm.get_submodule(str(node.target))
        for cls, (name, read) in _MODULES.items():
            if type(module) is cls:
                return name, read(module)
        raise UnsupportedOpError(
            f"module {type(module).__name__} (node {node.name!r}) has no kernel "
            "template. "
            + SUPPORTED_HINT)
    name = op_name(node)
    if name.endswith("_") and not name.startswith("_"):
        name = name[:-1]  # in-place spellings (relu_) compute the same values
    name = ALIASES.get(name, name)
    if name not in OPS and name != "pow":
        raise UnsupportedOpError(
            f"op {name!r} (node {node.name!r}, target {node.target}) has no kernel "
            "template. " + SUPPORTED_HINT)
    return name, {}


def _bind(name: str, node: Node, extra: dict) -> dict[str, Any]:
    """Match a node's positional and keyword arguments to the op's argument names."""
    spec = OPS[name]
    bound = dict(spec.defaults)
    bound.update(zip(spec.args, node.args))
    bound.update({k: v for k, v in node.kwargs.items() if k in spec.args})
    bound.update({k: v for k, v in extra.items() if k in spec.args})
    _check_options(name, node, {**node.kwargs, **extra})
    missing = [a for a in spec.args if a not in bound]
    if missing:
        raise UnsupportedOpError(
            f"node {node.name!r} ({name}) lacks arguments {missing}.")
    return bound


def _check_options(name: str, node: Node, kwargs: dict) -> None:
    """Refuse keyword options the templates do not implement; never ignore them."""
    if kwargs.get("alpha", 1) != 1:
        raise UnsupportedOpError(
            f"node {node.name!r}: {name} with alpha={kwargs['alpha']} has no template; "
            "write it as x + alpha * y before fusing.")
    if kwargs.get("approximate", "none") != "none":
        raise UnsupportedOpError(
            f"node {node.name!r}: gelu(approximate={kwargs['approximate']!r}) has no "
            "template; only the exact GELU is generated.")
    if kwargs.get("training", False) or (
            name == "identity" and _dropout_training(node)):
        raise UnsupportedOpError(
            f"node {node.name!r}: dropout in training mode is random, not elementwise "
            "math; call model.eval() before fusing.")
    if kwargs.get("dtype") is not None or kwargs.get("memory_format") not in (
            None, torch.preserve_format, torch.contiguous_format):
        raise UnsupportedOpError(
            f"node {node.name!r}: dtype/layout changes are not fused.")


def _dropout_training(node: Node) -> bool:
    # aten.dropout(input, p, train): args[2]
    return op_name(node) in ("dropout", "feature_dropout") and len(node.args) > 2 and \
        bool(node.args[2])


def _pow(node: Node) -> tuple[str, dict]:
    """pow with a constant exponent 1, 2, 0.5 or -1 maps to a cheaper row."""
    base, exponent = (node.args + (node.kwargs.get("exponent"),))[:2]
    rows = {1: "identity", 2: "square", 0.5: "sqrt", -1: "reciprocal"}
    constant = isinstance(exponent, (int, float)) and not isinstance(exponent, bool)
    if isinstance(base, Node) and constant and exponent in rows:
        return rows[exponent], {"x": base}
    raise UnsupportedOpError(
        f"node {node.name!r}: pow({base}, {exponent}) has no template (only constant "
        "exponents 1, 2, 0.5, -1); write x * x or leave the node out of the group.")


def _one_sided(name: str, bound: dict) -> tuple[str, dict]:
    """clamp(x, min=None) is clamp_max: a missing bound must not become an infinity."""
    if name != "clamp" or (bound["min"] is not None and bound["max"] is not None):
        return name, bound
    if bound["min"] is None and bound["max"] is None:
        return "identity", {"x": bound["x"]}
    if bound["min"] is None:
        return "clamp_max", {"x": bound["x"], "max": bound["max"]}
    return "clamp_min", {"x": bound["x"], "min": bound["min"]}


def _operand(value, env: dict[str, str], node: Node):
    if isinstance(value, Node):
        return env[value.name]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UnsupportedOpError(
            f"node {node.name!r} takes {value!r} ({type(value).__name__}); fused "
            "kernels "
            "take tensors and Python numbers only.")
    return Const(float(value))


def build_program(gm: GraphModule) -> Program:
    """Turn a group's GraphModule into a Program; refuse what has no template."""
    prog = Program(inputs=[])
    # exported graphs return a flat tuple that their codegen unflattens (a tensor)
    info = getattr(gm.graph._codegen, "pytree_info", None)
    prog.out_spec = getattr(info, "out_spec", None)
    env: dict[str, str] = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            env[node.name] = f"a{len(prog.inputs)}"
            prog.inputs.append(env[node.name])
        elif node.op == "get_attr":
            value = _fetch(gm, str(node.target))
            if not isinstance(value, torch.Tensor):
                raise UnsupportedOpError(f"get_attr {node.target!r} is not a tensor.")
            env[node.name] = f"a{len(prog.inputs)}"
            prog.inputs.append(env[node.name])
            prog.constants.append(value.detach())
        elif node.op == "output":
            _set_outputs(prog, node.args[0], env)
        elif node.op == "call_module" and str(node.target).startswith("_guards"):
            continue  # torch.export's input-shape check: not an op
        elif (row := reduce.parse(node)) is not None:
            _add_row_reduction(prog, node, row, env)
        else:
            name, extra = canonical(node, gm) if op_name(node) != "pow" else ("pow", {})
            if name == "pow":
                name, bound = _pow(node)
            else:
                bound = _bind(name, node, extra)
                name, bound = _one_sided(name, bound)
            args = tuple((a, _operand(bound[a], env, node)) for a in OPS[name].args)
            env[node.name] = f"t_{node.name}"
            prog.stmts.append(Stmt(env[node.name], name, args))
    prog.stmts = reduce.rewrite_online(prog.stmts)
    return prog


def _add_row_reduction(prog: Program, node: Node, row, env: dict) -> None:
    """A row reduction's statements (codegen.reduce) appended to the program."""
    kind, params = row
    if kind == "rms_norm" and params.get("eps") is None:
        params = {**params, "eps": reduce.torch_eps(dtype(node) or torch.float32)}

    def value(v):
        if isinstance(v, Node):
            return env[v.name]
        if isinstance(v, torch.Tensor):  # a module's weight: a constant input
            name = f"a{len(prog.inputs)}"
            prog.inputs.append(name)
            prog.constants.append(v.detach())
            return name
        raise UnsupportedOpError(f"node {node.name!r}: operand {v!r} is not a tensor.")

    var = f"t_{node.name}"
    prog.stmts += reduce.expand(kind, params, var, value, value)
    env[node.name] = var


def _fetch(gm: GraphModule, target: str):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _set_outputs(prog: Program, value, env: dict[str, str]) -> None:
    values = value if isinstance(value, (tuple, list)) else [value]
    prog.tuple_output = isinstance(value, (tuple, list))
    for v in values:
        if not isinstance(v, Node):
            raise UnsupportedOpError(
                f"group output {v!r} is not a tensor computed by the group.")
        prog.outputs.append(env[v.name])


# ---------------------------------------------------------------- layout of one call

@dataclass(frozen=True)
class Layout:
    """How each operand is indexed for one call (part of the kernel's cache key).

    patterns: per input then per output, "flat" (same layout as the contiguous output:
    index i), "scalar" (one element, loaded once) or "strided" (index arithmetic over
    `shape` with the operand's own strides; covers broadcasting and non-contiguous
    views without copying). `shape` is the loop's shape after merging dimensions that
    every operand walks contiguously; `strides` are in elements.
    """

    out_shape: tuple[int, ...]
    shape: tuple[int, ...]
    patterns: tuple[str, ...]
    strides: tuple[tuple[int, ...], ...]
    out_shapes: tuple[tuple[int, ...], ...]

    @property
    def numel(self) -> int:
        return math.prod(self.out_shape)


def shapes_of(prog: Program, inputs) -> dict[str, tuple[int, ...]]:
    """The broadcast shape of every program value, from the input shapes."""
    shapes = {v: tuple(t.shape) for v, t in zip(prog.inputs, inputs)}
    for s in prog.stmts:
        if s.op in reduce.REDUCTIONS:
            shapes[s.var] = reduce.reduced_shape(shapes[dict(s.args)["x"]])
            continue
        operand_shapes = [shapes[v] for v in prog.operands(s)]
        shapes[s.var] = tuple(torch.broadcast_shapes(*operand_shapes))
    return shapes


def broadcast_strides(shape, stride, out_shape) -> tuple[int, ...]:
    """Element strides of a tensor read as if broadcast to out_shape (0 = repeated)."""
    pad = len(out_shape) - len(shape)
    full_shape, full_stride = (1,) * pad + tuple(shape), (0,) * pad + tuple(stride)
    return tuple(0 if n == 1 else st for n, st in zip(full_shape, full_stride))


def contiguous_strides(shape) -> tuple[int, ...]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc if n != 1 else 0)
        acc *= n
    return tuple(reversed(strides))


def plan_layout(prog: Program, inputs) -> Layout:
    """Choose flat / scalar / strided indexing per operand and merge dimensions."""
    shapes = shapes_of(prog, inputs)
    out_shapes = tuple(shapes[v] for v in prog.outputs)
    in_shapes = [shapes[v] for v in prog.inputs]
    out_shape = tuple(torch.broadcast_shapes(*out_shapes, *in_shapes))
    flat = contiguous_strides(out_shape)
    strides = [broadcast_strides(t.shape, t.stride(), out_shape) for t in inputs]
    strides += [broadcast_strides(s, contiguous_strides(s), out_shape)
                for s in out_shapes]
    patterns = tuple("scalar" if not any(st) else "flat" if st == flat else "strided"
                     for st in strides)
    shape, merged = merge_dims(out_shape, strides)
    return Layout(out_shape, shape, patterns, merged, out_shapes)


def merge_dims(shape, strides) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """Drop size-1 dims and merge neighbours every operand walks contiguously.

    (8, 16, 32) with a per-channel operand of strides (0, 1, 0) stays 3-D, but a plain
    contiguous (8, 16, 32) becomes (4096,): fewer index computations per element.
    """
    keep = [d for d, n in enumerate(shape) if n != 1]
    dims = [[shape[d], [st[d] for st in strides]] for d in keep]
    out: list = []
    for n, sts in dims:
        if out and all(prev == cur * n for prev, cur in zip(out[-1][1], sts)):
            out[-1] = [out[-1][0] * n, sts]
        else:
            out.append([n, sts])
    if not out:
        out = [[1, [0] * len(strides)]]
    new_shape = tuple(n for n, _ in out)
    new_strides = tuple(tuple(sts[k] for _, sts in out) for k in range(len(strides)))
    return new_shape, new_strides
