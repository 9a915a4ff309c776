"""The small modules that `fuse_patterns` puts in place of a matched pattern (chapter 4).

Each forward is the best eager composition of the pattern: the ops after the first
one run in place on its fresh output (`relu_`, `add_`), so no intermediate tensor is
allocated or written to memory a second time. They still launch one kernel per op on
the CPU, and the interpreter counts the kernels they really launch (no
`graphopt_kernels` claim here); a compiler would emit one kernel with an epilogue.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..ops import OpKind


class ConvReLU(nn.Module):
    """relu(conv2d(x, w, b)); BN, when it was there, is already folded into w and b."""

    graphopt_kind = OpKind.COMPUTE

    def __init__(self, stride=1, padding=0, dilation=1, groups=1):
        super().__init__()
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups

    def conv(self, x, weight, bias):
        return F.conv2d(x, weight, bias, self.stride, self.padding, self.dilation,
                        self.groups)

    def forward(self, x, weight, bias):
        return self.conv(x, weight, bias).relu_()


class ConvAddReLU(ConvReLU):
    """relu(conv2d(x, w, b) + other): the residual add and ReLU run in place."""

    def forward(self, x, weight, bias, other):
        return self.conv(x, weight, bias).add_(other).relu_()


class LinearReLU(nn.Module):
    """relu(x @ w.T + b): one addmm (matmul with the bias add), then relu in place."""

    graphopt_kind = OpKind.COMPUTE

    def forward(self, x, weight, bias):
        return F.linear(x, weight, bias).relu_()


class MatMulAddReLU(nn.Module):
    """relu(a @ b + c) with the add and ReLU in place on the matmul's output."""

    graphopt_kind = OpKind.COMPUTE

    def forward(self, a, b, c):
        return torch.matmul(a, b).add_(c).relu_()


class AddLayerNorm(nn.Module):
    """layer_norm(a + b): the residual add feeding a layer norm, as in a Transformer."""

    graphopt_kind = OpKind.REDUCTION

    def __init__(self, normalized_shape, eps=1e-5):
        super().__init__()
        self.normalized_shape, self.eps = tuple(normalized_shape), eps

    def forward(self, a, b, weight, bias):
        return F.layer_norm(torch.add(a, b), self.normalized_shape, weight, bias, self.eps)
