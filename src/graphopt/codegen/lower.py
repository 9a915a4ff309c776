"""Lowering (下降): every fused group becomes one generated kernel (chapter 6).

`fuse_elementwise` (chapter 4) leaves each group as a `FusedElementwise` node that
runs its members by reference. This stage replaces each by a `GeneratedKernel`
(`codegen.fused`): the same group, whose call runs ONE kernel generated for it
(numba on a CPU, Triton on a GPU), compiled at its first call. The graph's shape
does not change; what each fused node runs does, and the interpreter counts it.

The kernel policy (`graphopt.policy`, fixed rules on shapes by default) is stored
on each kernel node. Where the recorded sizes already show that its kernel would
not pay (a short group on few elements, scalar maths on many), the stage decides
here: the node's `eager_why` says why, it runs the group's own ops at the cost of
those ops, and the stage's `notes` say so. Otherwise the node decides per call
(strides, autograd, sizes not known until then).
"""

from __future__ import annotations

import math

import torch
from torch.fx import GraphModule, Node

from ..i18n import note
from ..ops import OpKind, shape
from ..passes.fuse_elementwise import FusedElementwise
from ..passes.result import PassResult, finish, working_copy
from ..policy import resolve
from .fused import PLANS, GeneratedKernel, min_numel


def lower(gm: GraphModule, inplace: bool = False, policy=None) -> PassResult:
    """Replace every fused group's node module by its generated kernel (chapter 6).

    `policy` (a `graphopt.policy.Policy` or "fixed"; None: the default) is kept on
    each kernel; the first line of `notes` states it.
    """
    gm = working_copy(gm, inplace)
    policy = resolve(policy)
    lowered, notes = [], []
    for node in gm.graph.nodes:
        group = gm.get_submodule(str(node.target)) if node.op == "call_module" else None
        if type(group) is not FusedElementwise:
            continue
        kernel = GeneratedKernel(group, policy)
        rows = group.graphopt_kind is OpKind.REDUCTION  # holds a row reduction
        kernel.eager_why = _size_rules(node, group.ops, rows, policy)
        gm.add_submodule(str(node.target), kernel)
        node.meta["graphopt_plan"] = PLANS  # the interpreter counts what it ran
        lowered.append(node)
        notes += _eager_note(node, rows, policy)
        if kernel.eager_why:
            notes.append(note("lower: {node} runs its eager ops: {reason}",
                              node=node.name, reason=kernel.eager_why))
    res = finish(gm, rewritten=lowered)
    if lowered:
        res.notes.append(note("lower: {n} fused group(s) become generated kernels "
                              "under {policy}", n=len(lowered),
                              policy=policy.describe()))
    res.notes.extend(notes)
    return res


def _eager_note(node: Node, rows: bool, policy) -> list[str]:
    """A note where the recorded shapes and strides already show that `policy`
    runs the group's eager ops on the CPU: an input whose rows are not contiguous
    (a transposed or permuted view). Slices and broadcasts run the kernel."""
    if policy.strided_kernels or rows:
        return []
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.device.type != "cpu":
        return []
    if shape(node) is None:
        return []
    for a in node.args:
        if not isinstance(a, Node) or shape(a) is None or math.prod(shape(a)) <= 1:
            continue
        if _inner_step(a, val) not in (0, 1, None):
            return [note("lower: {node} runs its eager ops: input {input} is a "
                         "transposed view ({policy} policy: a loop with a run-time "
                         "stride does not vectorise)", node=node.name, input=a.name,
                         policy=policy.name)]
    return []


def _size_rules(node: Node, ops, rows: bool, policy) -> str:
    """Why `policy` runs the group's eager ops at the recorded output size, or "":
    below its `kernel_min_numel`, or where `Policy.group_eager` says so (a short
    group whose kernel would not pay for its call, or tanh, log, sin or cos the
    kernel would compute one element at a time), as each call would decide."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return ""
    try:
        numel = int(val.numel())
    except Exception:  # noqa: BLE001 - a symbolic size: decided per call instead
        return ""
    if numel < min_numel(policy):
        return note("{numel} elements, below the kernels' {min_numel}", numel=numel,
                    min_numel=min_numel(policy))
    # the tensors a call passes (a weight read by get_attr may have no recorded value)
    operands = sum(isinstance(a, Node) and not isinstance(a.meta.get("val"), _SCALARS)
                   for a in node.args)
    return policy.group_eager(ops, numel, val.device.type, operands, rows)


_SCALARS = (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)


def _inner_step(n: Node, out: torch.Tensor):
    """The recorded value's step along the output's last non-1 dimension, as the
    kernel would walk it (0 when broadcast along it); None when unknown."""
    val = n.meta.get("val")
    try:
        dims = [d for d, size in enumerate(out.shape) if size != 1]
        if not isinstance(val, torch.Tensor) or not dims:
            return None
        pad = out.dim() - val.dim()
        d = dims[-1] - pad
        return 0 if d < 0 or val.shape[d] == 1 else int(val.stride()[d])
    except Exception:  # noqa: BLE001 - symbolic strides: nothing to predict
        return None


