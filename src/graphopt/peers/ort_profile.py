"""ONNX Runtime's own profile, cut into breakdown's categories (chapter 7).

`profiled_session` turns on ORT's profiler; `ort_runs` parses the JSON trace: one
`breakdown.Run` per `model_run` event, holding the `*_kernel_time` Node events inside
it. Bias: profiling slows the kernels too; the kernel sum of a profiled run exceeded
the plain run by 0-41 % (most on MobileNet's many small kernels), so ORT's categories
are upper bounds and its `overhead` (plain run - kernels) comes out negative.
"""

from __future__ import annotations

import json
import os

from .breakdown import Run, conv_kind
from .ort import ort_session

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



def ort_category(op_type: str) -> str:
    """The category of an ONNX Runtime op type ('FusedConv' -> 'conv')."""
    return _ORT_CATEGORY.get(op_type.rsplit(".", 1)[-1], "other")


def profiled_session(path: str, threads: int, level: str, prefix: str,
                     spin: bool = False):
    """The InferenceSession of `ort_session`, with its profiler on.

    The trace goes to `prefix`_<date>.json; `session.end_profiling()` returns its path.
    """
    return ort_session(path, threads, level, spin=spin, profile_prefix=prefix).session


def _ort_label(args: dict) -> tuple[str, str]:
    """(category, op name) of one ORT kernel event; a conv's name says its kind,
    read from its weight's shape (the second input)."""
    op = args.get("op_name", "?")
    cat = ort_category(op)
    shapes = args.get("input_type_shape", [])
    if cat == "conv" and len(shapes) > 1:
        weight = next(iter(shapes[1].values()), ())
        op = f"{op} [{conv_kind(weight)}]"
    return cat, op


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
            run.add(*_ort_label(kernels[k].get("args", {})), kernels[k]["dur"] * 1e-6)
            k += 1
        out.append(run)
    return out
