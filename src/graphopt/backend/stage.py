"""The backend stage: library kernels bound, weights prepacked, the wrapper built.

Introduced in chapter 7. The graph passes (chapters 3-5) decide WHAT is fused; each
fused pattern module runs its ops by reference until this stage says HOW:

1. a lone conv or linear becomes a `PackedConv` / `PackedLinear` (`single_ops`);
2. each fused pattern module gets its kernel for the recorded dtype and device and
   the libraries installed (oneDNN with a post-op, MKL's GEMM, a numba row kernel;
   `plan`), and its weight is prepacked once (`prepack`), where the kernel
   policy (`graphopt.policy`, fixed rules on shapes by default) decides; the node
   gets ONE `Plan` (its guard, its call, its kernel count), on the module and in
   `node.meta["graphopt_plan"]`, which the module's forward, the wrapper and the
   interpreter all read;
3. the result is wrapped (`wrapper.Wrapper`): one straight-line function behind one
   entry guard that calls each plan directly.

Every choice other than the one fused library kernel is a line of `notes`. The
stage returns its own copy of the graph; the module it was given is unchanged.
"""

from __future__ import annotations

import math

import torch
from torch.fx import GraphModule, Node

from ..codegen.fused import GeneratedKernel
from ..i18n import note
from ..ops import dtype, shape
from ..passes.convert_layout import ToLayout
from ..passes.fuse_elementwise import FusedElementwise
from ..passes.fuse_patterns import rewrite_matches
from ..passes.fused_modules import (
    AddLayerNorm,
    MatMulAddReLU,
    SqueezeExcite,
)
from ..passes.legality import is_training
from ..passes.matching import value
from ..passes.prepacked import FusedPattern
from ..passes.result import PassResult, working_copy
from ..policy import resolve
from ..torch_internals import OpOverload
from . import onednn, onednn_reorder, wrapper
from .plan import plan_for
from .prepack import prepack
from .single_ops import SINGLE_OPS


def bind_backend(gm: GraphModule, inplace: bool = False, policy=None) -> PassResult:
    """Bind a library kernel to every fused pattern module, prepack its weight and
    build the wrapper (chapter 7). `policy`: the kernel policy, a
    `graphopt.policy.Policy` or "fixed" (None: the default).
    """
    gm = working_copy(gm, inplace)
    policy = resolve(policy)
    res = rewrite_matches(gm, SINGLE_OPS)
    if is_training(gm):  # the bound kernels have no backward: say what runs instead
        res.notes.append(note("backend: training mode: while autograd records, each "
                              "bound conv and linear runs its eager ops (oneDNN's "
                              "and MKL's kernels have no backward)"))
    for node in list(gm.graph.nodes):
        module = gm.get_submodule(str(node.target)) if node.op == "call_module" \
            else None
        if isinstance(module, FusedPattern):
            res.notes += bind(gm, node, module, policy)
            res.rewritten.append(node.name)
        elif isinstance(module, ToLayout) and onednn_reorder.binds(node):
            module.copy = onednn_reorder.copy  # oneDNN's reorder, made once
    small = nothing_to_bind(res.module)
    res.notes += [small] if small is not None else []
    wrapped = wrapper.install(res.module)
    res.notes.append(note("backend: the wrapper's fast path (one guard, direct "
                          "kernel calls)") if wrapped is not None else
                     note("backend: no fast path for this graph's inputs; fx's "
                          "forward runs it"))
    res.module = wrapped if wrapped is not None else res.module
    return res


# At most this many ops with nothing bound: the fast path's entry and guard (one frame,
# one C++ check of every tensor) then cost about what they save against eager (its
# two nn.Module frames), so the fast path can tie eager, not beat it. A rule on the
# graph, not a timing (benchmarks/slower_than_eager.py).
SMALL_OPS = 4


def nothing_to_bind(gm: GraphModule):
    """A note where the backend has nothing to win on `gm`, else None (chapter 7).

    Nothing to win: no library kernel bound (no fused pattern, no packed conv or
    linear), no group that `lower` made a generated kernel, only aten ops (no
    `torch.cond`, whose eager dispatch the fast path does save), at most SMALL_OPS.
    Every op then runs as eager runs it, and all the fast path can save is Python's
    call overhead, which its entry guard spends again. So the wrapper stays (fx's
    forward, the other path, costs 5-10x more here: pytree flattening, export's
    guard, a frame per op) and the note says why it cannot beat eager.
    """
    ops, numel = 0, 0
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method", "call_module") or \
                not node.users:  # export's guard: checked, not computed
            continue
        module = gm.get_submodule(str(node.target)) if node.op == "call_module" \
            else None
        if isinstance(module, FusedPattern) or \
                (isinstance(module, GeneratedKernel) and not module.eager_why) or \
                (module is None and not isinstance(node.target, OpOverload)):
            return None  # a kernel bound, or an op eager runs otherwise (torch.cond)
        ops += len(module.ops) if isinstance(module, FusedElementwise) else 1
        numel = max(numel, math.prod(shape(node) or (0,)))
    if ops > SMALL_OPS:
        return None
    return note("backend: nothing to bind: {ops} op(s) on at most {numel} elements, "
                "each run as eager runs it (no library or generated kernel): against "
                "eager the fast path saves only Python's call overhead, and its entry "
                "guard spends as much again", ops=ops, numel=numel)


def bind(gm: GraphModule, node: Node, module: FusedPattern, policy) -> list[str]:
    """Pick `module`'s kernel for its recorded dtype, prepack its weight and bind
    the kernel's call (ch. 7). Returns the notes: why it runs other than one kernel.
    """
    name = f"{node.name} ({type(module).__name__})"
    if isinstance(module, MatMulAddReLU):
        module.kernel = "eager"
        return [note("backend: {name} runs addmm then relu, 2 kernels: no CPU "
                     "library fuses an activation into a product of two activations",
                     name=name)]
    notes = _choose(gm, node, module, name, policy)
    module.plan = node.meta["graphopt_plan"] = plan_for(module, _device(gm, node))
    return notes


def _device(gm: GraphModule, node: Node) -> str:
    """The device type the node's inputs were recorded on (its first input's, else
    its weight's): the plan is made for it."""
    for a in node.args[:2]:
        if not isinstance(a, Node):
            continue
        t = a.meta.get("val")
        t = value(gm, a) if t is None and a.op == "get_attr" else t
        if isinstance(t, torch.Tensor):
            return t.device.type
    return "cpu"


def _choose(gm: GraphModule, node: Node, module: FusedPattern, name: str,
            policy) -> list[str]:
    """The module's kernel for its recorded dtype, its weight prepacked (ch. 7)."""
    kind = "numba" if isinstance(module, (AddLayerNorm, SqueezeExcite)) \
        else "onednn"
    module.kernel = kind
    if isinstance(module, AddLayerNorm):  # the row kernel splits where the policy says
        module.row_parallel_numel = policy.row_parallel_numel
    dtypes = {dtype(a) for a in node.args if isinstance(a, Node) and dtype(a)}
    problem = None if dtypes <= {torch.float32} else \
        note("dtype {dtypes}, the {kind} kernel takes float32", kind=kind,
             dtypes=", ".join(sorted(str(d) for d in dtypes)))
    if kind == "onednn" and not onednn.available():
        problem = note("this torch build has no oneDNN")
    if problem is not None:
        module.kernel, module.why_eager = "eager", problem
        return [note("backend: {name} runs the eager ops: {why}", name=name,
                     why=problem)]
    x, w = node.args[0], node.args[1]
    tensor = value(gm, w) if isinstance(w, Node) and w.op == "get_attr" else None
    if kind == "onednn" and isinstance(tensor, torch.Tensor) and shape(x):
        prepack(module, tensor, shape(x), policy, _known_flops(module, node))
    return _choice_note(module, name)


def _known_flops(module: FusedPattern, node: Node) -> int | None:
    """The pattern's FLOPs for the policy's small-work rule, or None where a size is
    unknown or symbolic (the rule then stays out of the choice)."""
    flops = module.graphopt_flops(node)
    return flops if type(flops) is int and flops > 0 else None


def _choice_note(module, name: str) -> list[str]:
    """A note where prepacking chose other than the one fused library kernel: eager
    conv2d on a 1x1 map, MKL's GEMM (then the activation), or oneDNN where MKL could
    have run it (measured faster, or MKL could not pack)."""
    act = getattr(getattr(module, "act", None), "attr", "none")
    if module.kernel == "eager" and module.why_eager:
        return [note("backend: {name} runs eager: {why}", name=name,
                     why=module.why_eager)]
    if module.kernel == "mkl" and act != "none":
        return [note("backend: {name} runs 2 kernels: {why}", name=name,
                     why=module.why)]
    if module.kernel == "mkl":
        return [note("backend: {name} runs 1 kernel: {why}", name=name,
                     why=module.why)]
    if getattr(module, "why", "") and module.kernel == "onednn":  # measured: oneDNN
        return [note("backend: {name} runs oneDNN: {why}", name=name,
                     why=module.why)]
    return []
