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

Still elsewhere: private *attributes* of torch objects, which the banned-api rule
cannot see: `OpOverload._schema` (an op's name and signature, read by ops.py and
the passes), and in codegen/wrapper.py, whose fast path must read them on every
call, `graph._codegen`, `nn.Module`'s hook dicts and `GraphModule._wrapped_call`.
"""

from __future__ import annotations

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

__all__ = [
    "HigherOrderOperator", "OpOverload", "PyTreeCodeGen", "TorchDispatchMode",
    "disable_current_modes", "dynamo_explain", "dynamo_reset", "fake_mode_of",
    "get_tracing_state", "has_mkl", "inductor_config", "new_fake_mode", "op_entry",
    "pair", "run_and_get_code", "storage_use_count", "tensor_metadata", "tree_flatten",
    "tree_flatten_spec", "tree_leaves", "tree_map", "tree_unflatten",
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
