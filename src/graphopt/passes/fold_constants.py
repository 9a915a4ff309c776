"""Constant folding (常量折叠): compute ahead of time what does not depend on the inputs.

Introduced in chapter 3.

Note
----
A node is *constant* when every value it reads is constant: parameters and buffers
(`get_attr`), literals, and other constant nodes. We assume eval/inference: weights do
not change between calls, which is exactly when folding is legal (training updates
them after every step, so nothing that reads a weight may be folded there).

    w ──► mul ──► add ◄── x          w*s is constant: it becomes one new buffer
    s ──┘                            x is an input: add must still run every call

The pass evaluates the constant nodes by *running* them with torch.fx's Interpreter,
as TVM's FoldConstant does: no op semantics are re-implemented here, so any op torch
can run can be folded. Only the constant nodes whose value is used by a non-constant
node (the frontier) become new `get_attr` buffers named `_folded_<node>`; the constant
ops behind them, and the weights only they read, are erased. Random and impure ops are never folded (their value must
differ from call to call, or they have side effects).
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Interpreter, Node

from ..ops import _submodule, op_name
from .result import (PassResult, add_constant, drop_unused_weights, finish, impure,
                     set_value_meta, topo_index, working_copy)

# A creation op (ones, full, arange, expand, ...) whose result is this many times
# larger than what it reads is left alone: folding it would trade a cheap fill for a
# large buffer that stays resident in memory for the model's whole life.
GROWTH_LIMIT = 4
SMALL_BYTES = 1024  # below this size a constant is always worth folding

_CREATION_OPS = {"ones", "zeros", "full", "empty", "arange", "linspace", "eye",
                 "ones_like", "zeros_like", "full_like", "empty_like", "new_ones",
                 "new_zeros", "new_full", "new_empty", "expand", "expand_as",
                 "broadcast_to", "repeat", "tile", "scalar_tensor"}


def fold_constants(gm: GraphModule, inplace: bool = False) -> PassResult:
    """Replace every constant subgraph by one precomputed buffer (chapter 3)."""
    gm = working_copy(gm, inplace)
    constant = constant_nodes(gm)
    frontier = [n for n in constant if n.op != "get_attr" and _used_by_non_constant(n, constant)]
    needed = _ancestors(frontier, constant)
    values = _evaluate(gm, needed)
    added, removed, rewritten = [], [], []
    for n in frontier:
        value = values[n]
        if not isinstance(value, torch.Tensor) or too_large_to_fold(n, value, values):
            continue
        target = add_constant(gm, f"_folded_{n.name}", _owned(value))
        with gm.graph.inserting_before(n):
            new = gm.graph.get_attr(target)
        set_value_meta(new, value)
        rewritten += [u for u in n.users]
        n.replace_all_uses_with(new)
        added.append(new)
    removed = _erase_dead_constants(gm, needed)
    removed += drop_unused_weights(gm, [n for n in needed if n.op == "get_attr"])
    gone = set(removed)
    rewritten = [u for u in rewritten if u not in gone]
    return finish(gm, removed, added, rewritten)


def constant_nodes(gm: GraphModule) -> set[Node]:
    """Nodes whose value is the same on every call (eval mode assumed)."""
    constant: set[Node] = set()
    for n in gm.graph.nodes:
        if n.op == "get_attr":
            constant.add(n)
        elif n.op in ("call_function", "call_method", "call_module") and _foldable(n):
            if all(a in constant for a in n.all_input_nodes):
                constant.add(n)
    return constant


def _foldable(n: Node) -> bool:
    if impure(n):  # random ops count as impure
        return False
    if n.op == "call_module":
        module = _submodule(n)
        return module is not None and not module.training
    if op_name(n) == "batch_norm" and len(n.args) > 5 and n.args[5]:
        return False  # training-mode BN updates its running statistics
    return True


def _used_by_non_constant(n: Node, constant: set[Node]) -> bool:
    return any(u not in constant for u in n.users)


def _evaluate(gm: GraphModule, needed: set[Node]) -> dict:
    """Run the constant nodes that the frontier needs, in graph order."""
    interp = Interpreter(gm, garbage_collect_values=False)
    index = topo_index(gm)
    with torch.no_grad():
        for n in sorted(needed, key=index.__getitem__):
            interp.env[n] = interp.run_node(n)
    return interp.env


def _ancestors(frontier: list[Node], constant: set[Node]) -> set[Node]:
    seen: set[Node] = set()
    stack = list(frontier)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack.extend(a for a in n.all_input_nodes if a in constant)
    return seen


def too_large_to_fold(n: Node, value: torch.Tensor, values: dict) -> bool:
    """True for a creation op whose result is much larger than what it reads."""
    if op_name(n) not in _CREATION_OPS or value.nbytes <= SMALL_BYTES:
        return False
    read = sum(v.nbytes for a in n.all_input_nodes
               if isinstance(v := values.get(a), torch.Tensor))
    return value.nbytes > GROWTH_LIMIT * max(read, 1)


def _owned(value: torch.Tensor) -> torch.Tensor:
    # A folded view (a transposed weight) would keep the whole original alive and
    # share memory with it; give the buffer its own storage.
    value = value.detach()
    return value.clone() if value._base is not None else value


def _erase_dead_constants(gm: GraphModule, evaluated: set[Node]) -> list[Node]:
    """Erase the folded ops that nothing reads any more."""
    removed = []
    for n in reversed(list(gm.graph.nodes)):
        if n in evaluated and n.op != "get_attr" and not n.users:
            removed.append(n)
            gm.graph.erase_node(n)
    return removed[::-1]
