"""Where the time goes, category by category, in graphopt and ONNX Runtime (ch. 7).

Both sides are cut into the same CATEGORIES (conv, linear/GEMM, attention,
norm/softmax, pool/reduce, elementwise, data movement, other) plus `overhead`: the
plain call's time minus the sum of its parts. Convs are also named by kind
(`conv_kind`: depthwise, 1x1, kxk), read from the weight's shape.

graphopt -- `time_nodes` runs the GraphModule through an fx Interpreter with a clock
around each op node and nothing else; not torch.profiler, which cannot see the numba
kernels of graphopt's fused nodes. A node's time holds its kernels and its own Python
and dispatch cost; the interpreter's bookkeeping between nodes falls outside every
part. Bias, measured by benchmarks/gap.py: the sum of the parts came within 0-6 % of
the plain `gm(*x)` call, while the interpreter's whole run was 1.5-5 ms slower.

ONNX Runtime -- its own profiler, parsed into the same Runs (`ort_profile.py`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.fx import GraphModule, Interpreter, Node

from ..ops import OpKind, kind, op_name

CATEGORIES = ("conv", "linear/GEMM", "attention", "norm/softmax", "pool/reduce",
              "elementwise", "data movement", "other")
OVERHEAD = "overhead"

# graphopt's fused modules and torch's modules (by class name, chapters 4, 6, 7) and
# torch / aten functions (by base name) whose OpKind is not the category
_TORCH = {
    "conv": ("ConvReLU", "ConvAddReLU", "PackedConv", "Conv1d", "Conv2d", "Conv3d",
             "conv1d", "conv2d", "conv3d", "convolution", "_convolution_pointwise"),
    "linear/GEMM": ("LinearReLU", "PackedLinear", "Linear", "MatMulAddReLU"),
    "attention": ("MultiheadAttention", "scaled_dot_product_attention",
                  "_scaled_dot_product_flash_attention_for_cpu"),
    "norm/softmax": ("AddLayerNorm", "LayerNorm", "GroupNorm", "Softmax", "LogSoftmax",
                     "softmax", "_softmax", "log_softmax", "layer_norm",
                     "native_layer_norm", "group_norm", "rms_norm"),
    "elementwise": ("FusedElementwise", "where", "dropout", "__and__", "__or__"),
    "data movement": ("ToLayout", "Flatten", "Unflatten", "embedding", "index",
                      "gather", "to", "contiguous", "clone"),
}
_TORCH_CATEGORY = {op: cat for cat, ops in _TORCH.items() for op in ops}

_BY_KIND = {OpKind.COMPUTE: "linear/GEMM", OpKind.REDUCTION: "pool/reduce",
            OpKind.ELEMENTWISE: "elementwise", OpKind.LAYOUT: "data movement",
            OpKind.OTHER: "other"}

def node_category(node: Node) -> str:
    """The category of one op node of a (graphopt-optimised) GraphModule."""
    if node.op == "call_module":
        module = node.graph.owning_module.get_submodule(str(node.target))
        name = type(module).__name__
        if name in _TORCH_CATEGORY:
            return _TORCH_CATEGORY[name]
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            return "elementwise"
        if isinstance(module, (nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d)):
            return "pool/reduce"
    name = op_name(node)
    if name in _TORCH_CATEGORY or name.rstrip("_") in _TORCH_CATEGORY:
        return _TORCH_CATEGORY.get(name, _TORCH_CATEGORY.get(name.rstrip("_")))
    if name.startswith("_assert") or name == "ShapeGuard":
        return "other"  # shape and metadata checks compute nothing
    return _BY_KIND[kind(node)]


@dataclass
class Run:
    """One call: its whole time, and seconds per category and per op name inside it."""

    total_s: float
    categories: dict[str, float] = field(default_factory=dict)
    ops: dict[str, float] = field(default_factory=dict)

    @property
    def parts_s(self) -> float:
        return sum(self.categories.values())

    def add(self, category: str, op: str, seconds: float) -> None:
        self.categories[category] = self.categories.get(category, 0.0) + seconds
        self.ops[op] = self.ops.get(op, 0.0) + seconds


class _NodeTimer(Interpreter):
    """An fx Interpreter with a clock around each op node's call, nothing else."""

    def __init__(self, gm: GraphModule, run: Run, labels: dict):
        super().__init__(gm, garbage_collect_values=True)
        self.record, self.labels = run, labels

    def run_node(self, n: Node):
        if n not in self.labels:
            return super().run_node(n)
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        start = time.perf_counter()
        result = getattr(self, n.op)(n.target, args, kwargs)
        self.record.add(*self.labels[n], time.perf_counter() - start)
        return result


def conv_kind(weight_shape) -> str:
    """'depthwise', '1x1' or 'kxk' from a conv weight's (out, in/groups, kh, kw)."""
    shape = tuple(weight_shape)
    if len(shape) != 4:
        return "?"
    if shape[1] == 1 and shape[2] * shape[3] > 1:
        return "depthwise"
    return "1x1" if shape[2] == shape[3] == 1 else "kxk"


def _weight_shape(n: Node):
    """The shape of a conv node's weight (its second argument), if known."""
    w = n.args[1] if len(n.args) > 1 else None
    if not isinstance(w, Node):
        return ()
    if w.op == "get_attr":
        value = n.graph.owning_module
        for part in str(w.target).split("."):
            value = getattr(value, part)
        return tuple(value.shape) if isinstance(value, torch.Tensor) else ()
    val = w.meta.get("val")
    return tuple(val.shape) if isinstance(val, torch.Tensor) else ()


def node_labels(gm: GraphModule) -> dict[Node, tuple[str, str]]:
    """(category, op name) of every op node of `gm` (not inputs, constants, output);
    a conv's name says its kind: 'ConvReLU [depthwise]'."""
    labels = {}
    for n in gm.graph.nodes:
        if n.op in ("call_function", "call_method", "call_module"):
            cat, name = node_category(n), op_name(n)
            if cat == "conv":
                name = f"{name} [{conv_kind(_weight_shape(n))}]"
            labels[n] = (cat, name)
    return labels


def by_conv_kind(run: Run) -> dict[str, float]:
    """Seconds per conv kind: the ops named 'X [kind]' summed by kind."""
    out: dict[str, float] = {}
    for op, s in run.ops.items():
        if op.endswith("]") and " [" in op:
            kind_ = op.rsplit(" [", 1)[1][:-1]
            out[kind_] = out.get(kind_, 0.0) + s
    return out


def time_nodes(gm: GraphModule, *inputs, labels: dict | None = None) -> Run:
    """One call of `gm` through the node timer (`total_s`: the interpreter's run)."""
    run = Run(0.0)
    timer = _NodeTimer(gm, run, labels if labels is not None else node_labels(gm))
    start = time.perf_counter()
    with torch.no_grad():
        timer.run(*inputs)
    run.total_s = time.perf_counter() - start
    return run


def mean_run(runs: list[Run]) -> Run:
    """Per category, op and total, the mean over `runs` (one round's calls)."""
    out = Run(sum(r.total_s for r in runs) / len(runs))
    for r in runs:
        for mine, theirs in ((out.categories, r.categories), (out.ops, r.ops)):
            for k, v in theirs.items():
                mine[k] = mine.get(k, 0.0) + v / len(runs)
    return out


def central(values: list[float]) -> float:
    """The interquartile mean: the mean of the middle half (noise only adds time on a
    shared machine; the slowest quarter is load, the fastest quarter luck)."""
    ordered = sorted(values)
    cut = len(ordered) // 4
    middle = ordered[cut:len(ordered) - cut]
    return sum(middle) / len(middle)


def central_run(runs: list[Run], total_s: float | None = None) -> Run:
    """The mean Run over the middle half of `runs` ordered by their sum of parts.

    Unlike per-category medians, its categories add up: their sum is the central
    calls' mean sum of parts. `total_s` replaces the total (else the same calls').
    """
    ordered = sorted(runs, key=lambda r: r.parts_s)
    cut = len(ordered) // 4
    out = mean_run(ordered[cut:len(ordered) - cut])
    if total_s is not None:
        out.total_s = total_s
    return out


def with_overhead(run: Run) -> dict[str, float]:
    """Seconds per category, every category present, plus `overhead` = total - parts."""
    table = {c: run.categories.get(c, 0.0) for c in CATEGORIES}
    table[OVERHEAD] = run.total_s - run.parts_s
    return table


def gap_shares(ours: Run, peer: Run) -> dict[str, float]:
    """Each category's (ours - peer) as a share of the whole-call gap (sums to 1).

    A negative share is a category where graphopt is the faster one.
    """
    gap = ours.total_s - peer.total_s
    a, b = with_overhead(ours), with_overhead(peer)
    return {c: (a[c] - b[c]) / gap if gap else 0.0 for c in a}


def top_share(shares: dict[str, float]) -> tuple[str, float]:
    """The category holding the largest share of the gap."""
    return max(shares.items(), key=lambda kv: kv[1])


def aten_self_times(fn, *inputs, calls: int = 5) -> Run:
    """torch.profiler's self CPU time per torch op inside `fn(*inputs)`, per call.

    A second view of graphopt's side, one level down: which library call inside a
    fused node takes the time (MKL's GEMM or the GELU after it). It cannot see the
    numba kernels (their time is in no torch op) and the profiler adds a cost per op:
    `total_s` is the profiled call's wall time, to compare with the plain call's.
    """
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for _ in range(calls):
            fn(*inputs)
        total = (time.perf_counter() - start) / calls
    run = Run(total)
    for event in prof.key_averages():
        if event.self_cpu_time_total > 0:
            run.add("torch op", event.key, event.self_cpu_time_total * 1e-6 / calls)
    return run
