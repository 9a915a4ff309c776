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
same). A graph with anything else (a method call, a module, a nested
container of values, a weight) returns None: the caller keeps fx's forward.
"""

from __future__ import annotations

from typing import Callable

from torch.fx import GraphModule, Node

from .torch_internals import OpOverload, op_entry, op_schema


def eager_ops(gm: GraphModule) -> Callable | None:
    """`inputs -> outputs` (a tuple of inputs in, what `gm(*inputs)` returns out),
    or None where a node is not a placeholder, an aten op or the output (ch. 4)."""
    source, namespace = _source(gm)
    if source is None:
        return None
    exec(compile(source, "<graphopt eager_ops>", "exec"), namespace)  # noqa: S102
    run = namespace["run"]
    run.source = source  # to read: print(eager_ops(gm).source)
    return run


def _source(gm: GraphModule) -> tuple[str | None, dict]:
    """The function's source and its globals (op entries and constants by name)."""
    names: dict[Node, str] = {}
    namespace: dict = {}
    inputs, body = [], []
    last = last_uses(gm.graph)
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            names[node] = f"v{len(names)}"
            inputs.append(names[node])
        elif node.op == "call_function" and isinstance(node.target, OpOverload):
            call = _call(node, names, namespace)
            if call is None:
                return None, {}
            names[node] = f"v{len(names)}"
            body.append(f"    {names[node]} = {call}")
            dead = [names[d] for d in last.get(node, ()) if d.op != "placeholder"]
            dead += [names[node]] if not node.users else []
            if dead:
                body.append(f"    del {', '.join(dead)}")
        elif node.op == "output":
            out = node.args[0]
            outs = out if isinstance(out, tuple) else (out,)
            if not all(isinstance(o, Node) and o in names for o in outs):
                return None, {}
            value = ", ".join(names[o] for o in outs)
            body.append(f"    return ({value},)" if isinstance(out, tuple)
                        else f"    return {value}")
        else:
            return None, {}
    unpack = [f"    {', '.join(inputs)}, = inputs"] if inputs else []
    return "\n".join(["def run(inputs):", *unpack, *body]) + "\n", namespace


def _call(node: Node, names: dict, namespace: dict) -> str | None:
    """`op(v0, c0, key=c1)` for one aten node, or None where fx must bind an
    argument (a graph value given by keyword or inside a list)."""
    if _holds_node(node.kwargs.values()):
        return None

    def arg(a):
        if isinstance(a, Node):
            return names.get(a)
        if isinstance(a, _CONTAINERS) and _holds_node([a]):
            return None
        return _global(namespace, "c", a)

    args = [arg(a) for a in node.args]
    args += [f"{k}={arg(v)}" for k, v in node.kwargs.items()]
    if None in args:
        return None
    op = _global(namespace, _op_name(node.target), op_entry(node.target))
    return f"{op}({', '.join(args)})"


def last_uses(graph) -> dict[Node, list[Node]]:
    """node -> the values it reads for the last time (fx's code frees them right
    after it; so do `eager_ops` and the backend's wrapper) (ch. 4)."""
    seen, last = set(), {}
    for node in reversed(graph.nodes):
        for value in node.all_input_nodes:
            if value not in seen:
                seen.add(value)
                last.setdefault(node, []).append(value)
    return last


def _op_name(overload: OpOverload) -> str:
    """aten.add.Tensor -> "add_Tensor": the entry's name in the function."""
    name = op_schema(overload).name.split("::")[-1]
    overload_name = op_schema(overload).overload_name
    return f"{name}_{overload_name}" if overload_name else name


def _global(namespace: dict, hint: str, value) -> str:
    """A name for `value` among the function's globals: an op entry keeps its name,
    each constant gets the next c0, c1, ..."""
    if hint in namespace and namespace[hint] is value:
        return hint
    name, k = hint, 0
    while name in namespace or hint == "c" and name == "c":
        name, k = f"{hint}{k}", k + 1
    namespace[name] = value
    return name


def _holds_node(values) -> bool:
    return any(isinstance(v, Node) or (isinstance(v, _CONTAINERS) and _holds_node(
        v.values() if isinstance(v, dict) else v)) for v in values)


_CONTAINERS = (list, tuple, dict)
