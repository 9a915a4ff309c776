"""Lowering: a fused group's GraphModule becomes a Program (chapter 6).

`build_program` walks the group's nodes in order: placeholders and constant tensors
become load variables, each elementwise node one statement (`canonical` finds its
row in `op_table.OPS` whatever its spelling; `_bind` matches its arguments to the
row's), and each row reduction the statements `reduce_program.expand` gives it.
Anything without a template is refused with an UnsupportedOpError naming the node,
never silently dropped or approximated.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx import GraphModule, Node

from ..errors import UnsupportedOpError
from ..ops import dtype, op_name
from ..passes import row_reductions
from ..torch_internals import graph_codegen
from .op_table import ALIASES, MODULES, OPS, SUPPORTED_HINT
from .program import Const, Program, Stmt
from .reduce_program import expand, rewrite_online, torch_eps


def canonical(node: Node, gm: GraphModule) -> tuple[str, dict[str, Any]]:
    """The OPS row of a node and the extra keyword arguments its spelling implies
    (ch. 6)."""
    if node.op == "call_module":
        module = gm.get_submodule(str(node.target))
        for cls, (name, read) in MODULES.items():
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
    """Turn a group's GraphModule into a Program; refuse what has no template
    (ch. 6)."""
    prog = Program(inputs=[])
    # exported graphs return a flat tuple that their codegen unflattens (a tensor)
    info = getattr(graph_codegen(gm.graph), "pytree_info", None)
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
        elif (row := row_reductions.parse(node)) is not None:
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
    prog.stmts = rewrite_online(prog.stmts)
    return prog


def _add_row_reduction(prog: Program, node: Node, row, env: dict) -> None:
    """A row reduction's statements (reduce_program.expand) appended to the program."""
    kind, params = row
    if kind == "rms_norm" and params.get("eps") is None:
        params = {**params, "eps": torch_eps(dtype(node) or torch.float32)}

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
    prog.stmts += expand(kind, params, var, value, value)
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

