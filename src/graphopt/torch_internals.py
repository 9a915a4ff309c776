"""Every private torch API graphopt uses, in one place, each with the reason.

Private names (a leading underscore, `torch._C`, `torch._ops`...) can change in any
torch release without notice. Keeping them here means a new torch breaks one file,
and a reader sees what graphopt leans on that is not public API. The rest of the
package imports them from this module only; ruff's banned-api rule
(pyproject.toml) refuses a private torch name anywhere else. Operator namespaces
(`torch.ops.aten._softmax`, `torch.ops.mkldnn._linear_pointwise`) are operators,
not Python APIs, and stay where they are called.

Heavy subsystems (dynamo, inductor, fake tensors) are imported inside the function
that needs them, so importing graphopt does not load them.

Private *attributes* of torch objects, which the banned-api rule cannot see, are
read here too, through the accessors at the end of this file (`schema`,
`graph_codegen`, `parameter_table`, `buffer_table`, `version`, `has_hooks`, ...);
tests/test_torch_internals.py scans the package for each name they read and fails
on one outside this file.
"""

from __future__ import annotations

import operator

import torch

# An aten operator's overload object (`aten.add.Tensor`): how graphopt tells an aten
# op in a graph from a Python function. torch exposes the class only in torch._ops.
from torch._ops import HigherOrderOperator, OpOverload

# fx's code generator for graphs with pytree-structured inputs and outputs
# (torch.export's): the wrapper writes the same unflattening by hand.
from torch.fx.graph import _PyTreeCodeGen as PyTreeCodeGen

# The metadata ShapeProp records on a node (`node.meta["tensor_meta"]`); passes that
# create a node record the same.
from torch.fx.passes.shape_prop import _extract_tensor_metadata as tensor_metadata

# `2` or `(2, 2)` -> `(2, 2)`, as nn.Conv2d normalises its arguments.
from torch.nn.modules.utils import _pair as pair

# A dispatch mode sees every aten kernel that runs: the interpreter counts kernels
# with it, and steps out of it to run its own bookkeeping.
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._python_dispatch import (
    _disable_current_modes as disable_current_modes,
)

# Flattening nested inputs and outputs (tuples, dicts, Hugging Face outputs) the way
# torch.export does. torch.utils.pytree is public only in newer torch releases.
from torch.utils._pytree import (
    tree_flatten,
    tree_leaves,
    tree_map,
    tree_unflatten,
)

# How many dispatch modes are active: a oneDNN primitive called directly runs where
# no mode sees it, so under one the backend calls torch's op instead.
dispatch_modes = torch._C._len_torch_dispatch_stack


__all__ = [
    "GLOBAL_HOOKS", "MODULE_HOOKS", "buffer_table", "child_table",
    "disable_current_modes", "dispatch_modes",
    "dynamo_explain", "dynamo_reset", "fake_mode_of", "get_tracing_state",
    "graph_codegen", "has_hooks", "has_mkl", "HigherOrderOperator",
    "inductor_config", "module_hooks", "new_fake_mode", "op_entry", "op_schema",
    "OpOverload", "pair", "parameter_table", "PyTreeCodeGen", "run_and_get_code",
    "set_graph", "share_state", "storage_use_count", "tensor_metadata",
    "TorchDispatchMode", "tree_flatten", "tree_flatten_spec", "tree_leaves",
    "tree_map", "tree_unflatten", "tensor_guards", "version",
]


def tree_flatten_spec(value, spec):
    """Flatten `value` by an exported program's input spec (keyword inputs in order)."""
    from torch.fx._pytree import tree_flatten_spec as flatten

    return flatten(value, spec)


def storage_use_count(storage) -> int:
    """How many tensors share `storage` (launch.py reuses an output only at 1)."""
    return torch._C._storage_Use_Count(storage._cdata)


# Not None while torch.jit.trace runs: the wrapper's fast path steps aside. Bound
# directly (no Python frame of ours): the wrapper asks it on every call.
get_tracing_state = torch._C._get_tracing_state


def has_mkl() -> bool:
    """True for a torch build with MKL (its packed GEMM, chapter 7)."""
    return bool(torch._C.has_mkl)


def op_entry(overload: OpOverload):
    """The C++ entry behind an aten overload: calling it skips one Python frame."""
    return overload._op


def fake_mode_of(values):
    """The fake-tensor mode `values` were made in (torch.export's), or None."""
    from torch._guards import detect_fake_mode

    return detect_fake_mode(values)


def new_fake_mode():
    """A fresh fake-tensor mode: tensors with shape, dtype and strides, no memory."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode()


def dynamo_explain(model):
    """torch._dynamo.explain: the graphs and graph breaks torch.compile would make."""
    import torch._dynamo

    return torch._dynamo.explain(model)


def dynamo_reset() -> None:
    """Forget every graph torch.compile captured (a fresh compile for a comparison)."""
    import torch._dynamo

    torch._dynamo.reset()


def run_and_get_code(fn, *args, **kwargs):
    """Run `fn` under inductor and return its result and the code inductor wrote."""
    from torch._inductor.utils import run_and_get_code as run

    return run(fn, *args, **kwargs)


def inductor_config():
    """Inductor's configuration module (freezing, the CPU backend's options)."""
    import torch._inductor.config as config

    return config


# ------------------------------------------------------- private attributes of torch
# Each accessor names the attribute it reads and why graphopt needs it. The names
# are listed in PRIVATE_ATTRIBUTES, which the test that keeps them here reads.

def op_schema(overload):
    """`OpOverload._schema`: an aten op's name, overload and arguments (which
    arguments it writes, which alias). torch exposes no public accessor. None for a
    call target that has none (a Python function)."""
    return getattr(overload, "_schema", None)


def graph_codegen(graph):
    """`Graph._codegen`: how fx writes a graph's forward (plain, or pytree's
    flattening of torch.export's inputs and outputs); the wrapper writes the same
    input binding and output unflattening itself."""
    return graph._codegen


def set_graph(gm, graph) -> None:
    """Set `GraphModule._graph` without the setter's recompile (the caller
    recompiles once, after all its edits)."""
    gm._graph = graph


def parameter_table(module) -> dict:
    """`nn.Module._parameters`: the module's own parameter dict. The wrapper reads a
    weight from it on every call (so `.to()` and `load_state_dict` are seen) without
    nn.Module's `__getattr__`; undoing a run's writes puts tensors back into it."""
    return module._parameters


def buffer_table(module) -> dict:
    """`nn.Module._buffers`: the module's own buffer dict (as `parameter_table`)."""
    return module._buffers


def child_table(module) -> dict:
    """`nn.Module._modules`: the module's own children by name."""
    return module._modules


def share_state(wrapper, module) -> None:
    """Give `wrapper` `module`'s own parameter, buffer and child dicts (the same
    dict objects): the backend's wrapper then has the graph module's state dict,
    parameters, submodules and their names, and `.to()` converts them in place."""
    wrapper.__dict__.update(_parameters=module._parameters, _buffers=module._buffers,
                            _modules=module._modules)


def version(t: torch.Tensor) -> tuple[int, int]:
    """What says a tensor was written since: `_version`, the counter every in-place
    write bumps (`load_state_dict`, an optimizer's step), and its address, which
    `p.data = other` changes while it keeps the counter. A prepacked weight is valid
    only while both are unchanged; whoever keeps one also keeps the storage it was
    made from alive, so no new storage can take that address. Writes through
    `p.data` (`p.data.copy_(w)`) change neither: torch's `.data` is by design
    invisible to autograd's bookkeeping, and so to this check. A plan's call spells
    it out, `(counter(t), t.data_ptr())`: a call of this function is one more
    Python frame a node (chapter 7)."""
    return counter(t), t.data_ptr()


# The version counter alone, as one C-level getter: a plan's call reads it in no
# frame of ours (`version` spelled out).
counter = operator.attrgetter("_version")


# nn.Module's per-module hook dicts and `gm.compile()`'s compiled call, as one
# C-level getter: `any(module_hooks(m))` is true where nn.Module's call would do
# more than call forward. The wrapper's entry asks it (and GLOBAL_HOOKS, the dicts
# `register_module_forward_hook` and friends fill) on every call, in no frame of ours;
# its generated entry reads the attributes by name (`MODULE_HOOKS`) in an `or` chain.
MODULE_HOOKS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks",
                "_backward_hooks", "_compiled_call_impl")
module_hooks = operator.attrgetter(*MODULE_HOOKS)


def _global_hooks() -> tuple:
    from torch.nn.modules import module as m

    return (m._global_forward_pre_hooks, m._global_forward_hooks,
            m._global_backward_pre_hooks, m._global_backward_hooks)


GLOBAL_HOOKS = _global_hooks()  # filled in place by torch, never rebound


def has_hooks(module) -> bool:
    """Whether a call of `module` would run a hook (its own forward hooks or
    pre-hooks, or global ones): then the wrapper calls the module, not its forward
    (`_forward_hooks`, `_forward_pre_hooks`, `module._global_forward_hooks`, ...)."""
    from torch.nn.modules import module as m

    return bool(module._forward_hooks or module._forward_pre_hooks
                or m._global_forward_hooks or m._global_forward_pre_hooks)


# The private attributes the accessors above read; nowhere else in graphopt.
PRIVATE_ATTRIBUTES = ("_schema", "_codegen", "_graph", "_parameters", "_buffers",
                      "_modules", "_version", "_forward_hooks", "_forward_pre_hooks",
                      "_global_forward_hooks", "_global_forward_pre_hooks",
                      "_global_backward_hooks", "_global_backward_pre_hooks",
                      "_backward_pre_hooks", "_backward_hooks", "_compiled_call_impl",
                      "_wrapped_call", "_op", "_cdata")


def tensor_guards(records: list):
    """One C++ check of many tensors against recorded (shape, stride, dtype,
    device), as torch.compile's guards check a frame's inputs: dynamo's
    `TensorGuards(...).check`, or None where this torch has none or the device
    cannot be made here (the wrapper's guard then checks in Python).

    It also compares dispatch keys (a tensor made under inference_mode differs) and
    requires_grad (the example's is False), so it accepts fewer tensors than the
    Python checks; the guard falls back to them. Never call its `check_verbose`:
    without tensor names it crashes the process.
    """
    try:
        from torch._C._dynamo.guards import TensorGuards
        examples = [torch.empty(0, dtype=dtype, device=device)
                    for _, _, dtype, device in records]
        return TensorGuards(*examples,
                            dynamic_dims_sizes=[list(r[0]) for r in records],
                            dynamic_dims_strides=[list(r[1]) for r in records]).check
    except (ImportError, AttributeError, RuntimeError, TypeError):
        return None  # sizes the C++ check cannot take (symbolic), another torch
