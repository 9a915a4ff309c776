"""Prepacking (权重预打包): each fused module's weight, once, in its kernel's layout.

Introduced in chapter 4, done by the backend stage (chapter 7). oneDNN and MKL read
a weight fastest in their own blocked layout; converting it is constant folding of
a layout change the kernel would otherwise redo on every call. The kernel policy
(`graphopt.policy`, fixed rules on shapes by default) decides the cases where the
one fused library kernel is not the best choice:

- a conv on a 1x1 feature map (a squeeze-and-excitation gate) is a matrix-vector
  product, and oneDNN's fixed cost per call outweighs it: eager `conv2d`, then
  torch's activation (two kernels), as the policy says;
- any other 1x1 conv with stride 1, no padding and one group is a GEMM over the
  channels (`conv_gemm`): below the policy's `onednn_gemm_flops` it runs MKL's
  packed GEMM on the channels-last pixels, then the activation in place;
- a float32 linear runs oneDNN on its blocked prepacked weight, the bias and the
  activation as post-ops (one kernel), by the policy's `linear_kernel` rule (by
  size and installed library); `Policy(gemm_library="mkl")` keeps the earlier rule,
  MKL's packed GEMM with the bias (inductor freezing's float32 choice) where torch's
  GELU, or nothing, follows;
- a conv or linear with an activation below the policy's `small_gemm_flops` runs
  its library ops unfused (eager conv2d or MKL's GEMM, then the activation): oneDNN's
  fixed cost per call is more than such a product takes.
"""

from __future__ import annotations

import math

import torch

from ..i18n import note
from ..passes.fused_modules import ConvAddReLU, ConvReLU, LinearReLU
from ..policy import MKL_ACTS, resolve
from . import conv_gemm, onednn, onednn_direct, prepacked

ONEDNN_FASTER = "oneDNN's fused kernel measured faster here than MKL's GEMM"
# The linear rule's reasons (`Policy.linear_kernel`), as the stage notes them.
MKL_GEMM = note("MKL's packed GEMM with the bias (policy fixed: BERT's plain linears "
                "ran 0.84-0.99x their oneDNN time at 1 and 2 threads)")
MKL_GEMM_GELU = note("MKL's packed GEMM with the bias, then torch's GELU (oneDNN's "
                     "GELU post-op cost 400-600 us a call on BERT against 40-155 us)")
MKL_MEASURED = note("MKL's packed GEMM with the bias, measured faster here than "
                    "oneDNN's kernel (policy measured)")


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
    if not why and module.kernel == "onednn" and _gemm(module, weight, key, policy,
                                                       flops):
        return
    if not why and module.kernel == "onednn" and flops is not None:
        why = policy.too_small_for_onednn(flops, grouped=module.groups > 1)
    if why:
        module.kernel, module.why_eager = "eager", why
        return
    _pack_conv(module, weight, key)


def _gemm(module: ConvReLU, weight, key, policy, flops) -> bool:
    """Whether the policy's `conv_as_gemm` rule bound a pointwise conv to MKL's
    packed GEMM over its channels, its weight packed for the input's pixels
    (ch. 7). Where MKL cannot pack the weight, the other rules decide."""
    if not conv_gemm.is_pointwise(weight.shape, module.stride, module.padding,
                                  module.dilation, module.groups) or len(key) != 4:
        return False
    why = policy.conv_as_gemm(flops, module.act.name, onednn.mkl_available())
    if not why:
        return False
    rows = conv_gemm.rows(key)
    try:
        packed = onednn.pack_mkl_linear_weight(weight.flatten(1), rows)
    except RuntimeError:  # an MKL that cannot pack: oneDNN or eager, as before
        return False
    prepacked.store(module, weight, rows, packed)
    module.kernel, module.why = "mkl", why
    return True


def _linear(module: LinearReLU, weight, input_shape, policy, flops) -> None:
    """The kernel the policy's `linear_kernel` rule picks, its weight packed for
    these rows (ch. 7): oneDNN's blocked layout (the bias and activation as
    post-ops, one kernel), MKL's packed GEMM (then torch's activation), or, below
    `small_gemm_flops` without MKL, the eager ops. Where MKL cannot pack the
    weight, oneDNN runs it."""
    if module.kernel != "onednn":
        return
    rows, act = math.prod(input_shape[:-1]), module.act
    kernel, rule = policy.linear_kernel(
        flops, act.name, onednn.mkl_available(),
        timed=lambda: onednn.mkl_faster(weight, input_shape, act),
        key=_choice_key(module, weight, input_shape),
        made_once=onednn_direct.supported(act))
    if kernel == "eager":
        module.kernel, module.why_eager = "eager", policy.too_small_for_onednn(flops)
        return
    if kernel == "mkl":
        try:
            packed = onednn.pack_mkl_linear_weight(weight, rows)
        except RuntimeError as err:  # an MKL that cannot pack: oneDNN runs it
            module.why = note("MKL could not pack the weight ({error}); oneDNN runs "
                              "it", error=str(err))
        else:
            prepacked.store(module, weight, rows, packed)
            module.kernel, module.why = "mkl", _mkl_why(policy, rule, act, flops)
            return
    else:
        module.why = _onednn_why(policy, rule, act)
    prepacked.store(module, weight, rows, onednn.pack_linear_weight(weight, rows))


def _mkl_why(policy, rule: str, act, flops) -> str:
    """Why MKL's GEMM runs the linear: the policy's reason, as the stage notes it."""
    if rule == "small":
        why = policy.too_small_for_onednn(flops)
        if act.attr == "none":
            return note("MKL's packed GEMM with the bias: {why}", why=why)
        return note("MKL's packed GEMM with the bias, then torch's {act}: {why}",
                    act=act.name, why=why)
    if rule == "measured":
        return MKL_MEASURED
    if rule == "mid" and act.attr == "none":
        return note("MKL's packed GEMM with the bias: {flops} FLOPs, below {limit}, "
                    "where MKL's shorter call (some 10 us less) beats oneDNN (policy "
                    "{policy})", flops=flops, limit=policy.onednn_gemm_flops,
                    policy=policy.name)
    if rule == "mid":
        return note("MKL's packed GEMM with the bias, then torch's {act}: {flops} "
                    "FLOPs, below {limit}, where MKL's shorter call (some 10 us less) "
                    "beats oneDNN's post-ops (policy {policy})", act=act.name,
                    flops=flops, limit=policy.onednn_gemm_flops, policy=policy.name)
    return MKL_GEMM_GELU if act.name == "gelu" else MKL_GEMM


def _onednn_why(policy, rule: str, act) -> str:
    """Why oneDNN runs the linear with its post-ops: a note for each choice."""
    if rule == "measured":
        return ONEDNN_FASTER
    if rule == "made once":
        return note("oneDNN's primitive made once, the bias and {act} as post-ops, 1 "
                    "kernel (policy {policy}: below {limit} FLOPs MKL's call beats "
                    "torch's oneDNN op, not a primitive made once)", act=act.name,
                    policy=policy.name, limit=policy.onednn_gemm_flops)
    if not onednn.mkl_available():
        return note("oneDNN with the bias and {act} as post-ops, 1 kernel (no MKL "
                    "here)", act=act.name)
    if policy.gemm_library == "mkl" or act.name not in MKL_ACTS:
        return note("oneDNN with the bias and {act} as post-ops, 1 kernel (policy "
                    "{policy}: MKL's GEMM would need {act} as a second kernel)",
                    act=act.name, policy=policy.name)
    if act.attr == "none":
        return note("oneDNN on its blocked prepacked weight, the bias as a post-op, "
                    "1 kernel (policy {policy}: float32 linears from {limit} FLOPs "
                    "run oneDNN, faster than MKL's packed GEMM on BERT's linears)",
                    policy=policy.name, limit=policy.onednn_gemm_flops)
    return note("oneDNN on its blocked prepacked weight, the bias and {act} as "
                "post-ops, 1 kernel (policy {policy}: float32 linears from {limit} "
                "FLOPs run oneDNN, faster than MKL's packed GEMM then torch's {act} "
                "on BERT's linears)", act=act.name, policy=policy.name,
                limit=policy.onednn_gemm_flops)


def _choice_key(module, weight, input_shape) -> str:
    """What a measured policy's record keys this module's timed choice by."""
    return (f"{type(module).__name__} {module.act.name} w{tuple(weight.shape)} "
            f"x{tuple(input_shape)} {getattr(module, 'stride', '')} "
            f"{getattr(module, 'padding', '')} {getattr(module, 'groups', '')}")
