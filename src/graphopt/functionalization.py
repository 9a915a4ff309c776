"""Functionalization's rewrite: an in-place aten op becomes its functional twin.

Introduced in chapter 3. The rule and the rewrite live here, in the core, because
capture applies them to every aten graph it returns (a graph that writes private
values in place hides the patterns passes look for); `passes.functionalize` is the
same rewrite as a pass, on a copy, with the usual `PassResult`. The legality rules
are the pass's docstring.
"""

from __future__ import annotations

import torch
from torch.fx import Graph, Node

from .aliasing import alias_source, written_by
from .i18n import note
from .ops import op_name
from .torch_internals import OpOverload, op_schema


def functionalize_graph(graph: Graph) -> tuple[list[Node], list[Node], list[str]]:
    """Rewrite `graph` in place: every sound in-place op becomes its functional
    form, and every later reader of the written value reads the new one.

    Returns (removed, added, notes): one note per in-place op kept, and why.
    Introduced in chapter 3.
    """
    index = {n: i for i, n in enumerate(graph.nodes)}
    removed, added, notes = [], [], []
    for m in list(graph.nodes):
        functional = functional_form(m)
        if functional is None:
            continue
        why = refusal(m, functional)
        if why is not None:
            notes.append(note("functionalize: kept {node} ({reason})", node=m.name,
                              reason=why))
            continue
        target = m.args[0]
        with graph.inserting_before(m):
            new = graph.call_function(functional, m.args, dict(m.kwargs))
        for key in ("val", "tensor_meta"):  # the shape metadata of what it replaces
            if key in m.meta:
                new.meta[key] = m.meta[key]
        index[new] = index[m]
        m.replace_all_uses_with(new)
        for u in list(target.users):
            if u is not m and index[u] > index[m]:  # read after the write
                u.replace_input_with(target, new)
        graph.erase_node(m)
        removed.append(m)
        added.append(new)
    return removed, added, notes


def functional_form(m: Node):
    """`aten.add.Tensor` for `aten.add_.Tensor`: the out-of-place twin, or None.

    Introduced in chapter 3.
    """
    t = m.target
    if m.op != "call_function" or not isinstance(t, OpOverload):
        return None
    args = op_schema(t).arguments
    if not args or args[0].alias_info is None or not args[0].alias_info.is_write:
        return None
    name = op_name(m)
    if not name.endswith("_") or name.startswith("_"):
        return None
    packet = getattr(torch.ops.aten, name[:-1], None)
    which = op_schema(t).overload_name or "default"
    overload = getattr(packet, which, None) if packet is not None else None
    if overload is None or op_schema(overload).is_mutable:
        return None
    # same arguments in the same places (dropout_ calls its first one self, dropout
    # input): compare their types, not their names
    types = [str(a.type) for a in op_schema(overload).arguments]
    if types != [str(a.type) for a in args]:
        return None
    return overload


def refusal(m: Node, functional) -> str | None:
    """Why `m` may not become `functional`, or None when it may (ch. 3)."""
    target = m.args[0] if m.args else None
    if not isinstance(target, Node):
        return note("writes a value that is not a node")
    if target.op in ("placeholder", "get_attr"):
        return (note("writes an input the caller sees") if target.op == "placeholder"
                else note("writes a weight or buffer the caller sees"))
    if alias_source(target) is not None:
        return note("writes {node}, a view of {base}", node=target.name,
                    base=alias_source(target).name)
    views = [u.name for u in target.users if u is not m and alias_source(u) is target]
    if views:
        return note("{views} shares {node}'s memory", views=", ".join(views),
                    node=target.name)
    others = [w for w in written_by(m) if w is not target]
    if others:
        return note("writes more than its first argument")
    if _val(target) is None:  # a graph not from capture (fx.symbolic_trace)
        return note("{node}'s dtype was not recorded (capture records it)",
                    node=target.name)
    if not _same_dtype(m, target, functional):
        return note("the functional op would change the dtype")
    return None


def _same_dtype(m: Node, target: Node, functional) -> bool:
    """Type promotion with every other operand keeps the written tensor's dtype."""
    want = _val(target)
    for a in list(m.args[1:]) + list(m.kwargs.values()):
        other = _val(a) if isinstance(a, Node) else a
        if isinstance(a, Node) and other is None:
            return False
        if isinstance(other, (torch.Tensor, bool, int, float, complex)):
            try:
                if torch.result_type(want, other) != want.dtype:
                    return False
            except Exception:
                return False
    return True


def _val(n: Node):
    v = n.meta.get("val")
    return v if isinstance(v, torch.Tensor) else None
