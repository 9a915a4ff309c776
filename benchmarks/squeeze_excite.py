"""The squeeze-excite gate as one numba kernel: alone, and in MobileNetV3-Small (ch. 7).

Run:  python benchmarks/squeeze_excite.py [--threads N] [--rounds R]

1. Each of MobileNetV3-Small's nine gate shapes (batch 1 and 8, channels-last): the
   `SqueezeExcite` module's reference ops (pool, conv, ReLU, conv, hardsigmoid, mul:
   what eager runs) against `backend.squeeze_excite.gate`, the one kernel.
2. The whole model, batch 1 and 8, optimised by the default pipeline and by the
   same pipeline with the Squeeze+Excite row left out of the pattern table (each
   gate then runs its six ops, every other node as before: both on the fast path),
   and eager, in one interleaved run (graphopt.measure.compare: median, IQR).

Last line:  RESULT gate_b1_sum_ratio=<kernel/eager> model_b1=<kernel/reference> ...
"""

from __future__ import annotations

import argparse

import torch

import graphopt
from graphopt import PIPELINE
from graphopt.backend import squeeze_excite
from graphopt.measure import compare
from graphopt.models import example
from graphopt.passes import PATTERNS, fuse_patterns
from graphopt.passes.fused_modules import SqueezeExcite

# MobileNetV3-Small's gates at 224x224: (channels, squeezed, map side)
GATES = ((16, 8, 56), (96, 24, 14), (240, 64, 14), (240, 64, 14), (120, 32, 14),
         (144, 40, 14), (288, 72, 7), (576, 144, 7), (576, 144, 7))


def one_gate(batch: int, c: int, c1: int, side: int, rounds: int, threads: int):
    """(eager median, kernel median) for one gate shape, seconds."""
    torch.manual_seed(0)
    x = torch.randn(batch, c, side, side).to(memory_format=torch.channels_last)
    w = (torch.randn(c1, c, 1, 1) * 0.1, torch.randn(c1),
         torch.randn(c, c1, 1, 1) * 0.1, torch.randn(c))
    module = SqueezeExcite()
    arrays = squeeze_excite.Weights()(*w)
    with torch.no_grad():
        torch.testing.assert_close(
            squeeze_excite.gate(x, arrays, "relu", "hardsigmoid"),
            module.reference(x, *w), atol=1e-5, rtol=1e-5)
        t = compare({"eager": lambda: module.reference(x, *w),
                     "kernel": lambda: squeeze_excite.gate(x, arrays, "relu",
                                                           "hardsigmoid")},
                    rounds=rounds, threads=threads)
    return t, t["eager"].median, t["kernel"].median


def without_gates(gm):
    """fuse_patterns with every row of the table but Squeeze+Excite."""
    return fuse_patterns(gm, table=[p for p in PATTERNS if p.name != "Squeeze+Excite"])


def whole_model(batch: int, rounds: int, threads: int):
    """The model optimised with the full pipeline and with the gate row left out of
    the pattern table (its gates then run their six ops), and eager."""
    model, inputs = example("mobilenet_v3_small", batch=batch)
    opt = graphopt.optimize(model, *inputs).module
    steps = [without_gates if s == "fuse_patterns" else s for s in PIPELINE]
    no_row = graphopt.optimize(model, *inputs, passes=[*steps, "lower", "backend"])
    gates = [m for m in opt.modules() if isinstance(m, SqueezeExcite)]
    with torch.no_grad():
        t = compare({"eager": model, "without the gate row": no_row.module,
                     "with it": opt}, *inputs, rounds=rounds, min_run_time=2.0,
                    threads=threads)
    return t, len(gates)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--rounds", type=int, default=15)
    a = p.parse_args()
    result = []
    for batch in (1, 8):
        eager_sum = kernel_sum = 0.0
        for c, c1, side in GATES:
            _, e, k = one_gate(batch, c, c1, side, a.rounds, a.threads)
            eager_sum, kernel_sum = eager_sum + e, kernel_sum + k
            print(f"batch {batch}, {c:3d} ch -> {c1:3d} on {side}x{side}: eager "
                  f"{e * 1e6:7.1f} us, kernel {k * 1e6:7.1f} us ({k / e:.2f}x)")
        print(f"batch {batch}, the nine gates: eager {eager_sum * 1e6:.0f} us, "
              f"kernel {kernel_sum * 1e6:.0f} us")
        t, n = whole_model(batch, a.rounds, a.threads)
        print(f"MobileNetV3-Small, batch {batch}, {n} gates:")
        print(t)
        print("  " + t.verdict("without the gate row", "with it"))
        print("  " + t.conditions)
        model_ratio = t["with it"].median / t["without the gate row"].median
        result += [f"gate_b{batch}_sum_ratio={kernel_sum / eager_sum:.2f}",
                   f"model_b{batch}={model_ratio:.3f}"]
    print("RESULT " + " ".join(result))


if __name__ == "__main__":
    main()
