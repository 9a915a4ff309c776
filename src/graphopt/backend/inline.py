"""A group `lower` left on its own ops, written into the wrapper's function (ch. 7).

Where the policy's size rules already decided at `lower` time that a fused group
would not pay for its kernel (`GeneratedKernel.eager_why`), the group runs its own
aten ops, one after another. Called as a module from the wrapper's function, that
is one more Python frame and a plan check per call, on a toy model as much as one
of its ops takes. So the wrapper writes the group's ops into its own function
instead, each as the wrapper writes any aten op, each value freed after its last
use. The entry guard pins the inputs' shapes; it also asks that the group's
`backend` is still "auto" (chapter 6 lets a reader switch it to "reference",
"numba" ...): where it is not, the general path runs the group as it says.
"""

from __future__ import annotations

from torch.fx import Node

from ..codegen import fused
from ..emitter import holds_node, last_uses
from ..torch_internals import OpOverload


def runs_its_ops(module) -> bool:
    """A lowered group whose forward runs its own ops, decided by `lower` (ch. 7)."""
    return isinstance(module, fused.GeneratedKernel) and \
        type(module).forward is fused.GeneratedKernel.forward and \
        bool(module.eager_why) and module.backend == "auto"


def group_lines(emit, node: Node, module) -> list | None:
    """The group's ops as lines of the wrapper's function (ch. 7), its result named
    as `node`, or None where the group holds anything but aten ops on its inputs
    (one tensor out): then the wrapper calls the group."""
    graph = module.gm.graph
    places = [n for n in graph.nodes if n.op == "placeholder"]
    out = next(n for n in graph.nodes if n.op == "output").args[0]
    if node.kwargs or len(places) != len(node.args) or not isinstance(out, Node) \
            or out.op != "call_function":
        return None
    names = {p: emit.arg(a) for p, a in zip(places, node.args)}
    last, lines = last_uses(graph), []
    for op in graph.nodes:
        if op.op in ("placeholder", "output"):
            continue
        if op.op != "call_function" or not isinstance(op.target, OpOverload) or \
                holds_node([a for a in [*op.kwargs.values(), *op.args]
                            if not isinstance(a, Node)]):
            return None  # a value inside a list: written out by the group only
        names[op] = node.name if op is out else emit.fresh(f"{node.name}_{op.name}")
        args = [names[a] if isinstance(a, Node) else emit.arg(a) for a in op.args]
        args += [f"{k}={emit.arg(v)}" for k, v in op.kwargs.items()]
        lines.append(f"    {names[op]} = {emit.aten(op)}({', '.join(args)})")
        dead = [names[d] for d in last.get(op, ()) if d.op != "placeholder"]
        dead += [] if op.users else [names[op]]
        if dead:
            lines.append(f"    del {', '.join(dead)}")
    return lines
