"""A fused group's own ops, run one after another without fx in between (ch. 4, 6).

Straight-line code, not a graph rewrite: it sits below the passes, which create the
fused nodes that run it (`passes.fuse_elementwise.FusedElementwise`), and below
`codegen` and `backend`, which run it too.

A fused node that runs its group by reference (`FusedElementwise` before `lower`;
a `GeneratedKernel` where the kernel policy says the kernel would not pay) must not
cost more than the unfused ops did. Calling the group's GraphModule goes through
nn.Module's call, fx's generated forward and each `OpOverload.__call__`: on a group
of two ops on sixteen elements those frames took 8 us where the two ops took 3.
`eager_ops(gm)` writes the same computation as one straight-line Python function,
each step an aten op's C++ entry (as fx writes `gm.code`, one frame less per op),
each intermediate freed after its last use (as fx does, so the peak memory is the
same): the core's one emitter for straight-line code (`emitter.Emitter`), which
the wrapper's fast path uses too. A graph with anything else (a method call, a
module, a nested container of values, a weight) returns None: the caller keeps
fx's forward.
"""

from __future__ import annotations

from typing import Callable

from torch.fx import GraphModule, Node

from .emitter import Emitter, Unsupported, holds_node, last_uses
from .torch_internals import OpOverload, op_schema

__all__ = ["EagerOps", "eager_ops", "last_uses"]


def eager_ops(gm: GraphModule) -> Callable | None:
    """`inputs -> outputs` (a tuple of inputs in, what `gm(*inputs)` returns out),
    or None where a node is not a placeholder, an aten op or the output (ch. 4)."""
    emit = EagerOps(gm.graph)
    try:
        source = emit.function()
    except Unsupported:
        return None
    run = emit.compile(source, "<graphopt eager_ops>", "run")
    run.source = source  # to read: print(eager_ops(gm).source)
    return run


class EagerOps(Emitter):
    """The `Emitter` of `eager_ops` (ch. 4): values `v0, v1, ...`, inputs as one
    tuple, every argument that is not a value a global (`c0`, `c1`, ...), and the
    inputs, which the caller still holds, never freed."""

    def __init__(self, graph):
        super().__init__(graph)
        self.reserved = set()  # values are v0, v1, ...: no node name to avoid
        self.names: dict[Node, str] = {}
        self.inputs: list[str] = []

    def function(self) -> str:
        body = self.body()
        unpack = [f"    {', '.join(self.inputs)}, = inputs"] if self.inputs else []
        return "\n".join(["def run(inputs):", *unpack, *body]) + "\n"

    def name(self, node: Node) -> str:
        return self.names[node]

    def frees(self, node: Node) -> bool:
        return node.op != "placeholder"

    def statement(self, node: Node) -> str | None:
        if node.op == "placeholder":
            self.names[node] = f"v{len(self.names)}"
            self.inputs.append(self.names[node])
            return None
        if node.op != "call_function" or not isinstance(node.target, OpOverload):
            raise Unsupported(f"{node.name} is not an aten op")
        if holds_node(node.kwargs.values()):
            raise Unsupported("a graph value given by keyword: fx binds it")
        args = [self.arg(a) for a in node.args]
        args += [f"{k}={self.arg(v)}" for k, v in node.kwargs.items()]
        callee = self.op(node.target, _op_name(node.target))
        self.names[node] = f"v{len(self.names)}"
        return self.call(node, callee, args)

    def arg(self, a) -> str:
        if isinstance(a, Node) and a in self.names:
            return self.names[a]
        if isinstance(a, Node) or holds_node([a]):
            raise Unsupported("a graph value fx must bind (in a list)")
        return self.global_("c", a)

    def output(self, node: Node) -> str:
        out = node.args[0]
        outs = out if isinstance(out, tuple) else (out,)
        if not all(isinstance(o, Node) and o in self.names for o in outs):
            raise Unsupported("an output that is not a value")
        value = ", ".join(self.names[o] for o in outs)
        return f"({value},)" if isinstance(out, tuple) else value

    def global_(self, hint: str, obj) -> str:
        """An op entry keeps its name (`add_Tensor`); each constant gets the next
        `c0`, `c1`, ..."""
        if hint in self.globals and self.globals[hint] is obj:
            return hint
        name, k = hint, 0
        while name in self.globals or hint == "c" and name == "c":
            name, k = f"{hint}{k}", k + 1
        self.globals[name] = obj
        return name


def _op_name(overload: OpOverload) -> str:
    """aten.add.Tensor -> "add_Tensor": the entry's name in the function."""
    name = op_schema(overload).name.split("::")[-1]
    overload_name = op_schema(overload).overload_name
    return f"{name}_{overload_name}" if overload_name else name
