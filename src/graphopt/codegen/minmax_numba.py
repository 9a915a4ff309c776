"""Max and min that LLVM can vectorise, for the generated row kernels (chapter 6).

A row's max written as a compare and a select, `m = x if x > m else m` (with an
`x != x` test where NaN must propagate), stays one element at a time: LLVM turns
such a loop into a vector max reduction only under the fast-math flags 'nnan' and
'nsz', which the kernels must not have (torch's amax propagates NaN). LLVM's own
max and min intrinsics carry their NaN rule in their definition (IEEE 754's maximum
and maxNum), so its loop vectoriser keeps a lane-wise max in a vector register and
merges the lanes at the end, whatever the flags:

    MAXIMUM(a, b), MINIMUM(a, b)   llvm.maximum / llvm.minimum: NaN when either is
                                   NaN, as torch.amax and torch.amin; -0 below +0
    MAXNUM(a, b)                   llvm.maxnum: the other one when one is NaN
                                   (online softmax's block max; NaN still reaches
                                   the row through the sum of exp)

Measured on 2026-12-07 (numba 0.68, LLVM 22, AVX-512, one thread): amax and amin of
1024 x 1024 5x faster than with the compare and branch
(`benchmarks/row_kernel_blocks.py`); a softmax's block max with llvm.maxnum faster
than with llvm.maximumnum (which also orders the zeros) on rows of 37, 256 and
1024, and on rows of 37 still 16 % slower than with the compare and select: the
part of a row the vector loop leaves to scalar code costs more there.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

_FLOATS = (types.float32, types.float64)


def _binary(name: str):
    """A numba intrinsic calling LLVM's `name` on two floats (the wider type)."""
    @intrinsic
    def call(typingctx, a, b):
        if a not in _FLOATS or b not in _FLOATS:
            return None
        out = types.float64 if types.float64 in (a, b) else types.float32

        def codegen(context, builder, signature, args):
            x, y = (context.cast(builder, v, t, out)
                    for v, t in zip(args, signature.args))
            ty = x.type
            fn = builder.module.declare_intrinsic(name, [ty],
                                                  ir.FunctionType(ty, [ty, ty]))
            return builder.call(fn, [x, y])
        return out(a, b), codegen
    return call


MAXIMUM = _binary("llvm.maximum")
MINIMUM = _binary("llvm.minimum")
MAXNUM = _binary("llvm.maxnum")

__all__ = ["MAXIMUM", "MAXNUM", "MINIMUM"]
