"""Which nodes write memory in place, and which values share memory (chapter 3).

An in-place op (`relu_`, `add_`, `x += y`, a training batch norm's running
statistics) changes a tensor that other nodes may also read, and a view
(`view`, `transpose`, `x[0]`) shares its input's memory, so writing one writes the
other. Two questions every rewrite must ask answer here:

- `written_by(n)`: the nodes whose memory `n` writes;
- `alias_root(n)`: the node (or the weight) whose memory `n`'s value lives in.

aten ops say both in their schema (`Tensor(a!) self` is written, a return
`Tensor(a)` aliases the argument marked `(a)`); Python-level graphs (module level)
are read from the method and module names. When in doubt the answer is "aliases"
and "written": a pass that believes it would refuse, never miscompile.
"""

from __future__ import annotations

import operator

from torch import nn
from torch.fx import Graph, Node

from .ops import _submodule, op_name
from .torch_internals import OpOverload, op_schema

# Python-level ops (module level graphs) whose result may share memory with arg 0.
_VIEW_METHODS = {
    "view", "view_as", "reshape", "reshape_as", "transpose", "permute", "t", "T",
    "expand", "expand_as", "flatten", "unflatten", "squeeze", "unsqueeze", "narrow",
    "select", "split", "chunk", "unbind", "detach", "as_strided", "contiguous", "to",
    "type", "type_as", "float", "double", "half", "bfloat16", "int", "long", "bool",
    "cpu", "cuda", "movedim", "swapaxes", "diagonal", "real", "imag", "unfold",
    "getitem", "__getitem__", "dropout", "alpha_dropout", "feature_dropout", "identity"}
_IN_PLACE_OPERATORS = {operator.iadd, operator.isub, operator.imul, operator.itruediv,
                       operator.ifloordiv, operator.imod, operator.ipow, operator.iand,
                       operator.ior, operator.ixor, operator.ilshift, operator.irshift,
                       operator.setitem}
_BN = {"batch_norm", "_native_batch_norm_legit_functional"}


def _overload(n: Node):
    t = n.target
    ok = n.op == "call_function" and isinstance(t, OpOverload)
    return t if ok else None


def _arg(n: Node, i: int, name: str):
    if len(n.args) > i:
        return n.args[i]
    return n.kwargs.get(name)


def written_by(n: Node) -> list[Node]:
    """The nodes whose memory running `n` writes (empty for a functional op) (ch. 3)."""
    ov = _overload(n)
    if ov is not None:
        out = [_arg(n, i, a.name) for i, a in enumerate(op_schema(ov).arguments)
               if a.alias_info is not None and a.alias_info.is_write]
        if op_name(n) == "batch_norm" and _arg(n, 5, "training"):
            out += [_arg(n, 3, "running_mean"), _arg(n, 4, "running_var")]
        return [x for x in out if isinstance(x, Node)]
    first = n.args[0] if n.args and isinstance(n.args[0], Node) else None
    if n.op == "call_module":
        inplace = getattr(_submodule(n), "inplace", False)
        return [first] if inplace and first is not None else []
    if n.op not in ("call_function", "call_method"):
        return []
    name = op_name(n)
    out = [n.kwargs["out"]] if isinstance(n.kwargs.get("out"), Node) else []
    if first is not None and (n.kwargs.get("inplace") or n.target in _IN_PLACE_OPERATORS
                              or (name.endswith("_") and not name.startswith("_"))):
        out.append(first)
    if name == "batch_norm" and _arg(n, 5, "training"):
        out += [x for x in (_arg(n, 3, "running_mean"), _arg(n, 4, "running_var"))
                if isinstance(x, Node)]
    return out


def alias_source(n: Node) -> Node | None:
    """The input node whose memory `n`'s value may share, or None (fresh memory).

    Introduced in chapter 3.
    """
    if n.op not in ("call_function", "call_method", "call_module"):
        return None
    first = n.args[0] if n.args and isinstance(n.args[0], Node) else None
    ov = _overload(n)
    if ov is not None:
        schema = op_schema(ov)
        if op_name(n).startswith("dropout") or op_name(n) in ("alpha_dropout",
                                                               "feature_dropout"):
            return first  # eval-mode dropout returns its input itself
        if not any(r.alias_info is not None for r in schema.returns):
            return None
        for i, a in enumerate(schema.arguments):
            x = _arg(n, i, a.name)
            if a.alias_info is not None and isinstance(x, Node):
                return x
        return None
    if written_by(n):
        return first  # an in-place op returns the tensor it wrote
    if n.op == "call_module":
        return first if isinstance(_submodule(n), (nn.Identity, nn.Dropout)) else None
    name = op_name(n)
    if n.target is operator.getitem or name in _VIEW_METHODS:
        return first
    return None


def alias_root(n: Node) -> Node:
    """Follow `alias_source` back to the node that owns the memory (ch. 3)."""
    seen = set()
    while (src := alias_source(n)) is not None and n not in seen:
        seen.add(n)
        n = src
    return n


def memory_key(n: Node):
    """Who owns `n`'s memory: its alias root; two get_attr nodes of one weight share
    memory, so a weight is keyed by its target (ch. 3)."""
    root = alias_root(n)
    return ("attr", str(root.target)) if root.op == "get_attr" else ("node", root)


def written_values(graph: Graph) -> set:
    """Memory keys of every value some node of `graph` writes in place (ch. 3)."""
    return {memory_key(w) for n in graph.nodes for w in written_by(n)}


def is_written(n: Node, written: set | None = None) -> bool:
    """Some in-place op writes `n`'s value or a value sharing its memory (ch. 3)."""
    if written is None:
        written = written_values(n.graph)
    return memory_key(n) in written
