"""A 1x1 convolution four ways, on MobileNetV3-Small's pointwise shapes (ch. 7).

A 1x1 conv with stride 1, no padding and one group is a matrix product over the
channels: on a channels-last input, the [N*H*W, Cin] view times the [Cout, Cin]
weight. This times, interleaved (`graphopt.measure.compare`), per shape:

- `onednn`: oneDNN's fused conv on its prepacked weight, the activation a post-op
  (what the backend bound before the 1x1 rule; one kernel);
- `mkl`: MKL's packed GEMM on the channels-last view, with the bias, then the
  activation in place (the backend's 1x1 rule; two kernels);
- `conv2d`: eager conv2d, then the activation in place (torch's GEMM path);
- `addmm`: addmm on the [N*H*W, Cin] view, then the activation in place.

The data behind `Policy.conv_as_gemm` (benchmarks/results/policy.md).
Run: python benchmarks/pointwise_conv.py [--batch 1] [--threads 1] [--rounds 9]
"""

from __future__ import annotations

import argparse
import math
import os

import torch
import torch.nn.functional as F

from graphopt.backend import conv_gemm, onednn
from graphopt.measure import compare
from graphopt.passes.activations import ACTIVATIONS

# MobileNetV3-Small's 1x1 stride-1 convs at 224x224 (Cin, Cout, map side, act),
# as the backend sees them after fold_conv_bn: expansions (relu or hardswish),
# projections (none) and the squeeze-and-excitation gates on a 1x1 map.
SHAPES = ((16, 16, 56, "none"), (16, 72, 56, "relu"), (72, 24, 28, "none"),
          (24, 88, 28, "relu"), (88, 24, 28, "none"), (24, 96, 28, "hardswish"),
          (96, 40, 14, "none"), (40, 240, 14, "hardswish"), (240, 40, 14, "none"),
          (48, 144, 14, "hardswish"), (144, 48, 14, "none"), (288, 96, 7, "none"),
          (96, 576, 7, "hardswish"), (576, 96, 7, "none"), (16, 8, 1, "relu"),
          (96, 24, 1, "relu"), (24, 96, 1, "none"), (576, 144, 1, "relu"),
          (144, 576, 1, "none"))


def calls(batch: int, cin: int, cout: int, side: int, act_name: str) -> dict:
    """The four ways on one shape, each checked against eager first."""
    act = ACTIVATIONS[act_name]
    x = torch.randn(batch, cin, side, side).to(memory_format=torch.channels_last)
    w, b = torch.randn(cout, cin, 1, 1), torch.randn(cout)
    rows, in_place = batch * side * side, conv_gemm.in_place(act)
    zero, one = [0, 0], [1, 1]
    dnn = onednn.pack_conv_weight(w, zero, one, one, 1, x.shape)
    mkl = onednn.pack_mkl_linear_weight(w.view(cout, cin), rows)
    w2 = w.view(cout, cin).t()
    fns = {"onednn": lambda: onednn.conv_act(x, dnn, b, zero, one, one, 1, act),
           "mkl": lambda: in_place(conv_gemm.gemm(x, mkl, w, b, rows)),
           "conv2d": lambda: in_place(F.conv2d(x, w, b)),
           "addmm": lambda: in_place(torch.addmm(
               b, x.permute(0, 2, 3, 1).reshape(rows, cin), w2))}
    expected = act.eager(F.conv2d(x, w, b))
    for name, fn in fns.items():
        got = fn().reshape(batch, side, side, cout).permute(0, 3, 1, 2) \
            if name == "addmm" else fn()
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4, msg=name)
    return fns


def _short(c) -> str:
    """mkl against onednn in a few words: the ratio, or 'noise' where IQRs overlap."""
    r = c.ratio("mkl", "onednn")
    return f"mkl/onednn {r:.2f}" + (" (noise)" if c.below_noise("mkl", "onednn")
                                     else "")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=9)
    args = p.parse_args(argv)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, batch {args.batch}, {args.threads} thread(s), "
          f"load {os.getloadavg()}")
    print(f"{'Cin->Cout map act':26}{'MFLOP':>6}" + "".join(
        f"{k:>9}" for k in ("onednn", "mkl", "conv2d", "addmm")) + "  (best, us)")
    for cin, cout, side, act in SHAPES:
        with torch.no_grad():
            fns = calls(args.batch, cin, cout, side, act)
            c = compare(fns, rounds=args.rounds, threads=args.threads)
        mflop = 2 * args.batch * side * side * cin * cout / 1e6
        times = "".join(f"{c[k].median * 1e6:7.1f}us" for k in fns)
        best = "/".join(f"{c[k].best * 1e6:.0f}" for k in fns)
        spread = max(c[k].spread for k in fns)
        print(f"{cin:>4}->{cout:<4} {side:>2}x{side:<2} {act:10}{mflop:6.2f}{times}  "
              f"best {best}  {_short(c)} (worst IQR {spread:.0%})")
    print(f"load {os.getloadavg()}; FLOPs 2*N*H*W*Cin*Cout, policy threshold "
          f"{math.log2(1 << 24):.0f} bits = {(1 << 24) / 1e6:.1f} MFLOP")


if __name__ == "__main__":
    main()
