"""Constant folding (常量折叠): compute ahead of time what does not depend on inputs.

Introduced in chapter 3.

Note
----
A node is *constant* when every value it reads is constant: parameters and buffers
(`get_attr`), literals, and other constant nodes, and when no in-place op writes it
(`legality.not_mutated`: in `acc = zeros(4); acc += x` the zeros change every call).
In eval/inference weights do not change between calls, which is when folding them
is legal. In training mode (`legality.is_training`) an optimiser step changes every
parameter, so nothing that reads a parameter, and no training-mode module such as
batch norm, is folded; buffers and literals still are. What was left alone and why
is in `PassResult.notes`, one line each.

    w ──► mul ──► add ◄── x          w*s is constant: it becomes one new buffer
    s ──┘                            x is an input: add must still run every call

The pass evaluates the constant nodes by *running* them with torch.fx's Interpreter,
as TVM's FoldConstant does: no op semantics are re-implemented here, so any op torch
can run can be folded. Only the constant nodes whose value is used by a non-constant
node (the frontier) become new `get_attr` buffers named `_folded_<node>`; the constant
ops behind them, and the weights only they read, are erased. Random and impure ops
are never folded (their value must differ from call to call, or they have side
effects).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.fx import GraphModule, Interpreter, Node

from ..aliasing import written_values
from ..i18n import note
from ..ops import _submodule, op_name
from .legality import _fetch, is_training, not_mutated
from .result import (
    PassResult,
    add_constant,
    drop_unused_weights,
    finish,
    impure,
    label,
    set_value_meta,
    topo_index,
    working_copy,
)

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
    notes: list[str] = []
    constant = constant_nodes(gm, notes)
    frontier = [
        n for n in constant if n.op != "get_attr" and _used_by_non_constant(n, constant)
    ]
    needed = _ancestors(frontier, constant)
    values = _evaluate(gm, needed)
    added, removed, rewritten = [], [], []
    for n in frontier:
        value = values[n]
        if not isinstance(value, torch.Tensor) or too_large_to_fold(n, value, values):
            continue
        if any(u.op == "output" for u in n.users):
            # the caller would get the same buffer on every call: writing the
            # result (out += 1) would change what the next call returns
            notes.append(note("fold_constants: kept {node} (returned as an output)",
                              node=label(n)))
            continue
        target = add_constant(gm, f"_folded_{n.name}", _owned(value))
        with gm.graph.inserting_before(n):
            new = gm.graph.get_attr(target)
        set_value_meta(new, value)
        rewritten += [u for u in n.users]
        n.replace_all_uses_with(new)
        added.append(new)
    modules = [n.target for n in needed if n.op == "call_module"]
    removed = _erase_dead_constants(gm, needed)
    # a folded module call (module level) leaves its submodule's weights behind
    removed += drop_unused_weights(gm, [n for n in needed if n.op == "get_attr"],
                                   [m for m in modules if m not in _called(gm)])
    gone = set(removed)
    rewritten = [u for u in rewritten if u not in gone]
    res = finish(gm, removed, added, rewritten)
    res.notes.extend(notes)
    return res


def constant_nodes(gm: GraphModule, notes: list[str] | None = None) -> set[Node]:
    """Nodes whose value is the same on every call (ch. 3).

    With `notes`, one line is appended for each value that would have been folded
    but for training mode or an in-place write (the first reason on its path).
    """
    training, written = is_training(gm), written_values(gm.graph)
    pure: set[Node] = set()  # constant if mode and mutation did not matter
    constant: set[Node] = set()
    blame: dict[Node, str] = {}
    for n in gm.graph.nodes:
        call = n.op in ("call_function", "call_method", "call_module")
        if n.op == "get_attr" or (call and not impure(n)  # random ops are impure
                                  and all(a in pure for a in n.all_input_nodes)):
            pure.add(n)
            why = refusal(gm, n, training, written)
            why = why or next((blame[a] for a in n.all_input_nodes if a in blame), None)
            if why is None:
                constant.add(n)
            else:
                blame[n] = why
    if notes is not None:
        for n in gm.graph.nodes:  # graph order: the same notes every run
            frontier = any(u not in pure for u in n.users)
            if n in blame and n.op != "get_attr" and frontier:
                notes.append(note("fold_constants: kept {node} ({reason})",
                                   node=label(n), reason=blame[n]))
    return constant


def refusal(gm: GraphModule, n: Node, training: bool, written: set) -> str | None:
    """Why the (otherwise constant) node `n` may not be folded, or None (ch. 3)."""
    if not not_mutated(n, written):
        return note("{node} is written in place", node=n.name)
    if n.op == "get_attr":
        if training and isinstance(_fetch(gm, str(n.target)), nn.Parameter):
            return note("reads parameter {name}: training mode", name=n.target)
        return None
    if n.op == "call_module":
        module = _submodule(n)
        if module is None or module.training:
            return note("{name} is in training mode", name=n.target)
    if op_name(n) == "batch_norm" and len(n.args) > 5 and n.args[5]:
        return note("training-mode batch norm updates its running statistics")
    return None


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
    """True for a creation op whose result is much larger than what it reads (ch. 3)."""
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


def _called(gm: GraphModule) -> set:
    return {n.target for n in gm.graph.nodes if n.op == "call_module"}


def _erase_dead_constants(gm: GraphModule, evaluated: set[Node]) -> list[Node]:
    """Erase the folded ops that nothing reads any more."""
    removed = []
    for n in reversed(list(gm.graph.nodes)):
        if n in evaluated and n.op != "get_attr" and not n.users:
            removed.append(n)
            gm.graph.erase_node(n)
    return removed[::-1]
