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
    conv2d and conv3d weights (output channels first). The arithmetic runs in the
    BN's precision; the results are cast to the conv's dtypes.
    """
    with torch.no_grad():
        # dtypes as torch.nn.utils.fusion.fuse_conv_bn_weights: the folded weight keeps
        # the conv weight's dtype, the bias the conv bias's (or the weight's when the
        # conv has none), so a bfloat16 conv after folding still gets a bfloat16 bias.
        if conv_b is None:
            conv_b = torch.zeros_like(bn_mean, dtype=conv_w.dtype)
        if bn_w is None:
            bn_w = torch.ones_like(bn_mean)
        if bn_b is None:
            bn_b = torch.zeros_like(bn_mean)
        scale = bn_w * torch.rsqrt(bn_var + bn_eps)
        per_channel = scale.reshape(-1, *([1] * (conv_w.dim() - 1)))
        weight = (conv_w * per_channel).to(conv_w.dtype)
        bias = ((conv_b - bn_mean) * scale + bn_b).to(conv_b.dtype)
    return weight, bias
