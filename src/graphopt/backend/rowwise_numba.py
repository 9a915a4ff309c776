"""The numba row kernels behind `codegen.rowwise` (chapter 4); imported on first use.

Two ways to get a row's mean and variance, both reading the row from memory once:
`_two_pass` sums, then sums squared deviations while the row sits in the L1 cache
(vectorised: fastmath lets numba reassociate the sums); `_welford` does it in one
sweep, but its division per element keeps the loop scalar. The driver picks
`_two_pass` because it measured faster (see `benchmarks/`); `welford=True` keeps
the other one callable for the comparison the book prints.
"""

import numba
import numpy as np
from numba import njit, prange

from ..codegen.cpu import _choose_threading_layer

_choose_threading_layer()


@njit(inline="always", fastmath=True, cache=True)
def _two_pass(a, b, base, n):
    total = np.float32(0.0)
    for j in range(n):
        total += a[base + j] + b[base + j]
    mean = total / np.float32(n)
    m2 = np.float32(0.0)
    for j in range(n):
        d = a[base + j] + b[base + j] - mean
        m2 += d * d
    return mean, m2


@njit(inline="always", cache=True)
def _welford(a, b, base, n):
    mean = np.float32(0.0)
    m2 = np.float32(0.0)
    for j in range(n):
        s = a[base + j] + b[base + j]
        delta = s - mean
        mean += delta / np.float32(j + 1)
        m2 += delta * (s - mean)
    return mean, m2


@njit(inline="always", fastmath=True, cache=True)
def _row(a, b, w, bias, out, r, n, eps, has_w, has_b, welford):
    base = r * n
    if welford:
        mean, m2 = _welford(a, b, base, n)
    else:
        mean, m2 = _two_pass(a, b, base, n)
    rstd = np.float32(1.0) / np.sqrt(m2 / np.float32(n) + eps)
    for j in range(n):  # normalise and store: the only write to memory
        y = (a[base + j] + b[base + j] - mean) * rstd
        if has_w:
            y = y * w[j]
        if has_b:
            y = y + bias[j]
        out[base + j] = y


@njit(fastmath=True, cache=True)
def rows_serial(a, b, w, bias, out, rows, n, eps, has_w, has_b, welford):
    """LayerNorm+Add on every row, one after the other (ch. 4)."""
    for r in range(rows):
        _row(a, b, w, bias, out, r, n, eps, has_w, has_b, welford)


@njit(parallel=True, fastmath=True, cache=True)
def rows_parallel(a, b, w, bias, out, rows, n, eps, has_w, has_b, welford, blocks):
    """LayerNorm+Add on every row in `blocks` blocks of rows, one a thread (ch. 4).

    Each block calls `rows_serial`, a function compiled on its own: a row's loops
    written inside the `prange` body did not vectorise in the thread pool's
    function and ran 13-16x slower per element than `rows_serial` (1024 and 8192
    rows of 256, numba 0.68, one thread: 0.89 against 0.065 ms, 8.7 against
    0.53 ms; `benchmarks/bert_row_split.py`)."""
    size = (rows + blocks - 1) // blocks
    for c in prange(blocks):
        lo = min(rows, c * size) * n
        hi = min(rows, c * size + size) * n
        rows_serial(a[lo:hi], b[lo:hi], w, bias, out[lo:hi], (hi - lo) // n, n, eps,
                    has_w, has_b, welford)


__all__ = ["numba", "rows_parallel", "rows_serial"]
