"""The squeeze-excite gate as one numba kernel: alone, and in MobileNetV3-Small (ch. 7).

Run:  python benchmarks/squeeze_excite.py [--threads N] [--rounds R]

1. Each of MobileNetV3-Small's nine gate shapes (batch 1 and 8, channels-last): the
   `SqueezeExcite` module's reference ops (pool, conv, ReLU, conv, hardsigmoid, mul:
   what eager runs) against `backend.squeeze_excite.gate`, the one kernel, and the
   same six ops exported to ONNX Runtime (its session run on an NCHW array, its own
   layout; `--no-ort` leaves it out).
2. The whole model, batch 1 and 8, optimised by the default pipeline and by the
   same pipeline with the Squeeze+Excite row left out of the pattern table (each
   gate then runs its six ops, every other node as before: both on the fast path),
   and eager, in one interleaved run (graphopt.measure.compare: median, IQR).

Last line:  RESULT gate_b1_sum_ratio=<kernel/eager> model_b1=<kernel/reference> ...
"""

from __future__ import annotations

import argparse
import tempfile

import numpy as np
import torch
from torch import nn

import graphopt
from graphopt import PIPELINE, peers
from graphopt.backend import squeeze_excite
from graphopt.measure import compare
from graphopt.models import example
from graphopt.passes import PATTERNS, fuse_patterns
from graphopt.passes.fused_modules import SqueezeExcite

# MobileNetV3-Small's gates at 224x224: (channels, squeezed, map side)
GATES = ((16, 8, 56), (96, 24, 14), (240, 64, 14), (240, 64, 14), (120, 32, 14),
         (144, 40, 14), (288, 72, 7), (576, 144, 7), (576, 144, 7))


class Gate(nn.Module):
    """The six ops eager runs (the module's reference), as a module to export."""

    def __init__(self, w):
        super().__init__()
        self.w = nn.ParameterList(w)

    def forward(self, x):
        return SqueezeExcite().reference(x, *self.w)


def ort_gate(x, w, threads: int):
    """One ORT call of the gate on an NCHW array, as a function of no arguments."""
    with tempfile.TemporaryDirectory() as folder:
        model = peers.onnx_runtime(Gate(w), [x.contiguous()], threads, folder=folder)
    feed = {model.input_names[0]: np.ascontiguousarray(x.numpy())}
    return lambda: model.session.run(None, feed)


def one_gate(batch: int, c: int, c1: int, side: int, rounds: int, threads: int,
             ort: bool):
    """Medians (seconds) for one gate shape: eager, kernel (and ORT)."""
    torch.manual_seed(0)
    x = torch.randn(batch, c, side, side).to(memory_format=torch.channels_last)
    w = (torch.randn(c1, c, 1, 1) * 0.1, torch.randn(c1),
         torch.randn(c, c1, 1, 1) * 0.1, torch.randn(c))
    module = SqueezeExcite()
    arrays = squeeze_excite.Weights()(*w)
    fns = {"eager": lambda: module.reference(x, *w),
           "kernel": lambda: squeeze_excite.gate(x, arrays, "relu", "hardsigmoid")}
    if ort:
        fns["ORT"] = ort_gate(x, w, threads)
    with torch.no_grad():
        torch.testing.assert_close(
            squeeze_excite.gate(x, arrays, "relu", "hardsigmoid"),
            module.reference(x, *w), atol=1e-5, rtol=1e-5)
        if ort:
            torch.testing.assert_close(torch.from_numpy(fns["ORT"]()[0]),
                                       module.reference(x, *w), atol=1e-5, rtol=1e-5)
        t = compare(fns, rounds=rounds, threads=threads)
    return {k: t[k].median for k in fns}


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
    p.add_argument("--no-ort", dest="ort", action="store_false")
    a = p.parse_args()
    result = []
    for batch in (1, 8):
        sums = {}
        for c, c1, side in GATES:
            m = one_gate(batch, c, c1, side, a.rounds, a.threads, a.ort)
            sums = {k: sums.get(k, 0.0) + v for k, v in m.items()}
            ort = f", ORT {m['ORT'] * 1e6:7.1f} us" if a.ort else ""
            print(f"batch {batch}, {c:3d} ch -> {c1:3d} on {side}x{side}: eager "
                  f"{m['eager'] * 1e6:7.1f} us, kernel {m['kernel'] * 1e6:7.1f} us "
                  f"({m['kernel'] / m['eager']:.2f}x){ort}")
        print(f"batch {batch}, the nine gates: " + ", ".join(
            f"{k} {v * 1e6:.0f} us" for k, v in sums.items()))
        eager_sum, kernel_sum = sums["eager"], sums["kernel"]
        if a.ort:
            result.append(f"gate_b{batch}_kernel_vs_ort={kernel_sum / sums['ORT']:.2f}")
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
