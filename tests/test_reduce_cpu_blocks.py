"""The generated numba row kernels' reading passes: blocks, slices, vector loops.

A reading pass walks a row in blocks of `reduce_cpu.BLOCK` columns, each block read
through its own slice (`blk_in0 = row_in0[j0:j1]`, j from 0) so that numba drops
its wraparound for negative indices and LLVM loads whole vectors; max and min call
LLVM's intrinsics (`codegen.minmax_numba`) so that they vectorise too. Here: the
answers across many blocks (BLOCK forced to 16 on rows of 37: two full blocks and a
partial one), the structure of the generated source, and the LLVM IR of a
reduction-only kernel (vector loads, no gathers). Speed is in
`benchmarks/row_kernel_blocks.py`, never here.
"""

import re
import types

import pytest
import torch
from torch import fx

from graphopt import codegen
from graphopt.codegen import reduce_cpu
from graphopt.codegen.minmax_numba import MAXIMUM, MAXNUM, MINIMUM
from graphopt.codegen.reduce_rows import plan_rows
from graphopt.policy import Policy
from numerics import assert_near_truth
from test_codegen_reduce import CASES


@pytest.fixture
def block16(monkeypatch):
    """Blocks of 16 columns; kernels generated before or after are forgotten."""
    codegen.clear_cache()
    monkeypatch.setattr(reduce_cpu, "BLOCK", 16)
    yield
    codegen.clear_cache()


def _kernel(fn, x):
    kernel = codegen.compile_group(fx.symbolic_trace(fn), (x,), backend="numba")
    return kernel, kernel(x)


def _specials(x):
    """NaN, inf and -inf masks that sit in the second and third block."""
    x[0, 20] = float("nan")               # NaN in a middle block
    x[1, 16:32] = float("-inf")           # a whole masked block
    x[2, 36] = float("inf")               # +inf in the last, partial block
    x[3] = torch.arange(37.0) * 10        # a new max in every block
    x[4, :] = float("-inf")               # a fully masked row
    return x


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
def test_rows_of_several_blocks_keep_torch_semantics(block16, name, layout):
    x = torch.randn(7, 37) * 5 if layout == "contiguous" else \
        (torch.randn(37, 7) * 5).t()       # read along the row with a stride
    x = _specials(x)
    kernel, got = _kernel(CASES[name], x)
    assert "for j0 in range(0, D, 16):" in kernel.source
    if layout == "strided":
        assert "(j0 + j) * cs[0]" in kernel.source  # column j0 + j of the block
    assert_near_truth(got, fx.symbolic_trace(CASES[name]), x)


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "max_min", "sum_mean",
                                  "variance_by_hand"])
def test_float64_rows_of_several_blocks(block16, name):
    x = torch.randn(5, 37, dtype=torch.float64) * 3
    x[0, 20] = float("nan")
    kernel, got = _kernel(CASES[name], x)
    assert "np.float64" in kernel.source
    torch.testing.assert_close(got, CASES[name](x), equal_nan=True)


def _reading_loops(source: str) -> list[list[str]]:
    """The lines of each `for j` loop of the parallel variant but the write pass's
    (`for j in range(D)`): the loops inside the reading passes' blocks."""
    loops, body, depth = [], None, 0
    for line in source.split("def kernel_serial(")[0].splitlines():
        indent = len(line) - len(line.lstrip())
        if body is not None and line.strip() and indent <= depth:
            loops.append(body)
            body = None
        if body is not None:
            body.append(line.strip())
        elif line.lstrip().startswith("for j in ") and "range(D)" not in line:
            body, depth = [line.strip()], indent
    return loops + ([body] if body else [])


@pytest.mark.parametrize("name", sorted(CASES))
def test_reading_loops_count_from_the_block_start_and_read_its_slice(name):
    """The structure that lets LLVM vectorise: j from 0 over the block's slice, no
    row-indexed or wrapped loads, no branches for max and min."""
    x = torch.randn(3, 37)
    kernel, _ = _kernel(CASES[name], x)
    loops = _reading_loops(kernel.source)
    assert loops, kernel.source
    for body in loops:
        assert body[0].startswith("for j in range(j1 - j0):"), body[0]
        code = "\n".join(body[1:])
        assert "row_in" not in code and "range(j0, j1)" not in code, code
        assert re.search(r"blk_in\d+\[j\]", code), code
        assert not re.search(r"^if ", code, re.M), code   # branch-free loop bodies
    ops = {s.op for s in kernel.program.stmts}
    assert ("MAXIMUM(" in kernel.source) == ("row_max" in ops)
    assert ("MINIMUM(" in kernel.source) == ("row_min" in ops)
    assert ("MAXNUM(" in kernel.source) == ("softmax_max" in ops)


def _ir(fn, x) -> dict[str, str]:
    """The LLVM IR of both variants of fn's row kernel, compiled afresh from its
    source (numba cannot show the IR of code it loaded from its disk cache)."""
    kernel, _ = _kernel(fn, x)
    scope: dict = {}
    exec(kernel.source.replace("cache=True", "cache=False"), scope)
    module = types.SimpleNamespace(kernel=scope["kernel"],
                                   kernel_serial=scope["kernel_serial"])
    prog = kernel.program
    ins = [x, *prog.constants]
    layout = plan_rows(prog, ins)
    outs = [torch.empty(s) for s in layout.out_shapes]
    reduce_cpu.plan(module, prog, layout, ins, outs,
                    Policy(row_parallel_numel=1 << 40))   # serial: compiles it
    (signature,) = module.kernel_serial.signatures
    module.kernel.compile(signature)   # the prange variant, on any thread count
    return {name: "\n".join(getattr(module, name).inspect_llvm().values())
            for name in ("kernel", "kernel_serial")}


@pytest.mark.parametrize("stat", ["sum", "amax", "amin"])
def test_a_reduction_only_kernel_loads_whole_vectors(stat):
    """One value per row out, so every load is the reading pass's: vector loads and
    vector max/min, no gathers (before the slices: gathers for the sum, one element
    at a time for max and min), in the serial variant and in the prange body."""
    fn = {"sum": lambda t: t.sum(-1, keepdim=True),
          "amax": lambda t: t.amax(-1, keepdim=True),
          "amin": lambda t: t.amin(-1, keepdim=True)}[stat]
    for variant, ir in _ir(fn, torch.randn(4, 300)).items():
        assert "llvm.masked.gather" not in ir, variant
        assert re.search(r"load <\d+ x float>", ir), f"{variant}: not vectorised"
        if stat != "sum":
            name = "maximum" if stat == "amax" else "minimum"
            assert re.search(rf"llvm\.{name}\.v\d+f32", ir), variant


@pytest.mark.parametrize("fn, want", [
    (MAXIMUM, [3.0, float("nan"), float("nan"), 0.0, float("nan")]),
    (MINIMUM, [-1.0, float("nan"), float("nan"), -0.0, float("nan")]),
    (MAXNUM, [3.0, 2.0, 2.0, None, float("nan")])])   # None: either zero
def test_minmax_intrinsics_follow_their_nan_rule(fn, want):
    from numba import njit

    @njit
    def apply(a, b):
        return [fn(x, y) for x, y in zip(a, b)]
    nan = float("nan")
    a, b = [3.0, nan, 2.0, -0.0, nan], [-1.0, 2.0, nan, 0.0, nan]
    for dtype in (torch.float32, torch.float64):
        got = apply(torch.tensor(a, dtype=dtype).numpy(),
                    torch.tensor(b, dtype=dtype).numpy())
        for g, w in zip(got, want):
            if w is None:
                assert g == 0
            elif w != w:
                assert g != g
            else:   # MAXIMUM and MINIMUM order -0 below +0
                assert g == w and str(g) == str(w), (g, w)
