"""Common-subexpression elimination (公共子表达式消除): compute each value once.

Introduced in chapter 5 as the worked example of a pass written by hand.

Note
----
Two nodes compute the same value when they run the same op (same `op` kind and
`target`) on the same input nodes with the same literal arguments:

    a = x + y            a = x + y
    b = x + y     ──►    c = a * a      (b's users now read a; b is erased)
    c = a * b

One forward sweep keeps a table from that key to the first node seen with it; a later
node with the same key is replaced by the first. Literal arguments are compared with
their type (`1`, `1.0` and `True` are equal in Python but are different arguments to
an op). Random ops (two `rand` calls must differ) and impure ops are never merged, and
an op that may mutate memory empties the table, because a value read before the
mutation may differ from the same read after it. A value that is itself written in
place (`legality.not_mutated` says no) is never merged: the write would reach both.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx import GraphModule, Node

from ..aliasing import written_by, written_values
from ..ops import _submodule, is_random
from .legality import not_mutated
from .result import PassResult, finish, impure, working_copy


def eliminate_common_subexpressions(
    gm: GraphModule, inplace: bool = False
) -> PassResult:
    """Replace every repeated computation by its first occurrence (chapter 5)."""
    gm = working_copy(gm, inplace)
    seen: dict[tuple, Node] = {}
    removed, rewritten = [], []
    written = written_values(gm.graph)
    for n in list(gm.graph.nodes):
        if n.op in ("placeholder", "output"):
            continue
        if impure(n) or written_by(n):  # training BN writes its statistics
            if mutates(n):
                seen.clear()  # a side effect: values read before it may change
            continue
        key = cse_key(n)
        if key is None or not not_mutated(n, written):
            continue  # merging a value written in place would write both copies
        first = seen.setdefault(key, n)
        if first is not n:
            rewritten += list(n.users)
            n.replace_all_uses_with(first)
            gm.graph.erase_node(n)
            removed.append(n)
    gone = set(removed)
    rewritten = [u for u in rewritten if u not in gone]
    return finish(gm, removed, (), rewritten)


def mutates(n: Node) -> bool:
    """An impure node that may write memory (random ops and guards only read).

    Introduced in chapter 5.
    """
    guard = n.op == "call_module" and str(n.target).startswith("_guards")
    return not guard and not is_random(n)


def cse_key(n: Node) -> tuple | None:
    """What `n` computes, as a hashable key; None when `n` must not be merged.

    Introduced in chapter 5.
    """
    if n.op == "call_module" and getattr(_submodule(n), "training", True):
        return None  # a training-mode module (BN) updates its state on every call
    try:
        key = (n.op, n.target, _freeze(n.args), _freeze(n.kwargs))
        hash(key)
    except TypeError:  # an argument that cannot be compared safely (a tensor literal)
        return None
    return key


def _freeze(value: Any) -> Any:
    """Turn an argument into a hashable value that keeps its type."""
    if isinstance(value, Node):
        return value
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_freeze(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, _freeze(v)) for k, v in value.items())))
    if isinstance(value, slice):
        return ("slice", _freeze(value.start), _freeze(value.stop), _freeze(value.step))
    if isinstance(value, float):
        return ("float", repr(value))  # keeps -0.0 apart from 0.0
    if isinstance(value, torch.Tensor):
        raise TypeError("tensor literal")
    return (type(value).__name__, value)
