"""A fused graph node calling its generated kernel (chapter 6).

`GeneratedKernel` is the node module the `lower` stage puts in place of each fused
group. A call runs the node's plan for its inputs' *signature* (`plan_of`): made at
the first call with that signature (launch.py), it holds everything decided then:
whether to run the kernel at all, which loop, which output buffers. The reference
executor (`module.gm`, the group's ops run eagerly) is the plan, silently, when
`module.backend` is "reference", when an input needs autograd (kernels have no
backward), or in "auto" mode where the kernel policy (`graphopt.policy`, stored on
the module by `lower`) says the kernel would not pay: below its
`kernel_min_numel()`, or on CPU inputs read with a run-time stride (a transposed
view: that loop does not vectorise; slices and broadcasts keep the kernel). Those
rules read shapes and strides only, so the same call runs the same way on every
machine. With a KernelFallbackWarning when the group holds an op without a template.

What a call ran is read off the same plan: `plan_kind(module, inputs)` ("numba",
"triton" or "reference") and `kernels_for(module, inputs)`, the count the
interpreter reads through `node.meta["graphopt_plan"]` (`PLANS`, written by `lower`).
`direct_call(module, node)` is the wrapper's call of the same plan (chapter 7):
behind its entry guard the signature cannot change, so the plan is bound once.
"""

from __future__ import annotations

import math
import warnings
import weakref
from typing import Callable

import torch
from torch.fx import Node

from ..eager_ops import eager_ops
from ..errors import UnsupportedOpError
from ..i18n import _
from ..ops import OpKind
from ..passes.fuse_elementwise import FusedElementwise
from ..policy import DEFAULT, resolve
from .kernel import KernelFallbackWarning, compile_group
from .launch import LaunchPlan, Plans, signature

_STATE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class GeneratedKernel(FusedElementwise):
    """A fused group that runs as ONE generated kernel (chapter 6).

    Made by the `lower` stage from a `FusedElementwise`: the same group (`.gm`,
    `.ops`, member modules), whose call runs its plan (`plan_of`). `policy` is the
    kernel policy the stage applied (`graphopt.policy`); `backend` is "auto" (numba
    on a CPU, Triton on a GPU, the policy's rules), "numba", "triton" or "reference"
    (the group's eager ops: a reader may switch it to compare).
    """

    backend = "auto"
    # Why "auto" runs the group's own ops at the sizes `lower` recorded (its note),
    # or "": set by `lower` where the policy's size rules already decide, so that
    # such a node costs what its ops cost, with no per-call plan lookup.
    eager_why = ""

    def __init__(self, group: FusedElementwise, policy=None):
        super().__init__(group.graph, group.ops, dict(group.parts.named_children()))
        self.graphopt_kind = group.graphopt_kind
        self.policy = policy

    def forward(self, *inputs):
        if self.eager_why and self.backend == "auto":
            return super().forward(*inputs)  # decided by `lower`: no plan to look up
        return plan_of(self, inputs).run(inputs, None)


class _State:
    """What one fused node remembers: its backend, kernel and one plan per signature."""

    def __init__(self, module):
        self.backend = getattr(module, "backend", "auto")
        self.kernel = None  # compiled on the first call that needs it
        # whether to run the kernel for each signature (`Plans`): the policy's rules
        # on top of the Kernel's own cache (how it runs), whose plan it then holds
        self.plans = Plans()


def plan_of(module, inputs) -> LaunchPlan:
    """The plan a call of `module` on `inputs` runs, under the current autograd mode
    (chapter 6): `plan.run(inputs, out)` runs it, `plan.kind` names it ("numba",
    "triton", "reference"), `plan.kernels` counts it. Made at the first call with
    these inputs' signature (or here, as that call would make it), then looked up."""
    state = _STATE.get(module)
    if state is None or state.backend != getattr(module, "backend", "auto"):
        state = _STATE[module] = _State(module)
    sig = signature(inputs)
    plan = state.plans.fresh().get(sig)
    if plan is None:
        plan = state.plans[sig] = _plan(module, state, inputs)
    return plan


def plan_kind(module, inputs) -> str:
    """What a call of `module` on `inputs` runs (chapter 6): "reference" (the
    group's own ops) or the generated kernel's backend ("numba", "triton")."""
    if module.eager_why and module.backend == "auto":
        return "reference"  # `forward` runs the ops; no plan is made
    return plan_of(module, inputs).kind


def kernels_for(module, inputs) -> int | None:
    """Kernels torch's dispatcher cannot see that a call on `inputs` launches
    (chapter 6): 1, the generated kernel; None where the group's own ops run (the
    interpreter counts those as they dispatch)."""
    if module.eager_why and module.backend == "auto":
        return None  # `forward` runs the ops; no plan is made
    return plan_of(module, inputs).kernels


class LoweredPlans:
    """A lowered node's plans as the interpreter reads them (chapter 6): `lower`
    writes `PLANS` into each kernel node's `node.meta["graphopt_plan"]`; the plan
    for each call is the node's own, per signature (`plan_of`)."""

    def hidden_kernels(self, module, *inputs) -> int | None:
        return kernels_for(module, inputs)

    def __reduce__(self):
        return "PLANS"  # one object: a copy or a pickle reads it back as PLANS


PLANS = LoweredPlans()


def direct_call(module, node: Node) -> Callable:
    """The node's call as the wrapper makes it: its plan bound once (chapter 7).

    Behind the wrapper's entry guard each input of this node has, call after call,
    the shape, strides, dtype and device it had at the first call, and autograd
    records nothing: `plan_of`'s signature and lookup (some 20 Python frames on a
    tiny group, more than its kernel takes) would find the same plan every time. So
    the first call binds the plan `plan_of` gives, and later calls run it. Checked
    per call is only what the guard does not fix: the module's `backend` (a reader
    may switch it), inference mode (a pooled output made inside it is an inference
    tensor) and the weights the node reads (`.to()` changes their dtype behind the
    guard). Where one differs, the plan is bound again.
    """
    weights = tuple(i for i, a in enumerate(node.args)
                    if isinstance(a, Node) and a.op == "get_attr")
    bound = [_UNBOUND, None, None, None]  # backend, inference mode, run, weights
    inference = torch.is_inference_mode_enabled

    def rebind(inputs):
        bound[:] = _bind(module, inputs, weights)
        return bound[2](inputs, None)

    def call(*inputs):
        backend, mode, run, _weights = bound
        if module.backend is backend and inference() is mode:
            return run(inputs, None)
        return rebind(inputs)

    def call_with_weights(*inputs):
        backend, mode, run, metas = bound
        if module.backend is backend and inference() is mode and all(
                _meta(inputs[i]) == m for i, m in metas):
            return run(inputs, None)
        return rebind(inputs)

    return call_with_weights if weights else call


_UNBOUND = object()  # no module's backend: the first call always binds


def _bind(module, inputs, weights):
    """What `direct_call` binds: the module's backend, the inference mode, the run
    of the plan for these inputs, and the weights' metadata."""
    return (module.backend, torch.is_inference_mode_enabled(),
            plan_of(module, inputs).run, tuple((i, _meta(inputs[i])) for i in weights))


def _meta(t):
    if isinstance(t, torch.Tensor):
        return (t.shape, t.stride(), t.dtype, t.device)
    return (type(t), t)


def _plan(module, state: _State, inputs):
    gm = module.gm
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    backend, policy = state.backend, _policy(module)
    if backend == "reference" or (backend == "auto" and module.eager_why) or \
            not tensors or (
            torch.is_grad_enabled() and any(t.requires_grad for t in tensors)):
        return _reference(gm)
    if backend == "auto":  # the policy's rules on sizes and ops
        numel = _numel(tensors)
        rows = module.graphopt_kind is OpKind.REDUCTION
        if numel < min_numel(policy) or policy.group_eager(
                module.ops, numel, tensors[0].device.type, len(tensors), rows):
            return _reference(gm)
    if state.kernel is None:
        state.kernel = _kernel_or_warn(module, backend, policy)
    if state.kernel is False:
        return _reference(gm)
    if backend == "auto" and not policy.strided_kernels and \
            _strided_on_cpu(state.kernel, tensors):
        return _reference(gm)
    return state.kernel.plan(inputs)


def _policy(module):
    """The policy `lower` stored on the node (the default on a node made by hand)."""
    return getattr(module, "policy", None) or DEFAULT


def _strided_on_cpu(kernel, tensors) -> bool:
    """An elementwise kernel on CPU inputs that would read an operand with a step
    known only at run time (a transposed or permuted view; `Layout.runtime_strides`):
    the rule that sends it to the eager ops. Slices and broadcasts keep the kernel."""
    from .layout import plan_layout
    from .reduce_program import is_row_program
    if tensors[0].device.type != "cpu" or is_row_program(kernel.program):
        return False
    try:
        layout = plan_layout(kernel.program, list(tensors) + kernel.program.constants)
    except Exception:  # noqa: BLE001 - shapes the kernel rejects: let it say why
        return False
    return layout.runtime_strides


def min_numel(policy=None) -> int:
    """The size below which "auto" runs the eager subgraph: `policy`'s (a Policy;
    None: the default one) `kernel_min_numel()` (chapter 6)."""
    return resolve(policy).kernel_min_numel()


def _reference(gm) -> LaunchPlan:
    """The group's own ops as a plan: straight through their C++ entries where the
    graph allows it (`eager_ops`), else fx's forward."""
    ops = eager_ops(gm)
    if ops is None:
        forward = gm.forward

        def run(inputs, out):
            return forward(*inputs)
    else:
        def run(inputs, out):
            return ops(inputs)
    return LaunchPlan("reference", run)


def _kernel_or_warn(module, backend, policy):
    try:
        return compile_group(module.gm, backend=backend, policy=policy)
    except UnsupportedOpError as e:
        if backend != "auto":
            raise
        warnings.warn(_("graphopt.codegen: fused group runs its reference executor: "
                        "{reason}").format(reason=e), KernelFallbackWarning,
                      stacklevel=4)
        return False


def kernel_of(module):
    """The Kernel a fused node compiled (None before its first kernel call) (ch. 6)."""
    state = _STATE.get(module)
    return state.kernel if state is not None and state.kernel else None


def _numel(tensors) -> int:
    try:
        return math.prod(torch.broadcast_shapes(*[t.shape for t in tensors]))
    except RuntimeError:  # shapes that do not broadcast: let the kernel say why
        return max(t.numel() for t in tensors)
