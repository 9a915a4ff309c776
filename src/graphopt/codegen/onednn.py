"""The CPU pattern kernels: oneDNN convolutions and matmuls with post-ops (chapter 4).

oneDNN (the CPU library behind PyTorch's `mkldnn` ops) runs a convolution or a matrix
product and applies an activation, or an add of another tensor and then an activation,
to each output tile while it is still in registers: one kernel launch, the
intermediate never reaches memory. These are the same entry points inductor calls
(`torch/_inductor/fx_passes/mkldnn_fusion.py`):

    mkldnn._convolution_pointwise(x, W, b, padding, stride, dilation, groups,
                                  attr, scalars, algorithm)
    mkldnn._convolution_pointwise.binary(x, other, W, b, padding, stride, dilation,
                                         groups, "add", 1.0, "relu", [], "")
    mkldnn._linear_pointwise(x, W, b, attr, scalars, algorithm)

The weight can be *prepacked* once into oneDNN's blocked layout (`pack_conv_weight`,
`pack_linear_weight`): a constant-folding step, done at optimize time, that the
kernel would otherwise repeat on every call.

A float32 linear can also run on MKL's packed GEMM (`mkl_linear` on a weight packed
by `pack_mkl_linear_weight`), the kernel inductor's freezing picks for float32 linears
on an x86 CPU with MKL. It takes the bias but no activation: `MKL_ACTS` names the
activations that run faster as MKL's GEMM, then torch's own kernel (measured on
BERT, `benchmarks/results/cpu_bert_mkl_ab.txt`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

_MK = torch.ops.mkldnn


@dataclass(frozen=True)
class Activation:
    """An activation as oneDNN names it (`attr`, `scalars`, `algorithm`) and as eager.

    `name` is the reader's name ("relu6"); `eager` applies it out of place.
    """

    name: str
    attr: str
    scalars: tuple = ()
    algorithm: str = ""

    def eager(self, y: torch.Tensor) -> torch.Tensor:
        if self.attr == "relu":
            return torch.relu(y)
        if self.attr == "hardtanh":
            return F.hardtanh(y, *self.scalars)
        if self.attr == "hardswish":
            return F.hardswish(y)
        if self.attr == "swish":
            return F.silu(y)
        if self.attr == "gelu":
            return F.gelu(y, approximate=self.algorithm)
        return y  # "none"


# The activations real models use, by the reader's name.
RELU = Activation("relu", "relu")
ACTIVATIONS = {
    "relu": RELU,
    "relu6": Activation("relu6", "hardtanh", (0.0, 6.0)),
    "hardswish": Activation("hardswish", "hardswish"),
    "silu": Activation("silu", "swish"),
    "gelu": Activation("gelu", "gelu", (), "none"),
    "gelu_tanh": Activation("gelu_tanh", "gelu", (), "tanh"),
    "none": Activation("none", "none"),
}


def hardtanh(lo: float, hi: float) -> Activation:
    """Hardtanh with any bounds (ReLU6 is hardtanh(0, 6))."""
    name = "relu6" if (lo, hi) == (0.0, 6.0) else f"hardtanh({lo:g}, {hi:g})"
    return Activation(name, "hardtanh", (float(lo), float(hi)))


def available() -> bool:
    """True when this torch build has oneDNN (x86 and most ARM CPU builds do)."""
    return torch.backends.mkldnn.is_available()


def mkl_available() -> bool:
    """True when MKL's packed GEMM can run here: inductor's test (an MKL build, not
    ARM's Compute Library behind oneDNN)."""
    return bool(torch._C.has_mkl) and not _MK._is_mkldnn_acl_supported()


def why_not(x: torch.Tensor | None, *others) -> str | None:
    """Why the oneDNN kernel cannot take these tensors, or None when it can.

    Checked at optimize time on the recorded shapes and again on every call.
    """
    if not available():
        return "this torch build has no oneDNN"
    tensors = [t for t in (x, *others) if isinstance(t, torch.Tensor)]
    if any(t.device.type != "cpu" for t in tensors):
        return "not a CPU tensor"
    if any(t.dtype is not torch.float32 for t in tensors):
        return "dtype is not float32 (oneDNN's other dtypes need CPU support we check)"
    return None


def needs_autograd(*tensors) -> bool:
    """oneDNN's fused ops have no backward: use eager ops while autograd records."""
    return torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)


# --------------------------------------------------------------- weight prepacking

def pack_conv_weight(weight, padding, stride, dilation, groups, input_shape):
    """The conv weight in oneDNN's blocked layout for this input shape (an mkldnn
    tensor: opaque, read only by oneDNN's kernels)."""
    with torch.no_grad():
        return _MK._reorder_convolution_weight(
            weight.detach(), list(padding), list(stride), list(dilation), groups,
            list(input_shape))


def pack_linear_weight(weight, batch_rows: int):
    """The (out, in) linear weight in oneDNN's blocked layout, for `batch_rows` rows."""
    with torch.no_grad():
        return _MK._reorder_linear_weight(weight.detach(), batch_rows)


def pack_mkl_linear_weight(weight, batch_rows: int):
    """The (out, in) linear weight packed by MKL for `batch_rows` rows (an opaque
    tensor that must not be copied: MKL's packed buffer is tied to its address)."""
    with torch.no_grad():
        return torch.ops.mkl._mkl_reorder_linear_weight(weight.detach(), batch_rows)


# ------------------------------------------------------------------------ kernels

def conv_act(x, weight, bias, padding, stride, dilation, groups, act: Activation):
    """act(conv2d(x, W, b)): one oneDNN kernel (`weight` plain or prepacked)."""
    return _MK._convolution_pointwise(
        x, weight, bias, padding, stride, dilation, groups, act.attr,
        list(act.scalars), act.algorithm)


def conv_add_relu(x, weight, bias, other, padding, stride, dilation, groups):
    """relu(conv2d(x, W, b) + other): one kernel, the add as a binary post-op.

    The argument order is inductor's: `other` right after `x`, then the binary attr
    "add" with alpha 1.0, then the unary post-op.
    """
    return _MK._convolution_pointwise.binary(
        x, other, weight, bias, padding, stride, dilation, groups, "add", 1.0,
        "relu", [], "")


def linear_act(x, weight, bias, act: Activation):
    """act(x @ W.T + b): one oneDNN matmul with the bias and activation as post-ops."""
    return _MK._linear_pointwise(x, weight, bias, act.attr, list(act.scalars),
                                 act.algorithm)


# Activations after which MKL's GEMM + torch's kernel beat oneDNN's post-op on BERT:
# none (the bias is in the GEMM: still one kernel) and exact GELU, whose oneDNN post-op
# cost 400-600 us a call against 40-155 us for torch's gelu on the same output.
# ReLU-like post-ops are cheap in oneDNN and were not measured slower: they stay fused.
MKL_ACTS = ("none", "gelu")


def mkl_linear(x, packed, weight, bias, batch_rows: int):
    """x @ W.T + b on MKL's packed GEMM: one kernel, the bias added by MKL.

    `weight` is the plain weight the pack came from; MKL runs it with `F.linear`
    when x does not have the `batch_rows` rows the pack was made for.
    """
    return torch.ops.mkl._mkl_linear(x, packed, weight, bias, batch_rows)
