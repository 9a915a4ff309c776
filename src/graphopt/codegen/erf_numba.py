"""A float32 erf that LLVM can vectorise, for exact GELU in numba kernels (chapter 6).

Exact GELU is x/2 (1 + erf(x/√2)). numba turns `math.erf` into a call to the C
library's scalar `erff`, which keeps a loop one element at a time: a generated
GELU-then-layer-norm row kernel took 58-60 ms on 2048x1024 against eager's 4-5 ms
(`benchmarks/results/README.md`, fourth pass). Like `exp_numba.exp32`, this erf is
straight-line arithmetic, both branches computed and one selected, so a loop of it
fills vector registers:

    |x| < 0.75  erf(x) = x · Σ c_n x^(2n)        the odd Taylor series, 9 terms:
                                                 no cancellation near 0
    |x| >= 0.75 erf(x) = 1 - t · exp(-x² + P(t)) t = 1 / (1 + |x|/2): the Chebyshev
                                                 fit of Numerical Recipes' `erfcc`
                                                 (fractional error below 1.2e-7)

and the sign of x put back with copysign (erf(-0) is -0, NaN stays NaN, erf(±inf)
is ±1). `tests/test_codegen_reduce.py` measures its error against torch.erf.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .exp_numba import exp32

F = np.float32
# erf(x)/x = 2/√π Σ (-1)^n x^(2n) / (n! (2n + 1)), highest power first for Horner
TAYLOR = tuple(F(2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)))
               for n in reversed(range(9)))
# P(t) of erfc(z) ~ t exp(-z² + P(t)), highest power first
ERFC = tuple(F(c) for c in (0.17087277, -0.82215223, 1.48851587, -1.13520398,
                            0.27886807, -0.18628806, 0.09678418, 0.37409196,
                            1.00002368, -1.26551223))
SPLIT, HALF, ONE = F(0.75), F(0.5), F(1.0)


# Inlined into the caller by numba itself (LLVM found it too large to inline), so
# the caller's error model applies: the generated kernels' "numpy" one. The
# "python" model would check 1 / (1 + |x|/2) for a zero divisor, a branch that
# raises and keeps the loop scalar.
@njit(cache=True, fastmath={"contract"}, error_model="numpy", inline="always")
def erf32(x):
    """erf(x) for a float32 x, within a few ulp of torch.erf (ch. 6); its error is
    tested)."""
    a = abs(x)
    z = a * a
    s = TAYLOR[0]
    for c in TAYLOR[1:]:
        s = s * z + c
    near = a * s
    t = ONE / (ONE + HALF * a)
    p = ERFC[0]
    for c in ERFC[1:]:
        p = p * t + c
    far = ONE - t * exp32(p - z)
    return math.copysign(near if a < SPLIT else far, x)
