"""The wrapper's function: an optimised graph as straight-line Python (chapter 7).

An fx GraphModule runs its graph through generated Python that looks every weight up
through `nn.Module.__getattr__`, calls every fused node through `nn.Module.__call__`
(hooks, tracing state), and lets each fused module check its inputs again (dtype,
device, autograd, its packed weight) before it reaches its kernel. On MobileNetV3
that is some 26 us of Python per node, more than many of its kernels take.

Inductor ends the same way: its output code is a `call(args)` function that calls
one kernel after another, with all checks done once, by guards, before it starts.
`build(gm)` writes that function for a graph module:

- **Direct calls.** Each node calls what it would reach in the end: an aten op's C++
  entry, a fused pattern node's plan (`backend.plan`: its guard asked once, here, on
  the recorded inputs; its call bound to the module), a lowered group's plan
  (`codegen.fused.direct_call`), or else the module's `forward`. Weights are read
  from their owner's parameter dict, so `.to()` and `load_state_dict` are seen; a
  packed weight is used only while its source is the same tensor, unchanged.
- **Values freed after their last use**, as fx's own code does.
- **Outputs as the model gives them.** A single tensor or a flat tuple is returned
  as written; only a nested structure goes through pytree's unflatten.
"""

from __future__ import annotations

import functools
import math
import textwrap
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.fx import GraphModule, Node
from torch.fx.graph import CodeGen

from ..codegen import fused
from ..eager_ops import last_uses
from ..passes.prepacked import FusedPattern
from ..shape_guard import ShapeGuard
from ..torch_internals import (
    OpOverload,
    PyTreeCodeGen,
    buffer_table,
    graph_codegen,
    has_hooks,
    op_entry,
    op_schema,
    parameter_table,
)
from .guard import SIMPLE, guard_function, parameter_names, recorded


@dataclass
class StraightLine:
    """The generated fast path of one GraphModule and what its guard checks."""

    source: str
    run: Callable
    guard: list  # (shape, stride, dtype, device) per input, or a Constant
    names: tuple  # fx's forward's parameter per placeholder; () takes no keywords
    weights: list  # (owner's parameter or buffer dict, name) per weight read
    calls: dict  # name in the source -> what it calls or reads
    direct: int  # nodes that call a kernel directly
    guard_source: str = ""
    check: Callable | None = None  # the guard, compiled from guard_source

    def bind(self, args: tuple, kwargs: dict) -> tuple | None:
        """The placeholders' values for a call, as fx's forward binds them, or None.

        Positional arguments fill the first names, keywords the rest, in any order;
        any other call (a key not named, one missing, one given twice) is None.
        """
        if not kwargs:
            return args
        rest = self.names[len(args):]
        if not rest or len(rest) != len(kwargs):
            return None  # counts agree and every name is present: the same keys
        try:
            return args + tuple(map(kwargs.__getitem__, rest))  # no Python frame
        except KeyError:
            return None

    def matches(self, args) -> bool:
        """The entry guard: inputs as recorded, autograd off (or nothing to record)."""
        return len(args) == len(self.guard) and self.check(*args)

    def records(self, args) -> bool:
        """Whether autograd records this call: an input or a weight requires grad.

        The guard asks only while grad is enabled: under no_grad it costs nothing."""
        return any(type(a) is torch.Tensor and a.requires_grad for a in args) or any(
            t.requires_grad for t in self._weights())

    def _weights(self):
        for table, name in self.weights:
            t = table.get(name)
            if isinstance(t, torch.Tensor):
                yield t


def build(gm: GraphModule, example_inputs=None) -> StraightLine | None:
    """The straight-line function for `gm`, or None (an input that is neither a
    tensor nor a Python flag, inputs passed as a nested structure, or a codegen fx
    does not document).

    Chapter 7. The guard takes the example inputs' shapes, strides, dtypes and
    devices (by default the placeholders' recorded `meta["val"]`, which torch.export
    writes). Inputs captured by keyword (`input_ids=`) are flat too: torch.export
    records them as a dict beside the positional tuple, and fx's forward names a
    parameter for each, which the wrapper binds a keyword call to."""
    codegen = graph_codegen(gm.graph)
    if type(codegen) not in (CodeGen, PyTreeCodeGen):
        return None
    places = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if example_inputs is None:
        example_inputs = [n.meta.get("val") for n in places]
    names = parameter_names(codegen, places)
    if len(example_inputs) != len(places) or names is None:
        return None
    guard = [recorded(x) for x in example_inputs]
    if any(g is None for g in guard):
        return None
    emit = Emitter(gm)
    try:
        source = emit.function(places)
    except _Unsupported:
        return None
    namespace = dict(emit.globals)
    exec(compile(source, "<graphopt wrapper>", "exec"), namespace)  # noqa: S102
    built = StraightLine(source, namespace["call"], guard, names, emit.weights,
                         emit.globals, emit.direct)
    built.guard_source, built.check = guard_function(
        [p.name for p in places], guard, built.records)
    return built


class _Unsupported(Exception):
    """An argument the wrapper cannot write out: the graph keeps fx's forward."""


class Emitter:
    """Writes the function: one statement per node, each value freed after its last
    use (as fx's own code does), a weight read inline where one node reads it."""

    def __init__(self, gm: GraphModule):
        self.gm, self.globals, self.ids, self.weights = gm, {}, {}, []
        self.direct = 0
        self.codegen = graph_codegen(gm.graph)
        self.locals = {n.name for n in gm.graph.nodes}
        self.inline = {n: self._attr(n) for n in gm.graph.nodes
                       if n.op == "get_attr" and len(n.users) == 1}

    def function(self, places) -> str:
        last = last_uses(self.gm.graph)
        lines = [f"def call({', '.join(p.name for p in places)}):"]
        for node in self.gm.graph.nodes:
            if node.op == "placeholder" or node in self.inline:
                continue
            if node.op == "output":
                lines.append(f"    return {self._output(node)}")
                break
            if node.op == "call_module" and not node.users and isinstance(
                    self.gm.get_submodule(node.target), ShapeGuard):
                continue  # export's shape check: the entry guard is stricter
            lines.append(self._statement(node))
            dead = [d.name for d in last.get(node, ()) if d not in self.inline]
            dead += [node.name] if not node.users else []
            if dead:
                lines.append(f"    del {', '.join(dead)}")
        return "\n".join(lines) + "\n"

    def _statement(self, node: Node) -> str:
        if node.op == "get_attr":
            return f"    {node.name} = {self._attr(node)}"
        if node.op == "call_method":
            callee = f"{self._arg(node.args[0])}.{node.target}"
            args = [self._arg(a) for a in node.args[1:]]
        else:
            callee = self._callee(node)
            args = [self._arg(a) for a in node.args]
        args += [f"{k}={self._arg(v)}" for k, v in node.kwargs.items()]
        line = f"    {node.name} = {callee}({', '.join(args)})"
        if len(line) <= 88:
            return line
        body = textwrap.fill(", ".join(args), 80, initial_indent=" " * 8,
                             subsequent_indent=" " * 8, break_long_words=False,
                             break_on_hyphens=False)
        return f"    {node.name} = {callee}(\n{body})"

    def _callee(self, node: Node) -> str:
        if node.op == "call_module":
            return self._global("k_" + node.name, self._module_call(node))
        target = node.target
        if isinstance(target, OpOverload):
            name = op_schema(target).name.replace("::", "_")
            return self._global(name, op_entry(target))
        hint = getattr(target, "__name__", "fn")
        return self._global(hint if hint.isidentifier() else "fn", target)

    def _attr(self, node: Node) -> str:
        prefix, _, name = node.target.rpartition(".")
        owner = self.gm.get_submodule(prefix) if prefix else self.gm
        hint = "w_" + (prefix.replace(".", "_") if prefix else "root")
        for table in (parameter_table(owner), buffer_table(owner)):
            if name in table:
                self.weights.append((table, name))
                return f"{self._global(hint, table)}[{name!r}]"
        return self._global("a_" + node.name, getattr(owner, name))

    def _module_call(self, node: Node):
        module = self.gm.get_submodule(node.target)
        if has_hooks(module):
            return module  # nn.Module's call runs the hooks
        call = _plan_call(module, node)
        if call is None and _runs_fused(module):
            call = fused.direct_call(module, node)  # its plan, bound once
        if call is not None:
            self.direct += 1
            return call
        return module.forward

    def _output(self, node: Node) -> str:
        out = self._arg(node.args[0])
        info = getattr(self.codegen, "pytree_info", None)
        if not isinstance(self.codegen, PyTreeCodeGen) or info is None or \
                info.out_spec is None:
            return out
        items = node.args[0] if isinstance(node.args[0], (list, tuple)) else [
            node.args[0]]
        spec = info.out_spec
        # what pytree's unflatten would build, written out: a leaf or a flat tuple
        if spec.is_leaf() and len(items) == 1:
            return self._arg(items[0])
        if spec.type is tuple and spec.num_children == len(items) and all(
                c.is_leaf() for c in spec.children()):
            return self._arg(tuple(items))
        flat = out if isinstance(node.args[0], (list, tuple)) else f"({out},)"
        return f"{self._global('unflatten', self.codegen.process_outputs)}({flat})"

    def _arg(self, a: Any) -> str:
        if isinstance(a, Node):
            return self.inline.get(a, a.name)
        if isinstance(a, list):  # fx's immutable_list too
            return "[" + ", ".join(self._arg(x) for x in a) + "]"
        if isinstance(a, dict) and all(type(k) is str for k in a):
            return "{" + ", ".join(f"{k!r}: {self._arg(v)}" for k, v in a.items()) + "}"
        if type(a) is tuple or (isinstance(a, tuple) and _holds_node(a)):
            inner = ", ".join(self._arg(x) for x in a)
            return f"({inner},)" if len(a) == 1 else f"({inner})"
        if type(a) in SIMPLE and not (type(a) is float and not math.isfinite(a)):
            return repr(a)
        if isinstance(a, dict) and _holds_node(a.values()):
            raise _Unsupported("a dict with non-string keys holding graph values")
        return self._global("c", a)  # the object itself: torch.Size, dtype, slice...

    def _global(self, hint: str, obj) -> str:
        """A global of the function for `obj`: one name per object, never clashing."""
        if id(obj) in self.ids:
            return self.ids[id(obj)]
        hint = hint if hint.isidentifier() else "g"
        name, k = hint, len(self.globals)
        while name in self.globals or name in self.locals:
            name, k = f"{hint}_{k}", k + 1
        self.globals[name] = obj
        self.ids[id(obj)] = name
        return name


def _plan_call(module, node: Node) -> Callable | None:
    """A fused pattern node's plan with its module bound in, where the plan's guard
    holds on the recorded inputs (the entry guard pins them), else None."""
    plan = getattr(module, "plan", None) if isinstance(module, FusedPattern) else None
    if plan is None or type(module).forward is not FusedPattern.forward:
        return None
    metas = [a.meta.get("val") if isinstance(a, Node) else a for a in node.args]
    if any(m is None for a, m in zip(node.args, metas) if isinstance(a, Node)):
        return None
    with torch.no_grad():  # the fast path runs only where autograd records nothing
        if not plan.guard(module, *metas):
            return None
    return functools.partial(plan.call, module)  # C-level: no frame of ours


def _runs_fused(module) -> bool:
    """A lowered group whose forward is still `run_fused` (not replaced)."""
    return isinstance(module, fused.GeneratedKernel) and \
        type(module).forward is fused.GeneratedKernel.forward


def _holds_node(a) -> bool:
    return any(isinstance(x, Node) or (isinstance(x, (list, tuple)) and _holds_node(x))
               for x in a)
