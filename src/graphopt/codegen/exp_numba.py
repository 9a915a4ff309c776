"""A float32 exp that LLVM can vectorise, for the generated numba kernels (chapter 6).

numba turns `math.exp` into a call to the C library's scalar `expf`: a loop that
calls it cannot use vector registers, so a softmax or a sigmoid kernel runs one
element at a time while torch and inductor run 8 (AVX2) with Sleef's vector exp.
Intel's SVML would give numba a vector exp, but only with an SVML-patched LLVM,
which the PyPI llvmlite wheels are not (`numba -s`: "llvmlite Using SVML Patched
LLVM: False"). So the kernels get this one: straight-line float and integer
arithmetic, no calls and no branches (ternaries become vector selects), the method
Cephes, Sleef and inductor use:

    n = round(x / ln 2)                  x = n ln 2 + r,  |r| <= ln(2) / 2
    r = x - n * C1 - n * C2              C1 + C2 = ln 2, C1 exact in few bits
    e^r ~ 1 + r + r^2 p(r)               p: degree-5 polynomial (Cephes' expf)
    e^x = e^r * 2^n1 * 2^n2              n1 + n2 = n, each 2^k built from its bits

Splitting 2^n in two keeps every factor a normal float, so results down to the
smallest denormal come out right. Inputs past the ends give exactly what torch
gives: inf above the largest x with a finite exp, 0 below the smallest x with a
nonzero one, NaN for NaN. `tests/test_codegen_reduce.py` measures its error against
torch.exp over the whole float32 range (specials and denormals included).

Compiled without fastmath: reassociating `x - n*C1 - n*C2` would lose the low bits
the two-constant split exists for. Kernels call it as `EXP(x)`; LLVM inlines it.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

F = np.float32
LOG2E = F(1.4426950408889634)
C1 = F(0.693359375)          # ln 2 rounded to 9 significant bits: n * C1 is exact
C2 = F(-2.12194440e-4)       # ln 2 - C1
P = tuple(F(c) for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                         4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1))
HI = F(88.72283172607422)    # the largest float32 x whose exp is finite
LO = F(-103.97207641601562)  # the smallest float32 x whose exp is not 0
HALF, ONE, ZERO, INF = F(0.5), F(1.0), F(0.0), F(np.inf)


@intrinsic
def _pow2(typingctx, k):
    """2**k for a whole float32 k in [-126, 127], built from its exponent bits.

    In LLVM, not numba: numba widens int32 arithmetic to int64, and these four
    instructions (convert, add the bias, shift into the exponent field,
    reinterpret as float) must stay 32-bit to fill a vector register."""
    if k != types.float32:
        return None

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        bits = builder.add(builder.fptosi(args[0], i32), ir.Constant(i32, 127))
        bits = builder.shl(bits, ir.Constant(i32, 23))
        return builder.bitcast(bits, ir.FloatType())
    return types.float32(types.float32), codegen


@njit(cache=True, fastmath={"contract"})
def exp32(x):
    """e**x for a float32 x, within a few ulp of torch.exp (ch. 6); its error is
    tested)."""
    xc = LO if x < LO else (HI if x > HI else x)
    xc = xc if xc == xc else ZERO           # NaN: any finite value, replaced below
    n = np.floor(xc * LOG2E + HALF)
    r = xc - n * C1
    r = r - n * C2
    p = P[0]
    for c in P[1:]:
        p = p * r + c
    y = p * (r * r) + r + ONE
    n1 = np.floor(n * HALF)
    y = y * _pow2(n1) * _pow2(n - n1)
    y = INF if x > HI else (ZERO if x < LO else y)
    return y if x == x else x


__all__ = ["exp32"]
