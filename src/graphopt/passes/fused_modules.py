"""The modules `fuse_patterns` puts in place of a matched pattern (chapter 4).

Each runs its pattern as ONE kernel where a library fuses it, else as the kernels
the policy (`graphopt.policy`: fixed rules on shapes by default) picks:

- CPU, float32: oneDNN with a post-op (`codegen.onednn`): the activation, or the
  residual add and ReLU, are applied to each output tile before it is stored; the
  weight is prepacked once (`prepack`, called by the pass) into oneDNN's blocked
  layout. A linear with no activation or exact GELU runs MKL's packed GEMM instead
  (then torch's GELU: two kernels) where the policy says so. LayerNorm+Add runs a
  generated numba row kernel (`codegen.rowwise`).
- CUDA: cuDNN's fused conv+ReLU / conv+add+ReLU, Triton for matmul and LayerNorm+Add
  (`codegen.patterns_gpu`).
- Anywhere else (float64, autograd recording, no oneDNN): the eager ops, out of place,
  several kernels; the pass records why in `PassResult.notes`.

`kernel` names what the last call ran ("onednn", "numba", "eager", ...), and the
interpreter counts the kernels that really ran: one for a library kernel.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..codegen import onednn
from ..codegen.onednn import RELU, Activation
from ..ops import OpKind, shape
from ..policy import resolve
from ..torch_internals import pair
from .prepacked import Counted, Prepacked


def _numel(node) -> int:
    out = shape(node) if node is not None else None
    return math.prod(out) if out is not None else 0


def _product_flops(node, contracted: int) -> int:
    """2 FLOPs (a multiply and an add) per output element per contracted input."""
    return 2 * _numel(node) * contracted


def _weight_shape(node):
    w = node.args[1]
    return shape(w) if hasattr(w, "meta") else None


def _usable(*tensors) -> bool:
    return onednn.why_not(*tensors) is None and not onednn.needs_autograd(*tensors)


ONEDNN_FASTER = "oneDNN's fused kernel measured faster here than MKL's GEMM"


class ConvReLU(Prepacked):
    """act(conv2d(x, w, b)), ReLU by default; a BN before it is folded into w and b.

    The name is the lecture notes' pattern (Conv+ReLU); `act` may be any activation of
    `codegen.onednn.ACTIVATIONS` (ReLU6, Hardswish, SiLU, GELU) (ch. 4).
    """

    graphopt_kind = OpKind.COMPUTE

    def __init__(self, stride=1, padding=0, dilation=1, groups=1,
                 act: Activation = RELU):
        super().__init__()
        self.stride, self.padding = list(pair(stride)), list(pair(padding))
        self.dilation, self.groups, self.act = list(pair(dilation)), groups, act
        self.kernel = "onednn" if onednn.available() else "eager"
        self.why_eager = "" if onednn.available() else "this torch build has no oneDNN"
        self._init_pack()

    def prepack(self, weight: torch.Tensor, input_shape, policy=None) -> None:
        """Fold the weight into oneDNN's blocked layout once (at optimize time).

        On a 1x1 feature map (a squeeze-and-excitation gate) the conv is a
        matrix-vector product and oneDNN's fixed cost per call outweighs it (chapter
        7 times both): the policy (`graphopt.policy`, fixed by default) says whether
        eager `conv2d` (then torch's activation: two kernels) runs it instead.
        """
        key = tuple(input_shape)
        if self.kernel == "onednn" and math.prod(key[2:]) == 1:
            why = resolve(policy).conv_on_tiny_map(
                self.act.attr != "none", lambda: self._eager_timed_faster(weight, key))
            if why:
                self.kernel, self.why_eager = "eager", why
                return
        self._store(weight, key, onednn.pack_conv_weight(
            weight, self.padding, self.stride, self.dilation, self.groups, key))

    def _eager_timed_faster(self, weight, key) -> bool:
        """The measured policy's question: did eager conv2d + act win here?"""
        args = (self.padding, self.stride, self.dilation, self.groups)
        return onednn.eager_conv_faster(weight, key, args, self.act)

    def _weight(self, x, weight):
        packed = self.packed(weight, tuple(x.shape))
        return weight if packed is None else packed

    def _conv(self, x, weight, bias):
        return F.conv2d(x, weight, bias, self.stride, self.padding, self.dilation,
                        self.groups)

    def forward(self, x, weight, bias):
        if self.kernel == "onednn" and _usable(x, weight, bias):
            return onednn.conv_act(x, self._weight(x, weight), bias, self.padding,
                                   self.stride, self.dilation, self.groups, self.act)
        if x.is_cuda and self.act == RELU and not onednn.needs_autograd(x, weight):
            from ..codegen import patterns_gpu
            return patterns_gpu.conv_relu(x, weight, bias, self)
        return self.act.eager(self._conv(x, weight, bias))

    def extra_repr(self) -> str:
        return (f"act={self.act.name}, stride={self.stride}, padding={self.padding}, "
                f"groups={self.groups}, kernel={self.kernel}")

    def graphopt_flops(self, node) -> int:
        """The conv's 2·(C/groups)·kh·kw per output element, plus 1 for the act."""
        w = _weight_shape(node)
        conv = _product_flops(node, math.prod(w[1:])) if w else 0
        return conv + (_numel(node) if self.act.attr != "none" else 0)


class ConvAddReLU(ConvReLU):
    """relu(conv2d(x, w, b) + other): the residual add and ReLU as oneDNN post-ops.

    Introduced in chapter 4.
    """

    def forward(self, x, weight, bias, other):
        if self.kernel == "onednn" and _usable(x, weight, bias, other) \
                and other.shape == self._out_shape(x, weight):
            return onednn.conv_add_relu(x, self._weight(x, weight), bias, other,
                                        self.padding, self.stride, self.dilation,
                                        self.groups)
        if x.is_cuda and not onednn.needs_autograd(x, weight, other):
            from ..codegen import patterns_gpu
            return patterns_gpu.conv_add_relu(x, weight, bias, other, self)
        return torch.relu(self._conv(x, weight, bias) + other)

    def graphopt_flops(self, node) -> int:
        return super().graphopt_flops(node) + _numel(node)  # the add

    def _eager_timed_faster(self, weight, key) -> bool:
        return False  # the add and ReLU ride on oneDNN's kernel: eager would take 3

    def prepack(self, weight: torch.Tensor, input_shape, policy=None) -> None:
        """As ConvReLU's, but a 1x1 map keeps oneDNN: eager would take 3 kernels."""
        key = tuple(input_shape)
        self._store(weight, key, onednn.pack_conv_weight(
            weight, self.padding, self.stride, self.dilation, self.groups, key))

    def _out_shape(self, x, weight):
        size = [(x.shape[i + 2] + 2 * self.padding[i]
                 - self.dilation[i] * (weight.shape[i + 2] - 1) - 1)
                // self.stride[i] + 1
                for i in range(2)]
        return torch.Size([x.shape[0], weight.shape[0], *size])


class LinearReLU(Counted, Prepacked):
    """act(x @ w.T + b) on a weight packed once: oneDNN's matmul with the bias and the
    activation as post-ops (one kernel), or MKL's packed GEMM with the bias, then
    torch's activation (`kernel == "mkl"`: one kernel, two with an activation) (ch. 4).
    """

    graphopt_kind = OpKind.COMPUTE

    def __init__(self, act: Activation = RELU):
        super().__init__()
        self.act = act
        self.kernel = "onednn" if onednn.available() else "eager"
        self.why = ""  # why MKL runs it (two kernels with an activation), or not
        self._init_pack()

    def prepack(self, weight: torch.Tensor, input_shape, policy=None) -> None:
        """Pack the weight once for this many rows (at optimize time).

        Where MKL is present and the activation is one MKL's GEMM can be followed by
        (none, exact GELU), the policy (`graphopt.policy`) picks MKL's packed GEMM
        (inductor freezing's float32 choice) or oneDNN's fused kernel. The fixed
        policy always takes MKL there: BERT ran 0.84-0.88x its oneDNN time at 1
        thread, 0.92-0.99x at 2, and exact GELU's oneDNN post-op lost at every
        thread count (`benchmarks/results/models_cpu.txt`); the measured policy
        times both on the recorded shape (`onednn.mkl_faster`).
        """
        rows = math.prod(input_shape[:-1])
        if self.kernel == "onednn" and self.act.name in onednn.MKL_ACTS \
                and onednn.mkl_available():
            try:
                why = resolve(policy).linear_on_mkl(
                    self.act.name,
                    lambda: onednn.mkl_faster(weight, input_shape, self.act))
                if why:
                    self._store(weight, rows,
                                onednn.pack_mkl_linear_weight(weight, rows))
                    self.kernel, self.why = "mkl", why
                    return
                self.why = ONEDNN_FASTER
            except RuntimeError as err:  # an MKL that cannot pack: oneDNN runs it
                self.why = f"MKL could not pack the weight ({err}); oneDNN runs it"
        self._store(weight, rows, onednn.pack_linear_weight(weight, rows))

    def forward(self, x, weight, bias):
        self._hidden_launch = False
        if self.kernel == "mkl" and _usable(x, weight, bias) and x.dim() >= 2:
            rows = math.prod(x.shape[:-1])
            packed = self.packed(weight, rows)
            y = F.linear(x, weight, bias) if packed is None else \
                onednn.mkl_linear(x, packed, weight, bias, rows)
            return self.act.eager(y)
        if self.kernel == "onednn" and _usable(x, weight, bias) and x.dim() >= 2:
            packed = self.packed(weight, math.prod(x.shape[:-1]))
            return onednn.linear_act(x, weight if packed is None else packed, bias,
                                     self.act)
        if x.is_cuda:
            from ..codegen import patterns_gpu
            if patterns_gpu.triton_linear_ok(x, weight, self.act):
                self._hidden_launch = True
                return patterns_gpu.linear_act(x, weight, bias, self.act)
        return self.act.eager(F.linear(x, weight, bias))

    def extra_repr(self) -> str:
        return f"act={self.act.name}, kernel={self.kernel}"

    def graphopt_flops(self, node) -> int:
        """2·K per output element (W is N x K), plus 1 for the act."""
        w = _weight_shape(node)
        mm = _product_flops(node, w[1]) if w else 0
        return mm + (_numel(node) if self.act.attr != "none" else 0)


class PackedConv(ConvReLU):
    """A conv no pattern took: oneDNN on its prepacked weight, act "none" (ch. 4)."""


class PackedLinear(LinearReLU):
    """A linear no pattern took: oneDNN on its prepacked weight, act "none" (ch. 4)."""


class MatMulAddReLU(nn.Module):
    """relu(a @ b + c) on activations (b is not a weight): addmm, then ReLU (ch. 4).

    No CPU library fuses an activation into a product of two activations; the matmul
    with the add (one `addmm` where shapes allow) and the ReLU stay two kernels. A
    constant `b` becomes `LinearReLU` instead (the pass transposes it once).
    """

    graphopt_kind = OpKind.COMPUTE
    kernel = "eager"

    def graphopt_flops(self, node) -> int:
        """2·K per output element for a @ b, 1 for the add, 1 for the ReLU."""
        a = shape(node.args[0]) if hasattr(node.args[0], "meta") else None
        return (_product_flops(node, a[-1]) if a else 0) + 2 * _numel(node)

    def forward(self, a, b, c):
        if a.dim() == 2 and b.dim() == 2:
            return torch.relu(torch.addmm(c, a, b))
        return torch.relu(torch.matmul(a, b) + c)


class AddLayerNorm(Counted, nn.Module):
    """layer_norm(a + b): the residual add feeding a layer norm, as in a Transformer.

    On the CPU one generated numba kernel reads a and b once, computes each row's
    mean and variance in one pass (Welford) and writes only the normalised row (ch. 4).
    """

    graphopt_kind = OpKind.REDUCTION

    def __init__(self, normalized_shape, eps=1e-5):
        super().__init__()
        self.normalized_shape, self.eps = tuple(normalized_shape), eps
        self.kernel = "numba"

    def graphopt_flops(self, node) -> int:
        """What ops.flops gives add (one per element) and layer_norm (one per input
        element): fusion changes bytes and kernels, not the arithmetic counted."""
        return 2 * _numel(node)

    def forward(self, a, b, weight, bias):
        from ..codegen import patterns_gpu, rowwise

        self._hidden_launch = len(self.normalized_shape) == 1
        if self._hidden_launch and self.kernel == "numba" \
                and rowwise.usable(a, b, weight, bias):
            return rowwise.add_layer_norm(a, b, weight, bias, self.eps)
        if self._hidden_launch and patterns_gpu.triton_rows_ok(a, b, weight, bias):
            return patterns_gpu.add_layer_norm(a, b, weight, bias, self.eps)
        self._hidden_launch = False
        return F.layer_norm(a + b, self.normalized_shape, weight, bias, self.eps)
