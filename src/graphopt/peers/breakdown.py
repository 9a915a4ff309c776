"""Where the time goes, category by category, in graphopt and ONNX Runtime (ch. 7).

Chapter 7 measures that ONNX Runtime runs the real models faster than graphopt; this
module says WHERE the difference lies. Both sides are cut into the same CATEGORIES
(conv, linear/GEMM, attention, norm/softmax, pool/reduce, elementwise, data movement,
other), plus `overhead`: the whole call's time minus the sum of its parts.

graphopt -- `time_nodes(gm, *x)` runs the optimised GraphModule through an fx
Interpreter that reads `time.perf_counter()` around each op node and nothing else.
torch.profiler is NOT used: the numba kernels of graphopt's fused nodes are not torch
ops, so it would miss them, while a clock around the node sees every kernel the node
runs (library or generated) plus that node's own Python and dispatch cost. Bias: the
interpreter's bookkeeping between nodes (fetching arguments, freeing values) falls
outside every part, and the timer itself adds under a microsecond per node. What
the plain `gm(*x)` call spends beyond the parts (its generated forward's glue, and
noise) is `overhead`; a negative overhead means the interpreter's run was slower
than the plain call. The benchmark prints both totals to show the size of the bias.

ONNX Runtime -- `profiled_session` turns on `SessionOptions.enable_profiling`;
`ort_runs(path)` parses the JSON trace it writes: one `Run` per `model_run` event,
holding the `*_kernel_time` Node events inside it (dur in µs), by `args.op_name`.
Bias: the profiler timestamps every node, so a profiled run is slower than a plain
one; kernel times themselves are what the trace says. The benchmark therefore takes
ORT's total from an UNPROFILED session and calls the rest `overhead` (executor,
allocation, the profiler's per-node cost is not in it).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.fx import GraphModule, Interpreter, Node

from ..ops import OpKind, kind, op_name

CATEGORIES = ("conv", "linear/GEMM", "attention", "norm/softmax", "pool/reduce",
              "elementwise", "data movement", "other")
OVERHEAD = "overhead"

# graphopt's fused modules and torch's modules, by class name (chapters 4, 6, 7)
_MODULES = {
    "ConvReLU": "conv", "ConvAddReLU": "conv", "PackedConv": "conv", "Conv1d": "conv",
    "Conv2d": "conv", "Conv3d": "conv",
    "LinearReLU": "linear/GEMM", "PackedLinear": "linear/GEMM", "Linear": "linear/GEMM",
    "MatMulAddReLU": "linear/GEMM", "MultiheadAttention": "attention",
    "AddLayerNorm": "norm/softmax", "LayerNorm": "norm/softmax", "GroupNorm":
    "norm/softmax", "Softmax": "norm/softmax", "LogSoftmax": "norm/softmax",
    "FusedElementwise": "elementwise", "ToLayout": "data movement",
    "Flatten": "data movement", "Unflatten": "data movement",
}

# torch / aten functions with no fitting OpKind, by base name
_FUNCTIONS = {
    "conv1d": "conv", "conv2d": "conv", "conv3d": "conv", "convolution": "conv",
    "_convolution_pointwise": "conv",
    "scaled_dot_product_attention": "attention",
    "_scaled_dot_product_flash_attention_for_cpu": "attention",
    "softmax": "norm/softmax", "_softmax": "norm/softmax", "log_softmax":
    "norm/softmax", "layer_norm": "norm/softmax", "native_layer_norm": "norm/softmax",
    "group_norm": "norm/softmax", "rms_norm": "norm/softmax",
    "embedding": "data movement", "index": "data movement", "gather": "data movement",
    "to": "data movement", "contiguous": "data movement", "clone": "data movement",
    "where": "elementwise", "dropout": "elementwise", "__and__": "elementwise",
    "__or__": "elementwise",
}

_BY_KIND = {OpKind.COMPUTE: "linear/GEMM", OpKind.REDUCTION: "pool/reduce",
            OpKind.ELEMENTWISE: "elementwise", OpKind.LAYOUT: "data movement",
            OpKind.OTHER: "other"}

# ONNX Runtime op types (`args.op_name` in its profile; contrib ops included)
_ORT = {
    "conv": ("Conv", "FusedConv", "ConvTranspose", "QLinearConv", "ConvInteger"),
    "linear/GEMM": ("Gemm", "MatMul", "FusedMatMul", "FusedGemm", "MatMulInteger",
                    "QGemm", "MatMulNBits", "QLinearMatMul"),
    "attention": ("Attention", "MultiHeadAttention", "GroupQueryAttention"),
    "norm/softmax": ("SkipLayerNormalization", "LayerNormalization", "Softmax",
                     "LogSoftmax", "SimplifiedLayerNormalization",
                     "SkipSimplifiedLayerNormalization", "EmbedLayerNormalization",
                     "GroupNormalization", "InstanceNormalization"),
    "pool/reduce": ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
                    "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ArgMax"),
    "elementwise": ("Add", "Sub", "Mul", "Div", "Relu", "Clip", "HardSigmoid",
                    "HardSwish", "Sigmoid", "Tanh", "Gelu", "BiasGelu", "FastGelu",
                    "Erf", "Where", "Pow", "Sqrt", "Exp", "Neg", "Not", "And", "Or",
                    "Equal", "Less", "Greater", "Cast", "BatchNormalization",
                    "LeakyRelu", "QuickGelu", "BiasAdd", "Max", "Min", "Abs"),
    "data movement": ("ReorderInput", "ReorderOutput", "Transpose", "Reshape",
                      "Flatten", "Concat", "Slice", "Gather", "Squeeze", "Unsqueeze",
                      "Expand", "Split", "Identity", "Tile", "Pad"),
}
_ORT_CATEGORY = {op: cat for cat, ops in _ORT.items() for op in ops}


def node_category(node: Node) -> str:
    """The category of one op node of a (graphopt-optimised) GraphModule."""
    if node.op == "call_module":
        module = node.graph.owning_module.get_submodule(str(node.target))
        name = type(module).__name__
        if name in _MODULES:
            return _MODULES[name]
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            return "elementwise"
        if isinstance(module, (nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d)):
            return "pool/reduce"
    name = op_name(node)
    if name in _FUNCTIONS or name.rstrip("_") in _FUNCTIONS:
        return _FUNCTIONS.get(name, _FUNCTIONS.get(name.rstrip("_")))
    if name.startswith("_assert") or name == "ShapeGuard":
        return "other"  # shape and metadata checks compute nothing
    return _BY_KIND[kind(node)]


def ort_category(op_type: str) -> str:
    """The category of an ONNX Runtime op type ('FusedConv' -> 'conv')."""
    return _ORT_CATEGORY.get(op_type.rsplit(".", 1)[-1], "other")


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


def node_labels(gm: GraphModule) -> dict[Node, tuple[str, str]]:
    """(category, op name) of every op node of `gm` (not inputs, constants, output)."""
    return {n: (node_category(n), op_name(n)) for n in gm.graph.nodes
            if n.op in ("call_function", "call_method", "call_module")}


def time_nodes(gm: GraphModule, *inputs, labels: dict | None = None) -> Run:
    """One call of `gm` through the node timer (`total_s`: the interpreter's run)."""
    run = Run(0.0)
    timer = _NodeTimer(gm, run, labels if labels is not None else node_labels(gm))
    start = time.perf_counter()
    with torch.no_grad():
        timer.run(*inputs)
    run.total_s = time.perf_counter() - start
    return run


def profiled_session(path: str, threads: int, level: str, prefix: str):
    """An ONNX Runtime session like `ort_session`'s, with its profiler on.

    The trace goes to `prefix`_<date>.json; `session.end_profiling()` returns its path.
    """
    import onnxruntime as ort

    opts = ort.SessionOptions()
    name = ("ORT_DISABLE_ALL" if level == "disable_all"
            else f"ORT_ENABLE_{level.upper()}")
    opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, name)
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
    opts.enable_profiling = True
    opts.profile_file_prefix = prefix
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def ort_runs(trace) -> list[Run]:
    """One Run per `model_run` in an ONNX Runtime profile (a path, or its events).

    Only events named `*_kernel_time` count (not the fences around them); each is put
    in the model_run whose time span holds it.
    """
    if isinstance(trace, (str, os.PathLike)):
        with open(trace) as f:
            trace = json.load(f)
    runs = sorted((e for e in trace if e.get("name") == "model_run"),
                  key=lambda e: e["ts"])
    kernels = sorted((e for e in trace if e.get("cat") == "Node"
                      and e.get("name", "").endswith("_kernel_time")),
                     key=lambda e: e["ts"])
    out, k = [], 0
    for r in runs:
        run, end = Run(r["dur"] * 1e-6), r["ts"] + r["dur"]
        while k < len(kernels) and kernels[k]["ts"] < r["ts"]:
            k += 1  # a kernel outside every model_run (none are expected)
        while k < len(kernels) and kernels[k]["ts"] <= end:
            op = kernels[k].get("args", {}).get("op_name", "?")
            run.add(ort_category(op), op, kernels[k]["dur"] * 1e-6)
            k += 1
        out.append(run)
    return out


def mean_run(runs: list[Run]) -> Run:
    """Per category, op and total, the mean over `runs` (one round's calls)."""
    out = Run(sum(r.total_s for r in runs) / len(runs))
    for r in runs:
        for c, s in r.categories.items():
            out.categories[c] = out.categories.get(c, 0.0) + s / len(runs)
        for o, s in r.ops.items():
            out.ops[o] = out.ops.get(o, 0.0) + s / len(runs)
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
