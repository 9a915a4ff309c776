"""The modules `fuse_patterns` puts in place of a matched pattern (chapter 4).

Each holds what its pattern computes (the conv's geometry, the activation, the
norm's shape) and runs it by reference: `reference` is the pattern's eager ops,
one after another, out of place, so a graph that was only fused runs as many
kernels as before and the interpreter counts each. Making the pattern ONE kernel is
the backend stage's job (`graphopt.backend`, chapter 7): it binds a library kernel
to each module (oneDNN with a post-op, MKL's GEMM, a numba row kernel, cuDNN or
Triton on a GPU), prepacks its weight, and names the choice in `kernel` and in the
stage's notes.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..ops import OpKind, shape
from ..torch_internals import pair
from .activations import RELU, Activation
from .prepacked import FusedPattern, Prepacked


def _numel(node) -> int:
    out = shape(node) if node is not None else None
    return math.prod(out) if out is not None else 0


def _product_flops(node, contracted: int) -> int:
    """2 FLOPs (a multiply and an add) per output element per contracted input."""
    return 2 * _numel(node) * contracted


def _weight_shape(node):
    w = node.args[1]
    return shape(w) if hasattr(w, "meta") else None


class ConvReLU(Prepacked):
    """act(conv2d(x, w, b)), ReLU by default; a BN before it is folded into w and b.

    The name is the lecture notes' pattern (Conv+ReLU); `act` may be any activation of
    `activations.ACTIVATIONS` (ReLU6, Hardswish, SiLU, GELU) (ch. 4).
    """

    graphopt_kind = OpKind.COMPUTE

    def __init__(self, stride=1, padding=0, dilation=1, groups=1,
                 act: Activation = RELU):
        super().__init__()
        self.stride, self.padding = list(pair(stride)), list(pair(padding))
        self.dilation, self.groups, self.act = list(pair(dilation)), groups, act

    def conv(self, x, weight, bias):
        return F.conv2d(x, weight, bias, self.stride, self.padding, self.dilation,
                        self.groups)

    def reference(self, x, weight, bias):
        return self.act.eager(self.conv(x, weight, bias))

    def extra_repr(self) -> str:
        return (f"act={self.act.name}, stride={self.stride}, padding={self.padding}, "
                f"groups={self.groups}, kernel={self.kernel}")

    def graphopt_flops(self, node) -> int:
        """The conv's 2·(C/groups)·kh·kw per output element, plus 1 for the act."""
        w = _weight_shape(node)
        conv = _product_flops(node, math.prod(w[1:])) if w else 0
        return conv + (_numel(node) if self.act.attr != "none" else 0)


class ConvAddReLU(ConvReLU):
    """act(conv2d(x, w, b) + other): the residual block's tail (ch. 4); `act` is
    ReLU (Conv+Add+ReLU) or none (Conv+Add: an inverted residual's tail)."""

    def reference(self, x, weight, bias, other):
        return self.act.eager(self.conv(x, weight, bias) + other)

    def graphopt_flops(self, node) -> int:
        return super().graphopt_flops(node) + _numel(node)  # the add

    def out_shape(self, x, weight):
        """The conv's output shape for input `x` (the add's other side must match)."""
        size = [(x.shape[i + 2] + 2 * self.padding[i]
                 - self.dilation[i] * (weight.shape[i + 2] - 1) - 1)
                // self.stride[i] + 1
                for i in range(2)]
        return torch.Size([x.shape[0], weight.shape[0], *size])


class LinearReLU(Prepacked):
    """act(x @ w.T + b): a linear and its activation (ch. 4)."""

    graphopt_kind = OpKind.COMPUTE

    def __init__(self, act: Activation = RELU):
        super().__init__()
        self.act = act
        self.why = ""  # the backend's reason for its kernel, when it is not oneDNN's

    def reference(self, x, weight, bias):
        return self.act.eager(F.linear(x, weight, bias))

    def extra_repr(self) -> str:
        return f"act={self.act.name}, kernel={self.kernel}"

    def graphopt_flops(self, node) -> int:
        """2·K per output element (W is N x K), plus 1 for the act."""
        w = _weight_shape(node)
        mm = _product_flops(node, w[1]) if w else 0
        return mm + (_numel(node) if self.act.attr != "none" else 0)


class MatMulAddReLU(FusedPattern):
    """relu(a @ b + c) on activations (b is not a weight): addmm, then ReLU (ch. 4).

    No CPU library fuses an activation into a product of two activations; the matmul
    with the add (one `addmm` where shapes allow) and the ReLU stay two kernels. A
    constant `b` becomes `LinearReLU` instead (the pass transposes it once).
    """

    graphopt_kind = OpKind.COMPUTE

    def graphopt_flops(self, node) -> int:
        """2·K per output element for a @ b, 1 for the add, 1 for the ReLU."""
        a = shape(node.args[0]) if hasattr(node.args[0], "meta") else None
        return (_product_flops(node, a[-1]) if a else 0) + 2 * _numel(node)

    def reference(self, a, b, c):
        if a.dim() == 2 and b.dim() == 2:
            return torch.relu(torch.addmm(c, a, b))
        return torch.relu(torch.matmul(a, b) + c)


class AddLayerNorm(FusedPattern):
    """layer_norm(a + b): the residual add feeding a layer norm, as in a Transformer.

    The backend binds one row kernel that reads a and b once, computes each row's
    mean and variance in one pass (Welford) and writes only the normalised row
    (`backend.rowwise`) (ch. 4).
    """

    graphopt_kind = OpKind.REDUCTION

    def __init__(self, normalized_shape, eps=1e-5):
        super().__init__()
        self.normalized_shape, self.eps = tuple(normalized_shape), eps

    def graphopt_flops(self, node) -> int:
        """What ops.flops gives add (one per element) and layer_norm (one per input
        element): fusion changes bytes and kernels, not the arithmetic counted."""
        return 2 * _numel(node)

    def reference(self, a, b, weight, bias):
        return F.layer_norm(a + b, self.normalized_shape, weight, bias, self.eps)


class SqueezeExcite(FusedPattern):
    """x * gate(conv(act(conv(mean(x))))): the squeeze-excite block's channel gate,
    as MobileNetV3 (ReLU, hardsigmoid) and EfficientNet (SiLU, sigmoid) write it.

    The mean squeezes each channel's map to one number; both convs are 1x1 on that
    1x1 map, so each is a small matrix-vector product per image; the gate then
    scales every pixel of its channel. The backend binds ONE numba kernel
    (`backend.squeeze_excite`): it reads x twice (the mean, then the product) and
    writes the output once, where eager runs six ops and writes five results.
    Introduced in chapter 7.
    """

    graphopt_kind = OpKind.REDUCTION

    def __init__(self, act: Activation = RELU, gate: str = "hardsigmoid"):
        super().__init__()
        self.act, self.gate = act, gate

    def reference(self, x, w1, b1, w2, b2):
        squeezed = F.adaptive_avg_pool2d(x, 1)  # as torchvision writes it
        g = F.conv2d(self.act.eager(F.conv2d(squeezed, w1, b1)), w2, b2)
        g = F.hardsigmoid(g) if self.gate == "hardsigmoid" else torch.sigmoid(g)
        return x * g

    def extra_repr(self) -> str:
        return f"act={self.act.name}, gate={self.gate}, kernel={self.kernel}"

    def graphopt_flops(self, node) -> int:
        """The mean and the product (one each per element of x), the two products
        (2 per weight per image) and the two activations (one per element)."""
        x = node.args[0]
        n = shape(x)[0] if shape(x) else 0
        weights = sum(math.prod(shape(w) or (0,)) for w in node.args[1:5:2]
                      if hasattr(w, "meta"))
        c = shape(x)[1] if shape(x) else 0
        return 2 * _numel(x) + n * (2 * weights + 2 * c)
