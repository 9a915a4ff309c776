"""The row-reduction template as one numba kernel (chapter 6; rules in `reduce`).

One task per row, rows split into one contiguous chunk per thread. Per row: the
offsets of every input, then one loop per reading pass (`reduce_rows.passes`), then the
write loop. Each reading pass walks the row in blocks of BLOCK elements:

    for each block:   the block's slice of each contiguous input (`blk_in0`);
                      loop 1: recompute the producers, update the accumulators
                      (sums, NaN-propagating max/min), the block's max for online
                      softmax and the block's sum for Welford;
                      loop 2 (online softmax only): rescale the running sum to
                      the new max once per block, then add the block's exp(x - m)
                      without a branch, so it vectorises;
                      loop 2 (Welford only): the block's squared deviations from its
                      own mean, then Chan's update of the running mean and M2.

exp is `exp_numba.exp32` in float32 kernels (libm's scalar expf would keep these
loops scalar); max and min are LLVM's intrinsics (`minmax_numba`: a compare and a
select would keep them scalar). fastmath={'reassoc'} only: it lets LLVM split a
sum over vector lanes (a different order of additions, as torch's own vectorised
sums use). No 'nnan'/'ninf': softmax over a -inf mask, NaN inputs and inf must
behave as in torch; no 'arcp'/'afn'.
"""

from __future__ import annotations

import re

import numpy as np
import torch

from .interleaved import fastest
from .op_table import OPS
from .program import Const, Program
from .reduce_program import PAIRED, REDUCTIONS
from .reduce_rows import RowLayout, needed, passes, stat_vars

BLOCK = 256
FLAGS = ", fastmath={'reassoc'}"
_NP = {torch.float32: "float32", torch.float64: "float64"}


def generate(prog: Program, layout: RowLayout, dtype: torch.dtype) -> str:
    """The numba source of one row kernel for this program, layout and dtype (ch. 6)."""
    from .cpu import math_sources, two_variants
    np_dtype = _NP[dtype]
    consts: dict[float, str] = {}
    n_in, n_out = len(prog.inputs), len(prog.outputs)
    params = [f"in{k}" for k in range(n_in)] + [f"out{k}" for k in range(n_out)]
    params += [f"st{k}" for k in range(n_in)] + ["cs", "lead", "R", "D", "nchunk"]
    body = _row_body(prog, layout, consts)
    head = ["import math", "import numpy as np", "from numba import njit, prange", "",
            f"ZERO = np.{np_dtype}(0)", f"ONE = np.{np_dtype}(1)",
            f"HALF = np.{np_dtype}(0.5)", f"THREE = np.{np_dtype}(3)",
            f"SIX = np.{np_dtype}(6)",
            f"RSQRT2 = np.{np_dtype}(0.7071067811865476)",
            f"NEG_INF = np.{np_dtype}(-np.inf)", f"POS_INF = np.{np_dtype}(np.inf)",
            f"NPT = np.{np_dtype}  # counts become this dtype: no float64 promotion"]
    head += math_sources(np_dtype, "\n".join(body))
    head += [f"from graphopt.codegen.minmax_numba import {name}" for name in
             ("MAXIMUM", "MAXNUM", "MINIMUM")
             if re.search(rf"\b{name}\(", "\n".join(body))]
    head += [f"{name} = np.{np_dtype}({_lit(v)})" for v, name in consts.items()]
    loop = ["    nd = lead.shape[0]", "    DF = NPT(D)",
            "    size = (R + nchunk - 1) // nchunk",
            "    for c in PRANGE(nchunk):  # one contiguous chunk of rows per thread",
            "        for r in range(c * size, min(R, c * size + size)):"]
    loop += ["            " + ln for ln in body]
    return "\n".join(head + two_variants(", ".join(params), loop, FLAGS)) + "\n"


def _lit(v: float) -> str:
    return repr(v) if np.isfinite(v) else f"np.{'inf' if v > 0 else '-inf'}"


def _expr(stmt, consts: dict) -> str:
    names = {}
    for a, v in stmt.args:
        if isinstance(v, Const):
            v = consts.setdefault(v.value, f"C{len(consts)}")
        names[a] = v
    return f"{stmt.var} = " + OPS[stmt.op].numba.format(**names)


def _load(prog, layout, k: int, block: bool) -> str:
    """Input k's element j: of the row (the write pass) or of the block (a reading
    pass, where j counts from the block's start j0)."""
    pattern = layout.patterns[k]
    if pattern == "contig":  # a slice made once per row (_row_body) or block (_pass)
        return f"{prog.inputs[k]} = {'blk' if block else 'row'}_in{k}[j]"
    col = "(j0 + j)" if block else "j"
    index = {"scalar": "0", "rowconst": f"o{k}",
             "strided": f"o{k} + {col} * cs[{k}]"}[pattern]
    return f"{prog.inputs[k]} = in{k}[{index}]"


def _row_body(prog: Program, layout: RowLayout, consts: dict) -> list[str]:
    n_in = len(prog.inputs)
    lines = [f"o{k} = 0" for k in range(n_in)] + ["rem = r",
             "for d in range(nd - 1, -1, -1):  # row index -> offset of each input",
             "    q = rem % lead[d]", "    rem //= lead[d]"]
    lines += [f"    o{k} += q * st{k}[d]" for k in range(n_in)]
    # Contiguous rows are read and written through a slice of the row: indices from
    # 0, which LLVM can prove non-negative, so numba's wraparound for negative
    # indices folds away and the loops load and store whole vectors (measured: the
    # softmax kernel 1.5x faster than with in0[o0 + j] and out0[r * D + j]).
    lines += [f"row_in{k} = in{k}[o{k}:o{k} + D]"
              for k, p in enumerate(layout.patterns) if p == "contig"]
    lines += [f"row_out{k} = out{k}[r * D:r * D + D]"
              for k, kind in enumerate(layout.out_kinds) if kind == "row"]
    per_row = [k for k, p in enumerate(layout.patterns) if p in ("rowconst", "scalar")]
    lines += [_load(prog, layout, k, False) for k in per_row]
    known = {prog.inputs[k] for k in per_row}
    stats = stat_vars(prog, layout)
    level = passes(prog)
    by_var = {s.var: s for s in prog.stmts}
    for p in range(1, max(level.values(), default=0) + 1):
        lines += _stat_stmts(prog, stats, known, consts)
        reds = [s for s in prog.stmts if s.op in REDUCTIONS and level[s.var] == p]
        lines += _pass(prog, layout, reds, known, consts, by_var)
        known |= {s.var for s in reds}
    lines += _stat_stmts(prog, stats, known, consts)
    return lines + _write(prog, layout, known, consts)


def _stat_stmts(prog, stats, known: set, consts) -> list[str]:
    """Per-row elementwise math computable now (e.g. rsqrt(var + eps))."""
    out = []
    for s in prog.stmts:
        if s.var in stats and s.var not in known and s.op not in REDUCTIONS and \
                all(o in known for o in prog.operands(s)):
            out.append(_expr(s, consts))
            known.add(s.var)
    return out


def _recompute(prog, layout, roots, known, consts, block: bool) -> list[str]:
    loads = [_load(prog, layout, k, block) for k in _read(prog, roots, known)]
    return loads + [_expr(s, consts) for s in needed(prog, roots, known)]


def _read(prog, roots, known) -> list[int]:
    """The inputs (by position) a loop computing `roots` loads."""
    used = {o for s in needed(prog, roots, known) for o in prog.operands(s)}
    used |= set(roots)
    return [k for k, v in enumerate(prog.inputs) if v in used and v not in known]


def _block_slices(prog, layout, roots, known) -> list[str]:
    """Per block, a slice of each contiguous input the pass reads.

    Indexed `row_in0[j]` with j from j0 to j1, numba cannot prove j >= 0 and keeps
    its wraparound for negative indices: LLVM then vectorises the loop with gathers,
    not whole-vector loads (a 1024 x 256 LayerNorm: 0.30 ms, against 0.066 ms with
    these slices and j from 0; `benchmarks/row_kernel_blocks.py`)."""
    return [f"    blk_in{k} = row_in{k}[j0:j1]" for k in _read(prog, roots, known)
            if layout.patterns[k] == "contig"]


def _pass(prog, layout, reds, known, consts, by_var) -> list[str]:
    roots = [dict(s.args)["x"] for s in reds]
    welford = [s for s in reds if s.op == "welford_mean"]
    init, update, final = [], [], []
    for s in reds:
        x, v = dict(s.args)["x"], s.var
        if s.op in ("row_sum", "row_mean"):
            init.append(f"{v} = ZERO")
            update.append(f"{v} += {x}")
            if s.op == "row_mean":
                final.append(f"{v} = {v} / DF")
        elif s.op in ("row_max", "row_min"):  # minmax_numba: NaN propagates
            fn, start = ("MAXIMUM", "NEG_INF") if s.op == "row_max" else \
                ("MINIMUM", "POS_INF")
            init.append(f"{v} = {start}")
            update.append(f"{v} = {fn}({v}, {x})")
        elif s.op == "softmax_max":  # the block's max here, its sum in _online
            init += [f"{v} = NEG_INF", f"{_partner(reds, v)} = ZERO"]
            update.append(f"b_{v} = MAXNUM(b_{v}, {x})  # NaN ignored")
        elif s.op == "welford_mean":
            mu, var = v, _partner(reds, v)
            init += [f"{mu} = ZERO", f"{var} = ZERO", f"n_{mu} = ZERO"]
            update.append(f"b_{mu} += {x}")
            final.append(f"{var} = {var} / DF  # M2 / D: the biased variance")
    lines = init + ["for j0 in range(0, D, %d):" % BLOCK,
                    "    j1 = min(j0 + %d, D)" % BLOCK]
    online = [s for s in reds if s.op == "softmax_max"]
    lines += [f"    b_{s.var} = ZERO" for s in welford]
    lines += [f"    b_{s.var} = NEG_INF" for s in online]
    lines += _block_slices(prog, layout, roots, known)
    lines += ["    for j in range(j1 - j0):  # j counts from the block's start"]
    body = _recompute(prog, layout, roots, known, consts, True) + update
    lines += ["        " + ln for ln in body]
    for s in welford:
        lines += _chan(prog, layout, s, _partner(reds, s.var), known, consts)
    for s in online:
        lines += _online(prog, layout, s, _partner(reds, s.var), known, consts)
    return lines + final


def _partner(reds, first: str) -> str:
    return next(s.var for s in reds if s.op in PAIRED and dict(s.args)["m"] == first)


def _chan(prog, layout, s, var, known, consts) -> list[str]:
    """Block mean, block M2 (from the block itself, in cache), Chan's merge."""
    x, mu = dict(s.args)["x"], s.var
    inner = _recompute(prog, layout, [x], known, consts, True)
    return ["    nb = NPT(j1 - j0)", f"    bm = b_{mu} / nb", "    bq = ZERO",
            "    for j in range(j1 - j0):"] + ["        " + ln for ln in inner] + [
            f"        dv = {x} - bm", "        bq += dv * dv",
            f"    delta = bm - {mu}", f"    tot = n_{mu} + nb",
            f"    {mu} += delta * nb / tot",
            f"    {var} += bq + delta * delta * n_{mu} * nb / tot",
            f"    n_{mu} = tot"]


def _online(prog, layout, s, sm, known, consts) -> list[str]:
    """Online softmax per block: rescale the sum once to the block's max, then add
    the block's exp(x - m) in a loop without branches (it vectorises).

    NaN-ignoring block max; a NaN or +inf reaches the sum (exp gives NaN) and so
    the whole row, as in torch. While the max is still -inf the shift is 0, so the
    -inf entries add exp(-inf) = 0 rather than exp(-inf + inf) = NaN."""
    x, m = dict(s.args)["x"], s.var
    inner = _recompute(prog, layout, [x], known, consts, True)
    return [f"    if b_{m} > {m}:  # a new max: rescale what the sum holds so far",
            f"        {sm} = {sm} * EXP({m} - b_{m})", f"        {m} = b_{m}",
            f"    sh = {m} if {m} > NEG_INF else ZERO",
            "    for j in range(j1 - j0):"] + ["        " + ln for ln in inner] + [
            f"        {sm} += EXP({x} - sh)"]


def _write(prog, layout, known, consts) -> list[str]:
    rows = [v for v, k in zip(prog.outputs, layout.out_kinds) if k == "row"]
    lines = []
    if rows:
        lines += ["for j in range(D):  # the write pass"]
        body = _recompute(prog, layout, rows, known, consts, False)
        body += [f"row_out{k}[j] = {v}" for k, v in enumerate(prog.outputs)
                 if layout.out_kinds[k] == "row"]
        lines += ["    " + ln for ln in body]
    lines += [f"out{k}[r] = {v}" for k, v in enumerate(prog.outputs)
              if layout.out_kinds[k] == "stat"]
    return lines


def plan(module, prog: Program, layout: RowLayout, inputs, outputs, policy):
    """A function (inputs, outputs[, arrays]) -> None, everything decided now (ch. 6).

    `policy` (`graphopt.policy.Policy`) says whether the rows are split over threads.
    """
    import numba

    from .cpu import _flat_view
    tail = [np.asarray(st if st else (0,), dtype=np.int64)
            for st in layout.lead_strides]
    tail += [np.asarray(layout.col_strides, dtype=np.int64),
             np.asarray(layout.lead if layout.lead else (1,), dtype=np.int64),
             layout.rows, layout.D]
    threads = numba.get_num_threads()
    parallel = policy.rows_parallel(
        layout.numel, layout.rows, threads,
        lambda: _parallel_timed_faster(module, inputs, outputs, tail,
                                       min(threads, layout.rows)))
    tail.append(min(threads, layout.rows) if parallel else 1)
    fn = module.kernel if parallel else module.kernel_serial
    fn(*[_flat_view(t) for t in inputs], *[o.view(-1).numpy() for o in outputs],
       *tail)

    def run(inputs, outputs, out_arrays=None):
        if out_arrays is None:
            out_arrays = [o.numpy().reshape(-1) for o in outputs]
        fn(*[_flat_view(t) for t in inputs], *out_arrays, *tail)
    run.parallel = parallel
    return run


def _parallel_timed_faster(module, inputs, outputs, tail, chunks) -> bool:
    """The measured policy's question: did the parallel variant run faster?

    Asked only between its thresholds (`Policy.rows_parallel`). Both variants are
    timed on scratch outputs (inputs are only read) by the calibration's own timer,
    `calibrate.fastest` (interleaved rounds, the best per call of each; its warm-up
    call compiles each variant). Speed only: both compute the same values.
    """
    from .cpu import _flat_view
    ins = [_flat_view(t) for t in inputs]
    outs = [torch.empty_like(o).view(-1).numpy() for o in outputs]
    best = fastest({"serial": lambda: module.kernel_serial(*ins, *outs, *tail, 1),
                    "parallel": lambda: module.kernel(*ins, *outs, *tail, chunks)},
                   rounds=3)
    return best["parallel"] < best["serial"]
