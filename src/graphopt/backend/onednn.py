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
activations torch's own kernel can apply after it; the policy's `linear_kernel`
picks between the two by size (`benchmarks/results/gemm_bert_cpu.txt`), and
`mkl_faster` measures it per shape for the measured policy.
"""

from __future__ import annotations

import math
import os

import torch
import torch.nn.functional as F

from .. import policy
from ..codegen.interleaved import fastest
from ..passes.activations import Activation
from ..torch_internals import has_mkl

_MK = torch.ops.mkldnn


def available() -> bool:
    """True when this torch build has oneDNN (x86 and most ARM CPU builds do).
    Chapter 4."""
    return torch.backends.mkldnn.is_available()


def mkl_available() -> bool:
    """True when MKL's packed GEMM can run here: inductor's test (an MKL build, not
    ARM's Compute Library behind oneDNN). Chapter 4."""
    return has_mkl() and not _MK._is_mkldnn_acl_supported()


def why_not(x: torch.Tensor | None, *others) -> str | None:
    """Why the oneDNN kernel cannot take these tensors, or None when it can (ch. 4).

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
    """oneDNN's fused ops have no backward: use eager ops while autograd records.
    Chapter 4."""
    return torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)


# --------------------------------------------------------------- weight prepacking

def pack_conv_weight(weight, padding, stride, dilation, groups, input_shape):
    """The conv weight in oneDNN's blocked layout for this input shape (an mkldnn
    tensor: opaque, read only by oneDNN's kernels). Chapter 4."""
    with torch.no_grad():
        return _MK._reorder_convolution_weight(
            weight.detach(), list(padding), list(stride), list(dilation), groups,
            list(input_shape))


def pack_linear_weight(weight, batch_rows: int):
    """The (out, in) linear weight in oneDNN's blocked layout, for `batch_rows` rows.
    Chapter 4."""
    with torch.no_grad():
        return _MK._reorder_linear_weight(weight.detach(), batch_rows)


def pack_mkl_linear_weight(weight, batch_rows: int):
    """The (out, in) linear weight packed by MKL for `batch_rows` rows (an opaque
    tensor that must not be copied: MKL's packed buffer is tied to its address).
    Chapter 4."""
    with torch.no_grad():
        return torch.ops.mkl._mkl_reorder_linear_weight(weight.detach(), batch_rows)


# ------------------------------------------------------------------------ kernels

def conv_act(x, weight, bias, padding, stride, dilation, groups, act: Activation):
    """act(conv2d(x, W, b)): one oneDNN kernel (`weight` plain or prepacked) (ch. 4)."""
    return _MK._convolution_pointwise(
        x, weight, bias, padding, stride, dilation, groups, act.attr,
        list(act.scalars), act.algorithm)


def conv_add_relu(x, weight, bias, other, padding, stride, dilation, groups,
                  relu: bool = True):
    """relu(conv2d(x, W, b) + other): one kernel, the add as a binary post-op (ch. 4);
    `relu=False`: conv2d(x, W, b) + other (Conv+Add).

    The argument order is inductor's: `other` right after `x`, then the binary attr
    "add" with alpha 1.0, then the unary post-op (None: none).
    """
    return _MK._convolution_pointwise.binary(
        x, other, weight, bias, padding, stride, dilation, groups, "add", 1.0,
        "relu" if relu else None, [], "")


def linear_act(x, weight, bias, act: Activation):
    """act(x @ W.T + b): one oneDNN matmul with the bias and activation as post-ops.
    Chapter 4."""
    return _MK._linear_pointwise(x, weight, bias, act.attr, list(act.scalars),
                                 act.algorithm)


# The activations after which MKL's GEMM + torch's kernel may run instead of oneDNN's
# post-op (the policy's `linear_kernel` decides: oneDNN by default; on the Xeon runs
# of `policy.md` MKL won, on the AVX-512 EPYC of `gemm_bert_cpu.txt` oneDNN did, its
# exact-GELU post-op included). ReLU-like post-ops stay fused.
MKL_ACTS = policy.MKL_ACTS
MKL_MARGIN = 0.97  # MKL must be this much faster: a tie keeps the fewer kernels
_MKL_CHOICE: dict = {}  # (input shape, weight shape, act, threads, wait) -> bool


def mkl_linear(x, packed, weight, bias, batch_rows: int):
    """x @ W.T + b on MKL's packed GEMM: one kernel, the bias added by MKL (ch. 4).

    `weight` is the plain weight the pack came from; MKL runs it with `F.linear`
    when x does not have the `batch_rows` rows the pack was made for.
    """
    return torch.ops.mkl._mkl_linear(x, packed, weight, bias, batch_rows)


def mkl_faster(weight, input_shape, act: Activation) -> bool:
    """Whether MKL's GEMM then torch's `act` ran faster than oneDNN's fused kernel.

    Measured once per shape, activation, thread count and OpenMP wait policy (the
    winner changes with them: at 1 thread MKL won every BERT linear, at 2 threads with
    OMP_WAIT_POLICY=PASSIVE it lost some plain ones), on random data of the recorded
    shape with a bias: interleaved rounds, the fastest of each (noise only adds
    time). The choice decides speed only: both kernels give the linear's result.
    Chapter 7.
    """
    key = (tuple(input_shape), tuple(weight.shape), act.name,
           torch.get_num_threads(), os.environ.get("OMP_WAIT_POLICY", ""))
    if key not in _MKL_CHOICE:
        _MKL_CHOICE[key] = _measure_mkl(weight, input_shape, act)
    return _MKL_CHOICE[key]


def _sample(weight, input_shape):
    """Random input of the recorded shape, the weight, a random bias."""
    gen = torch.Generator().manual_seed(0)  # the caller's random stream is untouched
    x = torch.randn(tuple(input_shape), generator=gen)
    return x, weight.detach(), torch.randn(weight.shape[0], generator=gen)


def _beats_onednn(runs: dict, rounds: int) -> bool:
    """Whether the run other than "onednn" was faster by MKL_MARGIN (interleaved
    rounds, the fastest of each: noise only adds time)."""
    with torch.no_grad():
        best = fastest(runs, rounds)
    (other,) = set(runs) - {"onednn"}
    return best[other] < MKL_MARGIN * best["onednn"]


def _measure_mkl(weight, input_shape, act: Activation, rounds: int = 9) -> bool:
    rows = math.prod(input_shape[:-1])
    x, w, b = _sample(weight, input_shape)
    dnn, mkl = pack_linear_weight(w, rows), pack_mkl_linear_weight(w, rows)
    return _beats_onednn({"onednn": lambda: linear_act(x, dnn, b, act),
                          "mkl": lambda: act.eager(mkl_linear(x, mkl, w, b, rows))},
                         rounds)


_EAGER_CONV_CHOICE: dict = {}  # (input shape, weight shape, conv args, act, threads)


def eager_conv_faster(weight, input_shape, conv_args, act: Activation) -> bool:
    """Whether eager conv2d then torch's `act` ran faster than oneDNN's fused conv.

    Asked for a 1x1 input map only (a squeeze-and-excitation gate: a matrix-vector
    product), where oneDNN's fixed cost per call can outweigh the work (chapter 7
    times both). `conv_args` is (padding, stride, dilation, groups). Measured once
    per shape, activation and thread count, as `mkl_faster` is; the fused kernel must
    lose by MKL_MARGIN, since eager launches two kernels.
    """
    key = (tuple(input_shape), tuple(weight.shape), tuple(map(str, conv_args)),
           act.name, torch.get_num_threads())
    if key not in _EAGER_CONV_CHOICE:
        _EAGER_CONV_CHOICE[key] = _measure_eager_conv(weight, input_shape, conv_args,
                                                      act)
    return _EAGER_CONV_CHOICE[key]


def _measure_eager_conv(weight, input_shape, conv_args, act, rounds: int = 7) -> bool:
    padding, stride, dilation, groups = conv_args
    x, w, b = _sample(weight, input_shape)
    packed = pack_conv_weight(w, padding, stride, dilation, groups, x.shape)
    return _beats_onednn(
        {"onednn": lambda: conv_act(x, packed, b, padding, stride, dilation, groups,
                                    act),
         "eager": lambda: act.eager(F.conv2d(x, w, b, stride, padding, dilation,
                                             groups))}, rounds)
