"""A fused group as one numba loop on the CPU (chapter 6).

The generated function walks the output once. For every output element it loads one
value from each input, runs the whole group's math in registers and stores the result:
the intermediates never reach memory. The output is allocated before the call (or
passed with `out=`).

Each source defines two functions with the same body: `kernel`, whose `prange` loop
numba splits into one contiguous block per thread (a static schedule: no hand-off
per element), and `kernel_serial`, the same loop with `range`, for tensors too small
to pay for waking the thread pool (the size where parallel starts to win is measured
on this machine: `codegen.calibration()`). The loop walks memory contiguously, so
LLVM vectorises it (8 float32 lanes with AVX2). An explicit chunk loop (`for c in
prange(nchunk)` around `for i in range(lo, hi)`) was measured too: its inner loop did
not vectorise and it ran 2.3x slower.

Two loop shapes are generated, chosen by the operands' layouts (common.Layout):

- every operand flat (same shape and contiguous): one loop over the flat index i;
- some operand strided (broadcast or a non-contiguous view): the loop runs over rows
  of the (merged) shape, in chunks of the last dimension so that even one long row is
  split over cores; a strided operand's offset is computed once per chunk and then
  advanced along the row, so no copy is made. How it advances is written into the
  source when the kernel is generated (`Layout.inner_steps`): `o + j` for a row that
  is contiguous (a slice, a bias along the row), one load per chunk for a value that
  is the same along the row (a per-channel scale). Both keep the inner loop
  vectorisable. Only another step (a transposed view) is read as `o + j * s` with `s`
  known at run time, which LLVM cannot vectorise: 10-30x slower per element,
  measured, so the default policy runs such groups' eager ops (`Policy`).

No `fastmath`: the elementwise loops vectorise without it (measured: no faster with
`nsz`/`contract`), and `nnan`/`ninf` would let LLVM drop the NaN that torch's ReLU,
max and min propagate. (The row-reduction kernels do use `reassoc`: see reduce_cpu.)

Constants are cast to the kernel's dtype (`np.float32(2.0)`): a bare Python float
would silently promote float32 arithmetic to float64.
"""

from __future__ import annotations

import os
import re

import numpy as np
import torch

from .common import OPS, Const, Layout, Program

CHUNK = 16384  # elements of one row one task handles in the strided loop shape

# constants the templates in common.OPS may name, defined only when used
_NAMED = {"ZERO": "0", "ONE": "1", "HALF": "0.5", "THREE": "3", "SIX": "6",
          "RSQRT2": "0.7071067811865476"}

_NP_DTYPES = {torch.float32: "float32", torch.float64: "float64"}


def generate(prog: Program, layout: Layout, dtype: torch.dtype) -> str:
    """The numba source of one kernel for this program, layout and dtype (ch. 6)."""
    np_dtype = _NP_DTYPES[dtype]
    consts, body = _body(prog, np_dtype)
    n_in = len(prog.inputs)
    params = [f"in{k}" for k in range(n_in)]
    params += [f"out{k}" for k in range(len(prog.outputs))]
    strided = [k for k, p in enumerate(layout.patterns) if p == "strided"]
    params += [f"st{k}" for k in strided]
    head = [
        "import math",
        "import numpy as np",
        "from numba import njit, prange",
        "",
        *[f"{name} = np.{np_dtype}({value})" for name, value in _NAMED.items()
          if re.search(rf"\b{name}\b", "\n".join(body))],
        *math_sources(np_dtype, "\n".join(body)),
        *consts,
    ]
    if strided:
        sig = ", ".join(params + ["shape", "chunk"])
        loop = _strided_loop(prog, layout, body)
    else:
        sig = ", ".join(params + ["n"])
        loop = _flat_loop(prog, layout, body)
    return "\n".join(head + two_variants(sig, loop)) + "\n"


# name in a kernel's body -> (its float32 version, its float64 version)
_MATH = {
    "EXP": ("from graphopt.codegen.exp_numba import exp32 as EXP", "EXP = math.exp"),
    "ERF": ("from graphopt.codegen.erf_numba import erf32 as ERF", "ERF = math.erf"),
}


def math_sources(np_dtype: str, body: str) -> list[str]:
    """The lines that define the EXP and ERF a kernel body calls: in float32 the
    vectorisable versions of `exp_numba` and `erf_numba` (libm's scalar expf and
    erff would keep the loop one element at a time), in float64 `math`'s, which
    keep their full double precision (ch. 6)."""
    return [pair[0] if np_dtype == "float32" else pair[1]
            for name, pair in _MATH.items() if re.search(rf"\b{name}\(", body)]


def two_variants(sig: str, loop: list[str], flags: str = "") -> list[str]:
    """`kernel` (one prange chunk per thread) and `kernel_serial` (plain range)
    (ch. 6)."""
    text = "\n".join(loop)
    # error_model="numpy": x / 0 is inf or NaN, as in torch, not ZeroDivisionError
    flags = ", error_model='numpy'" + flags
    return ["", "", f"@njit(parallel=True, cache=True{flags})",
            f"def kernel({sig}):", text.replace("PRANGE", "prange"),
            "", "", f"@njit(cache=True{flags})",
            f"def kernel_serial({sig}):", text.replace("PRANGE", "range")]


def _body(prog: Program, np_dtype: str) -> tuple[list[str], list[str]]:
    """Constant definitions and one line per statement of the program."""
    consts: dict[float, str] = {}
    lines = []
    for stmt in prog.stmts:
        names = {}
        for arg, value in stmt.args:
            if isinstance(value, Const):
                if value.value not in consts:
                    consts[value.value] = f"C{len(consts)}"
                value = consts[value.value]
            names[arg] = value
        lines.append(f"{stmt.var} = " + OPS[stmt.op].numba.format(**names))
    defs = [f"{name} = np.{np_dtype}({_literal(v)})" for v, name in consts.items()]
    return defs, lines


def _literal(v: float) -> str:
    return repr(v) if np.isfinite(v) else f"np.{'inf' if v > 0 else '-inf'}"


def _row_index(layout: Layout, k: int) -> str:
    """Where operand k's element of the current chunk is, in the strided loop.

    A flat operand, or a strided one whose row is contiguous (step 1), is read
    through a slice of the chunk, `r{k}[jj]`, with `jj` counting from 0: numba then
    knows the index is not negative and drops its wraparound check, and LLVM
    vectorises the loop (indexed as `in{k}[base + j]`, it did not: 47 us against
    ~5 us on 16 x 1024, measured). Any other step is read at run time."""
    if layout.patterns[k] == "flat" or layout.inner_steps[k] == 1:
        return f"r{k}[jj]"
    return f"in{k}[o{k} + (j0 + jj) * s{k}]"


def _row_slices(prog: Program, layout: Layout) -> list[str]:
    """The chunk's slice of every operand read or written as `r{k}[jj]`."""
    n_in, lines = len(prog.inputs), []
    for k, pattern in enumerate(layout.patterns):
        if pattern == "scalar" or (pattern == "strided" and layout.inner_steps[k] != 1):
            continue
        start = "base" if pattern == "flat" else f"o{k}"
        array = f"in{k}" if k < n_in else f"out{k - n_in}"
        lines.append(f"r{k} = {array}[{start} + j0:{start} + j1]")
    return lines


def _loads(prog: Program, layout: Layout, flat_index: str | None,
           in_loop: bool) -> list[str]:
    """One load per input: scalars before the loop (in_loop False), the others in
    it; `flat_index` names the flat loop's index, None means the strided loop."""
    lines = []
    for k, var in enumerate(prog.inputs):
        pattern = layout.patterns[k]
        if (pattern == "scalar") == in_loop or layout.inner_steps[k] == 0:
            continue  # a step-0 operand is loaded once per chunk (_row_constants)
        if pattern == "scalar":
            value = f"in{k}[0]"
        elif flat_index is not None:
            value = f"in{k}[{flat_index}]"
        else:
            value = _row_index(layout, k)
        lines.append(f"{var} = {value}")
    return lines


def _row_constants(prog: Program, layout: Layout) -> list[str]:
    """Operands with step 0 along the row: one load per chunk, outside the j loop."""
    return [f"{var} = in{k}[o{k}]" for k, var in enumerate(prog.inputs)
            if layout.inner_steps[k] == 0]


def _stores(prog: Program, layout: Layout, flat_index: str | None) -> list[str]:
    n_in = len(prog.inputs)
    lines = []
    for k, var in enumerate(prog.outputs):
        pattern, slot = layout.patterns[n_in + k], n_in + k
        if pattern == "scalar":
            lines.append(f"out{k}[0] = {var}")
        elif flat_index is not None:
            lines.append(f"out{k}[{flat_index}] = {var}")
        elif pattern == "flat" or layout.inner_steps[slot] == 1:
            lines.append(f"r{slot}[jj] = {var}")
        else:
            lines.append(f"out{k}[o{slot} + (j0 + jj) * s{slot}] = {var}")
    return lines


def _flat_loop(prog: Program, layout: Layout, body: list[str]) -> list[str]:
    pre = _loads(prog, layout, "i", in_loop=False)
    inner = _loads(prog, layout, "i", in_loop=True) + body + _stores(prog, layout, "i")
    # numba splits prange(n) into one contiguous block per thread (a static
    # schedule, no per-element hand-off) and LLVM vectorises the block. An explicit
    # `for c in prange(nchunk): for i in range(lo, hi)` measured 2.3x slower on the
    # 8-op chain (16M float32, 2 threads): its inner loop did not vectorise.
    return ["    " + ln for ln in pre] + [
        "    for i in PRANGE(n):  # contiguous: one block per thread, vectorised",
    ] + ["        " + ln for ln in inner]


def _strided_loop(prog: Program, layout: Layout, body: list[str]) -> list[str]:
    strided = [k for k, p in enumerate(layout.patterns) if p == "strided"]
    pre = _loads(prog, layout, "", in_loop=False)
    lines = ["    " + ln for ln in pre] + [
        "    nd = shape.shape[0]",
        "    inner = shape[nd - 1]",
        "    nchunk = (inner + chunk - 1) // chunk",
        "    rows = 1",
        "    for d in range(nd - 1):",
        "        rows *= shape[d]",
        *[f"    s{k} = st{k}[nd - 1]" for k in strided],
        "    for task in PRANGE(rows * nchunk):",
        "        row = task // nchunk",
        "        j0 = (task % nchunk) * chunk",
        "        j1 = min(j0 + chunk, inner)",
        "        base = row * inner",
        *[f"        o{k} = 0" for k in strided],
        "        rem = row",
        "        for d in range(nd - 2, -1, -1):  # row -> offsets of strided operands",
        "            c = rem % shape[d]",
        "            rem //= shape[d]",
        *[f"            o{k} += c * st{k}[d]" for k in strided],
        *["        " + ln for ln in _row_constants(prog, layout)],
        *["        " + ln for ln in _row_slices(prog, layout)],
        "        for jj in range(j1 - j0):",
    ]
    inner = _loads(prog, layout, None, in_loop=True) + body + \
        _stores(prog, layout, None)
    return lines + ["            " + ln for ln in inner]


def compile_source(source: str, name: str):
    """Import generated source from the kernel cache directory; return the module
    (ch. 6).

    A real file (not exec) lets numba keep the machine code on disk (`cache=True`):
    the next process that generates the same source loads it instead of compiling.
    """
    from .triton import import_source  # one cache directory for both generators
    _choose_threading_layer()
    return import_source(source, "numba", name)


def _choose_threading_layer() -> None:
    """Prefer numba's own thread pool ('workqueue') over a second OpenMP runtime.

    torch ships its own OpenMP; numba's 'omp' layer would start another pool on the
    same cores. On a busy 2-core machine a 1K-element kernel then took ~9 ms per call
    (threads waiting at the barrier for a core) against ~0.3 ms with 'workqueue'.
    An explicit NUMBA_THREADING_LAYER is respected.
    """
    import numba

    if "NUMBA_THREADING_LAYER" not in os.environ:
        numba.config.THREADING_LAYER = "workqueue"


def _flat_view(t: torch.Tensor) -> np.ndarray:
    """A 1-D numpy view of every element a (possibly strided) tensor can reach."""
    if t.is_contiguous():
        return t.detach().numpy().reshape(-1)
    span = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
    span = span if t.numel() else 0
    return torch.as_strided(t, (span,), (1,)).detach().numpy()


def plan(module, prog: Program, layout: Layout, inputs, outputs, parallel_numel):
    """A function (inputs, outputs) -> None with everything else decided now (ch. 6).

    numba's dispatcher is called directly: it matches argument types in C, a fraction
    of a microsecond; converting the tensors to numpy views costs more.
    """
    import numba

    strided = [k for k, p in enumerate(layout.patterns) if p == "strided"]
    tail = [np.asarray(layout.strides[k], dtype=np.int64) for k in strided]
    threads = numba.get_num_threads()
    parallel = layout.numel >= parallel_numel and threads > 1
    if strided:
        tail += [np.asarray(layout.shape, dtype=np.int64), CHUNK]
    else:
        tail += [layout.numel]
    fn = module.kernel if parallel else module.kernel_serial
    arrays = [_flat_view(t) for t in inputs] + [o.view(-1).numpy() for o in outputs]
    fn(*arrays, *tail)  # compiles now (or loads numba's disk cache), not at call 2
    flat = _flat_view

    def run(inputs, outputs, out_arrays=None):
        if out_arrays is None:
            out_arrays = [o.numpy().reshape(-1) for o in outputs]
        fn(*[flat(t) for t in inputs], *out_arrays, *tail)
    run.parallel = parallel
    return run


def launch(fn, prog: Program, layout: Layout, inputs, outputs) -> None:
    """Call a compiled numba kernel once on torch CPU tensors, zero-copy via numpy
    (ch. 6)."""
    run = plan(fn, prog, layout, inputs, outputs, parallel_numel=1 << 62)
    run(inputs, outputs)
