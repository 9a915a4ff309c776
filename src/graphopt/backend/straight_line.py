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
from dataclasses import dataclass
from typing import Callable

import torch
from torch.fx import GraphModule, Node
from torch.fx.graph import CodeGen

from ..codegen import fused
from ..emitter import Emitter, Unsupported
from ..passes.prepacked import FusedPattern
from ..shape_guard import ShapeGuard
from ..torch_internals import (
    OpOverload,
    PyTreeCodeGen,
    buffer_table,
    graph_codegen,
    has_hooks,
    op_schema,
    parameter_table,
)
from .bindings import binding
from .guard import MISS, guard_checks, guard_function, parameter_names, recorded
from .inline import group_lines, runs_its_ops


@dataclass
class StraightLine:
    """The generated fast path of one GraphModule and what its guard checks (ch. 7).

    `run` is the function: its guard first, then every node; it returns `MISS`
    where the guard fails (the wrapper then runs the general path). `check` is the
    same guard alone (`guard_source`)."""

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
    emit = CallEmitter(gm)
    try:
        body = emit.function(places)
    except Unsupported:
        return None
    built = StraightLine("", None, guard, names, emit.weights, emit.globals,
                         emit.direct)
    inputs = [p.name for p in places]
    # the guard at the function's head: one frame per call, not two
    checks = guard_checks(inputs, guard, built.records, emit.constant)
    checks[-1:-1] = emit.conditions  # before the autograd check, the costliest
    head, _, rest = body.partition("\n")
    built.source = f"{head}\n    if not (" + "\n            and ".join(checks) + \
        f"):\n        return {emit.constant('MISS', MISS)}\n{rest}"
    built.run = emit.compile(built.source, "<graphopt wrapper>", "call")
    built.guard_source, built.check = guard_function(inputs, guard, built.records)
    return built


class CallEmitter(Emitter):
    """The wrapper's `Emitter` (chapter 7; the core's, which `eager_ops` uses too):
    values as fx names them, every node kind written (a weight read inline where one
    node reads it; a module node calling its plan directly), outputs as the model
    gives them, and each value freed after its last use, inputs included."""

    def __init__(self, gm: GraphModule):
        super().__init__(gm.graph)
        self.gm, self.weights, self.direct = gm, [], 0
        self.conditions = []  # what the entry guard checks beyond the inputs
        self.codegen = graph_codegen(gm.graph)
        self.inline = {n: self._attr(n) for n in gm.graph.nodes
                       if n.op == "get_attr" and len(n.users) == 1}

    def function(self, places) -> str:
        head = f"def call({', '.join(p.name for p in places)}):"
        return "\n".join([head, *self.body()]) + "\n"

    def name(self, node: Node) -> str:
        return self.inline.get(node, node.name)

    def constant(self, hint: str, value) -> str:
        """A global named as the guard names it (`shape_0`), apart from the rest."""
        name = hint
        while name in self.globals or name in self.reserved:
            name += "_"
        self.globals[name] = value
        return name

    def frees(self, node: Node) -> bool:
        return node not in self.inline

    def statement(self, node: Node) -> str | None:
        if node.op == "placeholder" or node in self.inline:
            return None
        if node.op == "call_module" and not node.users and isinstance(
                self.gm.get_submodule(node.target), ShapeGuard):
            return None  # export's shape check: the entry guard is stricter
        if node.op == "get_attr":
            return f"    {node.name} = {self._attr(node)}"
        if node.op == "call_module":
            lines = self._group_ops(node)
            if lines is not None:
                return "\n".join(lines)
        if node.op == "call_method":
            callee = f"{self.arg(node.args[0])}.{node.target}"
            args = [self.arg(a) for a in node.args[1:]]
        else:
            callee = self._callee(node)
            args = [self.arg(a) for a in node.args]
        args += [f"{k}={self.arg(v)}" for k, v in node.kwargs.items()]
        return self.call(node, callee, args)

    def fresh(self, hint: str) -> str:
        """A new value's name, apart from every node's and global's."""
        name = hint
        while name in self.globals or name in self.reserved:
            name += "_"
        self.reserved.add(name)
        return name

    def aten(self, node: Node) -> str:
        """An aten node's callee: torch's binding where it is the same, else the
        overload's C++ entry."""
        function = binding(node)
        if function is not None:
            return self.global_(f"torch_{function.__name__}", function)
        return self.op(node.target, op_schema(node.target).name.replace("::", "_"))

    def _group_ops(self, node: Node) -> list | None:
        """A group `lower` left on its ops, written inline (`inline`), its backend
        checked at entry; None: call the module."""
        module = self.gm.get_submodule(node.target)
        if has_hooks(module) or not runs_its_ops(module):
            return None
        lines = group_lines(self, node, module)
        if lines is not None:
            group = self.constant(f"group_{node.name}", module)
            self.conditions.append(f"{group}.backend == 'auto'")
            self.direct += 1
        return lines

    def _callee(self, node: Node) -> str:
        if node.op == "call_module":
            return self.global_("k_" + node.name, self._module_call(node))
        target = node.target
        if isinstance(target, OpOverload):
            return self.aten(node)
        hint = getattr(target, "__name__", "fn")
        return self.global_(hint if hint.isidentifier() else "fn", target)

    def _attr(self, node: Node) -> str:
        prefix, _, name = node.target.rpartition(".")
        owner = self.gm.get_submodule(prefix) if prefix else self.gm
        hint = "w_" + (prefix.replace(".", "_") if prefix else "root")
        for table in (parameter_table(owner), buffer_table(owner)):
            if name in table:
                self.weights.append((table, name))
                return f"{self.global_(hint, table)}[{name!r}]"
        return self.global_("a_" + node.name, getattr(owner, name))

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

    def output(self, node: Node) -> str:
        out = self.arg(node.args[0])
        info = getattr(self.codegen, "pytree_info", None)
        if not isinstance(self.codegen, PyTreeCodeGen) or info is None or \
                info.out_spec is None:
            return out
        items = node.args[0] if isinstance(node.args[0], (list, tuple)) else [
            node.args[0]]
        spec = info.out_spec
        # what pytree's unflatten would build, written out: a leaf or a flat tuple
        if spec.is_leaf() and len(items) == 1:
            return self.arg(items[0])
        if spec.type is tuple and spec.num_children == len(items) and all(
                c.is_leaf() for c in spec.children()):
            return self.arg(tuple(items))
        flat = out if isinstance(node.args[0], (list, tuple)) else f"({out},)"
        return f"{self.global_('unflatten', self.codegen.process_outputs)}({flat})"


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
    """A lowered group whose forward is still `GeneratedKernel.forward` (not
    replaced): its plan can be called directly."""
    return isinstance(module, fused.GeneratedKernel) and \
        type(module).forward is fused.GeneratedKernel.forward
