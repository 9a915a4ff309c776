"""A 1x1 convolution is a GEMM: MKL's packed GEMM over the channels (chapter 7).

A convolution with a 1x1 kernel, stride 1, no padding, dilation 1 and one group
reads one pixel per output pixel: it is the product of the [N*H*W, Cin] matrix of
pixels and the [Cout, Cin] weight. On a channels-last input that matrix is a view,
no copy, and so is the product read back as a channels-last NCHW tensor:

    x (N, Cin, H, W), channels-last  --permute-->  (N, H, W, Cin), contiguous
    MKL GEMM with the bias           ------------>  (N, H, W, Cout)
    permute back (a view)            ------------>  (N, Cout, H, W), channels-last

On MobileNetV3-Small's small maps oneDNN's fused conv spends more on its call
(descriptors, its primitive cache) than on the arithmetic, while MKL's packed GEMM
(`torch.ops.mkl._mkl_linear`, the weight packed once for the rows) has a shorter
call: the kernel policy's `conv_as_gemm` rule says where (below its
`onednn_gemm_flops`, the linears' threshold), `benchmarks/pointwise_conv.py` times
it. The activation then runs in place on the product: two kernels, which the
interpreter counts. Opt-in (`Policy(pointwise_gemm=True)`): each conv is faster
alone, the whole model is not (benchmarks/results/policy.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..passes.activations import Activation
from ..torch_internals import op_entry

_IN_PLACE = {"relu": torch.ops.aten.relu_.default,
             "hardswish": torch.ops.aten.hardswish_.default,
             "swish": torch.ops.aten.silu_.default}


def is_pointwise(weight_shape, stride, padding, dilation, groups) -> bool:
    """Whether a conv is a GEMM over its channels: a 1x1 kernel, stride 1, no
    padding, dilation 1, one group (chapter 7)."""
    return (len(weight_shape) == 4 and tuple(weight_shape[2:]) == (1, 1)
            and groups == 1 and all(s == 1 for s in stride)
            and all(p == 0 for p in padding) and all(d == 1 for d in dilation))


def rows(input_shape) -> int:
    """The GEMM's rows for a (N, C, H, W) input: one per pixel, N*H*W (ch. 7)."""
    n, _, h, w = input_shape
    return n * h * w


def in_place(act: Activation):
    """`act` applied in place to a fresh product (ch. 7): no second output buffer.
    GELU has no in-place kernel in torch: it runs out of place."""
    if act.attr == "none":
        return lambda y: y
    if act.attr in _IN_PLACE:
        return op_entry(_IN_PLACE[act.attr])
    if act.attr == "hardtanh":
        lo, hi = act.scalars
        hardtanh_ = op_entry(torch.ops.aten.hardtanh_.default)
        return lambda y: hardtanh_(y, lo, hi)
    return act.eager


def gemm(x, packed, weight, bias, batch_rows: int):
    """conv2d(x, weight, bias) for a pointwise conv on a channels-last `x` with
    `batch_rows` pixels: MKL's packed GEMM on the pixels' view, the result viewed
    back as channels-last NCHW (one kernel, the bias added by MKL) (ch. 7)."""
    return torch.ops.mkl._mkl_linear(x.permute(0, 2, 3, 1), packed, weight, bias,
                                     batch_rows).permute(0, 3, 1, 2)


def conv(x, weight, bias, stride, padding, dilation, groups):
    """The general path, for an input of another layout or size (ch. 7)."""
    return F.conv2d(x, weight, bias, stride, padding, dilation, groups)
