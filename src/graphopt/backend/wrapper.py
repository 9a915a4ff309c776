"""The wrapper: an optimised graph module behind one guard and one function (ch. 7).

The backend stage's last step, `install(gm)`, returns a `Wrapper`: a new module that
holds the graph module (`.graph_module`, unchanged: no class is patched) and its
straight-line function (`straight_line.build`). A call

- **binds keywords as fx binds them.** `optimize(bert, input_ids=ids,
  attention_mask=mask)` records the inputs by name; a call with those names, in any
  order (or positionally, as fx's forward also takes them), is bound to the
  placeholders by the names of fx's forward;
- **checks one guard at entry** (`guard.guard_checks`, at the head of the
  straight-line function: one frame): the recorded shapes, strides, dtypes and
  devices, and autograd not recording. Then every intermediate is what it was at
  optimize time and each node's plan still holds, so the function runs on, calling
  each kernel directly; else it returns `MISS`;
- **else runs the graph module itself** (fx's forward, every check): other inputs,
  autograd, a graph edited and recompiled since (`gm.recompile()` makes a new
  forward, which the fast path was not written for), weights given another dtype
  or device (`.double()`, `.to()`: the fast path is dropped), or tracing.

Hooks registered on the wrapper run through nn.Module's call, as on any module;
without them, a call goes straight to the guard: each wrapper's class is made for
its graph (`entry`), its `__call__` the guard and the straight line in one frame.
`.graph`, `.code` and the other attributes of the graph module read through, so the
wrapper reads like the graph it runs; `graphopt.run` interprets the graph module
node by node, so what it counts is unchanged. `wrapper_of(m).source` is the
generated function.
"""

from __future__ import annotations

import copy
import re
from typing import Callable

from torch import nn
from torch.fx import GraphModule

from ..torch_internals import GLOBAL_HOOKS, MODULE_HOOKS, module_hooks, share_state
from ..torch_internals import get_tracing_state as tracing
from .guard import MISS, Constant
from .straight_line import StraightLine, build

__all__ = ["MISS", "Constant", "StraightLine", "Wrapper", "general", "install",
           "wrapper_of"]


class Wrapper(nn.Module):
    """A graph module and its fast path: one guard, one straight-line function.

    Chapter 7. `graph_module` is the fx GraphModule; the wrapper shares its
    parameters, buffers and submodules (the same dicts: the same state dict and
    names, `.to()` and `load_state_dict` reach them), and reads its other
    attributes (`.graph`, `.code`) through. `fast` is the generated function, or None
    where the fast path is off (a copy: `copy.copy` and `copy.deepcopy` give the
    graph module's general path until `install` is called on the copy). With a fast
    path, the instance's class is a subclass made for its graph, whose `__call__`
    is the generated entry (`entry`): `general(m)` or a copy runs without it.
    """

    def __init__(self, gm: GraphModule, fast: StraightLine | None):
        super().__init__()
        share_state(self, gm)
        self.__dict__["graph_module"] = gm  # not a child: its children are ours
        self.fast = fast
        self.arity = len(fast.guard) if fast is not None else -1
        # fx's class of this graph module, and the forward the function was written
        # for: `gm.recompile()` puts a new one there, which turns the fast path off
        self.gm_class, self.built_for = type(gm), type(gm).forward
        self.training = gm.training
        call = entry(fast) if fast is not None else None
        if call is not None:  # a class of its own whose call is the fast path
            self.__class__ = type("Wrapper", (Wrapper,), {
                "__call__": call, "__module__": __name__, "__doc__": Wrapper.__doc__})

    def __call__(self, *args, **kwargs):
        """Straight to the guard while nn.Module's call would only call forward (no
        hooks, not compiled, not traced): its two frames cost more than a small op;
        else nn.Module's call, whose forward is the same fast path (chapter 7)."""
        fast = self.fast
        if fast is not None and not any(module_hooks(self)) and \
                not any(GLOBAL_HOOKS) and tracing() is None:
            flat = fast.bind(args, kwargs) if kwargs else args
            if flat is not None and len(flat) == self.arity and \
                    self.gm_class.forward is self.built_for:
                out = fast.run(*flat)  # its guard first: MISS where it fails
                if out is not MISS:
                    return out
        return super().__call__(*args, **kwargs)

    def forward(self, *args, **kwargs):
        """The fast path when the guard holds, else the graph module (chapter 7)."""
        fast = self.fast
        if fast is not None:  # written out, not called: each call is a frame
            flat = fast.bind(args, kwargs) if kwargs else args
            if flat is not None and len(flat) == self.arity and \
                    self.gm_class.forward is self.built_for and tracing() is None:
                out = fast.run(*flat)
                if out is not MISS:
                    return out
        return self.graph_module(*args, **kwargs)

    def current(self) -> bool:
        """Whether the function still answers for the graph module: its forward is
        the one it was written for (no recompile since)."""
        return self.fast is not None and self.gm_class.forward is self.built_for

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "graph_module":
                raise
            return getattr(self.graph_module, name)

    def train(self, mode: bool = True):
        self.graph_module.training = mode  # its children are ours: set below
        return super().train(mode)

    def _apply(self, fn, recurse=True):
        """What `.to()`, `.double()`, `.half()` and `.cuda()` call. The function
        checks the inputs only: it was written for the weights' dtypes and devices
        at optimize time (each plan's guard asked once, then). Where a call changes
        any of them, the wrapper keeps only its general path, whose plans check
        their inputs on every call (chapter 7)."""
        before = _placements(self)
        super()._apply(fn, recurse)
        if self.fast is not None and _placements(self) != before:
            self.__class__, self.fast, self.arity = Wrapper, None, -1
        return self

    def __deepcopy__(self, memo):
        # the function reads the original's weights: a copy runs its general path
        return Wrapper(copy.deepcopy(self.graph_module, memo), None)

    def __getstate__(self):  # pickling: the generated function is rebuilt by install
        state = dict(self.__dict__)
        state["fast"], state["arity"] = None, -1
        return state

    def __reduce_ex__(self, protocol):
        # a copy is a plain Wrapper (general path): the class whose call is the
        # generated entry is made for this graph, and its function reads our weights
        return _plain, (self.__getstate__(),)


def _placements(module) -> list:
    """(dtype, device) of every parameter and buffer, in order."""
    return [(t.dtype, t.device) for t in (*module.parameters(), *module.buffers())]


def _plain(state: dict) -> Wrapper:
    """A Wrapper without a fast path, from `__getstate__`'s state (copy, pickle)."""
    wrapped = Wrapper.__new__(Wrapper)
    nn.Module.__setstate__(wrapped, state)
    return wrapped


# The generated entry: nn.Module's call, the wrapper's checks, the guard and the
# straight line in ONE frame. A call with nothing else to do (no hooks, compiled
# call or tracing; fx's forward the one it was written for; keywords bound as
# `StraightLine.bind` binds them) goes straight to the guard; anything else, or a
# failed guard, takes `Wrapper.__call__`, the general entry. Eager's call of a
# module is three frames (nn.Module's two, then forward); Wrapper.__call__ then the
# straight-line function was two, and on a two-op toy of 4 us the guard's C++
# check cost about what that saved: in CPU time on a loaded machine (2026-12-07),
# 1.01x eager's median, where one frame fewer ran 0.96x, its IQR below eager's.
ENTRY = """def __call__({self}, *{args}, **{kwargs}):
    {flat} = {bind}({args}, {kwargs}) if {kwargs} else {args}
    if {flat} is None or len({flat}) != {n} \\
{hooks}
            or {tracing}() is not None \\
            or {self}.gm_class.forward is not {self}.built_for:
        return {general}({self}, *{args}, **{kwargs})
{unpack}{guard}
        return {general}({self}, *{args}, **{kwargs})
{body}"""


def _hook_chain(module: str, global_hooks: str) -> str:
    """The entry's hook test as an `or` chain, nn.Module's own way: each hook dict
    by name, then the global ones, a tuple of the dicts torch fills in place (no
    call of `any` on a getter's tuple: on a 4 us toy that was 2 % of the call)."""
    tests = [f"{module}.{name}" for name in MODULE_HOOKS] + \
        [f"{global_hooks}[{i}]" for i in range(len(GLOBAL_HOOKS))]
    return "\n".join(f"            or {t} \\" for t in tests)


def entry(fast: StraightLine) -> Callable | None:
    """The wrapper's `__call__` for `fast`: its guard and body after the entry's
    checks, in one frame (chapter 7); None where its source is not as written."""
    lines = fast.source.rstrip("\n").split("\n")
    ends = [i for i, line in enumerate(lines) if line.startswith("        return ")]
    if not lines[0].startswith("def call(") or not ends or \
            not lines[1].startswith("    if not ("):
        return None
    params = lines[0][len("def call("):-len("):")]
    names = {"self": "wrapper", "args": "args", "kwargs": "kwargs", "flat": "flat",
             "bind": "bind",
             "global_hooks": "global_hooks",
             "tracing": "tracing", "general": "general_entry"}
    taken = set(re.findall(r"[A-Za-z_]\w*", fast.source)) | set(fast.run.__globals__)
    for key, name in names.items():  # apart from every name the function uses
        while name in taken:
            name += "_"
        names[key] = name
        taken.add(name)
    source = ENTRY.format(
        **names, n=len(fast.guard), guard="\n".join(lines[1:ends[0]]),
        hooks=_hook_chain(names["self"], names["global_hooks"]),
        unpack=f"    {params}, = {names['flat']}\n" if params else "",
        body="\n".join(lines[ends[0] + 1:]) + "\n")
    namespace = dict(fast.run.__globals__)
    namespace.update({names["tracing"]: tracing, names["general"]: Wrapper.__call__,
                      names["bind"]: fast.bind, names["global_hooks"]: GLOBAL_HOOKS})
    exec(compile(source, "<graphopt wrapper entry>", "exec"), namespace)  # noqa: S102
    call = namespace["__call__"]
    call.source, call.general = source, names["general"]  # read back by tests
    return call


def install(gm: GraphModule | Wrapper, example_inputs=None) -> Wrapper | None:
    """A `Wrapper` around `gm` with its fast path, or None where the graph cannot
    have one (chapter 7). Given a Wrapper, its graph module is wrapped anew.

    The guard takes the example inputs' shapes, strides, dtypes and devices (by
    default the placeholders' recorded `meta["val"]`, which torch.export writes).
    The backend stage calls this on its own copy of the graph: nothing else gets a
    fast path behind the caller's back.
    """
    inner = gm.graph_module if isinstance(gm, Wrapper) else gm
    built = build(inner, example_inputs)
    return None if built is None else Wrapper(inner, built)


def wrapper_of(module) -> StraightLine | None:
    """The fast path of a Wrapper, or None (not wrapped, a copy, or the graph module
    recompiled since) (ch. 7)."""
    return module.fast if isinstance(module, Wrapper) and module.current() else None


def general(module) -> Callable:
    """`module`'s general path as a callable: fx's forward, every check (chapter 7)."""
    return module.graph_module if isinstance(module, Wrapper) else module
