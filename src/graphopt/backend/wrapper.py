"""The wrapper: an optimised graph as one straight-line Python function (chapter 7).

An fx GraphModule runs its graph through generated Python that looks every weight up
through `nn.Module.__getattr__`, calls every fused node through `nn.Module.__call__`
(hooks, tracing state), and lets each fused module check its inputs again (dtype,
device, autograd, its packed weight) before it reaches its kernel. On MobileNetV3
that is some 26 µs of Python per node, more than many of its kernels take.

Inductor ends the same way: its output code is a `call(args)` function that calls
one kernel after another, with all checks done once, by guards, before it starts.
`install(gm)` gives an optimised GraphModule that path (the `backend` stage's last
step):

- **One guard at entry.** The graph is specialised to its example inputs, so when
  the inputs have the recorded shapes, strides, dtypes and devices, and autograd is
  not recording, every intermediate is what it was at optimize time, and each fused
  module's choice of kernel (made on those shapes) still holds. The guard is itself
  generated (`wrapper_of(gm).guard_source`): one straight `and` of C-level checks
  per input, in one Python frame, with no loop and no per-call list or dict.
- **Straight in.** A call `gm(x)` reaches the guard from `type(gm).__call__`, not
  through fx's and nn.Module's three frames of call machinery, while nn.Module would
  add nothing there (no hooks, not compiled, not traced). On a model of one op those
  frames and a Python guard cost more than the op (issue #21).
- **Direct calls.** Each node calls what it would reach in the end: an aten op's C++
  entry (`OpOverload._op`), a fused module's kernel with its prepacked weight bound
  in (`backend.direct_calls`), or else the module's `forward`. Weights are read from
  their owner's parameter dict, so `.to()` and `load_state_dict` are seen; a packed
  weight is used only while its source is the same tensor, unchanged.
- **Keywords bound as fx binds them.** `optimize(bert, input_ids=ids,
  attention_mask=mask)` records the inputs by name; a call with those names, in
  any order (or positionally, as fx's forward also takes them), is bound to the
  placeholders by the names of fx's forward and runs the same function.
- **The general path otherwise.** Other inputs (other or missing keywords, other
  shapes) or autograd run the GraphModule's own forward, with every check; hooks
  run nn.Module's call, whose forward is the wrapper's.
- **Outputs as the model gives them.** A single tensor or a flat tuple is returned
  as written; only a nested structure goes through pytree's unflatten.

`wrapper_of(gm).source` is the generated function; the interpreter (`graphopt.run`)
still walks the graph node by node, so what it counts is unchanged.
"""

from __future__ import annotations

import math
import textwrap
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.fx import GraphModule, Node
from torch.fx.graph import CodeGen
from torch.nn.modules import module as _module

from ..capture import ShapeGuard
from ..codegen import fused
from ..passes.eager_ops import last_uses
from ..torch_internals import OpOverload, PyTreeCodeGen, op_entry
from ..torch_internals import get_tracing_state as _tracing
from . import direct_calls

_SIMPLE = (int, float, bool, str, type(None))
# gm -> (its Wrapper, the forward installed, fx's forward); weak: never keeps gm alive
_INSTALLED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Constant:
    """A Python value the graph was specialised to (`use_cache=False`): the guard
    wants the same value again, as torch.export's own guard does."""

    value: Any


@dataclass
class Wrapper:
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


def install(gm: GraphModule, example_inputs=None) -> Wrapper | None:
    """Give `gm` the fast path; returns it, or None where the graph cannot have one.

    The guard takes the example inputs' shapes, strides, dtypes and devices (by
    default the placeholders' recorded `meta["val"]`, which torch.export writes).

    The backend stage calls this on the module it returns, its own copy: nothing
    else gets a fast path behind the caller's back. The forward and `__call__` are
    replaced on `gm`'s own class (every GraphModule has one, made for it by fx), so
    `gm.recompile()` after a graph edit puts fx's back: a stale fast path never
    runs. A copy (`copy.deepcopy`) runs the general path until installed again.
    """
    built = build(gm, example_inputs)
    if built is None:
        return None
    general = _INSTALLED[gm][2] if wrapper_of(gm) else type(gm).forward

    def forward(self, *args, **kwargs):
        """graphopt's wrapper: the fast path when the guard holds (chapter 7)."""
        flat = built.bind(args, kwargs) if kwargs else args
        if flat is not None and built.matches(flat):
            return built.run(*flat)
        return general(self, *args, **kwargs)

    type(gm).forward = forward
    type(gm).__call__ = _entry(built, type(gm), forward)
    _INSTALLED[gm] = (built, forward, general)
    return built


def _entry(built: Wrapper, cls: type, forward: Callable) -> Callable:
    """`gm(...)` straight to the guard while nn.Module's call would only call forward.

    nn.Module's call runs forward at once unless the module has hooks, was compiled
    (`gm.compile()`) or is being traced by torch.jit; the same test here, inline,
    saves fx's `call_wrapped`, `_WrappedCall` and nn.Module's two frames.
    """
    arity = len(built.guard)

    def __call__(self, *args, **kwargs):
        """graphopt's entry: the guard, then the straight-line function (chapter 7)."""
        flat = built.bind(args, kwargs) if kwargs else args
        if flat is not None and len(flat) == arity and cls.forward is forward and not (
                self._forward_pre_hooks or self._forward_hooks
                or self._backward_pre_hooks or self._backward_hooks
                or self._compiled_call_impl is not None
                or _module._global_forward_pre_hooks or _module._global_forward_hooks
                or _module._global_backward_pre_hooks
                or _module._global_backward_hooks or _tracing()) \
                and built.check(*flat):
            return built.run(*flat)
        return self._wrapped_call(self, *args, **kwargs)  # fx's own call: all of it

    return __call__


def wrapper_of(gm: GraphModule) -> Wrapper | None:
    """The installed wrapper, or None (never installed, or reset by `recompile`)."""
    entry = _INSTALLED.get(gm)
    return entry[0] if entry and type(gm).forward is entry[1] else None


def general(gm: GraphModule) -> Callable:
    """`gm`'s general path as a callable: fx's forward, every check (chapter 7)."""
    entry = _INSTALLED.get(gm)
    forward = entry[2] if wrapper_of(gm) else type(gm).forward
    return lambda *args, **kwargs: forward(gm, *args, **kwargs)


def build(gm: GraphModule, example_inputs=None) -> Wrapper | None:
    """The straight-line function for `gm`, or None (an input that is neither a
    tensor nor a Python flag, inputs passed as a nested structure, or a codegen fx
    does not document).

    Chapter 7. Inputs captured by keyword (`input_ids=`) are flat too: torch.export
    records them as a dict beside the positional tuple, and fx's forward names a
    parameter for each, which the wrapper binds a keyword call to."""
    codegen = gm.graph._codegen
    if type(codegen) not in (CodeGen, PyTreeCodeGen):
        return None
    places = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if example_inputs is None:
        example_inputs = [n.meta.get("val") for n in places]
    names = _parameter_names(codegen, places)
    if len(example_inputs) != len(places) or names is None:
        return None
    guard = [_recorded(x) for x in example_inputs]
    if any(g is None for g in guard):
        return None
    emit = _Emitter(gm)
    try:
        source = emit.function(places)
    except _Unsupported:
        return None
    namespace = dict(emit.globals)
    exec(compile(source, "<graphopt wrapper>", "exec"), namespace)
    built = Wrapper(source, namespace["call"], guard, names, emit.weights,
                    emit.globals, emit.direct)
    built.guard_source, built.check = _guard_function(
        [p.name for p in places], guard, built.records)
    return built


def _guard_function(names: list, guard: list, records: Callable) -> tuple:
    """The entry guard as Python source and function: one `and` of checks per input.

    Written out rather than looped over so that a call runs one frame of C-level
    comparisons (`x.shape == shape_0`, `x.stride() == stride_0`, ...), with no loop
    and no list; `records` (autograd's inputs and weights) runs only in grad mode.
    """
    namespace = {}

    def constant(hint: str, value) -> str:
        name = hint
        while name in names or name in namespace:
            name += "_"
        namespace[name] = value
        return name

    tensor = constant("Tensor", torch.Tensor)
    grad = constant("grad", torch.is_grad_enabled)
    type_of = constant("type_of", type)  # an input may be named `type`
    checks = []
    for i, (x, recorded) in enumerate(zip(names, guard)):
        if type(recorded) is Constant:  # a flag the graph is specialised to
            value = recorded.value
            checks.append(f"{type_of}({x}) is {constant(f'type_{i}', type(value))} and "
                          f"{x} == {constant(f'value_{i}', value)}")
            continue
        shape, stride, dtype, device = (constant(f"{k}_{i}", v) for k, v in zip(
            ("shape", "stride", "dtype", "device"), recorded))
        checks += [f"{type_of}({x}) is {tensor} and {x}.shape == {shape}",
                   f"{x}.stride() == {stride} and {x}.dtype is {dtype}",
                   f"{x}.device == {device}"]
    flat = f"({names[0]},)" if len(names) == 1 else f"({', '.join(names)})"
    checks.append(f"not ({grad}() and {constant('records', records)}({flat}))")
    source = f"def guard({', '.join(names)}):\n    return (" + \
        "\n            and ".join(checks) + ")\n"
    exec(compile(source, "<graphopt guard>", "exec"), namespace)
    return source, namespace["guard"]


def _recorded(x):
    if isinstance(x, torch.Tensor):  # a FakeTensor is one too
        return (x.shape, x.stride(), x.dtype, x.device)
    if type(x) in _SIMPLE and not (type(x) is float and math.isnan(x)):
        return Constant(x)  # a flag given by keyword (use_cache=False)
    return None


def _parameter_names(codegen, places) -> tuple | None:
    """fx's forward's parameter for each placeholder, in order: () where keywords
    cannot be bound by name, None where the inputs are not one leaf per placeholder.

    torch.export's spec is `(args tuple, kwargs dict)`; fx's forward takes
    `orig_args` (the positional names, then the dict's keys) and flattens them in
    that same order, so placeholder i is the parameter named `orig_args[i]`.
    """
    info = getattr(codegen, "pytree_info", None)
    if info is None or info.in_spec is None:  # forward(self, <placeholder targets>)
        targets = tuple(str(p.target) for p in places)
        starred = any(t.startswith("*") for t in targets)
        return () if starred else targets
    spec = info.in_spec
    if spec.type is not tuple or spec.num_children != 2:
        return None
    args, kwargs = spec.children()
    if args.type is not tuple or kwargs.type is not dict:
        return None
    leaves = args.children() + kwargs.children()
    if len(leaves) != len(places) or not all(c.is_leaf() for c in leaves):
        return None
    names = tuple(info.orig_args)
    return names if len(names) == len(places) else ()


class _Unsupported(Exception):
    """An argument the wrapper cannot write out: the graph keeps fx's forward."""


class _Emitter:
    """Writes the function: one statement per node, each value freed after its last
    use (as fx's own code does), a weight read inline where one node reads it."""

    def __init__(self, gm: GraphModule):
        self.gm, self.globals, self.ids, self.weights = gm, {}, {}, []
        self.direct = 0
        self.codegen = gm.graph._codegen
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
            name = target._schema.name.replace("::", "_")
            return self._global(name, op_entry(target))
        hint = getattr(target, "__name__", "fn")
        return self._global(hint if hint.isidentifier() else "fn", target)

    def _attr(self, node: Node) -> str:
        prefix, _, name = node.target.rpartition(".")
        owner = self.gm.get_submodule(prefix) if prefix else self.gm
        hint = "w_" + (prefix.replace(".", "_") if prefix else "root")
        for table in (owner._parameters, owner._buffers):
            if name in table:
                self.weights.append((table, name))
                return f"{self._global(hint, table)}[{name!r}]"
        return self._global("a_" + node.name, getattr(owner, name))

    def _module_call(self, node: Node):
        module = self.gm.get_submodule(node.target)
        call = direct_calls.direct_call(module, node)
        hooked = (module._forward_hooks or module._forward_pre_hooks
                  or _module._global_forward_hooks
                  or _module._global_forward_pre_hooks)
        if call is None and not hooked and _runs_fused(module):
            call = fused.direct_call(module, node)  # its plan, bound once (#21)
        if call is not None:
            self.direct += 1
            return call
        return module if hooked else module.forward

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
        if type(a) in _SIMPLE and not (type(a) is float and not math.isfinite(a)):
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


def _runs_fused(module) -> bool:
    """A lowered group whose forward is still `run_fused` (not replaced)."""
    return isinstance(module, fused.GeneratedKernel) and \
        type(module).forward is fused.GeneratedKernel.forward


def _holds_node(a) -> bool:
    return any(isinstance(x, Node) or (isinstance(x, (list, tuple)) and _holds_node(x))
               for x in a)
