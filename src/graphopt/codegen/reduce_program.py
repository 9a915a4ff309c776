"""What a row reduction becomes: its program statements (chapter 6).

Which reductions fuse is the rule in `reduce`. Under that rule one program per row
does everything: a pass over the row for each level of reductions (recomputing the
elementwise producers from the inputs instead of storing them), then a final pass
that writes the outputs. Two pass-merges keep the common norms at one reading pass
plus the write pass:

- softmax: online softmax (Milakov & Gimelshein, 2018). One pass keeps the running
  max m and the sum s of exp(x - m); when a larger x arrives, s is rescaled by
  exp(m_old - m_new). The write pass then computes exp(x - m) * (1 / s), one
  division per row.
- layer norm, variance: Welford's algorithm, merged per block with Chan's formula
  (the block's own mean and squared deviations, then one update of the running
  mean and M2): one pass, without the cancellation of E[x^2] - E[x]^2.

Program statements (`program.Stmt`) for reductions: `row_sum`, `row_max`, `row_min`,
`row_mean`, the online pair `softmax_max`/`softmax_sum(x, m)` and the Welford pair
`welford_mean`/`welford_var(x, mean)`; each yields one value per row.
"""

from __future__ import annotations

import torch

from .program import Const, Stmt

# one accumulator each: what sum / mean / amax / amin over the last dim become
ROW_OPS = ("row_sum", "row_max", "row_min", "row_mean")
REDUCTIONS = {*ROW_OPS, "softmax_max", "softmax_sum", "welford_mean", "welford_var"}
# which statements a pass computes together: the second of each pair needs the first
PAIRED = {"softmax_sum": "softmax_max", "welford_var": "welford_mean"}


def rewrite_online(stmts: list) -> list:
    """Merge hand-written softmax / variance chains into the one-pass pairs (ch. 6).

    max m = row_max(v); s = row_sum(exp(v - m))  ->  softmax_max / softmax_sum
    mu = row_mean(v); row_mean(square(v - mu))   ->  welford_mean / welford_var
    """
    by_var = {s.var: s for s in stmts}
    renamed = {}

    def operand(stmt, name="x"):
        return dict(stmt.args).get(name)

    for s in stmts:
        inner = by_var.get(operand(s))
        if inner is None:
            continue
        if s.op == "row_sum" and inner.op == "exp":
            diff = by_var.get(operand(inner))
            pair = ("softmax_max", "softmax_sum", "row_max")
        elif s.op == "row_mean" and inner.op == "square":
            diff = by_var.get(operand(inner))
            pair = ("welford_mean", "welford_var", "row_mean")
        else:
            continue
        if diff is None or diff.op != "sub":
            continue
        first = by_var.get(operand(diff, "y"))
        v = operand(diff)
        if first is None or first.op != pair[2] or operand(first) != v:
            continue
        renamed[first.var] = Stmt(first.var, pair[0], first.args)
        renamed[s.var] = Stmt(s.var, pair[1], (("x", v), ("m", first.var)))
    return [renamed.get(s.var, s) for s in stmts]


def is_row_program(prog) -> bool:
    """Whether the program holds a row reduction (ch. 6)."""
    return any(s.op in REDUCTIONS for s in prog.stmts)


def expand(kind: str, params: dict, var: str, operand, constant) -> list:
    """The statements of one row reduction; `operand(v)` maps graph values to names,
    `constant(t)` registers a weight tensor and returns its name (ch. 6)."""
    x = operand(params["x"])
    s = lambda suffix, op, **a: Stmt(f"{var}{suffix}", op, tuple(a.items()))  # noqa
    if kind in ROW_OPS:
        return [Stmt(var, kind, (("x", x),))]
    if kind in ("softmax", "log_softmax"):
        out = [s("_m", "softmax_max", x=x), s("_s", "softmax_sum", x=x, m=f"{var}_m"),
               s("_d", "sub", x=x, y=f"{var}_m")]
        if kind == "softmax":  # one division per row, a product per element
            return out + [s("_e", "exp", x=f"{var}_d"),
                          s("_i", "div", x=Const(1.0), y=f"{var}_s"),
                          Stmt(var, "mul", (("x", f"{var}_e"), ("y", f"{var}_i")))]
        return out + [s("_l", "log", x=f"{var}_s"),
                      Stmt(var, "sub", (("x", f"{var}_d"), ("y", f"{var}_l")))]
    eps = params["eps"]
    if kind == "layer_norm":
        out = [s("_mu", "welford_mean", x=x),
               s("_var", "welford_var", x=x, m=f"{var}_mu"),
               s("_d", "sub", x=x, y=f"{var}_mu"),
               s("_ve", "add", x=f"{var}_var", y=Const(float(eps))),
               s("_r", "rsqrt", x=f"{var}_ve"), s("_n", "mul", x=f"{var}_d",
                                                  y=f"{var}_r")]
    else:  # rms_norm; eps=None means the dtype's machine epsilon, as torch does
        out = [s("_sq", "square", x=x), s("_ms", "row_mean", x=f"{var}_sq"),
               s("_ve", "add", x=f"{var}_ms", y=Const(float(eps))),
               s("_r", "rsqrt", x=f"{var}_ve"), s("_n", "mul", x=x, y=f"{var}_r")]
    last = f"{var}_n"
    for name, op in (("weight", "mul"), ("bias", "add")):
        t = params.get(name)
        if t is not None:
            out.append(s(f"_{name[0]}", op, x=last, y=constant(t)))
            last = f"{var}_{name[0]}"
    out.append(Stmt(var, "identity", (("x", last),)))
    return out


def reduced_shape(s: tuple) -> tuple:
    """The shape `s` with its last dimension reduced to 1 (ch. 6)."""
    return tuple(s[:-1]) + (1,)


def torch_eps(dtype: torch.dtype) -> float:
    """The machine epsilon of `dtype`, as torch reports it (ch. 6)."""
    return torch.finfo(dtype).eps
