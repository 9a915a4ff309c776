"""The op table: one row per elementwise op, a template per backend (chapter 6).

Each kernel generator turns one program statement (`program.Stmt`) into one line of
its own language by filling in the op's template from `OPS`. The table is data:
adding an op is adding a row, not writing a new code path.

The same op has several spellings in fx graphs (`operator.mul`, `torch.mul`, the
`.mul()` method, `aten.mul.Tensor`, `nn.ReLU`); `ALIASES` and `MODULES` map them to
one row (`lowering.canonical` reads them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn


@dataclass(frozen=True)
class OpSpec:
    """One elementwise op (ch. 6): its argument names, defaults and one template per
    backend.

    Templates use the argument names, e.g. "{x} + {y}". In numba templates the names
    ZERO, ONE, HALF, THREE and SIX are constants of the kernel's dtype (no float64
    promotion), and EXP and ERF are the kernel's exp and erf (`cpu.math_sources`).
    """

    args: tuple[str, ...]
    numba: str
    triton: str
    defaults: tuple[tuple[str, Any], ...] = ()


_SIGMOID_NB = "ONE / (ONE + EXP(-{x}))"
# Rows: canonical name -> templates. Comments say why a row is not the obvious one.
OPS: dict[str, OpSpec] = {
    "add": OpSpec(("x", "y"), "{x} + {y}", "{x} + {y}"),
    "sub": OpSpec(("x", "y"), "{x} - {y}", "{x} - {y}"),
    "rsub": OpSpec(("x", "y"), "{y} - {x}", "{y} - {x}"),  # aten: y - x
    "mul": OpSpec(("x", "y"), "{x} * {y}", "{x} * {y}"),
    "div": OpSpec(("x", "y"), "{x} / {y}", "{x} / {y}"),
    "neg": OpSpec(("x",), "-{x}", "-{x}"),
    "abs": OpSpec(("x",), "abs({x})", "tl.abs({x})"),
    "square": OpSpec(("x",), "{x} * {x}", "{x} * {x}"),
    "reciprocal": OpSpec(("x",), "ONE / {x}", "1.0 / {x}"),
    # Triton rows use tl.where: tl.maximum(nan, 0.0) is 0.0, torch.relu(nan) is nan
    # (a comparison with NaN is false, so the where keeps x); numba's max keeps NaN.
    "relu": OpSpec(("x",), "max({x}, ZERO)", "tl.where({x} < 0.0, 0.0, {x})"),
    "relu6": OpSpec(("x",), "min(max({x}, ZERO), SIX)",
                    "tl.where({x} < 0.0, 0.0, tl.where({x} > 6.0, 6.0, {x}))"),
    "leaky_relu": OpSpec(("x", "negative_slope"),
                         "{x} if {x} > ZERO else {x} * {negative_slope}",
                         "tl.where({x} > 0.0, {x}, {x} * {negative_slope})",
                         (("negative_slope", 0.01),)),
    "clamp": OpSpec(("x", "min", "max"), "min(max({x}, {min}), {max})",
                    "tl.where({x} < {min}, {min}, tl.where({x} > {max}, {max}, {x}))",
                    (("min", None), ("max", None))),  # None: lowering._one_sided
    "clamp_min": OpSpec(("x", "min"), "max({x}, {min})",
                        "tl.where({x} < {min}, {min}, {x})"),
    "clamp_max": OpSpec(("x", "max"), "min({x}, {max})",
                        "tl.where({x} > {max}, {max}, {x})"),
    "hardtanh": OpSpec(("x", "min_val", "max_val"),
                       "min(max({x}, {min_val}), {max_val})",
                       "tl.where({x} < {min_val}, {min_val}, "
                       "tl.where({x} > {max_val}, {max_val}, {x}))",
                       (("min_val", -1.0), ("max_val", 1.0))),
    # torch.maximum/minimum return NaN if either side is NaN (x + y is then NaN)
    # MobileNetV3's gates: relu6(x + 3) / 6, and x times it
    "hardsigmoid": OpSpec(("x",), "min(max({x} + THREE, ZERO), SIX) / SIX",
                          "tl.where({x} + 3.0 < 0.0, 0.0, tl.where({x} + 3.0 > 6.0, "
                          "6.0, {x} + 3.0)) / 6.0"),
    "hardswish": OpSpec(("x",), "{x} * min(max({x} + THREE, ZERO), SIX) / SIX",
                        "{x} * tl.where({x} + 3.0 < 0.0, 0.0, tl.where({x} + 3.0 > "
                        "6.0, 6.0, {x} + 3.0)) / 6.0"),
    "maximum": OpSpec(("x", "y"), "{x} + {y} if {x} != {x} or {y} != {y} else "
                      "max({x}, {y})",
                      "tl.where(({x} != {x}) | ({y} != {y}), {x} + {y}, "
                      "tl.maximum({x}, {y}))"),
    "minimum": OpSpec(("x", "y"), "{x} + {y} if {x} != {x} or {y} != {y} else "
                      "min({x}, {y})",
                      "tl.where(({x} != {x}) | ({y} != {y}), {x} + {y}, "
                      "tl.minimum({x}, {y}))"),
    # EXP: exp_numba.exp32 in float32 kernels (vectorises), math.exp in float64
    "exp": OpSpec(("x",), "EXP({x})", "tl.exp({x})"),
    "log": OpSpec(("x",), "math.log({x})", "tl.log({x})"),
    "sqrt": OpSpec(("x",), "math.sqrt({x})", "tl.sqrt({x})"),
    "rsqrt": OpSpec(("x",), "ONE / math.sqrt({x})", "tl.rsqrt({x})"),
    "sin": OpSpec(("x",), "math.sin({x})", "tl.sin({x})"),
    "cos": OpSpec(("x",), "math.cos({x})", "tl.cos({x})"),
    "sigmoid": OpSpec(("x",), _SIGMOID_NB, "tl.sigmoid({x})"),
    # Triton has no portable tanh outside libdevice: tanh(x) = 2 sigmoid(2x) - 1
    "tanh": OpSpec(("x",), "math.tanh({x})", "2.0 * tl.sigmoid(2.0 * {x}) - 1.0"),
    "silu": OpSpec(("x",), "{x} * " + _SIGMOID_NB, "{x} * tl.sigmoid({x})"),
    # exact GELU (approximate="none"): x * Phi(x) with Phi from erf (ERF: erf_numba's
    # vectorisable erf32 in float32 kernels, math.erf in float64)
    "gelu": OpSpec(("x",), "HALF * {x} * (ONE + ERF({x} * RSQRT2))",
                   "0.5 * {x} * (1.0 + tl.erf({x} * 0.7071067811865476))"),
    # erf on its own (a GELU written by hand: x/2 * (1 + erf(x/sqrt2))): the same ERF
    "erf": OpSpec(("x",), "ERF({x})", "tl.erf({x})"),
    "identity": OpSpec(("x",), "{x}", "{x}"),
}

# Other spellings of the same op, as ops.op_name reports them (aten names, torch
# functions, methods, lower-cased module classes).
ALIASES: dict[str, str] = {
    "multiply": "mul", "true_divide": "div", "divide": "div", "subtract": "sub",
    "negative": "neg", "absolute": "abs", "clip": "clamp", "positive": "identity",
    "clone": "identity", "contiguous": "identity", "alias": "identity",
    "detach": "identity", "dropout": "identity", "feature_dropout": "identity",
    "silu": "silu", "hardtanh": "hardtanh", "leakyrelu": "leaky_relu",
}

# nn.Module classes that may sit inside a group, and how to read their arguments.
MODULES: dict[type, tuple[str, Any]] = {
    nn.ReLU: ("relu", lambda m: {}), nn.ReLU6: ("relu6", lambda m: {}),
    nn.Sigmoid: ("sigmoid", lambda m: {}), nn.Tanh: ("tanh", lambda m: {}),
    nn.SiLU: ("silu", lambda m: {}), nn.Identity: ("identity", lambda m: {}),
    nn.Hardsigmoid: ("hardsigmoid", lambda m: {}),
    nn.Hardswish: ("hardswish", lambda m: {}),
    nn.LeakyReLU: ("leaky_relu", lambda m: {"negative_slope": m.negative_slope}),
    nn.Hardtanh: ("hardtanh", lambda m: {"min_val": m.min_val, "max_val": m.max_val}),
    nn.GELU: ("gelu", lambda m: {"approximate": m.approximate}),
    nn.Dropout: ("identity", lambda m: {"training": m.training}),
}

SUPPORTED_HINT = (
    "Supported elementwise ops: " + ", ".join(sorted(OPS)) + ". Leave this op out of "
    "the fused group (it then runs eagerly), or add a row to "
    "graphopt.codegen.op_table.OPS.")
