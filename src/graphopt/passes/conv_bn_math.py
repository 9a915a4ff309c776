"""The algebra of Conv+BN folding (卷积与批归一化融合), as one pure function.

Introduced in chapter 4. In eval mode batch norm is a per-channel affine map of the
convolution's output y:

    bn(y) = gamma * (y - mean) / sqrt(var + eps) + beta
          = s * y + (beta - s * mean),          s = gamma / sqrt(var + eps)

and y = W * x + b is linear in W and b, so scaling output channel c of the weight by
s[c] and shifting the bias gives one convolution that computes both:

    W' = W * s[c]    (each output channel's filter scaled)
    b' = s * (b - mean) + beta

Kept separate from the graph rewrite (fold_conv_bn.py) so it can be tested and shown
on its own, as torch does with `torch.nn.utils.fusion.fuse_conv_bn_weights`.
"""

from __future__ import annotations

import torch


def fold_conv_bn_weights(conv_w: torch.Tensor, conv_b: torch.Tensor | None,
                         bn_mean: torch.Tensor, bn_var: torch.Tensor, bn_eps: float,
                         bn_w: torch.Tensor | None, bn_b: torch.Tensor | None
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Weight and bias of one convolution equal to conv followed by eval-mode BN.

    Pure: new tensors are returned and no argument is modified. Works for conv1d,
    conv2d and conv3d weights (output channels first). The arithmetic runs in
    float64 and each result is rounded once, to the conv's dtypes.

    Why float64: one rounding instead of five. In float32 b' = s * (b - mean) + beta
    rounds at var + eps, the square root, gamma / it, * s and + beta. When beta
    cancels a running mean 3000 standard deviations out, s * mean is ~3000 x gamma,
    whose last float32 bit (~2e-4) is as large as the small b' itself; in float64
    that error is ~1e-12, and rounding b' once puts its error at b''s own scale.

    Introduced in chapter 4.
    """
    with torch.no_grad():
        # dtypes as torch.nn.utils.fusion.fuse_conv_bn_weights: the folded weight keeps
        # the conv weight's dtype, the bias the conv bias's (or the weight's when the
        # conv has none), so a bfloat16 conv after folding still gets a bfloat16 bias.
        w_dtype = conv_w.dtype
        b_dtype = w_dtype if conv_b is None else conv_b.dtype
        wide = _wide_dtype(conv_w)
        mean, var = bn_mean.to(wide), bn_var.to(wide)
        gamma = torch.ones_like(mean) if bn_w is None else bn_w.to(wide)
        beta = torch.zeros_like(mean) if bn_b is None else bn_b.to(wide)
        bias = torch.zeros_like(mean) if conv_b is None else conv_b.to(wide)
        scale = gamma / torch.sqrt(var + bn_eps)
        per_channel = scale.reshape(-1, *([1] * (conv_w.dim() - 1)))
        weight = (conv_w.to(wide) * per_channel).to(w_dtype)
        bias = ((bias - mean) * scale + beta).to(b_dtype)
    return weight, bias


def _wide_dtype(t: torch.Tensor) -> torch.dtype:
    """float64, except on a device that has none (Apple's MPS): float32 there."""
    return torch.float32 if t.device.type == "mps" else torch.float64
