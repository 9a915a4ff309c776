"""Prepacking (权重预打包): each fused module's weight, once, in its kernel's layout.

Introduced in chapter 4, done by the backend stage (chapter 7). oneDNN and MKL read
a weight fastest in their own blocked layout; converting it is constant folding of
a layout change the kernel would otherwise redo on every call. The kernel policy
(`graphopt.policy`, fixed rules on shapes by default) decides the cases where the
one fused library kernel is not the best choice:

- a conv on a 1x1 feature map (a squeeze-and-excitation gate) is a matrix-vector
  product, and oneDNN's fixed cost per call outweighs it: eager `conv2d`, then
  torch's activation (two kernels), as the policy says;
- a linear with no activation or exact GELU may run MKL's packed GEMM with the bias
  (inductor freezing's float32 choice), then torch's GELU;
- a conv or linear with an activation below the policy's `small_gemm_flops` runs
  its library ops unfused (eager conv2d or MKL's GEMM, then the activation): oneDNN's
  fixed cost per call is more than such a product takes.
"""

from __future__ import annotations

import math

import torch

from ..passes.fused_modules import ConvAddReLU, ConvReLU, LinearReLU
from ..policy import resolve
from . import onednn, prepacked

ONEDNN_FASTER = "oneDNN's fused kernel measured faster here than MKL's GEMM"


def prepack(module, weight: torch.Tensor, input_shape, policy=None,
            flops: int | None = None) -> None:
    """Pack `weight` for `module`'s kernel and this input shape (or rows) (ch. 7).

    `flops`: the pattern's arithmetic (`graphopt_flops`), for the policy's rule on
    small products; None leaves that rule out.
    """
    if isinstance(module, ConvAddReLU):  # oneDNN still: eager takes 3 kernels
        _pack_conv(module, weight, tuple(input_shape))
    elif isinstance(module, ConvReLU):
        _conv(module, weight, tuple(input_shape), resolve(policy), flops)
    elif isinstance(module, LinearReLU):
        _linear(module, weight, tuple(input_shape), resolve(policy), flops)


def _pack_conv(module, weight, key) -> None:
    prepacked.store(module, weight, key, onednn.pack_conv_weight(
        weight, module.padding, module.stride, module.dilation, module.groups, key))


def _conv(module: ConvReLU, weight, key, policy, flops) -> None:
    why = ""
    if module.kernel == "onednn" and math.prod(key[2:]) == 1:
        def eager_won() -> bool:  # the measured policy's question
            args = (module.padding, module.stride, module.dilation, module.groups)
            return onednn.eager_conv_faster(weight, key, args, module.act)
        why = policy.conv_on_tiny_map(module.act.attr != "none", eager_won,
                                      key=_choice_key(module, weight, key))
    if not why and module.kernel == "onednn" and flops is not None:
        why = policy.too_small_for_onednn(flops, grouped=module.groups > 1)
    if why:
        module.kernel, module.why_eager = "eager", why
        return
    _pack_conv(module, weight, key)


def _linear(module: LinearReLU, weight, input_shape, policy, flops) -> None:
    """MKL's packed GEMM where the policy picks it, else oneDNN's, for these rows.

    The fixed policy always takes MKL where it can run the activation after it
    (none, exact GELU): BERT ran 0.84-0.88x its oneDNN time at 1 thread, 0.92-0.99x
    at 2, and exact GELU's oneDNN post-op lost at every thread count
    (`benchmarks/results/models_cpu.txt`); the measured policy times both on the
    recorded shape (`onednn.mkl_faster`). Below `small_gemm_flops` MKL (or, without
    MKL, the eager ops) takes any activation.
    """
    rows = math.prod(input_shape[:-1])
    small = policy.too_small_for_onednn(flops) if flops is not None else ""
    if module.kernel == "onednn" and small and not onednn.mkl_available():
        module.kernel, module.why_eager = "eager", small
        return
    if module.kernel == "onednn" and (module.act.name in onednn.MKL_ACTS or small) \
            and onednn.mkl_available():
        try:
            why = (policy.linear_on_mkl(
                module.act.name,
                lambda: onednn.mkl_faster(weight, input_shape, module.act),
                key=_choice_key(module, weight, input_shape))
                if module.act.name in onednn.MKL_ACTS else "") or small
            if why:
                prepacked.store(module, weight, rows,
                                  onednn.pack_mkl_linear_weight(weight, rows))
                module.kernel, module.why = "mkl", why
                return
            module.why = ONEDNN_FASTER
        except RuntimeError as err:  # an MKL that cannot pack: oneDNN runs it
            module.why = f"MKL could not pack the weight ({err}); oneDNN runs it"
    prepacked.store(module, weight, rows, onednn.pack_linear_weight(weight, rows))


def _choice_key(module, weight, input_shape) -> str:
    """What a measured policy's record keys this module's timed choice by."""
    return (f"{type(module).__name__} {module.act.name} w{tuple(weight.shape)} "
            f"x{tuple(input_shape)} {getattr(module, 'stride', '')} "
            f"{getattr(module, 'padding', '')} {getattr(module, 'groups', '')}")
