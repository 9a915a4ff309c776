"""Generated row kernels: do the reading passes load whole vectors? (ch. 6)

Run:  python benchmarks/row_kernel_blocks.py [--threads 1 2] [--rounds R]

A generated row kernel (`codegen.reduce_cpu`) walks each row's reading passes in
blocks of 256 columns. Before, the loops ran `for j in range(j0, j1)` over the row's
slice `row_in0[j]`: numba cannot prove such a j non-negative, keeps its wraparound
for negative indices, and LLVM vectorised the loops with gathers. Now each block
takes its own slice `blk_in0 = row_in0[j0:j1]` and j counts from 0: whole-vector
loads. Max and min were a compare and a select (or a branch), which LLVM keeps
scalar without 'nnan'; now they call LLVM's max and min (`codegen.minmax_numba`),
which it vectorises. Per case and thread count, the kernel as generated now against
the same source turned back into the old loops (`before`; on 2026-12-07 equal to
the old generator's source for these cases and those of tests/test_codegen_reduce.py),
both launched by `reduce_cpu.plan` under the default policy (the same thread rule),
timed in interleaved rounds (`graphopt.measure.compare`: median and IQR); at 2
threads or more also the kernel now with its rows not split (`now, serial`), to see
what the thread rule's split gives. The LLVM IR of each variant (serial, prange) is
counted too: `masked.gather` calls and vector loads.

Last line: RESULT <case>_t<threads>=<before / now median ratio> ...
"""

from __future__ import annotations

import argparse
import datetime
import os
import re

import numba
import torch
import torch.nn.functional as F
from torch import fx

from graphopt import codegen
from graphopt.codegen import cpu, reduce_cpu
from graphopt.codegen.reduce_rows import plan_rows
from graphopt.measure import compare
from graphopt.measure.thread_count import threads as threads_ctx
from graphopt.policy import Policy

SERIAL = 1 << 40  # a row_parallel_numel no tensor here reaches: rows never split
G = torch.Generator().manual_seed(0)
W, B = torch.randn(256, generator=G), torch.randn(256, generator=G)
W1K = torch.randn(1024, generator=G)
CASES = {  # name: (function, input): BERT's embeddings LayerNorm, ch. 6's softmax
    "layer_norm_1024x256": (lambda x: F.layer_norm(x, [256], W, B, 1e-12),
                            torch.randn(1024, 256, generator=G)),
    "softmax_2048x1024": (lambda x: torch.softmax(x * 0.125, -1) + 1.0,
                          torch.randn(2048, 1024, generator=G)),
    "softmax_16384x37": (lambda x: torch.softmax(x, -1),   # short rows: one block
                         torch.randn(16384, 37, generator=G)),
    "rms_norm_1024x1024": (lambda x: F.rms_norm(x, [1024], W1K),
                           torch.randn(1024, 1024, generator=G)),
    "max_min_1024x1024": (lambda x: x - x.amax(-1, keepdim=True)
                          + x.amin(-1, keepdim=True),
                          torch.randn(1024, 1024, generator=G)),
}


def before(source: str) -> str:
    """The same kernel with the reading loops as they were: j from j0 to j1,
    indexing the row's slice (and a strided input's column j); max and min as a
    compare and a select (a branch where NaN propagates)."""
    source = re.sub(r"(\w+) = MAXNUM\(\1, (\w+)\)[^\n]*",
                    r"\1 = \2 if \2 > \1 else \1", source)
    source = re.sub(r"( *)(\w+) = (MAXIMUM|MINIMUM)\(\2, (\w+)\)", _branch, source)
    source = re.sub(r"\n *blk_in\d+ = row_in\d+\[j0:j1\][^\n]*", "", source)
    source = re.sub(r"for j in range\(j1 - j0\):[^\n]*", "for j in range(j0, j1):",
                    source)
    source = re.sub(r"blk_in(\d+)\[j\]", r"row_in\1[j]", source)
    return source.replace("(j0 + j)", "j")


def _branch(m: re.Match) -> str:
    """`v = MAXIMUM(v, x)` as it was: a compare and a branch."""
    pad, v, fn, x = m.groups()
    cmp = ">" if fn == "MAXIMUM" else "<"
    return (f"{pad}if {x} {cmp} {v} or {x} != {x}:  # NaN propagates\n"
            f"{pad}    {v} = {x} if {v} == {v} else {v}")


def ir_counts(fn, signatures) -> str:
    """Gathers and vector loads in the LLVM IR of a kernel (compiled again without
    numba's on-disk cache, whose loaded code cannot be inspected)."""
    options = {k: v for k, v in fn.targetoptions.items()
               if k not in ("cache", "nopython")}
    fresh = numba.njit(**options)(fn.py_func)
    for sig in signatures:
        fresh.compile(sig)
    ir = "\n".join(fresh.inspect_llvm().values())
    return (f"gathers {ir.count('llvm.masked.gather')}, vector loads "
            f"{len(re.findall(r'load <[0-9]+ x float>', ir))}")


def launchers(name: str, threads: int):
    """{label: () -> None} for now and before, planned on `threads` threads."""
    f, x = CASES[name]
    kernel = codegen.compile_group(fx.symbolic_trace(f), (x,), backend="numba")
    want = kernel(x)
    prog = kernel.program
    ins = [x, *prog.constants]
    layout = plan_rows(prog, ins)
    runs, notes = {}, []
    variants = [("now", kernel.source, Policy()),
                ("before", before(kernel.source), Policy())]
    if threads > 1:  # the thread rule's split against the same kernel serial
        variants.append(("now, serial", kernel.source,
                         Policy(row_parallel_numel=SERIAL)))
    for label, source, policy in variants:
        module = cpu.compile_source(source, f"row_blocks_{label[:3]}_{name}")
        out = [torch.empty(s) for s in layout.out_shapes]
        with threads_ctx(threads):
            run = reduce_cpu.plan(module, prog, layout, ins, out, policy)
        torch.testing.assert_close(out[0], want[0] if isinstance(want, tuple)
                                   else want, rtol=1e-5, atol=1e-5)
        runs[label] = lambda run=run, out=out: run(ins, out)
        sigs = module.kernel_serial.signatures or module.kernel.signatures
        notes.append(f"{label}: {'split' if run.parallel else 'serial'}; IR serial: "
                     f"{ir_counts(module.kernel_serial, sigs)}; prange: "
                     f"{ir_counts(module.kernel, sigs)}")
    return runs, notes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
          f"numba {numba.__version__}, torch {torch.__version__}, "
          f"load {os.getloadavg()[0]:.2f}")
    result = []
    for t in args.threads:
        for name in CASES:
            runs, notes = launchers(name, t)
            cmp = compare(runs, rounds=args.rounds, threads=t)
            print(f"\n{name}, {t} thread(s); " + "; ".join(notes))
            print(cmp)
            print(cmp.verdict("now", "before"))
            if "now, serial" in cmp:
                print(cmp.verdict("now", "now, serial"))
            print(cmp.conditions)
            result.append(f"{name}_t{t}={cmp.ratio('before', 'now'):.2f}")
    print("\nRESULT " + " ".join(result))


if __name__ == "__main__":
    main()
