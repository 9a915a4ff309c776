"""Triton kernels for two of chapter 4's patterns on the GPU (imported on first use).

- `matmul_act`: C = act(A @ B + bias), tiled: each program computes one BLOCK_M x
  BLOCK_N tile of C, looping over K in BLOCK_K steps with `tl.dot`; the bias add and
  the activation are the kernel's *epilogue*, applied to the tile in registers before
  its only store.
- `add_layer_norm`: one program per row: load a and b, add, mean and variance of the
  row in registers, normalise, scale, shift, store. The sum never reaches memory.

Set TRITON_INTERPRET=1 before this module is imported to run them on CPU tensors
(tests do, on tiny sizes); on a GPU they compile to PTX.
"""

import triton
import triton.language as tl


@triton.jit
def _act(y, ACT: tl.constexpr, lo, hi):
    # codes: patterns_gpu.ACT_CODES
    if ACT == 1:  # relu; where() keeps NaN as torch.relu does (max() would drop it)
        y = tl.where(y < 0.0, 0.0, y)
    elif ACT == 2:
        y = tl.where(y < lo, lo, tl.where(y > hi, hi, y))
    elif ACT == 3:
        y = y * tl.minimum(tl.maximum(y + 3.0, 0.0), 6.0) / 6.0
    elif ACT == 4:
        y = y / (1.0 + tl.exp(-y))
    elif ACT == 5:  # exact gelu: 0.5 y (1 + erf(y / sqrt 2))
        y = 0.5 * y * (1.0 + tl.erf(y * 0.7071067811865476))
    return y


@triton.jit
def matmul_act_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                      sam, sak, sbk, sbn, scm, scn, lo, hi,
                      HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr):
    """C = act(A @ B + bias), one BLOCK_M x BLOCK_N tile per program (ch. 4)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * sam + kk[None, :] * sak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * sbk + rn[None, :] * sbn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    if HAS_BIAS:  # epilogue: bias and activation on the tile, still in registers
        acc += tl.load(bias_ptr + rn, mask=rn < N, other=0.0)[None, :]
    acc = _act(acc, ACT, lo, hi)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def add_layer_norm_kernel(a_ptr, b_ptr, w_ptr, bias_ptr, out_ptr, N, eps,
                          HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                          BLOCK: tl.constexpr):
    """out = layer_norm(a + b) of one row per program (ch. 4)."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    base = row * N
    s = tl.load(a_ptr + base + cols, mask=mask, other=0.0).to(tl.float32) \
        + tl.load(b_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(s, axis=0) / N
    d = tl.where(mask, s - mean, 0.0)
    var = tl.sum(d * d, axis=0) / N
    y = d / tl.sqrt(var + eps)
    if HAS_W:
        y = y * tl.load(w_ptr + cols, mask=mask, other=1.0)
    if HAS_B:
        y = y + tl.load(bias_ptr + cols, mask=mask, other=0.0)
    tl.store(out_ptr + base + cols, y, mask=mask)
