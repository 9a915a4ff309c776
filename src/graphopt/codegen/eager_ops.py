"""A fused group's own ops, run one after another without fx in between (chapter 6).

Where the kernel policy says a group's kernel would not pay (a group of one or two
ops on a few elements, an input that needs autograd, ...), the group runs its member
ops eagerly. Calling its GraphModule for that goes through nn.Module's call, fx's
generated forward and each `OpOverload.__call__`: on a group of two ops on sixteen
elements those frames took 8 us where the two ops took 3 (issue 21). `eager_ops(gm)`
returns the same computation as a list of steps, each an aten op's C++ entry and
its arguments, run by one small loop. A graph with anything else (a method call, a
module, a nested container of values) keeps fx's forward.
"""

from __future__ import annotations

from typing import Callable

from torch.fx import GraphModule, Node

from ..torch_internals import OpOverload, op_entry


class _Value:
    """An argument that is the value of an earlier node: its index in the run."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


def eager_ops(gm: GraphModule) -> Callable:
    """`inputs -> outputs` as `gm(*inputs)` gives them, with the ops called directly
    where every node is a placeholder, an aten op or the output (chapter 6)."""
    steps = _steps(gm)
    if steps is None:
        return lambda inputs: gm(*inputs)
    program, output = steps

    def run(inputs):
        values = list(inputs)
        for fn, args, kwargs in program:
            args = [values[a.index] if type(a) is _Value else a for a in args]
            values.append(fn(*args, **kwargs) if kwargs else fn(*args))
        if type(output) is _Value:
            return values[output.index]
        return tuple(values[o.index] for o in output)

    return run


def _steps(gm: GraphModule):
    """(steps, output) of the graph, or None where a node is not a plain op call."""
    index, program, output = {}, [], _NOT_PLAIN
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            index[node] = len(index)
        elif node.op == "call_function" and isinstance(node.target, OpOverload):
            args = [_arg(a, index) for a in node.args]
            kwargs = {k: _arg(v, index) for k, v in node.kwargs.items()}
            if any(a is _NOT_PLAIN for a in args) or any(
                    v is _NOT_PLAIN or type(v) is _Value for v in kwargs.values()):
                return None  # keyword values from the graph: fx binds those
            program.append((op_entry(node.target), args, kwargs))
            index[node] = len(index)
        elif node.op == "output" and type(node.args[0]) is tuple:
            output = tuple(_arg(o, index) for o in node.args[0])
            if not all(type(o) is _Value for o in output):
                return None
        elif node.op == "output":
            output = _arg(node.args[0], index)
        else:
            return None
    return (program, output) if type(output) in (_Value, tuple) else None


_NOT_PLAIN = object()  # an argument the steps cannot carry
_CONTAINERS = (list, tuple, dict)


def _arg(a, index):
    """A node's value as a `_Value`, any other non-container constant as itself."""
    if isinstance(a, Node):
        return _Value(index[a]) if a in index else _NOT_PLAIN
    return _NOT_PLAIN if isinstance(a, _CONTAINERS) else a
