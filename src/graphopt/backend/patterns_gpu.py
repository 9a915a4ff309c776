"""The GPU pattern kernels behind `fused_modules` (chapter 4).

- Conv+ReLU and Conv+Add+ReLU: cuDNN's fused entry points, which torch exposes as
  `torch.cudnn_convolution_relu` and `torch.cudnn_convolution_add_relu` (one cuDNN
  call, the add and ReLU applied as the conv's output is produced).
- Linear+act: a Triton matmul with the bias and activation in its epilogue.
- LayerNorm+Add: a Triton kernel, one program per row.

Selected only for CUDA tensors. This project's machine has no GPU: the Triton kernels
are tested with Triton's CPU interpreter (TRITON_INTERPRET=1) on tiny inputs, and the
cuDNN path awaits a run on a GPU (`benchmarks/gpu_check.sh`).
"""

from __future__ import annotations

import importlib.util
import math

import torch

from ..passes.activations import Activation

_FLOAT = (torch.float32, torch.float16, torch.bfloat16)
# activation codes of patterns_triton._act (a constexpr: one compiled variant each)
ACT_CODES = {"none": 0, "relu": 1, "hardtanh": 2, "hardswish": 3, "swish": 4,
             "gelu": 5}


def _triton_runs(*tensors) -> bool:
    """Triton can run on these: CUDA tensors, or any under its CPU interpreter."""
    from ..codegen.triton import interpreting

    if importlib.util.find_spec("triton") is None:
        return False
    ts = [t for t in tensors if t is not None]
    return all(t.is_cuda for t in ts) or interpreting()


def conv_relu(x, weight, bias, m):
    """relu(conv2d(x, W, b)) as one cuDNN call (float32/16, CUDA) (ch. 4)."""
    return torch.cudnn_convolution_relu(x, weight, bias, m.stride, m.padding,
                                        m.dilation, m.groups)


def conv_add_relu(x, weight, bias, other, m):
    """relu(conv2d(x, W, b) + other) as one cuDNN call (ch. 4): z = other,
    alpha = 1."""
    return torch.cudnn_convolution_add_relu(x, weight, other, 1.0, bias, m.stride,
                                            m.padding, m.dilation, m.groups)


def triton_linear_ok(x, weight, act: Activation) -> bool:
    """Triton can run it (ch. 4): CUDA (or the interpreter), a float dtype, a
    known act.

    Exact GELU only: the tanh approximation would need its own epilogue."""
    return (_triton_runs(x, weight) and x.dtype in _FLOAT and weight.dim() == 2
            and act.attr in ACT_CODES and act.algorithm in ("", "none")
            and not torch.is_grad_enabled())


def linear_act(x, weight, bias, act: Activation, block=(32, 32, 32)):
    """act(x @ W.T + b), one Triton launch (ch. 4); x has any number of leading
    dims."""
    from . import patterns_triton as k

    a = x.reshape(-1, x.shape[-1])
    m, kdim = a.shape
    n = weight.shape[0]
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    bm, bn, bk = block
    lo, hi = (act.scalars + (0.0, 0.0))[:2]
    grid = (math.ceil(m / bm), math.ceil(n / bn))
    wt = weight.t()  # B[k, n] = W[n, k]: strides do the transpose, nothing is copied
    k.matmul_act_kernel[grid](
        a, wt, bias if bias is not None else out, out, m, n, kdim,
        a.stride(0), a.stride(1), wt.stride(0), wt.stride(1), out.stride(0),
        out.stride(1), float(lo), float(hi), HAS_BIAS=bias is not None,
        ACT=ACT_CODES[act.attr], BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk)
    return out.reshape(*x.shape[:-1], n)


def triton_rows_ok(a, b, weight, bias) -> bool:
    """Triton can run LayerNorm+Add on these rows in one program each (ch. 4)."""
    ts = [t for t in (a, b, weight, bias) if t is not None]
    return (_triton_runs(*ts) and a.shape == b.shape and a.dim() >= 1
            and all(t.is_contiguous() and t.dtype in _FLOAT for t in ts)
            and a.shape[-1] <= 65536 and not torch.is_grad_enabled())


def add_layer_norm(a, b, weight, bias, eps: float):
    """layer_norm(a + b) over the last dimension, one Triton program per row
    (ch. 4)."""
    import triton

    from . import patterns_triton as k

    n = a.shape[-1]
    out = torch.empty_like(a)
    k.add_layer_norm_kernel[(a.numel() // n,)](
        a, b, weight if weight is not None else a, bias if bias is not None else a,
        out, n, float(eps), HAS_W=weight is not None, HAS_B=bias is not None,
        BLOCK=triton.next_power_of_2(n))
    return out
