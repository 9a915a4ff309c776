"""The row-reduction template as one Triton kernel (chapter 6; rules in `reduce`).

One program instance per row. Each reading pass loops over the row in blocks of
BLOCK columns with masked loads; accumulators are vectors of BLOCK lanes (one per
column position) reduced across lanes once at the end of the pass with `tl.sum` /
`tl.max`. Online softmax keeps a running max and rescaled sum per lane and merges the
lanes with the same rescaling; Welford merges each block's mean and squared
deviations (computed from the block in registers) into the running mean and M2 with
Chan's formula. Max and min propagate NaN as torch does (Triton's `tl.maximum`
does not by default).
"""

from __future__ import annotations

import math

import torch

from .common import Const, Program
from .reduce_program import PAIRED, REDUCTIONS
from .reduce_rows import RowLayout, needed, passes, stat_vars
from .triton import _body as _elementwise_lines
from .triton import _literal, interpreting

_DT = {torch.float32: "tl.float32", torch.float64: "tl.float64"}
NEG, NAN = 'float("-inf")', 'float("nan")'


def generate(prog: Program, layout: RowLayout, dtype: torch.dtype) -> str:
    """The Triton source of one row kernel for this program, layout and dtype
    (ch. 6)."""
    n_in, n_out, nd = len(prog.inputs), len(prog.outputs), len(layout.lead)
    params = [f"in{k}" for k in range(n_in)] + [f"out{k}" for k in range(n_out)]
    params += ["R", "D"] + [f"L{d}" for d in range(nd)]
    params += [f"st{k}_{d}" for k in range(n_in) for d in range(nd)]
    params += [f"cs{k}" for k in range(n_in)]
    lines = ["import triton", "import triton.language as tl", "", "", "@triton.jit",
             f"def kernel({', '.join(params)}, BLOCK: tl.constexpr):",
             "    r = tl.program_id(0)  # one program per row", "    rem = r"]
    for d in range(nd - 1, -1, -1):
        lines += [f"    q{d} = rem % L{d}", f"    rem = rem // L{d}"]
    for k in range(n_in):
        dot = " + ".join(f"q{d} * st{k}_{d}" for d in range(nd)) or "0"
        lines.append(f"    o{k} = {dot}")
    ctx = _Ctx(prog, layout, _DT[dtype])
    lines += ["    " + ln for ln in ctx.body()]
    return "\n".join(lines) + "\n"


class _Ctx:
    def __init__(self, prog, layout, dt):
        self.prog, self.layout, self.dt = prog, layout, dt
        self.stats = stat_vars(prog, layout)
        per_row = [k for k, p in enumerate(layout.patterns) if p in ("rowconst",
                                                                     "scalar")]
        self.per_row = per_row
        self.known = {prog.inputs[k] for k in per_row}

    def body(self) -> list[str]:
        prog = self.prog
        lines = [f"{prog.inputs[k]} = tl.load(in{k} + o{k})" for k in self.per_row]
        level = passes(prog)
        for p in range(1, max(level.values(), default=0) + 1):
            lines += self.stat_lines()
            reds = [s for s in prog.stmts if s.op in REDUCTIONS and level[s.var] == p]
            lines += self.reading_pass(reds)
            self.known |= {s.var for s in reds}
        return lines + self.stat_lines() + self.write()

    def stat_lines(self) -> list[str]:
        prog, out = self.prog, []
        for s in prog.stmts:
            if s.var in self.stats and s.var not in self.known and \
                    s.op not in REDUCTIONS and \
                    all(o in self.known for o in prog.operands(s)):
                out += _elementwise_lines(_one(prog, s))
                self.known.add(s.var)
        return out

    def recompute(self, roots) -> list[str]:
        prog = self.prog
        stmts = needed(prog, roots, self.known)
        used = {o for s in stmts for o in prog.operands(s)} | set(roots)
        loads = []
        for k, v in enumerate(prog.inputs):
            if v in used and v not in self.known:
                contig = self.layout.patterns[k] == "contig"
                step = "cols" if contig else f"cols * cs{k}"
                loads.append(f"{v} = tl.load(in{k} + o{k} + {step}, mask=mask, "
                             "other=0.0)")
        return loads + _elementwise_lines(_sub(prog, stmts))

    def reading_pass(self, reds) -> list[str]:
        dt = self.dt
        zero = f"tl.zeros([BLOCK], {dt})"
        init, update, final = [], [], []
        for s in reds:
            x, v = dict(s.args)["x"], s.var
            if s.op in ("row_sum", "row_mean"):
                init.append(f"acc_{v} = {zero}")
                update.append(f"acc_{v} += tl.where(mask, {x}, 0.0)")
                final.append(f"{v} = tl.sum(acc_{v}, axis=0)" +
                             (" / D" if s.op == "row_mean" else ""))
            elif s.op in ("row_max", "row_min"):
                cmp, start = (">", NEG) if s.op == "row_max" else ("<", 'float("inf")')
                red = "tl.max" if s.op == "row_max" else "tl.min"
                init.append(f"acc_{v} = tl.full([BLOCK], {start}, {dt})")
                update.append(f"acc_{v} = tl.where(mask & (({x} {cmp} acc_{v}) | "
                              f"({x} != {x})) & (acc_{v} == acc_{v}), {x}, acc_{v})")
                final += [f"{v} = {red}(acc_{v}, axis=0)",
                          f"{v} = tl.where(tl.sum(tl.where(acc_{v} != acc_{v}, 1, 0), "
                          f"axis=0) > 0, {NAN}, {v})  # NaN propagates"]
            elif s.op == "softmax_max":
                sm = _partner(reds, v)
                init += [f"m_{v} = tl.full([BLOCK], {NEG}, {dt})", f"s_{v} = {zero}"]
                update += [
                    f"xm = tl.where(mask, {x}, {NEG})",
                    f"up = xm > m_{v}  # new max in this lane: rescale its sum",
                    f"s_{v} = tl.where(up, s_{v} * tl.exp(m_{v} - xm) + "
                    "tl.exp(xm - xm),"
                    f" tl.where((m_{v} > {NEG}) | (xm != xm), "
                    f"s_{v} + tl.exp(xm - m_{v}), s_{v}))",
                    f"m_{v} = tl.where(up, xm, m_{v})"]
                final += [f"{v} = tl.max(m_{v}, axis=0)",
                          f"{sm} = tl.sum(tl.where(m_{v} > {NEG}, "
                          f"s_{v} * tl.exp(m_{v} - {v}), s_{v}), axis=0)"]
            elif s.op == "welford_mean":
                var = _partner(reds, v)
                init += [f"{v} = tl.sum({zero}, axis=0)", f"{var} = tl.sum({zero}, "
                         "axis=0)", f"n_{v} = tl.sum({zero}, axis=0)"]
                update += ["nb = tl.sum(tl.where(mask, 1.0, 0.0), axis=0)",
                           f"bm = tl.sum(tl.where(mask, {x}, 0.0), axis=0) / nb",
                           f"dv = tl.where(mask, {x} - bm, 0.0)",
                           "bq = tl.sum(dv * dv, axis=0)  # the block, in registers",
                           f"delta = bm - {v}", f"tot = n_{v} + nb",
                           f"{v} += delta * nb / tot",
                           f"{var} += bq + delta * delta * n_{v} * nb / tot",
                           f"n_{v} = tot"]
                final.append(f"{var} = {var} / D  # M2 / D: the biased variance")
        roots = [dict(s.args)["x"] for s in reds]
        body = ["cols = j0 + tl.arange(0, BLOCK)", "mask = cols < D"]
        body += self.recompute(roots) + update
        return init + ["for j0 in range(0, D, BLOCK):"] + \
            ["    " + ln for ln in body] + final

    def write(self) -> list[str]:
        prog, layout = self.prog, self.layout
        rows = [v for v, k in zip(prog.outputs, layout.out_kinds) if k == "row"]
        lines = []
        if rows:
            body = ["cols = j0 + tl.arange(0, BLOCK)", "mask = cols < D"]
            body += self.recompute(rows)
            body += [f"tl.store(out{k} + r * D + cols, {v}, mask=mask)"
                     for k, v in enumerate(prog.outputs)
                     if layout.out_kinds[k] == "row"]
            lines += ["for j0 in range(0, D, BLOCK):  # the write pass"]
            lines += ["    " + ln for ln in body]
        lines += [f"tl.store(out{k} + r, {v})" for k, v in enumerate(prog.outputs)
                  if layout.out_kinds[k] == "stat"]
        return lines


def _partner(reds, first: str) -> str:
    return next(s.var for s in reds if s.op in PAIRED and dict(s.args)["m"] == first)


def _one(prog, stmt):
    return _sub(prog, [stmt])


def _sub(prog, stmts) -> Program:
    return Program(inputs=prog.inputs, stmts=list(stmts))


def launch(fn, prog: Program, layout: RowLayout, inputs, outputs,
           block: int | None) -> None:
    """One program per row; BLOCK columns per step of each pass (ch. 6)."""
    if layout.numel == 0:
        return
    if block is None:
        cap = 65536 if interpreting() else 1024  # interpreter: fewest steps
        block = min(1 << max(layout.D - 1, 1).bit_length(), cap)
    args = list(inputs) + list(outputs) + [layout.rows, layout.D, *layout.lead]
    args += [st for sts in layout.lead_strides for st in sts]
    args += list(layout.col_strides)
    fn[(layout.rows,)](*args, BLOCK=block)


__all__ = ["generate", "launch", "Const", "math", "_literal"]
