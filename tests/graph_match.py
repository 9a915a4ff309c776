"""Compare two fx graphs by structure, the way TVM's pass tests compare `before()`
after the pass with `expected()`.

Names do not matter (a pass may call its node `conv2d_folded_weight` or `w1`); what
does: which op each node runs, which nodes feed it in which argument, which values
are shared by several readers (CSE's whole point), and the values of the constants.
Nodes are numbered in the order a walk from the output first reaches them, so two
graphs that differ only in node order or names get the same numbers. Nodes the
output does not reach (a guard, a dead node a pass should have removed) are
compared too, as a sorted list.
"""

from __future__ import annotations

import torch
from torch import fx


def _target(gm: fx.GraphModule, n: fx.Node, tensors: list):
    if n.op == "placeholder":
        return n.target
    if n.op == "get_attr":
        value = _attr(gm, n)
        if isinstance(value, torch.Tensor):
            tensors.append(value.detach())
            return ("tensor", tuple(value.shape), str(value.dtype))
        return ("attr", type(value).__name__)
    if n.op == "call_module":
        module = gm.get_submodule(str(n.target))
        inner = getattr(module, "gm", None)  # a fused group holds its subgraph
        if isinstance(inner, fx.GraphModule):
            return (type(module).__name__, structure(inner, tensors))
        for t in list(module.parameters()) + list(module.buffers()):
            tensors.append(t.detach())
        return type(module).__name__
    return str(n.target)


def _attr(gm, n):
    value = gm
    for part in str(n.target).split("."):
        value = getattr(value, part)
    return value


def _arg(a, number):
    if isinstance(a, fx.Node):
        return ("node", number[a])
    if isinstance(a, (list, tuple)):
        return tuple(_arg(x, number) for x in a)
    if isinstance(a, dict):
        return tuple(sorted((k, _arg(v, number)) for k, v in a.items()))
    return repr(a)


def structure(gm: fx.GraphModule, tensors: list | None = None) -> tuple:
    """A name-free description of `gm`'s graph; constants are appended to `tensors`."""
    tensors = [] if tensors is None else tensors
    output = next(iter(gm.graph.find_nodes(op="output")))
    number: dict[fx.Node, int] = {}
    order: list[fx.Node] = []

    def visit(n: fx.Node):  # post-order: a node's inputs are numbered before it
        if n in number:
            return
        for a in n.all_input_nodes:
            visit(a)
        number[n] = len(number)
        order.append(n)

    visit(output)
    reached = [(n.op, _target(gm, n, tensors), _arg((n.args, n.kwargs), number))
               for n in order]
    loose = []
    for n in gm.graph.nodes:
        if n not in number:
            visit(n)
            loose.append((n.op, _target(gm, n, tensors)))
    return tuple(reached), tuple(sorted(map(repr, loose)))


def assert_same_graph(got: fx.GraphModule, want: fx.GraphModule, rtol=1e-5, atol=1e-6):
    got_tensors, want_tensors = [], []
    got_s, want_s = structure(got, got_tensors), structure(want, want_tensors)
    assert got_s == want_s, (
        "graphs differ in structure\n--- got:\n"
        f"{got.graph}\n--- expected:\n{want.graph}"
    )
    assert len(got_tensors) == len(want_tensors)
    for i, (a, b) in enumerate(zip(got_tensors, want_tensors)):
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol,
                                   msg=lambda m, i=i: f"constant #{i} differs: {m}")
