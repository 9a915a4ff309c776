"""Compare two fx graphs by structure, the way TVM's pass tests compare `before()`
after the pass with `expected()`.

Names do not matter (a pass may call its node `conv2d_folded_weight` or `w1`); what
does: which op each node runs, which nodes feed it in which argument, which values
are shared by several readers (CSE's whole point), the values of the constants and
their dtype and layout (strides, channels-last, a library's blocked format), and each
called module's settings: its class and every setting it holds (a conv's stride,
padding, dilation and groups, an activation's kind and arguments, a layer norm's
shape and eps, a layout conversion's target, a fused group's ops and subgraph).
Nodes are numbered in the order a walk from the output first reaches them, so two
graphs that differ only in node order or names get the same numbers. Nodes the
output does not reach (a guard, a dead node a pass should have removed) are
compared too, as a sorted list.
"""

from __future__ import annotations

import dataclasses
import enum

import torch
from torch import fx, nn


def tensor_kind(t: torch.Tensor) -> tuple:
    """Shape, dtype and layout: strides for a strided tensor (contiguous and
    channels-last differ), else the layout itself (oneDNN's blocked `_mkldnn`)."""
    strides = tuple(t.stride()) if t.layout == torch.strided else None
    return ("tensor", tuple(t.shape), str(t.dtype), str(t.layout), strides)


_SETTING = (bool, int, float, str, type(None))


def _setting(v):
    """A module attribute as a comparable value, or None where it is no setting
    (a tensor, a module, a function, a cache)."""
    if isinstance(v, _SETTING):
        return repr(v)
    if isinstance(v, (list, tuple)):
        items = [_setting(x) for x in v]
        return None if any(i is None for i in items) else tuple(items)
    if isinstance(v, enum.Enum):
        return f"{type(v).__name__}.{v.name}"
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        items = [(f.name, _setting(getattr(v, f.name)))
                 for f in dataclasses.fields(v) if f.compare]
        # a value of settings (an activation, a policy); one that holds functions
        # (the backend's bound plan) is a binding, not a setting
        if any(d is None and getattr(v, n) is not None for n, d in items):
            return None
        return (type(v).__name__, tuple(items))
    return None


def settings(module: nn.Module) -> tuple:
    """Every setting `module` holds that differs from its class's default, sorted:
    what it computes with besides its inputs and weights (nn.Module's bookkeeping
    and private caches left out)."""
    out = []
    for name, v in sorted(vars(module).items()):
        if name.startswith("_"):
            continue
        described = _setting(v)
        if described is None:
            continue
        default = getattr(type(module), name, _MISSING)
        if default is not _MISSING and _setting(default) == described:
            continue
        out.append((name, described))
    return tuple(out)


_MISSING = object()


def _target(gm: fx.GraphModule, n: fx.Node, tensors: list):
    if n.op == "placeholder":
        return n.target
    if n.op == "get_attr":
        value = _attr(gm, n)
        if isinstance(value, torch.Tensor):
            tensors.append(value.detach())
            return tensor_kind(value)
        return ("attr", type(value).__name__)
    if n.op == "call_module":
        module = gm.get_submodule(str(n.target))
        inner = getattr(module, "gm", None)  # a fused group holds its subgraph
        if isinstance(inner, fx.GraphModule):
            return (type(module).__name__, settings(module), structure(inner, tensors))
        held = list(module.parameters()) + list(module.buffers())
        for t in held:
            tensors.append(t.detach())
        return (type(module).__name__, settings(module),
                tuple(tensor_kind(t) for t in held))
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


def same_graph(got: fx.GraphModule, want: fx.GraphModule) -> bool:
    """Whether `assert_same_graph(got, want)` holds."""
    try:
        assert_same_graph(got, want)
    except AssertionError:
        return False
    return True


def assert_unchanged(pass_, gm: fx.GraphModule, **kwargs):
    """Run `pass_(gm, **kwargs)` and check, by structure, that its graph is `gm`'s as
    it was before the pass ran (ops, edges, constants, module settings): a pass's
    own `changed` flag is not the judge, it must only agree. Returns the result."""
    before_tensors: list = []
    before = structure(gm, before_tensors)
    before_tensors = [t.clone() for t in before_tensors]
    result = pass_(gm, **kwargs)
    got_tensors: list = []
    assert structure(result.module, got_tensors) == before, (
        f"the pass changed the graph:\n--- got:\n{result.module.graph}")
    assert len(got_tensors) == len(before_tensors)
    for a, b in zip(got_tensors, before_tensors):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not result.changed, "the graph is as it was, yet the pass says it changed"
    return result
