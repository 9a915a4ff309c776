"""The numba kernel behind `backend.squeeze_excite` (chapter 7); imported on first use.

One image at a time, four loops, each a function compiled on its own. Written in
one body, the same four loops ran up to 2.6x slower than eager's six ops on
MobileNetV3's gate shapes, though their IR held vector instructions (why, we did
not find); as separate functions called in turn they run about 2.5x faster than
eager and 1.6x faster than ONNX Runtime (`benchmarks/squeeze_excite.py`). The two
products stay plain loops: they beat MKL's `addmv` alone (4-6 us against 6-8 on
the largest gate) and with the weights cold (28-33 us against 56-80).
All of it is serial: on MobileNetV3's maps (at most 56 x 56 x 16 values) waking
numba's thread pool costs more than the whole gate.

Layout: x and out are flat buffers, (N, H, W, C) for channels-last tensors (each
pixel's channels contiguous: the inner loops run along C, or along a row of a few
pixels where C is small) or (N, C, H, W) for NCHW ones (each channel's plane
contiguous: they run along the plane).
"""

import numpy as np
from numba import njit

from ..codegen.cpu import _choose_threading_layer

_choose_threading_layer()
_F = dict(fastmath=True, cache=True, boundscheck=False)
ZERO, THREE, SIXTH = np.float32(0.0), np.float32(3.0), np.float32(1.0 / 6.0)


@njit(**_F)
def pixels_per_row(pixels, c):
    """How many pixels the channels-last loops take as one row: enough that a row
    holds 64 floats or more, where they divide the image. A row of 16 floats (a
    56 x 56 x 16 map, MobileNetV3's first gate) is two vector instructions, and
    the loop's own overhead cost three times the adds (12 us against 4) (ch. 7)."""
    m = max(1, 64 // c)
    return m if pixels % m == 0 else 1


@njit(**_F)
def channel_sums(x, s, pixels, c):
    """s[k] = the sum of channel k over the image's pixels (ch. 7): rows of
    `pixels_per_row` pixels summed into one wide accumulator, then folded (one
    pixel a row: straight into s)."""
    m = pixels_per_row(pixels, c)
    width = m * c
    acc = s if m == 1 else np.empty(width, np.float32)
    for j in range(width):
        acc[j] = ZERO
    for r in range(pixels // m):
        row = r * width
        for j in range(width):
            acc[j] += x[row + j]
    if m > 1:
        for k in range(c):
            total = ZERO
            for i in range(m):
                total += acc[i * c + k]
            s[k] = total


@njit(**_F)
def plane_sums(x, s, pixels, c):
    """s[k] = the sum of channel k's plane, NCHW (ch. 7)."""
    for k in range(c):
        total = ZERO
        for p in range(pixels):
            total += x[k * pixels + p]
        s[k] = total


@njit(**_F)
def scale_planes(x, g, out, pixels, c):
    """out[k, p] = x[k, p] * g[k], NCHW (ch. 7)."""
    for k in range(c):
        for p in range(pixels):
            out[k * pixels + p] = x[k * pixels + p] * g[k]


@njit(**_F)
def matvec(w, b, v, out, n_in, n_out, scale, act):
    """out = act(scale * (W @ v) + b), W (n_out, n_in) row-major; act 0 none,
    1 ReLU, 2 SiLU, 3 hardsigmoid, 4 sigmoid (ch. 7)."""
    for j in range(n_out):
        acc = ZERO
        for k in range(n_in):
            acc += w[j * n_in + k] * v[k]
        y = acc * scale + b[j]
        if act == 1:
            y = max(y, ZERO)
        elif act == 2:
            y = y / (np.float32(1.0) + np.exp(-y))
        elif act == 3:
            y = min(max(y + THREE, ZERO), np.float32(6.0)) * SIXTH
        elif act == 4:
            y = np.float32(1.0) / (np.float32(1.0) + np.exp(-y))
        out[j] = y


@njit(**_F)
def scale_channels(x, g, out, pixels, c):
    """out[p, k] = x[p, k] * g[k], the excite (ch. 7), along rows of
    `pixels_per_row` pixels (g repeated once per pixel of the row)."""
    m = pixels_per_row(pixels, c)
    width = m * c
    row_gate = g if m == 1 else np.empty(width, np.float32)
    for i in range(1 if m == 1 else m):
        row_gate[i * c:(i + 1) * c] = g
    for r in range(pixels // m):
        row = r * width
        for j in range(width):
            out[row + j] = x[row + j] * row_gate[j]


@njit(**_F)
def squeeze_excite(x, w1, b1, w2, b2, out, images, pixels, c, c1, act, gate,
                   channels_last):
    """The whole gate for each image: sums, the two products (the mean's 1/pixels
    folded into the first), the gate, the scaled copy (ch. 7)."""
    s = np.empty(c, np.float32)
    z = np.empty(c1, np.float32)
    g = np.empty(c, np.float32)
    size = pixels * c
    for n in range(images):
        xi, oi = x[n * size:(n + 1) * size], out[n * size:(n + 1) * size]
        if channels_last:
            channel_sums(xi, s, pixels, c)
        else:
            plane_sums(xi, s, pixels, c)
        matvec(w1, b1, s, z, c, c1, np.float32(1.0) / np.float32(pixels), act)
        matvec(w2, b2, z, g, c1, c, np.float32(1.0), gate)
        if channels_last:
            scale_channels(xi, g, oi, pixels, c)
        else:
            scale_planes(xi, g, oi, pixels, c)


__all__ = ["squeeze_excite"]
