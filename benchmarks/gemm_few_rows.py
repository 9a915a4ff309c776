"""Which GEMM runs a float32 linear fastest at one row and at eight (chapter 7).

Run:  python benchmarks/gemm_few_rows.py [--threads 1 2] [--rounds R] [--cold]

At batch 1 a classifier's linear is a matrix-vector product: it streams its weight
once and does two FLOPs per weight, so its time is the weight's bytes over the
bandwidth a library reaches. For MobileNetV3-Small's classifier (576 -> 1024 then
hardswish; 1024 -> 1000), MobileNetV3-Large's first (960 -> 1280, hardswish), a
1280 -> 1000 classifier (MobileNetV3-Large, EfficientNet-B0) at M = 1 and 8, and
BERT's linears at M = 128 for reference (`--few-rows` leaves them out), three
kernels, each with its bias and activation, interleaved (graphopt.measure.compare):

- onednn: `_linear_pointwise` on the blocked weight oneDNN prepacked for M rows,
  the activation as a post-op (what the policy's "fixed" rule binds);
- mkl: MKL's packed GEMM (`_mkl_linear`, the bias added by MKL), then torch's
  activation;
- F.linear (torch's own GEMM, MKL's sgemm/sgemv through ATen), then the activation;
- onednn direct: oneDNN's inner-product primitive made once through its C API
  (`backend.onednn_direct.LinearPrimitive`, what the backend binds where the
  library is installed), the activation as a post-op.

Each row prints the medians and the weight's read rate of the fastest (GB/s), then
the verdict of the two fastest (a difference only where their IQRs do not overlap).

`--cold`: before each timed call a 64 MiB buffer is written (twice the L3 here), so
the weight comes from memory, as in a model whose other layers ran in between;
warm, a 2.4 MB weight stays in the L2 and L3 from one call to the next and the
measurement says what the caches do, not what a classifier costs in a model.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.nn.functional as F

from graphopt.backend import onednn, onednn_direct
from graphopt.measure import compare
from graphopt.measure.report import Comparison, from_times
from graphopt.measure.thread_count import set_threads
from graphopt.passes.activations import ACTIVATIONS

# (M, K, N, activation)
SHAPES = ((1, 576, 1024, "hardswish"), (8, 576, 1024, "hardswish"),
          (1, 960, 1280, "hardswish"), (8, 960, 1280, "hardswish"),
          (1, 1024, 1000, "none"), (8, 1024, 1000, "none"),
          (1, 1280, 1000, "none"), (8, 1280, 1000, "none"),
          (128, 768, 2304, "none"), (128, 768, 768, "none"),
          (128, 768, 3072, "gelu"), (128, 3072, 768, "none"))


def kernels(m: int, k: int, n: int, act_name: str) -> dict:
    """The three kernels on one product, each checked against F.linear + act."""
    act = ACTIVATIONS[act_name]
    x, w, b = torch.randn(m, k), torch.randn(n, k) * k ** -0.5, torch.randn(n)
    packed, mkl = onednn.pack_linear_weight(w, m), onednn.pack_mkl_linear_weight(w, m)
    fns = {"onednn": lambda: onednn.linear_act(x, packed, b, act),
           "mkl": lambda: act.eager(onednn.mkl_linear(x, mkl, w, b, m)),
           "F.linear": lambda: act.eager(F.linear(x, w, b))}
    if onednn_direct.supported(act):  # made for the thread count set now
        primitive = onednn_direct.LinearPrimitive(x, w, b, act)
        fns["onednn direct"] = lambda: primitive(x, b)
    want = act.eager(F.linear(x, w, b))
    for name, fn in fns.items():
        torch.testing.assert_close(fn(), want, atol=1e-4, rtol=1e-4, msg=name)
    return fns


def cold(fns: dict, rounds: int, threads: int) -> Comparison:
    """Each round, each kernel in turn: the caches flushed, then one call timed."""
    set_threads(threads)
    flush = torch.zeros(16 << 20)  # 64 MiB of float32
    times = {name: [] for name in fns}
    for fn in fns.values():  # warm-up: first-call costs out of the way
        fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            flush.add_(1.0)
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    load = os.getloadavg()[0]
    return Comparison({n: from_times(n, t, "cpu", threads) for n, t in times.items()},
                      [], threads, loads=(load, load))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--cold", action="store_true")
    p.add_argument("--few-rows", action="store_true")
    a = p.parse_args()
    torch.manual_seed(0)
    print("load at start", os.getloadavg())
    for threads in a.threads:
        for m, k, n, act in SHAPES:
            if a.few_rows and m > 8:
                continue
            set_threads(threads)
            with torch.no_grad():
                fns = kernels(m, k, n, act)
                c = cold(fns, a.rounds, threads) if a.cold else \
                    compare(fns, rounds=a.rounds, threads=threads)
            order = sorted(fns, key=lambda name: c[name].median)
            rate = 4 * k * n / c[order[0]].median / 1e9
            times = "  ".join(
                f"{name} {c[name].median * 1e6:6.1f} ({c[name].q1 * 1e6:.0f}-"
                f"{c[name].q3 * 1e6:.0f})" for name in fns)
            print(f"t{threads} M{m:<3d} {k}->{n} {act:9s} {times} us | best "
                  f"{order[0]} {rate:.0f} GB/s | {c.verdict(order[1], order[0])}")
        print("  " + c.conditions)


if __name__ == "__main__":
    main()
